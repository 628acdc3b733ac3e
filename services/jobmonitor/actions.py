"""The actions the job monitor's `decide()` (decide.py) asks for, and its `Decision`. Pure.

act.py carries them out, in order; each names its reason, which the monitor logs.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlaas.domain.status import Status


@dataclass(frozen=True)
class TransitionTo:
    target: Status
    reason: str
    error_code: str = ""
    exit_code: int | None = None


@dataclass(frozen=True)
class SignalHelperFinish:
    reason: str


@dataclass(frozen=True)
class KillHelper:
    reason: str


@dataclass(frozen=True)
class StopLearners:
    reason: str


@dataclass(frozen=True)
class Cleanup:
    reason: str
    # Set when the helper was killed or failed after the job ended: the stored logs may be
    # incomplete, and the job info says so.
    logs_incomplete: bool = False


@dataclass(frozen=True)
class ReleaseAllocation:
    reason: str
    ended: bool = False  # COMPLETED or FAILED: the scheduler learns the job's run time


@dataclass(frozen=True)
class RestartHelper:
    """Start the job's helper container again in place; the learners keep running.

    The helper lost (killed or stopped from outside) while the learners train is restarted
    alone: the job volume still holds data, code and the ready mark, so the new helper
    process adopts the running gang and goes on syncing checkpoints and logs.
    """

    reason: str


@dataclass(frozen=True)
class RestartLearners:
    """Start every learner of the gang again in its container (those still running killed
    first); the helper, the volume and the placement stay.

    A learner killed or stopped from outside while its gang trains on one node: the volume
    holds the data, the code, the ready mark and the learners' own last checkpoint, so the
    restarted learners resume from it at once, without a requeue, a new placement or a new
    helper. It counts against the manifest's max_restarts like the LCM's restarts.
    """

    reason: str


@dataclass(frozen=True)
class MarkStalled:
    """Record a stall in the job's info with its evidence; fire the `stalled` hook event."""

    reason: str
    since: float  # the job's last log activity: one mark per stall
    evidence: tuple[dict, ...] = ()


@dataclass(frozen=True)
class Requeue:
    """Ask the LCM to restart the gang from its last checkpoint (counts as a restart)."""

    reason: str
    error_code: str


Action = (
    TransitionTo
    | SignalHelperFinish
    | KillHelper
    | StopLearners
    | Cleanup
    | ReleaseAllocation
    | Requeue
    | RestartHelper
    | RestartLearners
    | MarkStalled
)


@dataclass(frozen=True)
class Decision:
    actions: list[Action]
    # Look at the job again at this time even if nothing happens (a timeout is pending).
    recheck_at: float | None = None
