"""What the job monitor should do about one job: a pure decision, with a cause for every action.

The monitor (monitor.py) observes a job's world — its live status from etcd, its containers
as plain `dlaas.domain.ports.Container`s (whichever engine reported them), the events its helper
printed, the last log lines of failed learners and its own bookkeeping (when the helper
was told to finish, whether the allocation was released, whether cleanup already ran) —
and `decide()` turns that into a `Decision`: the actions to take, in order, and when to
look again. No Docker, etcd or store imports here,
so every rule is tested with plain data and a fake clock.

Who owns which edge (dlaas.domain.status): the LCM moves QUEUED -> PENDING -> DOWNLOADING and
handles user halt; the monitor advances DOWNLOADING -> PROCESSING -> STORING -> COMPLETED
and fails jobs whose containers failed, from DOWNLOADING on. While a job is PENDING the LCM
is still deploying it, and the monitor changes nothing; a QUEUED job may still have the
containers of its previous run while the LCM tears them down, and those are the LCM's too.

Failures come in two kinds (`classify_*`). The job's own fault (a learner's non-zero exit
code, an OOM kill, data not found, refused credentials, a bad code archive) fails the job
with the reason: running it again would fail again. Infrastructure trouble (a container
killed or stopped from outside, a container gone, the data store unreachable) asks the LCM
to restart the gang from its last checkpoint (`Requeue`); the LCM counts the restarts
against the manifest's max_restarts, records them and fails the job when none are left.
A job whose containers the monitor cannot see because their Docker engine is down never
gets here: node health is the LCM's call, and it requeues such jobs itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from dlaas.domain.jobspec import (
    EVENT_DATA_READY,
    EVENT_ERROR,
    HELPER_EXIT_REASONS,
    HELPER_EXIT_STORE_UNREACHABLE,
    ROLE_HELPER,
    JobErrorCode,
)
from dlaas.domain.ports import Container
from dlaas.domain.status import FINAL, TERMINAL, JobState, Status, between, can_transition

# How many of a failed learner's last log lines go into the job's failure reason.
LOG_TAIL_LINES = 10
# How long a helper may take to store logs after the finish signal on a final job.
DEFAULT_HELPER_TIMEOUT_S = 60.0
# How long a helper may take to store results and logs while the job is STORING.
DEFAULT_STORE_TIMEOUT_S = 600.0
# While QUEUED or PENDING the containers are the LCM's (a previous run's, or being
# deployed); the learners run (beside the helper) from DOWNLOADING through PROCESSING.
_LCM_OWNS = between(Status.QUEUED, Status.PENDING)
_LEARNERS_RUN = between(Status.DOWNLOADING, Status.PROCESSING)

# The codes this detector records (their one home: dlaas.domain.errors.JobErrorCode).
ERROR_EXIT_CODE = JobErrorCode.EXIT_CODE
ERROR_OOM = JobErrorCode.OOM_KILLED
ERROR_HELPER = JobErrorCode.HELPER_FAILED
ERROR_CONTAINERS_MISSING = JobErrorCode.CONTAINERS_MISSING
ERROR_STORE_TIMEOUT = JobErrorCode.STORE_TIMEOUT
ERROR_KILLED = JobErrorCode.KILLED
ERROR_TERMINATED = JobErrorCode.TERMINATED

# Exit codes of a container whose main process died of a signal sent from outside: Docker
# (and the init process) report 128 + the signal number.
EXIT_SIGKILL = 137
EXIT_SIGTERM = 143
# What a restarted Docker engine records for a container whose process died with the old
# engine (it cannot learn the real exit code).
EXIT_ENGINE_LOST = 255
ERROR_ENGINE_LOST = JobErrorCode.ENGINE_LOST

# Helper failures that are the job's own fault (bad location, credentials, archive, its
# own data store not answering: HELPER_EXIT_CONNECTION_UNREACHABLE): a restart would fail
# the same way. The one the platform's: its own store not answering (exit
# HELPER_EXIT_STORE_UNREACHABLE) restarts; unknown codes fail as helper_failed. By exit
# code, not error code: both kinds of unreachable store report `store_unreachable`.
HELPER_INFRA_EXITS = frozenset({HELPER_EXIT_STORE_UNREACHABLE})

# How long the monitor waits for the LCM to act on a restart request before asking again
# (the LCM lets the helper sync checkpoints and logs first, which takes a while).
DEFAULT_REQUEUE_RETRY_S = 60.0


@dataclass(frozen=True)
class JobView:
    """Everything decide() reads about one job."""

    state: JobState
    containers: Sequence[Container]
    helper_events: Sequence[Mapping] = ()
    # Learner index -> its last log lines (the monitor fetches them for failed learners).
    log_tails: Mapping[int, Sequence[str]] = field(default_factory=dict)
    now: float = 0.0
    # Expected number of learners when known (from the manifest); None: trust what exists.
    num_learners: int | None = None
    # When the monitor last lost the Docker engine of one of the job's nodes (None: never).
    engine_lost_at: float | None = None
    # When the helper was sent the finish signal (None: not yet).
    helper_signalled_at: float | None = None
    released: bool = False
    cleaned_up: bool = False
    helper_timeout_s: float = DEFAULT_HELPER_TIMEOUT_S
    store_timeout_s: float = DEFAULT_STORE_TIMEOUT_S
    # When the monitor asked the LCM to restart this run of the job (None: not yet).
    requeue_requested_at: float | None = None
    # How often this run's helper was restarted alone.
    helper_restarts: int = 0
    requeue_retry_s: float = DEFAULT_REQUEUE_RETRY_S


@dataclass(frozen=True)
class Failure:
    """Why a job's containers failed, and whose fault it is."""

    reason: str
    error_code: str
    exit_code: int | None = None
    # True: the platform's trouble, restart from the last checkpoint; False: the job's own.
    infrastructure: bool = False


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
)

