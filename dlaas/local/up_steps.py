"""The steps of one `dlaas up`: each finds its component running, or (re)starts it.

`UpSteps` holds one run's state directory, configuration (platform.json) and secrets; its
steps are the Docker engine, etcd (one member or a cluster), S3, Redis, the firewall, the
images, the nodes (a local swarm for N > 1) and each service and the supervisor, each
recorded by pid. dlaas/local/platform.py runs them in order (`up`) and stops them (`down`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dlaas.adapters.nodes import machine_capacity
from dlaas.domain import jobspec
from dlaas.local import firewall
from dlaas.local.components import API_PROBES, EXTRA_ETCD, kind_of
from dlaas.local.dockerd import DEFAULT_DOCKER_HOST, docker_gateway_ip, start_dockerd_if_needed
from dlaas.local.etcd import EtcdServer, start_etcd
from dlaas.local.probes import etcd_ok, grpc_serving, http_json, s3_ok
from dlaas.local.processes import (
    ManagedProcess,
    ServerError,
    free_ports,
    keep_or_new_port,
    pid_alive,
    spawn,
    stop_pid,
    wait_until,
)
from dlaas.local.redis import start_redis
from dlaas.local.seaweedfs import make_s3_client, start_seaweedfs
from dlaas.local.state import StateDir, read_json, record_alive, write_private
from dlaas.local.swarm import SwarmInfo, SwarmLab, SwarmLabError

Progress = Callable[[str], None]

SERVICE_START_TIMEOUT = 60.0
JOBMONITOR_SETTLE_S = 1.0
# Pid files of the extra engines of the multi-engine mode that the swarm replaced
# (pids/engine-node-2.json): only ever stopped and forgotten (`_retire_old_engines`).
OLD_ENGINE_PREFIX = "engine-"


class PlatformError(RuntimeError):
    """`up` could not bring a component up; the message names it and points at its log."""


@dataclass(frozen=True)
class _Starting:
    """A service spawned by this `up`, not yet answering."""

    name: str
    module: str
    address: str
    process: ManagedProcess
    log: Path
    started: float  # time.monotonic() at its spawn


class UpSteps:
    """One `up` run: each step finds its component running or starts it."""

    def __init__(self, state: StateDir, progress: Progress, build_images: bool):
        self.state = state
        self.progress = progress
        self.build_images = build_images
        self.config = read_json(state.root / "platform.json")
        self.creds = state.secrets()
        self.docker_host = DEFAULT_DOCKER_HOST

    def save_config(self) -> None:
        write_private(self.state.root / "platform.json", self.config)

    # -- Docker
    def docker(self) -> None:
        info = start_dockerd_if_needed(self.state.logs)
        self.docker_host = info.docker_host
        if info.started_pid is not None:
            self.state.write_pid(
                "dockerd",
                {"pid": info.started_pid, "match": "dockerd", "address": info.docker_host},
            )
            self.progress(f"docker: started dockerd (pid {info.started_pid})")
        else:
            self.progress(f"docker: engine answering on {info.docker_host}")

    # -- etcd
    def etcd_cluster(self, members: int) -> str:
        """`members` etcd members forming one cluster; each found running or (re)started."""
        names = ["etcd", *EXTRA_ETCD][:members]
        ports = self.config.get("etcd_cluster_ports") or {}
        for name in names:
            if name not in ports:
                ports[name] = free_ports(2)
        self.config.update(etcd_cluster_ports=ports, etcd_members=members)
        self.save_config()
        cluster = ",".join(f"{n}=http://127.0.0.1:{ports[n][1]}" for n in names)
        dead = [n for n in names if not record_alive(self.state.read_pid(n))]
        for name in dead:
            self._stop_stale(name, self.state.read_pid(name))
        started: dict[str, EtcdServer] = {}

        def start(name: str) -> None:
            # A fresh cluster needs its members up together; a restarted member rejoins.
            started[name] = start_etcd(
                self.state.root / "etcd",
                name=name,
                client_port=ports[name][0],
                peer_port=ports[name][1],
                cluster=cluster,
                log=self.state.logs / f"{name}.log",
            )

        threads = [threading.Thread(target=start, args=(n,)) for n in dead]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for name in dead:
            if name not in started:
                raise PlatformError(f"{name}: etcd member did not start; see its log")
            server = started[name]
            self.state.write_pid(
                name, {"pid": server.pid, "match": str(server.data_dir), "address": server.endpoint}
            )
            self.progress(f"{name}: started on {server.endpoint} (pid {server.pid})")
        for name in set(names) - set(dead):
            self.progress(f"{name}: running on 127.0.0.1:{ports[name][0]}")
        return ",".join(f"127.0.0.1:{ports[n][0]}" for n in names)

    def etcd(self) -> str:
        record = self.state.read_pid("etcd")
        if record_alive(record) and etcd_ok(record["address"]):
            self.progress(f"etcd: running on {record['address']}")
            return record["address"]
        self._stop_stale("etcd", record)
        # A single member keeps its peer URL in its data dir: reuse both ports when free.
        client_port = keep_or_new_port(self.config.get("etcd_client_port"))
        peer_port = keep_or_new_port(self.config.get("etcd_peer_port"))
        server = start_etcd(
            self.state.root / "etcd",
            client_port=client_port,
            peer_port=peer_port,
            log=self.state.logs / "etcd.log",
        )
        self.config.update(etcd_client_port=server.port, etcd_peer_port=server.peer_port)
        self.save_config()
        self.state.write_pid(
            # The data dir is in its command line: a pid reused by any other etcd won't match.
            "etcd",
            {"pid": server.pid, "match": str(server.data_dir), "address": server.endpoint},
        )
        self.progress(f"etcd: started on {server.endpoint} (pid {server.pid})")
        return server.endpoint

    # -- S3
    def s3(self) -> str:
        record = self.state.read_pid("s3")
        if record_alive(record) and s3_ok(record["address"]):
            self.progress(f"s3: running on {record['address']}")
            return record["address"]
        self._stop_stale("s3", record)
        server = start_seaweedfs(
            self.state.root / "s3",
            self.creds["s3_access_key"],
            self.creds["s3_secret_key"],
            port=keep_or_new_port(self.config.get("s3_port")),
            log=self.state.logs / "s3.log",
        )
        self.config.update(s3_port=server.port, s3_grpc_port=server.grpc_port)
        self.save_config()
        self.state.write_pid(
            "s3", {"pid": server.pid, "match": str(server.data_dir), "address": server.endpoint}
        )
        self.progress(f"s3: started SeaweedFS on {server.endpoint} (pid {server.pid})")
        return server.endpoint

    # -- Redis: the worker's broker (queued purges), persisted in the state dir
    def redis(self) -> str:
        """The broker's URL (with its password: for the services' environment only)."""
        record = self.state.read_pid("redis")
        port = self.config.get("redis_port")
        if record_alive(record) and port:
            self.progress(f"redis: running on {record['address']}")
            return f"redis://:{self.creds['redis_password']}@127.0.0.1:{port}/0"
        self._stop_stale("redis", record)
        server = start_redis(
            self.state.root / "redis",
            port=keep_or_new_port(port),
            log=self.state.logs / "redis.log",
            persist=True,
            password=self.creds["redis_password"],
        )
        self.config.update(redis_port=server.port)
        self.save_config()
        address = f"127.0.0.1:{server.port}"
        self.state.write_pid(
            # Redis rewrites its command line to "redis-server 127.0.0.1:PORT": the address
            # it serves tells it from a process that reused the pid.
            "redis",
            {"pid": server.pid, "match": address, "address": address},
        )
        self.progress(f"redis: started on {address} (pid {server.pid})")
        return server.url

    # -- the host firewall fencing job containers in (dlaas.local.firewall)
    def firewall(self, platform_id: str, s3_port: int) -> None:
        grpc_port = self.config.get("s3_grpc_port")
        try:
            firewall.apply(platform_id, s3_port, grpc_port)
        except firewall.FirewallError as e:
            raise PlatformError(f"firewall: {e}") from None
        self.progress(
            f"firewall: job bridges {jobspec.bridge_prefix(platform_id)}* reach only S3 "
            f"(port {s3_port}) and their own network"
        )
        if not grpc_port:
            # Started by a version that did not record it: restart S3 to fence it.
            self.progress("firewall: the S3 gRPC port is unknown; `dlaas down` + `up` fences it")

    def bucket(self, s3_endpoint: str, bucket: str) -> None:
        client = make_s3_client(
            s3_endpoint, self.creds["s3_access_key"], self.creds["s3_secret_key"]
        )
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            client.head_bucket(Bucket=bucket)
        except (ClientError, BotoCoreError):  # missing (404) is the common case; create tells more
            client.create_bucket(Bucket=bucket)
            self.progress(f"s3: created bucket {bucket}")

    # -- images
    def images(self) -> None:
        if not self.build_images:
            self.progress("images: skipped")
            return
        import docker

        from dlaas.local.images import ensure_images

        client = docker.DockerClient(base_url=self.docker_host, timeout=600)
        try:
            ensure_images(client, progress=lambda line: self.progress(f"images: {line}"))
        finally:
            client.close()

    # -- nodes
    def nodes(self, count: int | None) -> SwarmInfo | None:
        """Bring the platform to `count` nodes: a local swarm of that many for N > 1 (None
        for one node: the machine's engine alone)."""
        count = count or int(self.config.get("nodes") or 1)
        if count < 1:
            raise PlatformError(f"nodes: must be at least 1, got {count}")
        _retire_old_engines(self.state, self.progress)
        self.config.update(nodes=count)
        self.save_config()
        lab = self.swarm_lab(count)
        if count == 1:
            lab.down()
            return None
        running = None
        with contextlib.suppress(SwarmLabError):
            running = lab.info()
        if running is not None and len(running.nodes) != count:
            self.progress(f"swarm: {len(running.nodes)} nodes running, {count} wanted: rebuilding")
            lab.down()
        try:
            info = lab.up()
        except SwarmLabError as e:
            raise PlatformError(f"swarm: {e}") from None
        self.progress(f"swarm: nodes {', '.join(info.nodes)}; manager at {info.manager_socket}")
        return info

    def swarm_lab(self, count: int) -> SwarmLab:
        """The local swarm of `count` nodes, each declaring its share of the machine.

        Every node declares all the machine's CPUs (containers share CPU time, and a gang
        packed on one node must fit it) and an N-th of its memory (memory is not shared);
        DLAAS_NODE_CPUS / DLAAS_NODE_MEMORY_MB / DLAAS_NODE_GPUS declare per node instead.
        """
        from dlaas.local.images import LEARNER_IMAGE

        cpus, memory_mb = machine_capacity()
        cpus = float(os.environ.get("DLAAS_NODE_CPUS") or 0) or cpus
        memory_mb = int(os.environ.get("DLAAS_NODE_MEMORY_MB") or 0) or memory_mb // count
        gpus = int(os.environ.get("DLAAS_NODE_GPUS") or 0)
        names = [f"node-{i}" for i in range(1, count + 1)]
        labels = {
            name: {"rack": f"rack-{i}", "area": "local", "dlaas.cpus": f"{cpus:g}",
                   "dlaas.memory_mb": str(memory_mb), "dlaas.gpus": str(gpus)}
            for i, name in enumerate(names, start=1)
        }  # fmt: skip
        image = os.environ.get("DLAAS_LEARNER_IMAGE") or LEARNER_IMAGE
        # Framework images are large (PyTorch's 1.5 GB): copied to the nodes only when asked
        # for by name (comma-separated tags, built first with `dlaas images build`).
        extra = [t.strip() for t in os.environ.get("DLAAS_NODE_IMAGES", "").split(",") if t.strip()]
        # Named like a job bridge of this platform: the firewall fences the lab in as it does
        # a job network (its nodes' containers reach the host's S3 port and nothing else of
        # the host, nothing is routed from or to it; node-to-node frames are bridged).
        platform_id = self.config.get("platform_id", "")
        bridge = jobspec.bridge_name(platform_id, "swarm-lab") if platform_id else ""
        return SwarmLab(
            self.state.root / "swarm", nodes=count, labels=labels, images=[image, *extra],
            progress=lambda line: self.progress(f"swarm: {line}"),
            machine_docker_host=self.docker_host, bridge=bridge,
        )  # fmt: skip

    def gateway_ip(self) -> str:
        import docker

        client = docker.DockerClient(base_url=self.docker_host, timeout=30)
        try:
            return docker_gateway_ip(client)
        finally:
            client.close()

    # -- services
    def service_port(self, name: str, holders: tuple[str, ...] = ()) -> int:
        """The port service `name` had last time if it still holds it or it is free, else new.

        `holders`: the processes that share the port (default: the one named `name`)."""
        previous = self.config.get(f"{name}_port")
        if previous and any(record_alive(self.state.read_pid(h)) for h in holders or (name,)):
            return previous
        return keep_or_new_port(previous)

    def services(self, wanted: list[tuple[str, dict[str, str], str]]) -> None:
        """Each (name, env, address) found running with this configuration, or (re)started.

        Those to start are all spawned first, then waited for: their imports and
        connections overlap (on 2 cores the nine services of a fresh `up` answer in about
        half the time they took one after another). A service that does not answer is
        stopped and raises PlatformError; the others stay recorded (`down` stops them)."""
        starting = [s for item in wanted if (s := self._spawn_service(*item)) is not None]
        for start in starting:
            self._await_service(start)

    def _spawn_service(self, name: str, env: dict[str, str], address: str) -> _Starting | None:
        """Start service `name` unless it runs with this configuration (None: it does)."""
        fingerprint = hashlib.sha256(json.dumps(env, sort_keys=True).encode()).hexdigest()
        module = f"services.{kind_of(name)}.main"
        record = self.state.read_pid(name)
        if (
            record_alive(record)
            and record.get("config") == fingerprint
            and self._answers(name, address, record["pid"])
        ):
            self.progress(f"{name}: running{_where(address)} (pid {record['pid']})")
            return None
        if record_alive(record):
            self.progress(f"{name}: restarting (configuration changed or not answering)")
        self._stop_stale(name, record)
        log = self.state.logs / f"{name}.log"
        mp = spawn(
            name,
            [sys.executable, "-m", module],
            log,
            env={**os.environ, **env},
            cwd=self.state.root,
        )
        # Record the pid before waiting: a failed start is still stopped by `down`.
        self.state.write_pid(
            name, {"pid": mp.pid, "match": module, "address": address, "config": fingerprint}
        )
        return _Starting(name, module, address, mp, log, time.monotonic())

    def _await_service(self, start: _Starting) -> None:
        name, mp = start.name, start.process
        try:
            wait_until(
                lambda: self._answers(name, start.address, mp.pid, start.started),
                SERVICE_START_TIMEOUT,
                f"{name} ({start.module})",
                alive=mp.alive,
                log=start.log,
            )
        except ServerError as e:
            mp.stop()
            self.state.forget(name)
            raise PlatformError(str(e)) from None
        self.progress(f"{name}: started{_where(start.address)} (pid {mp.pid})")

    def supervisor(self) -> None:
        """The process that restarts any component that dies (`python -m dlaas.local.supervisor`)."""
        record = self.state.read_pid("supervisor")
        if record_alive(record):
            self.progress(f"supervisor: running (pid {record['pid']})")
            return
        self._stop_stale("supervisor", record)
        mp = spawn(
            "supervisor",
            [sys.executable, "-m", "dlaas.local.supervisor", str(self.state.root)],
            self.state.logs / "supervisor.log",
            env=dict(os.environ),
            cwd=self.state.root,
        )
        self.state.write_pid(
            "supervisor", {"pid": mp.pid, "match": "dlaas.local.supervisor", "address": ""}
        )
        self.progress(f"supervisor: started (pid {mp.pid})")

    def _answers(self, name: str, address: str, pid: int, started: float | None = None) -> bool:
        """Whether service `name` answers; one that serves nothing (the job monitor, the
        worker) counts once alive JOBMONITOR_SETTLE_S after it was `started` (monotonic)."""
        if kind_of(name) in ("lcm", "scheduler"):
            return grpc_serving(address)
        if kind_of(name) == "api":
            # Its peers answer on the same port: only this replica's own answer counts. The
            # kernel spreads fresh connections over the replicas at random: a few tries.
            health = f"{address}/health"
            return any(http_json(health).get("replica") == name for _ in range(API_PROBES))
        # The job monitor serves nothing: alive a moment after start means it got past
        # its configuration and connections.
        if started is not None:
            time.sleep(max(0.0, started + JOBMONITOR_SETTLE_S - time.monotonic()))
        return pid_alive(pid)

    def _stop_stale(self, name: str, record: dict) -> None:
        if record and record_alive(record):
            stop_pid(int(record["pid"]))
        elif record:
            self.progress(f"{name}: stale pid file (pid {record.get('pid')} no longer runs it)")
        self.state.forget(name)


def _where(address: str) -> str:
    return f" on {address}" if address else ""


def _retire_old_engines(state: StateDir, progress: Progress) -> list[str]:
    """Stop and forget the extra engines of a state dir from before the swarm; their names.

    The upgrade path from the multi-engine mode: SIGTERM by the recorded pid (dockerd stops
    its containers and its containerd), then the record goes, so that the supervisor never
    takes it for a dead component. Their image caches (`engines/`) are left alone: a
    SIGKILLed engine may have left mounts there; the administrator removes them.
    """
    stopped = []
    for path in sorted(state.pids.glob(f"{OLD_ENGINE_PREFIX}*.json")):
        record = state.read_pid(path.stem)
        if record_alive(record):
            stop_pid(int(record["pid"]), timeout=30.0)
            stopped.append(path.stem)
        progress(f"{path.stem}: Docker engine of the multi-engine mode retired")
        state.forget(path.stem)
    (state.root / "nodes.yaml").unlink(missing_ok=True)
    return stopped
