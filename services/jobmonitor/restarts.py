"""What the job monitor restarts in place itself, without the LCM: a helper lost beside
running learners, and the learners of a gang on one node killed or stopped from outside.
Pure rules over decide.py's JobView; the actions are in actions.py.

The rest (a gang across nodes, a node lost, restarts out, the job's own failures) goes
through decide.py's other rules: a requeue by the LCM, or the job's failure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlaas.domain.ports import Container
from dlaas.domain.status import Status, between
from services.jobmonitor.actions import RestartHelper, RestartLearners
from services.jobmonitor.classify import (
    ERROR_KILLED,
    ERROR_TERMINATED,
    EXIT_SIGKILL,
    EXIT_SIGTERM,
    Failure,
)

if TYPE_CHECKING:
    from services.jobmonitor.decide import JobView

_LEARNERS_RUN = between(Status.DOWNLOADING, Status.PROCESSING)
# A helper restarted this many times in one run is not restarted alone again: the gang is.
MAX_HELPER_RESTARTS = 3
# A gang restarted in place this many times in one run is requeued at its next failure
# (placed again, perhaps elsewhere) rather than restarted there once more.
MAX_LEARNER_RESTARTS = 2
# How long after a restart in place the failure it answered is taken for the restart still
# under way (a swarm's new task takes a while to show) before it counts as not taken.
RESTART_SETTLE_S = 15.0
# The failures a restart in place answers: the learner's container killed or stopped from
# outside (not an OOM kill, not with its engine, not what its log says).
_IN_PLACE = frozenset({ERROR_KILLED, ERROR_TERMINATED})


def helper_lost_alone(
    view: JobView, helper: Container | None, learners: list[Container], all_done: bool
) -> RestartHelper | None:
    """The helper died from outside while the learners are fine (running, or finished with
    their results on the volume): restart it alone, to sync or to store them."""
    if helper is None or not helper.exited or helper.oom_killed:
        return None
    if view.state.status not in _LEARNERS_RUN or (all_done and helper.exit_code == 0):
        return None  # (exit 0 after the learners: it stored everything, the job completes)
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


def learners_in_place(
    view: JobView, helper: Container | None, learners: list[Container], failure: Failure
) -> RestartLearners | None:
    """A learner killed or stopped from outside while its gang trains on one node beside a
    running helper: restart the gang's learners there. None: requeue as usual.

    As Kubernetes' restartPolicy OnFailure restarts a pod's container where it is, and
    torchrun its workers: the node is fine, the volume holds the data, the code and the
    learners' last checkpoint, so neither a new placement nor a new helper is needed. A gang
    across nodes is requeued (each node's helper finishes once its learners have ended), as
    is one whose restarts ran out (the LCM then fails it) or that was restarted in place
    MAX_LEARNER_RESTARTS times in this run."""
    if failure.error_code not in _IN_PLACE or view.state.status != Status.PROCESSING:
        return None
    if helper is None or not helper.running or view.nodes != 1:
        return None
    if len(learners) < (view.num_learners or 0):
        return None
    if view.restarts >= view.max_restarts or view.learner_restarts >= MAX_LEARNER_RESTARTS:
        return None
    if _answered(view, learners):
        return None  # a restart in place answered this failure and did not take: placed again
    return RestartLearners(
        f"restart {view.restarts + 1}/{view.max_restarts} in place from the learners' last "
        f"checkpoint: {failure.reason}"
    )


def under_way(view: JobView, helper: Container | None, learners: list[Container]) -> bool:
    """Whether the learners that ended all ended before this run's last restart in place,
    made less than RESTART_SETTLE_S ago beside a helper that runs on: that restart's new run
    is on its way (a swarm's new tasks take a while to show). After that it did not take."""
    last = view.learner_restarted_at
    if last is None or view.now >= last + RESTART_SETTLE_S:
        return False
    if helper is None or helper.exited:
        return False
    return _answered(view, learners)


def _answered(view: JobView, learners: list[Container]) -> bool:
    """Whether every learner that ended did so before this run's last restart in place."""
    last = view.learner_restarted_at
    ended = [c for c in learners if c.exited]
    return last is not None and bool(ended) and all((c.finished_at or 0.0) <= last for c in ended)