# A helper restarted this many times in one run is not restarted alone again: the gang is.
MAX_HELPER_RESTARTS = 3


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
        if isinstance(change, Requeue):
            return _requeue(view, change)
        if isinstance(change, RestartHelper):
            return Decision([change])
        if change is not None:
            actions.append(change)
            status = change.target
    if status == Status.STORING:
        return _storing(view, helper, learners, actions)
    if status in FINAL:
        return _final(view, helper, learners, status, actions)
    return Decision(actions)


def _helper_lost_alone(
    view: JobView, helper: Container | None, learners: list[Container], all_done: bool
) -> RestartHelper | None:
    """The helper died from outside while the learners are fine: restart it alone."""
    if helper is None or not helper.exited or helper.oom_killed:
        return None
    if view.state.status not in _LEARNERS_RUN or all_done:
        return None
    if view.helper_restarts >= MAX_HELPER_RESTARTS:
        return None
    if any(c.exited and (c.exit_code or c.oom_killed) for c in learners):
        return None
    how = {EXIT_SIGKILL: "killed (SIGKILL)", EXIT_SIGTERM: "stopped (SIGTERM)", 0: "stopped"}
    if helper.exit_code not in how:
        return None
    return RestartHelper(
        f"the helper was {how[helper.exit_code]} from outside; restarted beside the running "
        f"learners ({view.helper_restarts + 1}/{MAX_HELPER_RESTARTS})"
    )


