"""The restarts the job monitor makes in place itself (services/jobmonitor/restarts.py), as
decide() answers them: a gang on one node whose learner was killed or stopped from outside
is restarted there, counted against max_restarts; everything else is requeued or fails as
before. Plain data and a fixed clock; the same on real containers is
tests/integration/test_monitor.py."""

from __future__ import annotations

import pytest

from dlaas.domain.jobspec import ROLE_HELPER, ROLE_LEARNER
from dlaas.domain.ports import Container
from dlaas.domain.status import JobState, Status
from services.jobmonitor import restarts
from services.jobmonitor.decide import JobView, Requeue, RestartLearners, TransitionTo, decide

NOW = 1000.0
KILLED = "learner 0 was killed from outside (SIGKILL, exit code 137)"


def helper(st: str = "running", code: int | None = None) -> Container:
    return Container("h", "h", "job", ROLE_HELPER, None, st, "", code, False)


def learner(
    i: int, st: str = "running", code: int | None = None, oom: bool = False, at: float = NOW - 1
) -> Container:
    done = at if st == "exited" else None
    return Container(f"l{i}", f"l{i}", "job", ROLE_LEARNER, i, st, "", code, oom, finished_at=done)


def view(containers, status: Status = Status.PROCESSING, **kw) -> JobView:
    kw = {"max_restarts": 3, "num_learners": 2, **kw}
    return JobView(
        state=JobState(status, NOW - 10, "", seq=4), containers=containers, now=NOW, **kw
    )


def killed_gang() -> list[Container]:
    return [helper(), learner(0, "exited", 137), learner(1, "exited", 1, at=NOW - 0.5)]


def test_a_learner_killed_on_a_one_node_gang_restarts_the_gang_there():
    dec = decide(view(killed_gang(), restarts=1))
    reason = f"restart 2/3 in place from the learners' last checkpoint: {KILLED}"
    assert dec.actions == [RestartLearners(reason)]
    assert dec.recheck_at == NOW + restarts.RESTART_SETTLE_S


def test_a_survivor_still_running_is_restarted_with_the_gang():
    dec = decide(view([helper(), learner(0, "exited", 137), learner(1)]))
    assert [type(a) for a in dec.actions] == [RestartLearners]


def test_a_learner_stopped_from_outside_restarts_in_place_too():
    dec = decide(view([helper(), learner(0, "exited", 143)], num_learners=1))
    assert [type(a) for a in dec.actions] == [RestartLearners]
    assert "stopped from outside (SIGTERM" in dec.actions[0].reason


@pytest.mark.parametrize(
    "containers, kw, why",
    [
        (killed_gang(), {"restarts": 3}, "restarts ran out: the LCM fails it"),
        (killed_gang(), {"max_restarts": 0}, "no restarts asked for"),
        (killed_gang(), {"nodes": 2}, "a gang across nodes: each node's helper finishes"),
        (
            killed_gang(),
            {"learner_restarts": restarts.MAX_LEARNER_RESTARTS, "learner_restarted_at": NOW - 60},
            "restarted in place often enough in this run: placed again",
        ),
        (
            [helper("exited", 0), learner(0, "exited", 137), learner(1, "exited", 1)],
            {},
            "no helper to adopt the new run",
        ),
        ([helper(), learner(0, "exited", 137)], {}, "a learner container is gone"),
    ],
)
def test_otherwise_a_killed_learner_still_asks_the_lcm(containers, kw, why):
    dec = decide(view(containers, **kw))
    assert [type(a) for a in dec.actions] == [Requeue], why


def test_while_downloading_a_killed_learner_is_requeued():
    dec = decide(view(killed_gang(), Status.DOWNLOADING))
    assert [type(a) for a in dec.actions] == [Requeue]


@pytest.mark.parametrize(
    "dead, code",
    [(learner(0, "exited", 137, oom=True), "oom_killed"), (learner(0, "exited", 1), "exit_code")],
)
def test_the_jobs_own_failures_still_fail_it(dead, code):
    dec = decide(view([helper(), dead], num_learners=1))
    first = dec.actions[0]
    assert isinstance(first, TransitionTo) and (first.target, first.error_code) == (
        Status.FAILED,
        code,
    )
    assert not any(isinstance(a, RestartLearners | Requeue) for a in dec.actions)


def test_the_failure_a_restart_answered_waits_for_its_new_run_then_counts_as_not_taken():
    # A swarm's new tasks take a while to show: the old failures are no new restart.
    made = {"learner_restarts": 1, "learner_restarted_at": NOW - 2, "restarts": 1}
    before = [helper(), learner(0, "exited", 137, at=NOW - 3), learner(1, "exited", 1, at=NOW - 3)]
    dec = decide(view(before, **made))
    assert dec.actions == []
    assert dec.recheck_at == NOW - 2 + restarts.RESTART_SETTLE_S
    # Still those failures once the restart should have settled: it did not take.
    late = NOW - restarts.RESTART_SETTLE_S - 1
    old = [helper(), learner(0, "exited", 137, at=late - 1), learner(1, "exited", 1, at=late - 1)]
    dec = decide(view(old, **{**made, "learner_restarted_at": late}))
    assert [type(a) for a in dec.actions] == [Requeue]


def test_a_new_kill_after_the_restart_is_restarted_again():
    made = {"learner_restarts": 1, "learner_restarted_at": NOW - 5, "restarts": 1}
    again = [helper(), learner(0, "exited", 137, at=NOW - 1), learner(1, "exited", 1, at=NOW)]
    dec = decide(view(again, **made))
    assert [type(a) for a in dec.actions] == [RestartLearners]
    assert dec.actions[0].reason.startswith("restart 2/3 in place")


def test_a_running_gang_after_its_restart_needs_nothing():
    made = {"learner_restarts": 1, "learner_restarted_at": NOW - 2, "restarts": 1}
    dec = decide(view([helper(), learner(0), learner(1)], **made))
    assert dec.actions == [] and dec.recheck_at == NOW - 2 + restarts.RESTART_SETTLE_S
