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
Two restarts the monitor makes in place itself (restarts.py): a helper lost beside running
learners, and a gang on one node whose learner was killed or stopped from outside (its
learners restarted in their containers, counted against max_restarts too).
A job whose containers the monitor cannot see because their Docker engine is down never
gets here: node health is the LCM's call, and it requeues such jobs itself.

Which kind a failed learner's is comes from classify.py, its last log lines first
(the triage catalog, dlaas.domain.triage). A running job's limits (limits.py) are judged
here too: a deadline passed stops the learners like a halt, then fails the job
`deadline_exceeded`; a job whose learners stopped logging is marked stalled, then failed or
restarted if its manifest says so; a job over its disk size (disk.py: a learner's writable
layer, or its node's job volume as the helper reports it) fails `disk_full`. The actions
are in actions.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from dlaas.domain.jobspec import EVENT_DATA_READY, ROLE_HELPER, JobErrorCode
from dlaas.domain.ports import Container
from dlaas.domain.run_time import duration_text
from dlaas.domain.status import (
    FINAL,
    TERMINAL,
    JobState,
    Status,
    Transition,
    between,
    can_transition,
)
from dlaas.domain.triage import CATALOG, Rule
from services.jobmonitor import disk, gang, limits, restarts
from services.jobmonitor.actions import (
    Action,
    Cleanup,
    Decision,
    KillHelper,
    MarkStalled,
    ReleaseAllocation,
    Requeue,
    RestartHelper,
    RestartLearners,
    SignalHelperFinish,
    StopLearners,
    TransitionTo,
)
from services.jobmonitor.classify import (
    ENGINE_EXITS,
    ERROR_CONTAINERS_MISSING,
    ERROR_ENGINE_LOST,
    ERROR_STORE_TIMEOUT,
    ERROR_TERMINATED,
    Failure,
    classify_helper,
    classify_learner,
)
from services.jobmonitor.limits import DEFAULT_POLL_S, ON_STALL_NOTIFY, Activity

ERROR_STALLED = JobErrorCode.STALLED
ERROR_DEADLINE = JobErrorCode.DEADLINE_EXCEEDED
# How long a helper may take to store logs after the finish signal on a final job.
DEFAULT_HELPER_TIMEOUT_S = 60.0
# How long a helper may take to store results and logs while the job is STORING.
DEFAULT_STORE_TIMEOUT_S = 600.0
# While QUEUED or PENDING the containers are the LCM's (a previous run's, or being
# deployed); the learners run (beside the helper) from DOWNLOADING through PROCESSING.
_LCM_OWNS = between(Status.QUEUED, Status.PENDING)
_LEARNERS_RUN = between(Status.DOWNLOADING, Status.PROCESSING)

# How late the monitor may notice an engine loss after the engine's containers ended with
# it (a swarm's tasks are polled; a killed engine's stream breaks only when next read):
# a container that ended with an engine code this long before still ended with the engine.
ENGINE_LOSS_NOTICED_S = 30.0

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
    # Restarts in place (restarts.py): the manifest's max_restarts and the restarts
    # made so far (every kind, the LCM's too); how many nodes the gang is placed on; this
    # run's restarts of its learners in place, and when the last was made.
    max_restarts: int = 0
    restarts: int = 0
    nodes: int = 1
    learner_restarts: int = 0
    learner_restarted_at: float | None = None
    requeue_retry_s: float = DEFAULT_REQUEUE_RETRY_S
    # What a failed learner's last lines are read against (the manifest's, the operator's,
    # the built-in rows: dlaas.domain.triage), and the job's image its reason names.
    triage_rules: Sequence[Rule] = CATALOG
    image: str = ""
    # Stalls (limits.py): learner -> its log activity; 0 s: not watched.
    learner_activity: Mapping[int, Activity] = field(default_factory=dict)
    stall_after_s: float = 0.0
    on_stall: str = ON_STALL_NOTIFY
    stall_marked_for: float | None = None  # the activity time of the stall last marked
    poll_s: float = DEFAULT_POLL_S
    # The deadline (limits.py): the job's status history; 0 s: none.
    history: Sequence[Transition] = ()
    max_duration_s: float = 0.0
    deadline_source: str = "max_duration"
    # Disk (disk.py): learner -> its writable layer's bytes as last measured; each
    # learner's disk size (0: not watched); how often the layers are measured.
    layer_bytes: Mapping[int, int] = field(default_factory=dict)
    disk_limit_bytes: int = 0
    disk_poll_s: float = disk.DEFAULT_DISK_POLL_S


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
        if change is None:
            marks, change = _stalled(view, learners)
            actions += marks
        if isinstance(change, StopLearners):  # the deadline: they checkpoint first
            return Decision([*actions, change], view.now + limits.STOP_RECHECK_S)
        if isinstance(change, Requeue):
            asked = _requeue(view, change)
            return Decision([*actions, *asked.actions], asked.recheck_at)
        if isinstance(change, RestartHelper):
            return Decision([change])
        if isinstance(change, RestartLearners):
            return Decision([change], view.now + restarts.RESTART_SETTLE_S)
        if change is not None:
            actions.append(change)
            status = change.target
    if status == Status.STORING:
        return _storing(view, helper, learners, actions)
    if status in FINAL:
        return _final(view, helper, learners, status, actions)
    return Decision(actions, _recheck(view, learners, status))


def _status_change(
    view: JobView, helper: Container | None, learners: list[Container]
) -> TransitionTo | Requeue | RestartHelper | RestartLearners | StopLearners | None:
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

    over = _deadline(view, learners, all_done)
    if over is not None:
        return over
    full = disk.disk_full(
        status, view.layer_bytes, view.disk_limit_bytes, view.helper_events, view.log_tails
    )
    if full is not None and not all_done:
        return TransitionTo(Status.FAILED, *full)
    restart_helper = restarts.helper_lost_alone(view, helper, learners, all_done)
    if restart_helper is not None:
        return restart_helper
    failure = _first_failure(view, helper, learners)
    if failure is not None:
        if restarts.under_way(view, helper, learners):
            return None
        in_place = restarts.learners_in_place(view, helper, learners, failure)
        if in_place is not None:
            return in_place
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


def _deadline(
    view: JobView, learners: list[Container], all_done: bool
) -> TransitionTo | StopLearners | None:
    """A job past its running-time limit: stop its learners (SIGTERM: they checkpoint),
    then, none running, fail it `deadline_exceeded` (its helper then stores everything)."""
    if view.max_duration_s <= 0 or view.state.status not in _LEARNERS_RUN or all_done:
        return None
    left = view.max_duration_s - limits.running_s(view.history, view.state, view.now)
    if left > 0:
        return None
    reached = view.now + left
    if any(
        c.exited and (c.exit_code or c.oom_killed) and (c.finished_at or reached) < reached
        for c in learners
    ):
        return None  # it failed before its deadline: that failure is the reason
    reason = (
        f"deadline: ran {duration_text(view.max_duration_s)} "
        f"({view.deadline_source}; queued, pending and halted time not counted)"
    )
    if view.state.status == Status.PROCESSING and any(c.running for c in learners):
        return StopLearners(f"{reason}; learners stopped (SIGTERM) to checkpoint")
    return TransitionTo(
        Status.FAILED,
        f"{reason}; stopped like a halt, results and logs stored",
        ERROR_DEADLINE,
    )


def _stalled(
    view: JobView, learners: list[Container]
) -> tuple[list[Action], TransitionTo | Requeue | None]:
    """A PROCESSING job no running learner of which logged for stall_after: mark it once
    (evidence, hook event), then what its manifest says (notify: nothing more)."""
    if view.state.status != Status.PROCESSING or view.stall_after_s <= 0:
        return [], None
    if not any(c.running for c in learners):
        return [], None
    since = limits.last_activity(learners, view.learner_activity)
    if since is None or view.now - since < view.stall_after_s:
        return [], None
    found = limits.evidence(learners, view.learner_activity)
    reason = limits.stall_reason(found, view.now - since, view.stall_after_s)
    marks: list[Action] = []
    if view.stall_marked_for != since:
        marks.append(MarkStalled(reason, since, tuple(found)))
    if view.on_stall == limits.ON_STALL_FAIL:
        return marks, TransitionTo(Status.FAILED, reason, ERROR_STALLED)
    if view.on_stall == limits.ON_STALL_RESTART:
        return marks, Requeue(reason, ERROR_STALLED)
    return marks, None


def _recheck(view: JobView, learners: list[Container], status: Status) -> float | None:
    """When to look at a running job again for its limits: its deadline; for stalls, the
    next poll of its learners' logs, or when the stall is due if sooner."""
    times = []
    settled = (view.learner_restarted_at or 0.0) + restarts.RESTART_SETTLE_S
    if settled > view.now:  # a restart in place on its way: judged again once it settled
        times.append(settled)
    if view.max_duration_s > 0 and status in _LEARNERS_RUN:
        left = view.max_duration_s - limits.running_s(view.history, view.state, view.now)
        if left > 0:  # past it, _deadline has acted
            times.append(view.now + left)
    if view.disk_limit_bytes > 0 and status in _LEARNERS_RUN:
        times.append(view.now + view.disk_poll_s)
    if view.stall_after_s > 0 and status == Status.PROCESSING:
        since = limits.last_activity(learners, view.learner_activity)
        times.append(view.now + view.poll_s)
        if since is not None and since + view.stall_after_s > view.now:  # else seen now
            times.append(since + view.stall_after_s)
    return min(times) if times else None


def _requeue(view: JobView, change: Requeue) -> Decision:
    """Ask the LCM once per failure; ask again only if it did nothing for a long while."""
    if view.requeue_requested_at is not None:
        again = view.requeue_requested_at + view.requeue_retry_s
        if view.now < again:
            return Decision([], again)
    return Decision([change], view.now + view.requeue_retry_s)


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
        first.exit_code in ENGINE_EXITS
        and view.engine_lost_at is not None
        and (
            first.finished_at is None
            or first.finished_at >= view.engine_lost_at - ENGINE_LOSS_NOTICED_S
        )
    ):
        # It stopped while its engine was away: the node's trouble, not the job's.
        who = "the helper" if first.role == ROLE_HELPER else f"learner {first.learner}"
        code = first.exit_code
        reason = f"{who} died with the Docker engine of its node (exit code {code})"
        return Failure(reason, ERROR_ENGINE_LOST, code, infrastructure=True)
    if first.role == ROLE_HELPER:
        return classify_helper(first, view.helper_events)
    tail = view.log_tails.get(first.learner or 0, ())
    failure = classify_learner(first, tail, view.triage_rules, view.image)
    # One that failed waiting for a peer: the peer is to blame (gang.py).
    return gang.blame(failure, first, learners, view.log_tails, view.triage_rules, view.image)


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
