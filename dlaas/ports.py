"""Ports to the platform's shared facts: job status in etcd and the scheduler.

Abstract classes, no I/O. The production adapters subclass them (`StatusKeeper` in
dlaas.etcd_status, `SchedulerClient` in dlaas.sdk); so do the in-memory fakes of the
fast tests (tests/lcm_fakes.py), so a use case runs the same against either.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from dlaas.errors import InvalidTransition, JobNotFound
from dlaas.status import JobState, Status, forward_path


class StatusRepo(ABC):
    """A job's live status, changed only by compare-and-swap along dlaas.status's table,
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
