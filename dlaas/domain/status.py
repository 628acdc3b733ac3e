"""The job status state machine: the one module that owns job status.

Pure logic. `TRANSITIONS` is the single table of valid edges, each commented with who
triggers it; final statuses map to nothing. `advance()` refuses bad edges and returns
the new state with a timestamped, reasoned history entry; the adapters persist it with
compare-and-swap (etcd) and mirror it to the job store.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from dlaas.domain.errors import InvalidTransition


class Status(StrEnum):
    QUEUED = "QUEUED"
    PENDING = "PENDING"
    DOWNLOADING = "DOWNLOADING"
    PROCESSING = "PROCESSING"
    STORING = "STORING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    HALTED = "HALTED"


S = Status

TRANSITIONS: dict[Status, frozenset[Status]] = {
    # LCM: the scheduler placed the gang, deployment starts.
    # LCM: halted by the user while waiting; FAILED when the job can no longer ever run.
    S.QUEUED: frozenset({S.PENDING, S.HALTED, S.FAILED}),
    # LCM: helper and learners created; the helper starts loading data.
    # LCM: deployment failed for good (image missing, ...) -> FAILED, or user halt.
    # LCM: the node was lost or deployment hit an infrastructure error -> QUEUED (requeued).
    S.PENDING: frozenset({S.DOWNLOADING, S.FAILED, S.HALTED, S.QUEUED}),
    # Monitor: the helper reported the data and code in place, learners start training.
    # Monitor: the helper failed (data not found, store refused), or user halt.
    # Monitor/LCM: infrastructure failure with restarts left, node lost, preempted -> QUEUED.
    S.DOWNLOADING: frozenset({S.PROCESSING, S.FAILED, S.HALTED, S.QUEUED}),
    # Monitor: every learner exited 0; the helper uploads results and logs.
    # Monitor: a learner exited non-zero or was OOM-killed; or user halt.
    # Monitor/LCM: restart from the last checkpoint after an infrastructure failure, node
    # lost, preempted by a higher priority, or rescaled (elastic) -> QUEUED.
    S.PROCESSING: frozenset({S.STORING, S.FAILED, S.HALTED, S.QUEUED}),
    # Monitor: the helper exited 0 after results and logs were stored.
    # Monitor: the upload failed; or user halt.
    # LCM: the node holding the results was lost; Monitor: the helper died from outside
    # (killed, gone with its node's engine) -> QUEUED. The results only that node's volume
    # had are gone, the checkpoints are in S3: restart from the last one (redoing the tail
    # of the training) rather than lose the job. Never a controller's choice (LOSS_ONLY).
    S.STORING: frozenset({S.COMPLETED, S.FAILED, S.HALTED, S.QUEUED}),
    # Final: nothing leaves them.
    S.COMPLETED: frozenset(),
    S.FAILED: frozenset(),
    # LCM: the user resumes the job; it continues from its last checkpoint.
    S.HALTED: frozenset({S.QUEUED}),
}

# Edges only a user's request takes (never an automatic controller).
USER_ONLY = frozenset({(S.HALTED, S.QUEUED)})
# Edges taken only when the job's node or containers were lost under it (a restart after a
# failure), never by a controller's choice (preemption, rescale, drain): a STORING job's
# training is done, so moving it on purpose would only throw finished work away.
LOSS_ONLY = frozenset({(S.STORING, S.QUEUED)})

# The happy path, in order; used to walk forward over steps an observer saw late.
HAPPY_PATH = (S.QUEUED, S.PENDING, S.DOWNLOADING, S.PROCESSING, S.STORING, S.COMPLETED)


def between(first: Status, last: Status) -> frozenset[Status]:
    """The happy-path statuses from `first` to `last`, both included.

    Groupings such as "the learners run" (DOWNLOADING..PROCESSING) are written with this
    rather than typed by hand, so a status added to the happy path joins them.
    """
    i, j = HAPPY_PATH.index(first), HAPPY_PATH.index(last)
    if i > j:
        raise ValueError(f"{first} comes after {last} on the happy path")
    return frozenset(HAPPY_PATH[i : j + 1])


# The groupings every service uses, derived from the table (tests/unit/test_status.py pins
# them); never re-type them elsewhere.
# Nothing leaves them: the job is over for good (its data may be purged, its allocation
# released as ended).
TERMINAL = frozenset(s for s, nxt in TRANSITIONS.items() if not nxt)
# Ended: no container of the job should run. Only a user's resume leaves HALTED.
FINAL = frozenset(s for s, nxt in TRANSITIONS.items() if all((s, n) in USER_ONLY for n in nxt))
ACTIVE = frozenset(Status) - FINAL
# Placed and deployed: the job's containers exist on its nodes and it holds its allocation
# (every active status after the first).
DEPLOYED = ACTIVE - {HAPPY_PATH[0]}
# Placed jobs a failure sends back to the queue (their node lost, their containers killed or
# gone: a restart from the last checkpoint): the statuses with an automatic edge to QUEUED.
RESTARTABLE = frozenset(
    s for s, nxt in TRANSITIONS.items() if S.QUEUED in nxt and (s, S.QUEUED) not in USER_ONLY
)
# Placed jobs a controller may also move on purpose (preemption, rescale, drain): the
# restartable ones but those whose edge to QUEUED is LOSS_ONLY. Not STORING: training is done.
REQUEUEABLE = frozenset(s for s in RESTARTABLE if (s, S.QUEUED) not in LOSS_ONLY)


@dataclass(frozen=True)
class Transition:
    status: Status
    at: float
    reason: str
    error_code: str = ""
    exit_code: int | None = None


@dataclass(frozen=True)
class JobState:
    """The live status of one job, as kept in etcd (history lives in the job store)."""

    status: Status
    at: float
    reason: str
    error_code: str = ""
    exit_code: int | None = None
    seq: int = 0  # number of transitions so far; 0 for QUEUED

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> JobState:
        return cls(
            status=Status(d["status"]),
            at=float(d["at"]),
            reason=d.get("reason", ""),
            error_code=d.get("error_code", ""),
            exit_code=d.get("exit_code"),
            seq=int(d.get("seq", 0)),
        )

    @property
    def final(self) -> bool:
        return self.status in FINAL

    def transition(self) -> Transition:
        return Transition(self.status, self.at, self.reason, self.error_code, self.exit_code)


def initial(now: float, reason: str = "submitted") -> JobState:
    return JobState(Status.QUEUED, now, reason)


def can_transition(current: Status, target: Status) -> bool:
    return target in TRANSITIONS[current]


def advance(
    state: JobState,
    target: Status,
    now: float,
    reason: str,
    *,
    error_code: str = "",
    exit_code: int | None = None,
) -> JobState:
    """The state after `target`; raise InvalidTransition for an edge not in the table."""
    if not can_transition(state.status, target):
        raise InvalidTransition(f"job cannot go from {state.status} to {target}")
    if not reason:
        raise ValueError("every status change needs a reason")
    return JobState(target, now, reason, error_code, exit_code, state.seq + 1)


def forward_path(current: Status, target: Status) -> list[Status]:
    """The happy-path steps from `current` to `target` (exclusive of current).

    An observer that learns late that a job is already further along (say, learners done
    while it still shows DOWNLOADING) walks every step so the history stays complete.
    Non-happy targets (FAILED, HALTED) are a single step.
    """
    if target not in HAPPY_PATH or current not in HAPPY_PATH:
        return [target]
    i, j = HAPPY_PATH.index(current), HAPPY_PATH.index(target)
    return list(HAPPY_PATH[i + 1 : j + 1]) if j > i else []
