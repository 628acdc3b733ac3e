"""An N-node Docker Swarm on this machine, for the tests, chaos runs and `dlaas up --nodes N`.

Each node is a `dockerd` in its own network namespace (and UTS namespace, so that every
node has its own hostname: "node-1", "node-2", ...), plugged by a veth pair into one host
bridge on a /24 of its own. Node 1 is the only manager (`swarm init`); the others join with
the worker token. The platform reaches the swarm only through the manager's socket; the
node sockets are there for the tests (and for copying images, as there is no registry).
The lab's layout (names, addresses, the dockerd command) is swarm_plan.py's, pure; one
node's plumbing on the host (namespace, veth, dockerd, removal) is swarm_node.py's.

    lab = SwarmLab(state_dir, nodes=2, labels={"node-1": {"rack": "r1"}})
    info = lab.up()                      # SwarmInfo: manager_socket, node_sockets, ...
    docker.DockerClient(base_url=info.manager_socket).nodes.list()
    lab.kill_node("node-2"); lab.restart_node("node-2")
    lab.down()                           # no process, namespace, veth or bridge left

How it is wired, and why:
- `nsenter --net=/var/run/netns/NAME`, never `ip netns exec`: the latter remounts /sys in a
  new mount namespace and dockerd then fails ("Devices cgroup isn't mounted").
- `unshare --uts` + `hostname node-K` before dockerd: otherwise all nodes report the
  machine's hostname and `node.hostname==...` placement cannot tell them apart.
- `--iptables=false --bridge=none`: the node's dockerd touches no firewall and makes no
  default bridge; swarm tasks reach the outside through `docker_gwbridge` inside the
  namespace. Each namespace masquerades what leaves through its veth (one iptables rule in
  that namespace, not on the host): a task's source address (docker_gwbridge, 172.x, the same
  range in every namespace and on the host) would otherwise get no reply. That is how
  containers reach the host's servers (S3) at `host_address`, the bridge's host address.
- The bridge's /24 is taken from 10.199.0.0/16, skipping every network in use on the machine
  (host routes, other labs' bridges, the machine engine's networks), chosen under a
  machine-wide lock so that labs of concurrent test runs never share one. Overlay networks
  of the swarm come from Docker's 10.0.0.0/8 pool counting up from 10.0.0.0: far below.
- Names carry a random suffix (namespaces, veths, bridge, exec roots), so labs of other
  worktrees run side by side; `dlaas up` names the bridge like a job bridge of its platform
  instead, so that its host firewall (dlaas.local.firewall) fences the lab in: the nodes'
  containers reach the host's S3 port and nothing else of the host, and nothing is routed
  from or to the lab (frames between nodes are bridged, not routed); everything the lab made is in its state file
  (`state_dir/lab.json`), which `down()` (from any process) reads to remove it all.

Not simulated: `kill_node` SIGKILLs the node's dockerd only (an engine crash); its
containerd and containers keep running until `restart_node` (dockerd adopts them again) or
`down()`; `kill_node(..., machine=True)` kills them too (a machine loss). An `--opt
encrypted` overlay passes no traffic here (no IPsec in this kernel). A service's virtual IP
(the default endpoint mode) does not route either: its load balancing needs the iptables
rules that `--iptables=false` turns off. Give services `endpoint_mode="dnsrr"` (the name
resolves to the tasks' own addresses) or dial `tasks.<service>`; both work across nodes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import secrets
import shutil
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from dlaas.local import dockerd, processes
from dlaas.local.dockerd import taken_networks

# The process and mount helpers (dlaas.local.processes, .host) find a node's leftovers by its
# exec root in their command lines and mounts.
from dlaas.local.host import unmount_under
from dlaas.local.processes import descendants, pids_with_token
from dlaas.local.swarm_node import (
    check_requirements,
    fan_out,
    load_images,
    plug,
    remove_node,
    run,
    start_dockerd,
)
from dlaas.local.swarm_plan import (
    RUN_DIR,
    SwarmInfo,
    SwarmLabError,
    choose_subnet,
    lab_plan,
    node_names,
)

STATE_FILE = "lab.json"
DEFAULT_IMAGES = ("dlaas/learner:latest",)
SAVE_CHUNK = 1 << 20  # bytes of the images' tar read at a time
SOCKET_PATH_MAX = 100  # unix socket paths: 108 bytes in the kernel, some margin

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- the lab


class SwarmLab:
    """Build, inspect, break and remove one lab whose state lives in `state_dir`.

    `labels`: node name -> swarm node labels (set through the manager API). `gpus`: node
    name -> GPUs it advertises as the swarm generic resource "gpu" (none by default).
    `images`: tags copied from the machine's engine to every node (`docker save`/`load`).
    `heartbeat_s`: the swarm dispatcher heartbeat; a node whose engine dies is Down a few
    heartbeats later.
    """

    def __init__(
        self,
        state_dir: Path | str,
        nodes: int = 2,
        labels: Mapping[str, Mapping[str, str]] | None = None,
        gpus: Mapping[str, int] | None = None,
        images: Sequence[str] = DEFAULT_IMAGES,
        progress: Callable[[str], None] | None = None,
        heartbeat_s: float = 2.0,
        machine_docker_host: str = dockerd.DEFAULT_DOCKER_HOST,
        timeout: float = 90.0,
        bridge: str = "",
    ) -> None:
        self.state_dir = Path(state_dir).resolve()
        self.n = nodes
        self.labels = {k: dict(v) for k, v in (labels or {}).items()}
        self.gpus = dict(gpus or {})
        self.images = list(images)
        self.progress = progress or (lambda _msg: None)
        self.heartbeat_s = heartbeat_s
        self.machine_docker_host = machine_docker_host
        self.timeout = timeout
        # The host bridge's name, when the caller's firewall fences bridges by name.
        self.bridge = bridge
        names = set(node_names(nodes))
        unknown = sorted((set(self.labels) | set(self.gpus)) - names)
        if unknown:
            raise SwarmLabError(
                f"labels/gpus name nodes this lab does not have: {', '.join(unknown)} "
                f"(nodes are {', '.join(node_names(nodes))})"
            )

    # ---- public --------------------------------------------------------------------

    def up(self) -> SwarmInfo:
        """Start the lab, or return the running one recorded in the state file."""
        check_requirements()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with self._locked():
            record = self._read()
            if record and self.bridge and record["bridge"] != self.bridge:
                self.progress(f"rebuilding the swarm lab on bridge {self.bridge}, which is fenced")
            elif record and self._healthy(record):
                self.progress("swarm lab already running")
                return self._info(record)
            if record:
                self.progress("removing the remains of a previous swarm lab")
                self._teardown(record)
            t0 = time.monotonic()
            record = self._create()
            try:
                self._form_swarm(record)
                self._copy_images(record)
            except BaseException:  # broad: Ctrl-C too: never leave a half-built lab behind
                self._teardown(record)
                raise
            self.progress(f"swarm lab up: {self.n} nodes in {time.monotonic() - t0:.1f}s")
            return self._info(record)

    def info(self) -> SwarmInfo:
        """The running lab's addresses; SwarmLabError if none is recorded."""
        record = self._read()
        if not record:
            raise SwarmLabError(f"no swarm lab recorded in {self.state_dir}")
        return self._info(record)

    def client(self, node: str | None = None, timeout: int = 30):
        """A docker.DockerClient on the manager (or on `node`'s own engine)."""
        import docker

        info = self.info()
        url = info.manager_socket if node is None else info.node_sockets[self._known(node)]
        return docker.DockerClient(base_url=url, timeout=timeout)

    def kill_node(self, name: str, machine: bool = False) -> None:
        """SIGKILL `name`'s dockerd (an engine crash); `machine`: its containerd and
        containers too (the machine is lost)."""
        record = self._read()
        node = self._node(record, name)
        pid = int(node["pid"])
        if not processes.pid_matches(pid, node["pidfile"]):
            return
        victims = [pid]
        if machine:
            # containerd and the shims name the exec root; the containers' processes are the
            # shims' descendants (the shims are reparented away from dockerd at start).
            engine = [pid, *pids_with_token(node["exec_root"] + "/")]
            victims = engine + descendants(engine)
        for victim in dict.fromkeys(victims):
            with contextlib.suppress(ProcessLookupError):  # gone already
                os.kill(victim, signal.SIGKILL)
        processes.wait_until(lambda: not processes.pid_alive(pid), 10, f"{name}'s dockerd to die")

    def restart_node(self, name: str, wait_ready: bool = True) -> None:
        """Start `name`'s dockerd again (same data: it rejoins the swarm); with `wait_ready`,
        return once the manager lists it Ready."""
        with self._locked():
            record = self._read()
            node = self._node(record, name)
            if not processes.pid_matches(int(node["pid"]), node["pidfile"]):
                if not pids_with_token(node["exec_root"] + "/"):
                    # A machine loss left the runtime state of a dead containerd (which keeps
                    # a new one from starting) and mounts. After a dockerd-only crash its
                    # containerd still runs the containers: they are left to be adopted.
                    unmount_under(Path(node["exec_root"]), Path(node["data_root"]))
                    shutil.rmtree(node["exec_root"], ignore_errors=True)
                    Path(node["pidfile"]).unlink(missing_ok=True)
                start_dockerd(record, node)
                self._write(record)
                self._wait_answers(node)
        if wait_ready:
            self.wait_node_state(name, "ready")

    def node_state(self, name: str) -> str:
        """The manager's view of `name`: "ready", "down", "unknown", ... ("" if not listed)."""
        client = self.client(timeout=10)
        try:
            for node in client.nodes.list():
                if node.attrs["Description"]["Hostname"] == name:
                    return node.attrs["Status"]["State"]
            return ""
        finally:
            client.close()

    def wait_node_state(self, name: str, state: str, timeout: float | None = None) -> None:
        """Poll the manager until it reports `name` in `state`; SwarmLabError on timeout."""
        timeout = timeout or self.timeout
        try:
            processes.wait_until(
                lambda: self.node_state(name) == state, timeout,
                f"swarm manager to report {name} {state}", interval=0.25,
            )  # fmt: skip
        except processes.ServerError as e:
            raise SwarmLabError(str(e)) from None

    def down(self) -> None:
        """Stop every dockerd of the lab and remove its namespaces, veths, bridge and data."""
        if not self.state_dir.exists():
            return
        with self._locked():
            record = self._read()
            if record:
                self._teardown(record)

    # ---- building ------------------------------------------------------------------

    def _create(self) -> dict:
        RUN_DIR.mkdir(parents=True, exist_ok=True)
        # The machine-wide lock covers choosing the subnet and creating the bridge that
        # takes it (its route then marks it taken for every later lab).
        with open(RUN_DIR / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                subnet = choose_subnet(taken_networks())
                record = lab_plan(self.state_dir, secrets.token_hex(3), subnet, self.n, self.bridge)
                record["labels"], record["gpus"] = self.labels, self.gpus
                for node in record["nodes"]:
                    if len(node["socket"]) > SOCKET_PATH_MAX:
                        raise SwarmLabError(
                            f"state_dir {self.state_dir} is too long: the node sockets under "
                            f"it ({node['socket']}) pass the {SOCKET_PATH_MAX}-byte limit"
                        )
                # Recorded before anything exists: a failed start is cleaned up from it.
                self._write(record)
                self.progress(f"bridge {record['bridge']} on {subnet}")
                run("ip", "link", "add", record["bridge"], "type", "bridge")
                run("ip", "addr", "add", f"{record['host_address']}/24", "dev", record["bridge"])
                run("ip", "link", "set", record["bridge"], "up")
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        try:
            for node in record["nodes"]:
                plug(record, node, self.progress)
                start_dockerd(record, node)
                self._write(record)
            for node in record["nodes"]:
                self._wait_answers(node)
        except BaseException:  # broad: Ctrl-C too: a half-built lab goes; re-raised
            self._teardown(record)
            raise
        return record

    def _wait_answers(self, node: dict) -> None:
        pid, url = int(node["pid"]), f"unix://{node['socket']}"
        try:
            processes.wait_until(
                lambda: dockerd.docker_answers(url), self.timeout,
                f"dockerd of {node['name']} ({url})",
                alive=lambda: processes.pid_alive(pid), log=Path(node["log"]),
            )  # fmt: skip
        except processes.ServerError as e:
            raise SwarmLabError(str(e)) from None

    def _form_swarm(self, record: dict) -> None:
        import docker

        first, *others = record["nodes"]
        manager = docker.DockerClient(base_url=f"unix://{first['socket']}", timeout=60)
        try:
            self.progress(f"swarm init on {first['name']} ({first['address']})")
            spec = manager.api.create_swarm_spec(
                dispatcher_heartbeat_period=int(self.heartbeat_s * 1e9)
            )
            manager.api.init_swarm(
                advertise_addr=first["address"], listen_addr="0.0.0.0:2377", swarm_spec=spec
            )
            token = manager.swarm.attrs["JoinTokens"]["Worker"]
            for node in others:
                self.progress(f"{node['name']} joins")
                worker = docker.DockerClient(base_url=f"unix://{node['socket']}", timeout=60)
                try:
                    worker.swarm.join(
                        remote_addrs=[f"{first['address']}:2377"], join_token=token,
                        advertise_addr=node["address"], listen_addr="0.0.0.0:2377",
                    )  # fmt: skip
                finally:
                    worker.close()
            self._write(record)
            for node in record["nodes"]:
                self.wait_node_state(node["name"], "ready")
            for swarm_node in manager.nodes.list():
                name = swarm_node.attrs["Description"]["Hostname"]
                if record["labels"].get(name):
                    spec = dict(swarm_node.attrs["Spec"])
                    spec["Labels"] = {**spec.get("Labels", {}), **record["labels"][name]}
                    swarm_node.update(spec)
        finally:
            manager.close()

    def _copy_images(self, record: dict) -> None:
        """One `docker save` of all the images from the machine's engine (layers they share
        once), streamed into every node's `docker load` while it is read: no file, and
        the save overlaps the loads."""
        import docker

        if not self.images:
            return
        source = docker.DockerClient(base_url=self.machine_docker_host, timeout=300)
        try:
            for tag in self.images:
                try:
                    source.images.get(tag)
                except docker.errors.ImageNotFound:
                    raise SwarmLabError(
                        f"image {tag} is not on the machine's engine ({self.machine_docker_host})"
                        "; build it first (`dlaas images build`)"
                    ) from None
            nodes = record["nodes"]
            self.progress(f"copying {', '.join(self.images)} to {len(nodes)} nodes")
            # GET /images/get?names=...: the several-image `docker save`, which docker-py's
            # get_image (one name) does not offer.
            api = source.api
            saved = api._get(api._url("/images/get"), params={"names": self.images}, stream=True)
            fan_out(
                api._stream_raw_result(saved, SAVE_CHUNK, False),
                [partial(load_images, node, tags=self.images) for node in nodes],
            )
        finally:
            source.close()

    # ---- state ---------------------------------------------------------------------

    def _healthy(self, record: dict) -> bool:
        nodes = record.get("nodes", [])
        if len(nodes) != self.n:
            return False
        if not all(processes.pid_matches(int(n["pid"]), n["pidfile"]) for n in nodes):
            return False
        import docker

        try:
            return all(self.node_state(n["name"]) == "ready" for n in nodes)
        # The manager not answering (its socket refuses: OSError, requests' errors among
        # them; the engine errs: DockerException; a node entry lacks a field) means "not
        # usable": the caller removes the lab and builds it again.
        except (docker.errors.DockerException, OSError, KeyError, SwarmLabError) as exc:
            log.info("the recorded swarm lab does not answer (%r); not reused", exc)
            return False

    def _info(self, record: dict) -> SwarmInfo:
        nodes = record["nodes"]
        return SwarmInfo(
            manager_socket=f"unix://{nodes[0]['socket']}",
            nodes=[n["name"] for n in nodes],
            node_sockets={n["name"]: f"unix://{n['socket']}" for n in nodes},
            node_addresses={n["name"]: n["address"] for n in nodes},
            host_address=record["host_address"],
            subnet=record["subnet"],
            bridge=record["bridge"],
            state_dir=str(self.state_dir),
            manager_address=f"{nodes[0]['address']}:2377",
            labels={k: dict(v) for k, v in record.get("labels", {}).items()},
            gpus=dict(record.get("gpus", {})),
        )

    def _known(self, name: str) -> str:
        if name not in node_names(self.n):
            raise SwarmLabError(f"no node {name!r} in this lab ({', '.join(node_names(self.n))})")
        return name

    def _node(self, record: dict | None, name: str) -> dict:
        self._known(name)
        if not record:
            raise SwarmLabError(f"no swarm lab recorded in {self.state_dir}")
        return next(n for n in record["nodes"] if n["name"] == name)

    def _read(self) -> dict | None:
        try:
            return json.loads((self.state_dir / STATE_FILE).read_text())
        except (OSError, ValueError):
            return None

    def _write(self, record: dict) -> None:
        tmp = self.state_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(record, indent=1))
        tmp.replace(self.state_dir / STATE_FILE)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """One up/down/restart at a time per state dir (threads and processes alike)."""
        with open(self.state_dir / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _teardown(self, record: dict) -> None:
        """Remove everything `record` names; tolerant of parts that never existed."""
        nodes = record.get("nodes", [])
        if nodes:
            # In parallel: a dockerd takes seconds to stop its swarm agent and containerd,
            # and removing a node's image layers (tens of thousands of files) longer.
            with ThreadPoolExecutor(len(nodes)) as pool:
                list(pool.map(remove_node, nodes))
        bridge = record.get("bridge", "")
        if bridge and Path(f"/sys/class/net/{bridge}").exists():
            run("ip", "link", "del", bridge, check=False)
        (self.state_dir / STATE_FILE).unlink(missing_ok=True)
        self.progress("swarm lab removed")
