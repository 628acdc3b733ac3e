"""What the job monitor should do about one job: a pure decision, with a cause for every action.

The monitor (monitor.py) observes a job's world — its live status from etcd, plain views of
its containers, the events its helper printed, the last log lines of failed learners and
its own bookkeeping (when the helper was told to finish, whether the allocation was
released, whether cleanup already ran) — and `decide()` turns that into a `Decision`: the
actions to take, in order, and when to look again. No Docker, etcd or store imports here,
so every rule is tested with plain data and a fake clock.

Who owns which edge (dlaas.status): the LCM moves QUEUED -> PENDING -> DOWNLOADING and
handles user halt; the monitor advances DOWNLOADING -> PROCESSING -> STORING -> COMPLETED
and fails jobs whose containers failed, from DOWNLOADING on. While a job is PENDING the LCM
is still deploying it, and the monitor changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from dlaas.jobspec import EVENT_DATA_READY, EVENT_ERROR, HELPER_EXIT_REASONS, ROLE_HELPER
from dlaas.status import FINAL, JobState, Status

# How many of a failed learner's last log lines go into the job's failure reason.
LOG_TAIL_LINES = 10
# How long a helper may take to store logs after the finish signal on a final job.
DEFAULT_HELPER_TIMEOUT_S = 60.0
# How long a helper may take to store results and logs while the job is STORING.
DEFAULT_STORE_TIMEOUT_S = 600.0

# Docker container states, grouped by what they mean for the monitor.
RUNNING_STATES = frozenset({"running", "paused", "restarting"})
EXITED_STATES = frozenset({"exited", "dead"})

ERROR_EXIT_CODE = "exit_code"
ERROR_OOM = "oom_killed"
ERROR_HELPER = "helper_failed"  # a helper exit code the contract does not name
ERROR_CONTAINERS_MISSING = "containers_missing"
ERROR_STORE_TIMEOUT = "store_timeout"


@dataclass(frozen=True)
class ContainerView:
    """What the monitor needs to know about one container of a job (plain data)."""

    role: str  # jobspec.ROLE_HELPER | jobspec.ROLE_LEARNER
    learner: int | None  # learner index; None for the helper
    state: str  # Docker's State.Status: created, running, exited, dead, ...
    exit_code: int | None = None
    oom_killed: bool = False
    name: str = ""
    finished_at: float | None = None  # Docker's State.FinishedAt, seconds since the epoch

    @property
    def running(self) -> bool:
        return self.state in RUNNING_STATES

    @property
    def exited(self) -> bool:
        return self.state in EXITED_STATES


@dataclass(frozen=True)
class JobView:
    """Everything decide() reads about one job."""

    state: JobState
    containers: Sequence[ContainerView]
    helper_events: Sequence[Mapping] = ()
    # Learner index -> its last log lines (the monitor fetches them for failed learners).
    log_tails: Mapping[int, Sequence[str]] = field(default_factory=dict)
    now: float = 0.0
    # Expected number of learners when known (from the manifest); None: trust what exists.
    num_learners: int | None = None
    # When the helper was sent the finish signal (None: not yet).
    helper_signalled_at: float | None = None
    released: bool = False
    cleaned_up: bool = False
    helper_timeout_s: float = DEFAULT_HELPER_TIMEOUT_S
    store_timeout_s: float = DEFAULT_STORE_TIMEOUT_S


# --- actions -------------------------------------------------------------------------


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


Action = TransitionTo | SignalHelperFinish | KillHelper | StopLearners | Cleanup | ReleaseAllocation


@dataclass(frozen=True)
class Decision:
    actions: list[Action]
    # Look at the job again at this time even if nothing happens (a timeout is pending).
    recheck_at: float | None = None


# --- the rules -----------------------------------------------------------------------


def decide(view: JobView) -> Decision:
    """The actions for one job, in the order they must run.

    A status change comes first; the actions after it assume it succeeded (the monitor
    stops and looks again when its compare-and-swap loses a race, e.g. to a user halt).
    """
    helper = _helper(view.containers)
    learners = sorted(_learners(view.containers), key=lambda c: c.learner or 0)
    actions: list[Action] = []
    status = view.state.status
    if status not in FINAL:
        change = _status_change(view, helper, learners)
        if change is not None:
            actions.append(change)
            status = change.target
    if status == Status.STORING:
        return _storing(view, helper, learners, actions)
    if status in FINAL:
        return _final(view, helper, learners, status, actions)
    return Decision(actions)


def _status_change(
    view: JobView, helper: ContainerView | None, learners: list[ContainerView]
) -> TransitionTo | None:
    """The one status change the containers call for, or None."""
    status = view.state.status
    if status in (Status.QUEUED, Status.PENDING):
        # A QUEUED job has no containers yet; while PENDING the LCM is still creating and
        # starting them (it fails the job itself when deployment fails), and acting now
        # would race its deploy. DOWNLOADING comes next.
        return None

    failed = _first_failed_learner(learners)
    if failed is not None:
        return _learner_failure(failed, view.log_tails.get(failed.learner or 0, ()))

    if helper is not None and helper.exited and helper.exit_code != 0:
        return _helper_failure(helper, view.helper_events)

    if helper is None:
        what = "containers are" if not view.containers else "helper container is"
        return TransitionTo(
            Status.FAILED, f"the job's {what} gone while it was {status}", ERROR_CONTAINERS_MISSING
        )

    expected = view.num_learners if view.num_learners is not None else len(learners)
    all_done = (
        expected > 0
        and len(learners) >= expected
        and all(c.exited and c.exit_code == 0 for c in learners)
    )

    if helper.exited:  # and exited 0
        if status == Status.STORING or all_done:
            # Walking to COMPLETED records the steps a restarted monitor saw late.
            return TransitionTo(Status.COMPLETED, "helper stored results and logs")
        return TransitionTo(
            Status.FAILED, "helper exited before the learners finished", ERROR_HELPER, 0
        )

    if all_done and status in (Status.DOWNLOADING, Status.PROCESSING):
        return TransitionTo(Status.STORING, f"all {len(learners)} learner(s) exited 0")

    if status == Status.DOWNLOADING and _saw(view.helper_events, EVENT_DATA_READY):
        return TransitionTo(Status.PROCESSING, "helper reported data and code ready")

    return None


def _storing(
    view: JobView,
    helper: ContainerView | None,
    learners: list[ContainerView],
    actions: list[Action],
) -> Decision:
    """STORING: tell the helper to store results (once), and give it a deadline."""
    if helper is None or not helper.running:
        return Decision(actions)
    if view.helper_signalled_at is None:
        # Also after a monitor restart between the STORING write and the signal.
        actions.append(SignalHelperFinish("all learners exited 0; helper stores results"))
        return Decision(actions, view.now + view.store_timeout_s)
    deadline = view.helper_signalled_at + view.store_timeout_s
    if view.now < deadline:
        return Decision(actions, deadline)
    actions.append(
        TransitionTo(
            Status.FAILED,
            f"helper did not store results within {view.store_timeout_s:.0f} s",
            ERROR_STORE_TIMEOUT,
        )
    )
    return _final(view, helper, learners, Status.FAILED, actions)


def _final(
    view: JobView,
    helper: ContainerView | None,
    learners: list[ContainerView],
    status: Status,
    actions: list[Action],
) -> Decision:
    """A final job: release its allocation, let the helper store the logs, then clean up."""
    if not view.released:
        actions.append(ReleaseAllocation(f"job is {status}"))
    if any(c.running for c in learners):
        actions.append(StopLearners(f"job is {status}"))

    if helper is not None and helper.running:
        if view.helper_signalled_at is None:
            actions.append(SignalHelperFinish(f"job is {status}; helper stores logs"))
            return Decision(actions, view.now + view.helper_timeout_s)
        deadline = view.helper_signalled_at + view.helper_timeout_s
        if view.now < deadline:
            return Decision(actions, deadline)  # the helper is storing the logs
        limit = f"{view.helper_timeout_s:.0f} s"
        actions.append(KillHelper(f"helper did not exit within {limit} of the finish signal"))
        actions.append(Cleanup(f"job is {status}; helper killed, logs may be incomplete", True))
        return Decision(actions)

    if view.containers or not view.cleaned_up:
        incomplete = helper is not None and helper.exited and helper.exit_code != 0
        if helper is None:
            why = f"job is {status}"
        elif incomplete:
            why = f"job is {status}; helper exited {helper.exit_code}, logs may be incomplete"
        else:
            why = f"job is {status}; helper has exited"
        actions.append(Cleanup(why, incomplete))
    return Decision(actions)


def _learner_failure(c: ContainerView, tail: Sequence[str]) -> TransitionTo:
    if c.oom_killed:
        reason = f"learner {c.learner} was killed: out of memory (exit code {c.exit_code})"
    else:
        reason = f"learner {c.learner} exited with code {c.exit_code}"
    lines = [line for line in tail if line.strip()][-LOG_TAIL_LINES:]
    if lines:
        reason += "; last log lines:\n" + "\n".join(lines)
    error_code = ERROR_OOM if c.oom_killed else ERROR_EXIT_CODE
    return TransitionTo(Status.FAILED, reason, error_code, c.exit_code)


def _helper_failure(helper: ContainerView, events: Sequence[Mapping]) -> TransitionTo:
    code = helper.exit_code
    if helper.oom_killed:
        error_code, text = ERROR_OOM, "the helper ran out of memory"
    else:
        error_code, text = HELPER_EXIT_REASONS.get(
            code or 0, (ERROR_HELPER, f"helper exited with code {code}")
        )
    message = next(
        (str(e.get("message", "")) for e in reversed(events) if e.get("event") == EVENT_ERROR),
        "",
    )
    reason = f"{text}: {message}" if message else text
    return TransitionTo(Status.FAILED, reason, error_code)


def _first_failed_learner(learners: list[ContainerView]) -> ContainerView | None:
    """The learner that failed first: later failures are often its consequence."""
    failed = [c for c in learners if c.exited and (c.exit_code or c.oom_killed)]
    if not failed:
        return None
    return min(failed, key=lambda c: (c.finished_at or float("inf"), c.learner or 0))


def _helper(containers: Sequence[ContainerView]) -> ContainerView | None:
    return next((c for c in containers if c.role == ROLE_HELPER), None)


def _learners(containers: Sequence[ContainerView]) -> list[ContainerView]:
    return [c for c in containers if c.role != ROLE_HELPER]


def _saw(events: Sequence[Mapping], name: str) -> bool:
    return any(e.get("event") == name for e in events)
