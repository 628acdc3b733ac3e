"""The Docker engine on this machine: ask it, start it when none answers, read its networks.

Unlike the other servers, the engine is the machine's and holds the image cache, so
`ensure_dockerd` only starts it when nothing answers, and nobody but `dlaas down` (and
only if `up` started it) ever stops it. Several platforms (several `DLAAS_HOME`s) may
share one engine: each marks itself on it while it is up (`mark_user`), and `engine_users`
tells `down` who else uses the engine, by those marks and by the platform label of the
containers running on it, so that it leaves an engine in use running. `taken_networks`
tells dlaas.local.swarm which address ranges the machine's engine and routes already use.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from dlaas.local.host import host_routes, interface_ipv4
from dlaas.local.processes import (
    ServerError,
    pid_alive,
    pid_cmdline,
    pid_matches,
    spawn,
    started,
    wait_until,
)

DEFAULT_DOCKER_SOCKET = "/var/run/docker.sock"
DEFAULT_DOCKER_HOST = f"unix://{DEFAULT_DOCKER_SOCKET}"
DOCKER_DATA_ROOT = "/var/lib/dlaas-docker"
# The mark of a platform using an engine: a volume (no process, kept across the engine's
# restarts) labelled with the platform's id and its state dir. Not labelled
# dlaas.managed: no platform's clean-up of its own job volumes ever takes it.
LABEL_ENGINE_USER = "dlaas.engine-user"
LABEL_HOME = "dlaas.home"
MARK_PREFIX = "dlaas-engine-user-"


def docker_answers(docker_host: str = DEFAULT_DOCKER_HOST, timeout: float = 3.0) -> bool:
    """True if a Docker engine answers a ping on `docker_host`."""
    import docker

    from dlaas.adapters.docker_calls import ENGINE_UNREACHABLE

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
    started(mp, docker_answers, timeout, "the Docker engine (dockerd)")
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


@dataclass(frozen=True)
class EngineUser:
    """A platform using the engine: its id, its state dir (when it marked itself) and how
    many of its containers run there."""

    platform_id: str
    home: str = ""
    running: int = 0


def _engine(docker_host: str, timeout: float = 10):
    import docker

    return docker.DockerClient(base_url=docker_host, timeout=timeout)


def mark_user(platform_id: str, home: Path, docker_host: str = DEFAULT_DOCKER_HOST) -> None:
    """Mark on the engine that the platform at `home` uses it (idempotent); ServerError if
    the engine does not take the mark."""
    from dlaas.adapters.docker_calls import ENGINE_UNREACHABLE

    try:
        client = _engine(docker_host)
        try:
            labels = {LABEL_ENGINE_USER: platform_id, LABEL_HOME: str(home)}
            client.volumes.create(name=MARK_PREFIX + platform_id, labels=labels)
        finally:
            client.close()
    except ENGINE_UNREACHABLE as exc:
        raise ServerError(
            f"the Docker engine at {docker_host} did not take this platform's mark "
            f"({type(exc).__name__}): is it still running?"
        ) from None


def unmark_user(platform_id: str, docker_host: str = DEFAULT_DOCKER_HOST) -> None:
    """Take the platform's mark off the engine; silent if it is not there, or no engine answers."""
    from dlaas.adapters.docker_calls import ENGINE_UNREACHABLE

    try:
        client = _engine(docker_host)
        try:
            client.volumes.get(MARK_PREFIX + platform_id).remove()
        finally:
            client.close()
    except ENGINE_UNREACHABLE:  # docker.errors.NotFound among them
        pass


def engine_users(docker_host: str = DEFAULT_DOCKER_HOST) -> list[EngineUser]:
    """Every platform that marked itself on the engine or has a running container there
    (its `dlaas.managed` label); [] if no engine answers."""
    from dlaas.adapters.docker_calls import ENGINE_UNREACHABLE
    from dlaas.domain.jobspec import LABEL_MANAGED

    homes: dict[str, str] = {}
    running: dict[str, int] = {}
    try:
        client = _engine(docker_host)
        try:
            for volume in client.volumes.list(filters={"label": LABEL_ENGINE_USER}):
                labels = volume.attrs.get("Labels") or {}
                homes[labels.get(LABEL_ENGINE_USER, "")] = labels.get(LABEL_HOME, "")
            for c in client.api.containers(filters={"label": LABEL_MANAGED}):
                owner = (c.get("Labels") or {}).get(LABEL_MANAGED, "")
                running[owner] = running.get(owner, 0) + 1
        finally:
            client.close()
    except ENGINE_UNREACHABLE:
        return []
    ids = sorted((set(homes) | set(running)) - {""})
    return [EngineUser(i, homes.get(i, ""), running.get(i, 0)) for i in ids]


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
        address = interface_ipv4(bridge)
        if address:
            return address
    for cfg in configs:
        subnet = cfg.get("Subnet") or ""
        if subnet and ":" not in subnet:
            return str(next(ipaddress.ip_network(subnet, strict=False).hosts()))
    raise ServerError(f"Docker network {network!r} has no IPv4 gateway")


def taken_networks() -> list[str]:
    """Networks another engine must not use: host routes, the machine engine's networks."""
    taken = [*host_routes(), *_machine_engine_pools()]
    import docker

    from dlaas.adapters.docker_calls import ENGINE_UNREACHABLE

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