def _status_change(
    view: JobView, helper: Container | None, learners: list[Container]
) -> TransitionTo | Requeue | RestartHelper | None:
    """The one status change (or restart request) the containers call for, or None."""
    status = view.state.status
    if status in _LCM_OWNS:
        # A QUEUED job has no containers yet, or those of its previous run that the LCM is
        # tearing down; while PENDING the LCM is still creating and starting them (it fails
        # the job itself when deployment fails), and acting now would race its deploy.
        return None

    expected = view.num_learners if view.num_learners is not None else len(learners)
    all_done = (
        expected > 0
        and len(learners) >= expected
        and all(c.exited and c.exit_code == 0 for c in learners)
    )

    restart_helper = _helper_lost_alone(view, helper, learners, all_done)
    if restart_helper is not None:
        return restart_helper
    failure = _first_failure(view, helper, learners)
    if failure is None and helper is not None and helper.exited and helper.exit_code == 0:
        if status == Status.STORING or all_done:
            # Walking to COMPLETED records the steps a restarted monitor saw late.
            return TransitionTo(Status.COMPLETED, "helper stored results and logs")
        # The helper exits 0 early only on a finish signal, and the monitor sends that
        # only from STORING on: someone else stopped it (docker stop, an engine restart).
        failure = Failure(
            "the helper was stopped from outside before the learners finished",
            ERROR_TERMINATED,
            0,
            infrastructure=True,
        )
    if failure is None:
        failure = _missing(view, helper, learners)
    if failure is not None:
        if failure.infrastructure and can_transition(status, Status.QUEUED):
            return Requeue(failure.reason, failure.error_code)
        # The job's own fault (a STORING job too: the platform's trouble restarts it from its
        # last checkpoint, its uploaded-from-the-volume results being gone).
        return TransitionTo(Status.FAILED, failure.reason, failure.error_code, failure.exit_code)

    if all_done and status in _LEARNERS_RUN:
        return TransitionTo(Status.STORING, f"all {len(learners)} learner(s) exited 0")

    if status == Status.DOWNLOADING and _saw(view.helper_events, EVENT_DATA_READY):
        return TransitionTo(Status.PROCESSING, "helper reported data and code ready")

    return None


def _requeue(view: JobView, change: Requeue) -> Decision:
    """Ask the LCM once per failure; ask again only if it did nothing for a long while."""
    if view.requeue_requested_at is not None:
        again = view.requeue_requested_at + view.requeue_retry_s
        if view.now < again:
            return Decision([], again)
    return Decision([change], view.now + view.requeue_retry_s)


# --- classification ----------------------------------------------------------------


def classify_learner(c: Container, tail: Sequence[str] = ()) -> Failure:
    """Why a learner that exited non-zero (or was OOM-killed) failed, and whose fault it is."""
    code = c.exit_code
    if c.oom_killed:
        # The job asked for too little memory, or its program uses too much: the same
        # gang would run out again, so no restart.
        reason = f"learner {c.learner} was killed: out of memory (exit code {code})"
        return Failure(_with_tail(reason, tail), ERROR_OOM, code)
    if code == EXIT_SIGKILL:
        # SIGKILL that was not the OOM killer: docker kill, a dying node, a chaos test.
        reason = f"learner {c.learner} was killed from outside (SIGKILL, exit code {code})"
        return Failure(reason, ERROR_KILLED, code, infrastructure=True)
    if code == EXIT_SIGTERM:
        # The platform stops learners only of ended or requeued jobs (status written first),
        # so a SIGTERM on a running job came from outside: docker stop, an engine shutdown.
        reason = f"learner {c.learner} was stopped from outside (SIGTERM, exit code {code})"
        return Failure(reason, ERROR_TERMINATED, code, infrastructure=True)
    reason = f"learner {c.learner} exited with code {code}"
    return Failure(_with_tail(reason, tail), ERROR_EXIT_CODE, code)


