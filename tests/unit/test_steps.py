"""`run_step` (dlaas/domain/steps.py), the one place that interprets Permanent/Temporary errors, and
the call sites that use it, over the FAKES of tests/lcm_fakes.py (no etcd, Docker, scheduler).
"""

from __future__ import annotations

import logging
import threading

import pytest
from lcm_fakes import fake_lcm
from test_monitor_fast import World

from dlaas.domain.errors import DlaasError, JobNotFound, TemporaryError
from dlaas.domain.status import Status
from dlaas.domain.steps import Outcome, run_step
from services.jobmonitor.observe import INFO_REQUEUE

log = logging.getLogger("test.steps")


def test_a_step_that_succeeds_returns_its_value_and_calls_no_handler():
    called = []
    step = run_step(
        "x", lambda: 42, log=log, on_permanent=called.append, on_temporary=called.append
    )
    assert step.outcome is Outcome.DONE and step.done and step.value == 42 and called == []


def test_a_permanent_error_is_settled_and_logged_at_info(caplog):
    permanent, temporary = [], []

    def refused():
        raise JobNotFound("job-x")

    with caplog.at_level(logging.INFO, logger="test.steps"):
        step = run_step(
            "release of job job-x",
            refused,
            log=log,
            on_permanent=permanent.append,
            on_temporary=temporary.append,
        )
    assert step.outcome is Outcome.PERMANENT and not step.done and step.value is None
    assert isinstance(step.error, JobNotFound) and permanent == [step.error] and temporary == []
    [rec] = caplog.records
    assert rec.levelno == logging.INFO and rec.getMessage().startswith("release of job job-x: ")


@pytest.mark.parametrize("exc", [TemporaryError("scheduler down"), DlaasError("not classed")])
def test_a_temporary_or_unclassed_domain_error_is_retried_and_logged_as_a_warning(exc, caplog):
    permanent, temporary = [], []

    def failing():
        raise exc

    with caplog.at_level(logging.INFO, logger="test.steps"):
        step = run_step(
            "restart of job j",
            failing,
            log=log,
            on_permanent=permanent.append,
            on_temporary=temporary.append,
            then="asking again soon",
        )
    assert step.outcome is Outcome.TEMPORARY and step.error is exc
    assert temporary == [exc] and permanent == []
    [rec] = caplog.records
    assert rec.levelno == logging.WARNING and rec.getMessage().endswith("; asking again soon")


def test_an_error_that_is_not_a_domain_error_is_not_interpreted():
    def bug():
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        run_step("x", bug, log=log)


# -- the job monitor's release and restart requests --------------------------------------


def _ended_job(world: World, job_id: str) -> None:
    engine = world.engines["local"]
    helper, (_, second) = world.running_job(job_id, learners=2)
    engine.set_state(second, "exited", 3)
    engine.set_state(helper, "exited", 0)


def test_a_release_the_scheduler_refuses_for_good_is_settled_not_retried(job_store):
    world = World(job_store)
    _ended_job(world, "job-gone")

    def holds_nothing(job_id, ended):
        raise JobNotFound(job_id)

    world.monitor.actor.release = holds_nothing
    world.monitor.reconcile_job("job-gone")
    assert world.status("job-gone") == Status.FAILED
    assert world.store.get("job-gone").info["released"] is True  # settled: never asked again


def test_a_restart_request_the_lcm_cannot_take_now_is_asked_again_soon(job_store):
    world = World(job_store)
    engine = world.engines["local"]
    _, (first, _) = world.running_job("job-k")
    engine.set_state(first, "exited", 137)

    def lcm_down(job_id, reason, is_restart=False):
        raise TemporaryError("lcm failing over")

    world.monitor.actor.requeue = lcm_down
    world.monitor.reconcile_job("job-k")
    assert not world.store.get("job-k").info.get(INFO_REQUEUE)  # not recorded as asked
    world.now += 10  # past the retry deadline: the worker takes the job again
    assert "job-k" in world.monitor.queue.next_batch(world.now, threading.Event())


def test_a_restart_request_the_lcm_refuses_for_good_is_recorded_as_answered(job_store):
    world = World(job_store)
    engine = world.engines["local"]
    _, (first, _) = world.running_job("job-r")
    engine.set_state(first, "exited", 137)

    def moved_on(job_id, reason, is_restart=False):
        raise JobNotFound(job_id)

    world.monitor.actor.requeue = moved_on
    world.monitor.reconcile_job("job-r")
    assert world.store.get("job-r").info[INFO_REQUEUE]["reason"]


# -- the LCM's placement round and identity revocation ------------------------------------


def test_one_refused_or_failing_decision_does_not_stop_the_round(job_store):
    from dlaas.v1 import scheduler_pb2

    lcm = fake_lcm(job_store)
    lcm.scheduler.decisions = [
        scheduler_pb2.Decision(job_id=j, action="preempt", cause="c") for j in ("a", "b", "c")
    ]
    carried = []

    def carry_out(decision):
        carried.append(decision.job_id)
        if decision.job_id == "a":
            raise JobNotFound("a")
        if decision.job_id == "b":
            raise TemporaryError("etcd away")

    lcm._carry_out = carry_out
    lcm.place_round()
    assert carried == ["a", "b", "c"]


def test_a_revocation_that_fails_now_is_left_to_the_sweep(job_store, caplog):
    lcm = fake_lcm(job_store)

    def iam_down(job_id):
        raise TemporaryError(f"could not revoke the S3 identity of {job_id}: timeout")

    lcm.identities.revoke = iam_down
    with caplog.at_level(logging.WARNING):
        lcm._revoke("job-x")  # does not raise
    assert any("leader's sweep revokes it later" in r.getMessage() for r in caplog.records)
