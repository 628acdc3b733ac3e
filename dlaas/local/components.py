"""What the local platform runs (servers, service replicas, start order) and `dlaas status`.

`status` reads each component's pid record (dlaas.local.state) and asks every running one,
at once, whether it answers on its address (dlaas.local.probes).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from dlaas.local.dockerd import DEFAULT_DOCKER_HOST, docker_answers
from dlaas.local.probes import etcd_ok, grpc_answers, http_json, redis_answers, s3_ok
from dlaas.local.state import StateDir, default_state_dir, record_alive

# Start order; `down` goes in reverse. Each service is `python -m services.<kind>.main`,
# where the kind is the name up to a dash: the LCM runs as three replicas (one leads).
LCM_REPLICAS = 3
LCM_NAMES = tuple(f"lcm-{i}" for i in range(LCM_REPLICAS))
# The API runs as two replicas sharing one port (SO_REUSEPORT): one dying takes nothing
# down while the supervisor restarts it.
API_REPLICAS = 2
API_NAMES = tuple(f"api-{i}" for i in range(API_REPLICAS))
API_PROBES = 24  # a live replica is missed by all of them with odds (1/2) ** 24
SERVICES = ("scheduler", *LCM_NAMES, "jobmonitor", "worker", *API_NAMES)
SERVERS = ("etcd", "s3", "redis")
# With `--etcd-members 3` etcd runs as a real three-member cluster: "etcd" plus these.
EXTRA_ETCD = ("etcd-1", "etcd-2")


def kind_of(name: str) -> str:
    """The service a process name runs: "lcm-1" -> "lcm"."""
    return name.split("-", 1)[0]


@dataclass
class ComponentStatus:
    name: str
    running: bool
    pid: int | None = None
    address: str = ""
    detail: str = ""
    # Whether it answers on its address as it should; None: it serves nothing to ask (the
    # job monitor, the supervisor) or does not run.
    healthy: bool | None = None


def status(state_dir: Path | None = None) -> list[ComponentStatus]:
    """Every component `up` manages: whether its recorded process is alive, and whether
    it answers on its address (see `_health`)."""
    state = StateDir(Path(state_dir or default_state_dir()))
    out = []
    members = [m for m in EXTRA_ETCD if state.read_pid(m)] if state.pids.exists() else []
    for name in ("dockerd", *SERVERS, *members, *SERVICES, "supervisor"):
        record = state.read_pid(name)
        if not record:
            if name == "dockerd":
                running = docker_answers()
                out.append(
                    ComponentStatus(
                        name, running, None, DEFAULT_DOCKER_HOST,
                        "answers (Docker ping); not started by dlaas" if running else "not running",
                        healthy=True if running else None,
                    )
                )  # fmt: skip
            else:
                out.append(ComponentStatus(name, False, None, "", "not started"))
            continue
        alive = record_alive(record)
        detail = "running" if alive else "stale pid file (process gone)"
        out.append(
            ComponentStatus(name, alive, record.get("pid"), record.get("address", ""), detail)
        )
    _add_health([c for c in out if c.running and c.pid is not None])
    return out


# Components that serve nothing a probe could ask: their process running is the answer.
_NOTHING_TO_ASK = frozenset({"jobmonitor", "supervisor", "worker"})


def _health(name: str, address: str) -> tuple[bool | None, str]:
    """Whether a running component answers as it should, and what was asked."""
    kind = kind_of(name)
    if kind in _NOTHING_TO_ASK:
        return None, "running (serves nothing to ask)"
    if not address:
        return False, "running, but its pid file names no address to ask"
    if kind == "etcd":
        ok, asked = etcd_ok(address), "etcd /health"
    elif kind == "s3":
        ok, asked = s3_ok(address), "S3"
    elif kind == "redis":
        ok, asked = redis_answers(address), "Redis PING"
    elif kind in ("lcm", "scheduler"):
        ok, asked = grpc_answers(address), "gRPC health: SERVING"
    elif kind == "api":
        ok, asked = _api_replica_answers(name, address), "/health as this replica"
    elif name == "dockerd":
        ok, asked = docker_answers(address, timeout=2.0), "Docker ping"
    else:
        return None, "running"
    return ok, f"answers ({asked})" if ok else f"running, but does not answer ({asked})"


def _add_health(components: list[ComponentStatus]) -> None:
    """Ask every running component at once: a status takes one probe's time, not the sum."""
    if not components:
        return
    with ThreadPoolExecutor(max_workers=len(components)) as pool:
        answers = list(pool.map(lambda c: _health(c.name, c.address), components))
    for component, (healthy, detail) in zip(components, answers, strict=True):
        component.healthy, component.detail = healthy, detail


def _api_replica_answers(name: str, address: str) -> bool:
    """Whether replica `name` answers /health. Its peers answer on the same port: only its
    own answer counts (`API_PROBES` tries); three tries that get no answer at all end it."""
    silent = 0
    for _ in range(API_PROBES):
        answer = http_json(f"{address}/health")
        if answer.get("replica") == name:
            return True
        silent += not answer
        if silent >= 3:
            return False
    return False