def classify_helper(helper: Container, events: Sequence[Mapping] = ()) -> Failure:
    """Why a helper that exited non-zero failed, and whose fault it is."""
    code = helper.exit_code
    if helper.oom_killed:
        return Failure("the helper ran out of memory", ERROR_OOM, code)
    if code == EXIT_SIGKILL:
        return Failure(
            f"the helper was killed from outside (SIGKILL, exit code {code})",
            ERROR_KILLED,
            code,
            infrastructure=True,
        )
    if code == EXIT_SIGTERM:  # it exits 0 on SIGTERM once its handler is in place
        return Failure(
            f"the helper was stopped from outside (SIGTERM, exit code {code})",
            ERROR_TERMINATED,
            code,
            infrastructure=True,
        )
    error_code, text = HELPER_EXIT_REASONS.get(
        code or 0, (ERROR_HELPER, f"helper exited with code {code}")
    )
    message = next(
        (str(e.get("message", "")) for e in reversed(events) if e.get("event") == EVENT_ERROR),
        "",
    )
    reason = f"{text}: {message}" if message else text
    return Failure(reason, error_code, infrastructure=code in HELPER_INFRA_EXITS)


def _first_failure(
    view: JobView, helper: Container | None, learners: list[Container]
) -> Failure | None:
    """The failure of the container that failed first: later ones are often its consequence
    (a learner whose peer was killed loses its connection and exits 1)."""
    failed = [c for c in learners if c.exited and (c.exit_code or c.oom_killed)]
    if helper is not None and helper.exited and (helper.exit_code or helper.oom_killed):
        failed.append(helper)
    if not failed:
        return None
    first = min(
        failed,
        key=lambda c: (c.finished_at or float("inf"), c.role == ROLE_HELPER, c.learner or 0),
    )
    if (
        first.exit_code == EXIT_ENGINE_LOST
        and view.engine_lost_at is not None
        and (first.finished_at is None or first.finished_at >= view.engine_lost_at)
    ):
        # It stopped while its engine was away: the node's trouble, not the job's.
        who = "the helper" if first.role == ROLE_HELPER else f"learner {first.learner}"
        reason = f"{who} died with the Docker engine of its node (exit code {EXIT_ENGINE_LOST})"
        return Failure(reason, ERROR_ENGINE_LOST, EXIT_ENGINE_LOST, infrastructure=True)
    if first.role == ROLE_HELPER:
        return classify_helper(first, view.helper_events)
    return classify_learner(first, view.log_tails.get(first.learner or 0, ()))


def _missing(view: JobView, helper: Container | None, learners: list[Container]) -> Failure | None:
    """Containers of an active job that are gone (removed from outside, engine wiped).

    The LCM creates every container before it writes DOWNLOADING, so from then on each
    must exist. A job on an unreachable engine is never decided (see the module doc).
    """
    status = view.state.status
    if not view.containers:
        reason = f"the job's containers are gone while it was {status}"
    elif helper is None:
        reason = f"the helper container is gone while the job was {status}"
    else:
        present = {c.learner for c in learners}
        gone = [i for i in range(view.num_learners or 0) if i not in present]
        if not gone:
            return None
        which = ", ".join(str(i) for i in gone)
        reason = f"learner {which} container is gone while the job was {status}"
    return Failure(reason, ERROR_CONTAINERS_MISSING, infrastructure=True)


def _with_tail(reason: str, tail: Sequence[str]) -> str:
    lines = [line for line in tail if line.strip()][-LOG_TAIL_LINES:]
    return reason + "; last log lines:\n" + "\n".join(lines) if lines else reason


def _storing(
    view: JobView,
    helper: Container | None,
    learners: list[Container],
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
    helper: Container | None,
    learners: list[Container],
    status: Status,
    actions: list[Action],
) -> Decision:
    """A final job: release its allocation, let the helper store the logs, then clean up."""
    if not view.released:
        ended = status in TERMINAL
        actions.append(ReleaseAllocation(f"job is {status}", ended))
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


def _helper(containers: Sequence[Container]) -> Container | None:
    return next((c for c in containers if c.role == ROLE_HELPER), None)


def _learners(containers: Sequence[Container]) -> list[Container]:
    return [c for c in containers if c.role != ROLE_HELPER]


def _saw(events: Sequence[Mapping], name: str) -> bool:
    return any(e.get("event") == name for e in events)
