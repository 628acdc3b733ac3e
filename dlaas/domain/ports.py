"""Ports to the platform's shared facts: job status in etcd, the scheduler, and the
containers of jobs as a container engine reports them.

Abstract classes, no I/O. The production adapters subclass them (`StatusKeeper` in
dlaas.adapters.etcd_status, `SchedulerClient` in dlaas.clients.sdk, the Docker and Swarm engines of
dlaas.adapters.engines); so do the in-memory fakes of the fast tests (tests/lcm_fakes.py), so a use
case runs the same against either.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from dlaas.domain.accounts import AuditEntry, Quota, Team, TokenRecord, User
from dlaas.domain.errors import InvalidRequest, InvalidTransition, JobNotFound
from dlaas.domain.plan import DeploymentPlan
from dlaas.domain.status import JobState, Status, forward_path


class StatusRepo(ABC):
    """A job's live status, changed only by compare-and-swap along dlaas.domain.status's table,
    and the facts the LCM keeps next to it (placement, node health) or reads there (the
    scheduler's allocations)."""

    # ---- job status ------------------------------------------------------------------

    @abstractmethod
    def get(self, job_id: str) -> JobState | None: ...

    @abstractmethod
    def create(self, job_id: str, reason: str = "submitted") -> JobState:
        """Put the QUEUED state if the job has none yet; return the job's state either way."""

    @abstractmethod
    def transition(
        self,
        job_id: str,
        target: Status,
        reason: str,
        *,
        error_code: str = "",
        exit_code: int | None = None,
    ) -> JobState:
        """Move the job to `target`; raise InvalidTransition if not allowed, JobNotFound."""

    def try_transition(self, job_id: str, target: Status, reason: str, **kw) -> JobState | None:
        """Like transition(), but None when the edge is not allowed (someone got there first)."""
        try:
            return self.transition(job_id, target, reason, **kw)
        except InvalidTransition:
            return None

    def walk_to(self, job_id: str, target: Status, reason: str, **kw) -> JobState | None:
        """Advance along the happy path to `target`, recording every step in between."""
        current = self.get(job_id)
        if current is None:
            raise JobNotFound(job_id)
        state: JobState | None = current
        for step in forward_path(current.status, target):
            state = self.try_transition(job_id, step, reason, **kw)
            if state is None:
                return None
        return state

    @abstractmethod
    def delete(self, job_id: str) -> None:
        """Forget the job: its status and everything kept under it (its placement)."""

    @abstractmethod
    def active_jobs(self) -> dict[str, JobState]:
        """Every job whose status is not final."""

    @abstractmethod
    def repair_mirrors(self, since: float | None = None) -> list[str]:
        """Mirror into the job store what it missed; the jobs repaired."""

    # ---- next to a job's status: its placement ---------------------------------------

    @abstractmethod
    def placement(self, job_id: str) -> list[dict]:
        """The job's placement as the LCM recorded it ({learner, node, gpu_indices}), or []."""

    @abstractmethod
    def set_placement(self, job_id: str, placement: list[dict]) -> None: ...

    # ---- the cluster: node health (the LCM's), allocations (the scheduler's) ---------

    @abstractmethod
    def set_node_health(self, name: str, health: dict[str, Any]) -> None:
        """Record a node's health ({"healthy": bool, "since": t, ...}): the scheduler reads it."""

    @abstractmethod
    def unhealthy_nodes(self) -> set[str]: ...

    @abstractmethod
    def held_allocation(self, job_id: str) -> list[dict]:
        """The allocation the scheduler still holds for the job (its running entry), or []."""

    @abstractmethod
    def watch_scheduler(self, callback: Callable[[object], None]) -> object:
        """Call `callback` on every change of the scheduler's state; a handle to cancel."""

    @abstractmethod
    def cancel_watch(self, handle: object) -> None: ...


class SchedulerPort(ABC):
    """The scheduler as the LCM uses it: queue a gang, ask for decisions, give back."""

    @abstractmethod
    def enqueue(self, gang: Any) -> tuple[bool, str]:
        """Queue (or re-target) a gang (a scheduler_pb2.GangRequest); (accepted, reason)."""

    @abstractmethod
    def schedule(self) -> list[Any]:
        """The decisions to carry out now (scheduler_pb2.Decision)."""

    @abstractmethod
    def release(self, job_id: str, ended: bool = False) -> None:
        """Give back the job's allocation and drop it from the queue."""


# ---- the containers of jobs -----------------------------------------------------------

# Container states, in Docker's vocabulary (a Swarm task's state is mapped onto them).
RUNNING_STATES = frozenset({"running", "paused", "restarting"})
EXITED_STATES = frozenset({"exited", "dead"})


@dataclass(frozen=True)
class Container:
    """One container of a job as its engine reports it: a Docker container, or the task of
    a Swarm service. Plain data; `id` is the engine's handle for the calls below."""

    id: str
    name: str
    job_id: str
    role: str  # jobspec.ROLE_HELPER | jobspec.ROLE_LEARNER
    learner: int | None  # learner index; None for a helper
    state: str  # created, running, exited, dead, ... (RUNNING_STATES, EXITED_STATES)
    node: str = ""
    exit_code: int | None = None  # set once exited
    oom_killed: bool = False
    finished_at: float | None = None  # seconds since the epoch, once exited

    @property
    def running(self) -> bool:
        return self.state in RUNNING_STATES

    @property
    def exited(self) -> bool:
        return self.state in EXITED_STATES


class EngineUnreachable(Exception):
    """The engine (or the node it speaks for) does not answer; what runs there is unknown."""

    def __init__(self, node: str, cause: str = ""):
        super().__init__(f"the container engine of node {node} does not answer"
                         + (f": {cause}" if cause else ""))  # fmt: skip
        self.node = node


@dataclass(frozen=True)
class ContainerStats:
    """One running job container's counters, as one read of its engine gave them."""

    id: str
    cpu_ns: int  # CPU time used since the container started
    read_at: float  # when the engine read the counters (seconds, the engine's clock)
    memory_bytes: int | None  # in use, page cache left out; None: the engine did not say


class UsageSource(ABC):
    """One node's running job containers and their counters (the LCM's utilization
    sampler reads it; the Docker adapter is dlaas.adapters.engines.docker_usage)."""

    @abstractmethod
    def read(self) -> list[ContainerStats]:
        """The platform's running containers on the node; raise EngineUnreachable."""


class EventStream(ABC):
    """The job ids an engine reports changes for, as they happen; `close()` ends it."""

    @abstractmethod
    def __iter__(self) -> Iterator[str]: ...

    @abstractmethod
    def close(self) -> None: ...


class JobContainers(ABC):
    """A node's view of the platform's job containers: observe them and act on one.

    What the job monitor and the API's log reader need of an engine. Every call is
    idempotent; a container already gone is fine (None, empty, or nothing done). Calls
    that cannot reach the engine raise EngineUnreachable.
    """

    @abstractmethod
    def job_containers(self, job_id: str) -> list[Container]:
        """The job's containers on this node, exited ones included."""

    @abstractmethod
    def jobs_with_resources(self) -> set[str]:
        """Ids of the jobs that have containers, networks or volumes of this platform here."""

    @abstractmethod
    def events(self, since: float | None = None) -> EventStream:
        """A stream of the ids of jobs whose containers changed (a wake-up, not the truth:
        the monitor reads `job_containers` again). Raises EngineUnreachable."""

    @abstractmethod
    def logs(
        self, c: Container, *, tail: int | None = None, timestamps: bool = False
    ) -> bytes | None:
        """The container's output so far (the last `tail` lines; `timestamps`: each line
        after the time it was printed, `2026-11-27T00:12:34.123456789Z `, as Docker writes
        it); None when it is gone."""

    @abstractmethod
    def follow_logs(self, c: Container) -> Iterator[bytes]:
        """The container's output from its start, ending when the container ends."""

    @abstractmethod
    def restart(self, c: Container) -> None:
        """Start the container again, killed first if it still runs: a helper restarted
        beside running learners, a gang's learners restarted in place. Its volume, network
        and placement stay; on a swarm the service's new task is a new container."""

    @abstractmethod
    def kill(self, c: Container, signal: str | None = None) -> None:
        """Send `signal` (default SIGKILL) to the container's main process."""

    @abstractmethod
    def stop(self, c: Container, timeout: int) -> None:
        """SIGTERM, then SIGKILL after `timeout` seconds; returns when it has exited."""

    @abstractmethod
    def remove_resources(self, job_id: str) -> None:
        """Remove every container, network and volume of the job here (missing is fine)."""

    def layer_bytes(self, job_id: str) -> dict[str, int] | None:
        """Container id -> bytes in its writable layer, for the job's running containers
        here (the job monitor's disk limit); None: this engine cannot say."""
        return None


class ContainerEngine(JobContainers):
    """One node's container engine, as the LCM drives it: every call idempotent.

    Also the node's JobContainers (dlaas.domain.ports), which the job monitor and the API's log
    reader use; the LCM itself uses `jobs_with_resources` from there (a node that comes
    back is cleared of what is left of jobs that moved on).
    """

    @abstractmethod
    def ping(self) -> bool:
        """Whether the engine answers now (never raises)."""

    def probe(self) -> str:
        """The node's health for the LCM's probes: "up", "down", or "unknown" when nobody can
        tell now (a cluster manager that does not answer, or has not heard from the node
        since it restarted), and then nothing may be judged on it. Never raises. An engine of
        its own is the node: it answers or the node is down."""
        return "up" if self.ping() else "down"

    @abstractmethod
    def image_present(self, image: str) -> bool: ...

    # Whether this node's containers are reached through a cluster manager that still
    # answers while the node is down (a swarm node): its jobs' containers can be removed.
    answers_for_down_node: bool = False

    # A node's state and availability are the cluster engine's (a swarm node object's). An
    # engine of its own has neither: its state is what the LCM's probes say (None here) and
    # it is always active.
    def node_state(self) -> str | None:
        """ready, down, unknown or disconnected as the cluster sees the node; None: ask ping."""
        return None

    def availability(self) -> str:
        """active, pause or drain (raise EngineUnreachable if the cluster cannot say)."""
        return "active"

    def set_availability(self, availability: str) -> None:
        raise InvalidRequest(
            "availability: a node can be drained only on a swarm (DLAAS_SWARM_MANAGER); "
            "this platform runs on an engine of its own"
        )

    @abstractmethod
    def deploy(self, plan: DeploymentPlan) -> list[str]:
        """Make the job's containers match `plan` and start them; the container names
        (the helper's first). Raise DeployRefused, ImageUnavailable or TemporaryError."""

    @abstractmethod
    def containers(self, job_id: str, role: str | None = None) -> Sequence[object]:
        """The job's containers on this engine (empty: it has none here)."""

    @abstractmethod
    def stop_learners(self, job_id: str, timeout: int = 10) -> None: ...

    @abstractmethod
    def signal_helper(self, job_id: str) -> None:
        """Tell the job's helper to store checkpoints and logs and exit."""

    @abstractmethod
    def wait_helper(self, job_id: str, timeout_s: float) -> bool:
        """Wait until the job's helper has exited; False on timeout."""

    @abstractmethod
    def remove_job(self, job_id: str) -> None:
        """Remove every container, the network and the volume of a job (missing is fine)."""

    def remove_run(self, job_id: str) -> None:
        """Remove one run of a job that goes on (restarted, requeued, resized): its
        containers go; what its next run would make again may stay (missing is fine). By
        default everything goes, as `remove_job`."""
        self.remove_job(job_id)

    def remove_job_here(self, job_id: str) -> None:
        """Remove only what the job has on this node (missing is fine): a node that comes
        back is cleared of a job that moved on, whose new run may already be elsewhere. An
        engine of its own holds only this node's part: that is the whole job here."""
        self.remove_job(job_id)


class AccountStore(Protocol):
    """What the account use cases (`dlaas.domain.account_ops`) need of a store: teams,
    users, token hashes and the audit log. The job stores (`dlaas.adapters.store`) have it."""

    def add_team(self, team: Team) -> bool: ...
    def get_team(self, name: str) -> Team | None: ...
    def set_quota(self, name: str, quota: Quota) -> bool: ...
    def set_max_priority(self, name: str, ceiling: int) -> bool: ...
    def set_storage_quota(self, name: str, quota_bytes: int) -> bool: ...
    def set_durations(self, name: str, default_s: int, max_s: int) -> bool: ...
    def add_user(self, user: User) -> bool: ...
    def get_user(self, name: str) -> User | None: ...
    def add_token(self, token: TokenRecord) -> None: ...
    def find_token(self, token_hash: str) -> TokenRecord | None: ...
    def revoke_tokens(
        self, *, user: str | None = None, token_hash: str | None = None, at: float
    ) -> int: ...
    def append_audit(self, entry: AuditEntry) -> None: ...
