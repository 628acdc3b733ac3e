"""The REAL job monitor (services/jobmonitor: observe -> decide -> act) over the in-memory
FAKES of its ports (tests/lcm_fakes.py): no etcd, no Docker, no scheduler, no LCM.

`reconcile_job` is driven by hand, the way the monitor's worker calls it; the fakes'
containers are moved by the test (a learner exits, the helper prints `stored` and exits).
The same paths against the real Docker engine and etcd are in
tests/integration/test_monitor.py.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from lcm_fakes import FakeEngine, InMemoryStatusRepo

from dlaas.adapters.store.base import JobRecord
from dlaas.domain import jobspec
from dlaas.domain.errors import TemporaryError
from dlaas.domain.status import Status
from services.jobmonitor.monitor import JobMonitor

NOW = 1_000_000.0
STORED = 'DLAAS-EVENT {"event": "stored"}\n'


def manifest(learners: int) -> str:
    return (
        f"name: fast\nlearners: {learners}\n"
        "framework: {name: python, version: '3', command: python3 train.py}\n"
    )


class World:
    """The monitor under test, its fakes, and what it asked of the scheduler and the LCM."""

    def __init__(self, store, nodes=("local",)):
        self.now = NOW
        self.store = store
        self.repo = InMemoryStatusRepo(store, clock=lambda: self.now)
        self.engines = {n: FakeEngine(node=n) for n in nodes}
        self.released: list[tuple[str, bool]] = []
        self.requeued: list[tuple[str, str]] = []
        self.monitor = JobMonitor(
            self.engines,
            self.repo,
            store,
            lambda job_id, ended: self.released.append((job_id, ended)),
            clock=lambda: self.now,
            requeue=lambda job_id, reason, is_restart=False: self.requeued.append((job_id, reason)),
        )

    def running_job(self, job_id: str, learners: int = 2, node: str = "local", team: str = ""):
        """A job as the LCM leaves it once deployed: DOWNLOADING, helper and learners up."""
        record = JobRecord(job_id, "alice", "fast", manifest(learners), self.now, team=team)
        self.store.create(record)
        self.repo.create(job_id)
        self.repo.transition(job_id, Status.PENDING, "placed")
        self.repo.set_placement(
            job_id, [{"learner": i, "node": node, "gpu_indices": []} for i in range(learners)]
        )
        engine = self.engines.get(node) or FakeEngine(node=node)
        helper = engine.add(job_id, jobspec.ROLE_HELPER)
        learners_ = [engine.add(job_id, jobspec.ROLE_LEARNER, i) for i in range(learners)]
        self.repo.transition(job_id, Status.DOWNLOADING, "helper and learners started")
        return helper, learners_

    def status(self, job_id: str) -> Status:
        state = self.repo.get(job_id)
        assert state is not None
        return state.status

    def history(self, job_id: str) -> list[str]:
        return [t.status.value for t in self.store.get(job_id).history]


@pytest.fixture
def world(job_store) -> World:
    return World(job_store)


def wait_for(what: str, check) -> None:
    """Background work of the monitor (a learner stopped on its own thread) to land."""
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, f"no {what}"
        time.sleep(0.01)


def test_learners_exit_0_the_job_stores_then_completes_after_the_helper_stored(world):
    engine = world.engines["local"]
    helper, learners = world.running_job("job-ok")
    for c in learners:
        engine.set_state(c, "exited", 0)

    world.monitor.reconcile_job("job-ok")
    assert world.status("job-ok") == Status.STORING
    assert world.history("job-ok")[-3:] == ["DOWNLOADING", "PROCESSING", "STORING"]
    assert engine.signals == [(helper.name, jobspec.HELPER_FINISH_SIGNAL)]
    assert world.store.get("job-ok").info["helper_signalled_at"] == NOW
    assert [e["exit_code"] for e in world.store.get("job-ok").info["learners"]] == [0, 0]

    world.now += 5
    world.monitor.reconcile_job("job-ok")  # the helper is still storing: nothing new
    assert world.status("job-ok") == Status.STORING and len(engine.signals) == 1

    engine.print(helper, STORED)
    engine.set_state(helper, "exited", 0)
    world.monitor.reconcile_job("job-ok")
    record = world.store.get("job-ok")
    assert record.status == Status.COMPLETED and record.error_code == ""
    assert world.released == [("job-ok", True)]
    assert engine.job_containers("job-ok") == [] and engine.removed == ["job-ok"]
    assert record.info["cleaned_up"] is True and not record.info.get("logs_incomplete")


def test_a_learner_exiting_non_zero_fails_the_job_with_its_code_and_last_lines(world):
    engine = world.engines["local"]
    helper, (first, second) = world.running_job("job-bad")
    engine.print(second, "".join(f"epoch {i}\n" for i in range(15)) + "Traceback: boom\n")
    engine.set_state(second, "exited", 3, finished_at=NOW)

    world.monitor.reconcile_job("job-bad")
    record = world.store.get("job-bad")
    assert record.status == Status.FAILED
    assert (record.error_code, record.exit_code) == ("exit_code", 3)
    assert record.reason.startswith("learner 1 exited with code 3; last log lines:")
    assert record.reason.endswith("Traceback: boom") and "epoch 5" not in record.reason
    assert world.released == [("job-bad", True)] and world.requeued == []
    # The other learner is stopped, the helper told to store the logs.
    wait_for("stop of learner 0", lambda: engine.stopped_containers == [first.name])
    assert engine.signals == [(helper.name, jobspec.HELPER_FINISH_SIGNAL)]


def test_learners_removed_by_the_cleanup_of_a_job_its_helper_failed_are_not_shown_running(world):
    engine = world.engines["local"]
    helper, learners = world.running_job("job-nodata", team="vision")
    world.monitor.reconcile_job("job-nodata")  # the learners are mirrored as running
    assert [e["state"] for e in world.store.get("job-nodata").info["learners"]] == ["running"] * 2
    missing = "bucket 'vision--no-such' does not exist"  # the helper knows the real bucket
    event = {"event": "error", "code": "data_not_found", "message": missing}
    engine.print(helper, f"DLAAS-EVENT {json.dumps(event)}\n")
    engine.set_state(helper, "exited", jobspec.HELPER_EXIT_DATA_NOT_FOUND)
    engine.set_state(learners[1], "exited", 0)

    world.monitor.reconcile_job("job-nodata")
    record = world.store.get("job-nodata")
    assert record.status == Status.FAILED and record.info["cleaned_up"] is True
    assert record.reason.endswith(": bucket 'no-such' does not exist"), record.reason
    assert engine.job_containers("job-nodata") == []
    assert [(e["id"], e["state"]) for e in record.info["learners"]] == [
        (0, "removed"),
        (1, "exited"),
    ]


def test_a_node_that_does_not_answer_leaves_its_job_alone_until_it_is_back(world):
    engine = world.engines["local"]
    _, learners = world.running_job("job-away")
    engine.up = False
    for c in learners:
        engine.set_state(c, "exited", 1)  # what runs there is unknown to the monitor

    assert world.monitor.reconcile_job("job-away") is None
    assert world.status("job-away") == Status.DOWNLOADING
    assert world.released == [] and world.requeued == [] and engine.signals == []

    engine.up = True  # answers again; still down for the monitor until its watcher says so
    assert world.monitor.reconcile_job("job-away") is None
    world.monitor.reach.back("local")  # the watcher reconnected
    world.monitor.reconcile_job("job-away")
    assert world.status("job-away") == Status.FAILED


def test_a_storing_job_whose_node_is_away_is_not_failed_but_restarted_once_back(world):
    # The chaos run: the node holding a STORING job's helper was killed. Away, the job is
    # the LCM's (it requeues it); past the store deadline too, the monitor fails nothing.
    engine = world.engines["local"]
    helper, learners = world.running_job("job-st")
    for c in learners:
        engine.set_state(c, "exited", 0)
    world.monitor.reconcile_job("job-st")
    assert world.status("job-st") == Status.STORING
    engine.up = False
    world.now += 10_000  # well past the store deadline
    assert world.monitor.reconcile_job("job-st") is None
    engine.set_state(helper, "exited", 255, finished_at=world.now + 1)  # died with its node
    world.now += 10_000
    assert world.monitor.reconcile_job("job-st") is None
    assert world.status("job-st") == Status.STORING and world.requeued == []

    # Back before the LCM acted (it was lost only briefly): the helper died with the engine;
    # the node's fault, so the LCM is asked to restart it from its checkpoint, not failed.
    engine.up = True
    world.monitor.reach.back("local")
    world.monitor.reconcile_job("job-st")
    assert world.status("job-st") == Status.STORING  # the LCM moves it, not the monitor
    assert [(j, "engine" in why) for j, why in world.requeued] == [("job-st", True)]


def test_a_job_placed_on_a_node_without_an_engine_here_is_left_alone(world):
    world.running_job("job-elsewhere", node="n9")
    assert world.monitor.reconcile_job("job-elsewhere") is None
    assert world.status("job-elsewhere") == Status.DOWNLOADING


def test_a_submitted_job_never_placed_costs_no_engine_or_store_call(world, monkeypatch):
    world.store.create(JobRecord("job-new", "alice", "fast", manifest(1), world.now))
    world.repo.create("job-new")
    asked = []
    engine = world.engines["local"]
    monkeypatch.setattr(engine, "job_containers", lambda job_id: asked.append(job_id) or [])
    monkeypatch.setattr(world.store, "get", lambda job_id: asked.append(job_id))
    assert world.monitor.reconcile_job("job-new") is None
    assert asked == [] and world.status("job-new") == Status.QUEUED
    # The periodic resync does not even read its status again: it knows it from the list.
    get = world.repo.get
    monkeypatch.setattr(world.repo, "get", lambda job_id: asked.append(job_id) or get(job_id))
    world.monitor.reconcile_all()
    assert asked == []
    # Requeued (placed once, so its old run's containers may be around): looked at.
    world.repo.transition("job-new", Status.PENDING, "placed")
    world.repo.transition("job-new", Status.QUEUED, "preempted")
    monkeypatch.undo()
    monkeypatch.setattr(engine, "job_containers", lambda job_id: asked.append(job_id) or [])
    world.monitor.reconcile_job("job-new")
    assert asked == ["job-new"]


def test_the_leftovers_of_a_deleted_job_are_removed(world):
    engine = world.engines["local"]
    world.running_job("job-gone")
    world.repo.delete("job-gone")
    world.monitor.status_deleted("job-gone")  # what the etcd watch reports

    assert world.monitor.reconcile_job("job-gone") is None
    assert engine.job_containers("job-gone") == [] and engine.removed == ["job-gone"]


def test_containers_without_a_status_it_did_not_see_go_are_left_alone(world):
    engine = world.engines["local"]
    world.running_job("job-other")
    world.repo.delete("job-other")  # another platform's job sharing the engine, say

    assert world.monitor.reconcile_job("job-other") is None
    assert len(engine.job_containers("job-other")) == 3 and engine.removed == []


def test_a_helper_killed_from_outside_is_restarted_beside_running_learners(world):
    engine = world.engines["local"]
    helper, _ = world.running_job("job-h")
    engine.set_state(helper, "exited", 137)

    world.monitor.reconcile_job("job-h")
    assert engine.job_containers("job-h")[0].running  # started again, in place
    assert len(world.store.get("job-h").info["helper_restarts"]) == 1
    assert world.status("job-h") == Status.DOWNLOADING and world.requeued == []


def test_a_learner_killed_from_outside_asks_the_lcm_for_a_restart(world):
    engine = world.engines["local"]
    _, (first, _) = world.running_job("job-k")
    engine.set_state(first, "exited", 137)

    decision = world.monitor.reconcile_job("job-k")
    assert world.requeued and world.requeued[0][0] == "job-k"
    assert decision is not None and decision.recheck_at is not None  # asks again if ignored
    assert world.status("job-k") == Status.DOWNLOADING  # the LCM moves it, not the monitor


def test_a_release_the_scheduler_does_not_answer_is_tried_again_later(world):
    engine = world.engines["local"]
    helper, (_, second) = world.running_job("job-rel", learners=2)
    engine.set_state(second, "exited", 3)
    engine.set_state(helper, "exited", 0)

    def down(job_id, ended):
        raise TemporaryError("scheduler at nowhere is not answering")

    world.monitor.actor.release = down
    world.monitor.reconcile_job("job-rel")
    assert world.status("job-rel") == Status.FAILED
    assert not world.store.get("job-rel").info.get("released")
    # The job was cleaned up in the same pass; the retry must outlive that.
    assert world.store.get("job-rel").info["cleaned_up"] is True
    world.now += 10  # past the retry deadline: the worker takes the job again
    assert "job-rel" in world.monitor.queue.next_batch(world.now, threading.Event())

    world.monitor.actor.release = lambda job_id, ended: world.released.append((job_id, ended))
    world.monitor.reconcile_job("job-rel")
    assert world.released == [("job-rel", True)]
    assert world.store.get("job-rel").info["released"] is True
