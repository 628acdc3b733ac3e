"""The REAL LCM use cases, node health and restart policy over the in-memory port fakes
(tests/lcm_fakes.py): no etcd, no Docker, no scheduler service.

The rules checked here (restart backoff, the max_restarts boundary, what a node that
comes back keeps) used to be reachable only through etcd and Docker.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from lcm_fakes import FakeEngine, FakeScheduler, InMemoryStatusRepo, fake_lcm

from dlaas.adapters.nodes import NodeSpec
from dlaas.domain.errors import CapacityExceeded, ImageUnavailable, InvalidTransition
from dlaas.domain.ports import ContainerEngine, SchedulerPort, StatusRepo
from dlaas.domain.status import DEPLOYED, HAPPY_PATH, Status
from services.lcm import use_cases
from services.lcm.reconciler import BURST_ROUND_GAP_S
from services.lcm.restart_policy import MAX_BACKOFF_S, backoff_s

MANIFEST = "name: j\nframework: {name: python, command: python3 train.py}\n"


def test_the_fakes_implement_the_ports():
    assert isinstance(InMemoryStatusRepo(), StatusRepo)
    assert isinstance(FakeEngine(), ContainerEngine)
    assert isinstance(FakeScheduler(), SchedulerPort)


@pytest.mark.parametrize(
    ("restart", "seconds"),
    [(1, 0.0), (2, 1.0), (3, 2.0), (4, 4.0), (7, 32.0), (8, MAX_BACKOFF_S), (50, MAX_BACKOFF_S)],
)
def test_restart_backoff_is_at_once_then_doubles_up_to_the_cap(restart, seconds):
    assert backoff_s(restart) == seconds


def _placed(lcm, job_id: str, node: str = "local") -> None:
    """The job as the leader leaves it once deployed on `node`."""
    lcm.keeper.transition(job_id, Status.PENDING, "placed")
    lcm.keeper.set_placement(job_id, [{"learner": 0, "node": node, "gpu_indices": []}])
    lcm.deployers[node].containers_of[job_id] = [f"{job_id}-helper", f"{job_id}-learner-0"]


def _wait_due(lcm, job_id: str) -> None:
    # The requeue's teardown runs on a thread; as the leader it ends by marking the job due.
    deadline = time.monotonic() + 10
    while job_id not in lcm._due and time.monotonic() < deadline:
        time.sleep(0.01)
    assert job_id in lcm._due


def test_a_job_restarts_max_restarts_times_then_fails(job_store):
    lcm = fake_lcm(job_store)
    lcm._leading.set()
    lcm.submit("job-r", "alice", MANIFEST + "max_restarts: 2\n", "")
    for restart in (1, 2):
        _placed(lcm, "job-r")
        assert lcm.requeue("job-r", "learner 0 exited 1", is_restart=True) == "QUEUED"
        _wait_due(lcm, "job-r")
        lcm._due.clear()
        assert job_store.get("job-r").info["restarts"] == restart
        assert f"restart {restart}/2" in lcm.keeper.get("job-r").reason
    _placed(lcm, "job-r")
    assert lcm.requeue("job-r", "learner 0 exited 1", is_restart=True) == "FAILED"
    state = lcm.keeper.get("job-r")
    assert state.error_code == "restarts_exhausted" and "max_restarts=2" in state.reason
    assert job_store.get("job-r").info["restarts"] == 2


def test_restart_waits_out_its_backoff(job_store):
    now = [1000.0]
    lcm = fake_lcm(job_store, clock=lambda: now[0])
    lcm._leading.set()
    lcm.submit("job-b", "alice", MANIFEST + "max_restarts: 5\n", "")
    for restart in (1, 2, 3):
        _placed(lcm, "job-b")
        lcm.requeue("job-b", "boom", is_restart=True)
        _wait_due(lcm, "job-b")
        assert lcm._due.pop("job-b") == now[0] + backoff_s(restart)


def test_a_node_that_comes_back_keeps_only_the_running_jobs_placed_on_it(job_store):
    lcm = fake_lcm(job_store)
    engine = lcm.deployers["local"]
    for job_id in ("job-run", "job-moved", "job-other"):
        lcm.submit(job_id, "alice", MANIFEST, "")
    _placed(lcm, "job-run")  # running here: kept
    _placed(lcm, "job-moved")
    lcm.keeper.transition("job-moved", Status.QUEUED, "requeued while the node was away")
    _placed(lcm, "job-other")
    lcm.keeper.set_placement("job-other", [{"learner": 0, "node": "n2", "gpu_indices": []}])
    engine.containers_of["job-gone"] = ["job-gone-helper"]  # deleted meanwhile: no status
    # Marked lost while the engine was away (not through _node_lost: it would requeue
    # job-run, which this test needs running when the node answers again).
    lcm.keeper.set_node_health("local", {"healthy": False})
    lcm._unhealthy.add("local")
    lcm.check_nodes()
    assert sorted(engine.removed) == ["job-gone", "job-moved", "job-other"]
    assert "job-run" in engine.containers_of
    assert lcm.keeper.unhealthy_nodes() == set() and "local" not in lcm._unhealthy


def test_a_node_that_comes_back_keeps_a_storing_jobs_helper(job_store):
    # The helper of a STORING job is uploading results and logs: a node that was only
    # unreachable (never judged lost, so the job was not requeued) must not lose it when
    # it answers again.
    lcm = fake_lcm(job_store)
    engine = lcm.deployers["local"]
    lcm.submit("job-st", "alice", MANIFEST, "")
    _placed(lcm, "job-st")
    for status in (Status.DOWNLOADING, Status.PROCESSING, Status.STORING):
        lcm.keeper.transition("job-st", status, "on its way")
    lcm.keeper.set_node_health("local", {"healthy": False})
    lcm._unhealthy.add("local")
    lcm.check_nodes()
    assert engine.removed == []
    assert "job-st" in engine.containers_of


@pytest.mark.parametrize("status", sorted(DEPLOYED, key=HAPPY_PATH.index))
def test_a_node_that_comes_back_keeps_every_deployed_job_placed_on_it(job_store, status):
    # Only jobs that moved on lose what they left there; a job still deployed on the node
    # (from PENDING to STORING: DEPLOYED, derived from the status table) was only out of
    # reach, and keeps its containers.
    lcm = fake_lcm(job_store)
    engine = lcm.deployers["local"]
    lcm.submit("job-k", "alice", MANIFEST, "")
    _placed(lcm, "job-k")
    for step in HAPPY_PATH[HAPPY_PATH.index(Status.PENDING) + 1 : HAPPY_PATH.index(status) + 1]:
        lcm.keeper.transition("job-k", step, "on its way")
    assert lcm.keeper.get("job-k").status == status
    lcm.keeper.set_node_health("local", {"healthy": False})
    lcm._unhealthy.add("local")
    lcm.check_nodes()
    assert engine.removed == [] and "job-k" in engine.containers_of


def _storing(lcm, job_id: str, node: str, manifest: str = MANIFEST) -> None:
    lcm.submit(job_id, "alice", manifest, "")
    _placed(lcm, job_id, node)
    for status in (Status.DOWNLOADING, Status.PROCESSING, Status.STORING):
        lcm.keeper.transition(job_id, status, "on its way")


def _two_nodes(job_store):
    now = [1000.0]
    nodes = [NodeSpec(name=n, cpus=8, memory_mb=16384) for n in ("n1", "n2")]
    lcm = fake_lcm(job_store, nodes=nodes, clock=lambda: now[0])
    lcm._leading.set()

    def probe(times: int = 1) -> None:
        for _ in range(times):
            now[0] += 1
            lcm.check_nodes()

    return lcm, probe


def test_a_storing_job_on_a_lost_node_is_requeued_from_its_checkpoint_with_the_cause(job_store):
    # The chaos run: the node holding a STORING job's results died. Its checkpoints are in
    # S3: the job restarts from the last one (redoing the tail of its training), not FAILED.
    lcm, probe = _two_nodes(job_store)
    _storing(lcm, "job-lost", "n1")
    _storing(lcm, "job-fine", "n2")
    probe()
    lcm.deployers["n1"].up = False
    probe(2)
    state = lcm.keeper.get("job-lost")
    assert state.status == Status.QUEUED
    assert "node n1 lost while storing" in state.reason and "checkpoint" in state.reason
    assert [t.status for t in job_store.get("job-lost").history][-2:] == [
        Status.STORING,
        Status.QUEUED,
    ]
    assert "node n1 lost while storing" in job_store.get("job-lost").history[-1].reason
    _wait_due(lcm, "job-lost")
    assert "restarts" not in job_store.get("job-lost").info  # the node's loss, no restart
    # Queued again for the scheduler, which places it on the healthy node.
    assert lcm.keeper.unhealthy_nodes() == {"n1"}
    # The STORING job on the node that stays healthy goes on storing, untouched.
    assert lcm.keeper.get("job-fine").status == Status.STORING
    assert lcm.deployers["n2"].removed == [] and "job-fine" in lcm.deployers["n2"].containers_of


def test_a_node_that_comes_back_leaves_the_requeued_storing_jobs_new_run_alone(job_store):
    lcm, probe = _two_nodes(job_store)
    _storing(lcm, "job-lost", "n1")
    probe()
    lcm.deployers["n1"].up = False
    probe(2)
    _wait_due(lcm, "job-lost")
    # Placed again on n2 and running there; n1 answers again with the old run's leftovers.
    _placed(lcm, "job-lost", "n2")
    lcm.keeper.transition("job-lost", Status.DOWNLOADING, "helper and learners started")
    lcm.deployers["n1"].containers_of["job-lost"] = ["job-lost-helper"]
    lcm.deployers["n1"].up = True
    probe()
    assert "job-lost" not in lcm.deployers["n1"].containers_of  # the old run's, removed
    assert lcm.deployers["n2"].removed == [] and "job-lost" in lcm.deployers["n2"].containers_of
    assert lcm.keeper.get("job-lost").status == Status.DOWNLOADING


def test_a_storing_job_is_restarted_after_a_failure_but_never_moved_on_purpose(job_store):
    # The monitor's restart (its helper killed, gone with its engine) takes STORING -> QUEUED
    # and counts; a controller's choice (drain, rescale) never throws finished training away.
    lcm, _ = _two_nodes(job_store)
    _storing(lcm, "job-st", "n1", MANIFEST + "max_restarts: 2\n")
    with pytest.raises(InvalidTransition, match="STORING"):
        lcm.requeue("job-st", "drained", is_restart=False)
    assert lcm.move_off("n1", "drained") == []
    assert lcm.keeper.get("job-st").status == Status.STORING
    assert lcm.requeue("job-st", "the helper was killed", is_restart=True) == "QUEUED"
    _wait_due(lcm, "job-st")
    assert job_store.get("job-st").info["restarts"] == 1


def test_a_node_lost_after_it_was_seen_is_schedulable_again_once_it_answers(job_store):
    # Seen answering (and active) first, as a node normally is before it is lost: nothing
    # about its availability changes when it comes back, so it is the return itself that
    # must tell the scheduler (etcd) that it may place there again.
    now = [0.0]
    lcm = fake_lcm(job_store, clock=lambda: now[0])
    engine = lcm.deployers["local"]

    def probe() -> None:
        now[0] += 1
        lcm.check_nodes()

    probe()
    engine.up = False
    probe()
    probe()
    assert lcm.keeper.unhealthy_nodes() == {"local"}
    engine.up = True
    probe()
    assert lcm.keeper.unhealthy_nodes() == set() and "local" not in lcm._unhealthy


def test_a_lost_node_is_marked_after_the_failed_probes_in_a_row(job_store):
    now = [0.0]
    lcm = fake_lcm(job_store, clock=lambda: now[0])
    engine = lcm.deployers["local"]
    engine.up = False
    now[0] += 1
    lcm.check_nodes()
    assert lcm.keeper.unhealthy_nodes() == set()  # one failed probe is not a lost node
    now[0] += 1
    lcm.check_nodes()
    assert lcm.keeper.unhealthy_nodes() == {"local"}


def test_submit_refuses_what_never_fits_and_a_missing_image(job_store):
    lcm = fake_lcm(job_store, cpus=2)
    lcm.deployers["local"].missing_images.add(lcm.settings.learner_image)
    with pytest.raises(ImageUnavailable):
        lcm.submit("job-img", "alice", MANIFEST, "")
    lcm.deployers["local"].missing_images.clear()  # built meanwhile: found at once
    with pytest.raises(CapacityExceeded, match="can never fit"):
        lcm.submit("job-big", "alice", MANIFEST + "learners: 3\n", "")


def test_submits_ask_the_engine_for_an_image_once_while_it_is_there(job_store, monkeypatch):
    lcm = fake_lcm(job_store)
    engine = lcm.deployers["local"]
    asked = []
    present = engine.image_present
    monkeypatch.setattr(
        engine, "image_present", lambda image: asked.append(image) or present(image)
    )
    for i in range(3):
        lcm.submit(f"job-{i}", "alice", MANIFEST, "")
    assert asked == [lcm.settings.learner_image]
    # Past IMAGE_SEEN_S it is asked again, and a removed image is refused from then on.
    lcm._images_seen[lcm.settings.learner_image] -= use_cases.IMAGE_SEEN_S
    engine.missing_images.add(lcm.settings.learner_image)
    with pytest.raises(ImageUnavailable):
        lcm.submit("job-gone", "alice", MANIFEST, "")
    assert len(asked) == 2


def test_delete_of_a_running_job_halts_and_removes_it(job_store):
    lcm = fake_lcm(job_store)
    lcm.submit("job-d", "alice", MANIFEST, "")
    _placed(lcm, "job-d")
    lcm.delete("job-d", "alice")
    assert lcm.keeper.get("job-d") is None and lcm.keeper.placement("job-d") == []
    assert lcm.deployers["local"].removed == ["job-d"] and "job-d" in lcm.scheduler.released
    assert lcm.deployers["local"].runs_removed == []  # the whole job, network included


def test_a_restart_removes_only_the_run_so_the_engine_may_keep_the_jobs_network(job_store):
    lcm = fake_lcm(job_store)
    lcm._leading.set()
    lcm.submit("job-n", "alice", MANIFEST + "max_restarts: 1\n", "")
    _placed(lcm, "job-n")
    lcm.requeue("job-n", "learner 0 was killed", is_restart=True)
    _wait_due(lcm, "job-n")
    assert lcm.deployers["local"].runs_removed == ["job-n"]


def test_a_placement_decision_deploys_the_plan(job_store):
    from dlaas.v1 import scheduler_pb2

    lcm = fake_lcm(job_store)
    lcm.submit("job-p", "alice", MANIFEST + "learners: 2\n", "")
    lcm.scheduler.decisions = [
        scheduler_pb2.Decision(
            job_id="job-p",
            action="start",
            cause="fits",
            allocations=[scheduler_pb2.LearnerAllocation(learner=i, node="local") for i in (0, 1)],
        )
    ]
    lcm.place_round()
    [plan] = lcm.deployers["local"].plans
    assert plan.job_id == "job-p" and len(plan.learners) == 2
    assert lcm.keeper.get("job-p").status == Status.DOWNLOADING
    assert [entry["id"] for entry in job_store.get("job-p").info["learners"]] == [0, 1]


def test_scale_outside_the_range_is_refused_with_the_one_rules_message(job_store):
    from dlaas.domain.errors import InvalidRequest
    from dlaas.domain.manifest import elastic_range_problem

    lcm = fake_lcm(job_store)
    lcm.submit("job-e", "alice", MANIFEST + "learners: 2\nmin_learners: 1\nmax_learners: 3\n", "")
    with pytest.raises(InvalidRequest) as refused:
        lcm.scale("job-e", "alice", 4)
    assert refused.value.message == elastic_range_problem(4, 1, 3)
    lcm.submit("job-f", "alice", MANIFEST, "")
    with pytest.raises(InvalidRequest, match="learners: job job-f is not elastic"):
        lcm.scale("job-f", "alice", 2)


@pytest.mark.parametrize("action", ["preempt", "shrink", "grow"])
def test_the_scheduler_never_moves_a_storing_job_but_moves_a_processing_one(job_store, action):
    # STORING -> QUEUED exists for a failure (node lost, helper killed) only: a preemption
    # or a rescale would throw finished training away.
    lcm, _ = _two_nodes(job_store)
    _storing(lcm, "job-st", "n1")
    lcm.submit("job-run", "alice", MANIFEST, "")
    _placed(lcm, "job-run", "n2")
    lcm.keeper.transition("job-run", Status.DOWNLOADING, "started")
    lcm.start_job = lambda *a, **k: None  # a shrink/grow restarts at once: not under test
    for job_id in ("job-st", "job-run"):
        lcm._carry_out(SimpleNamespace(job_id=job_id, cause="test", allocations=[], action=action))
    assert lcm.keeper.get("job-st").status == Status.STORING
    assert lcm.keeper.get("job-run").status == Status.QUEUED


def test_a_burst_of_wakes_runs_few_rounds_and_a_lone_one_runs_at_once(job_store, monkeypatch):
    lcm = fake_lcm(job_store)
    rounds: list[float] = []
    monkeypatch.setattr(lcm, "place_round", lambda: rounds.append(time.monotonic()))
    lcm._leading.set()
    lcm.start()
    lcm.wake()  # as an election does: the first round (the reconcile's) runs at once
    try:
        deadline = time.monotonic() + 2
        while not rounds:  # the first round (the reconcile's) has run
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(2 * BURST_ROUND_GAP_S)  # past the burst gap: the loop is quiet
        woken = time.monotonic()
        lcm.wake()
        while rounds[-1] < woken:
            assert time.monotonic() < deadline + 1
            time.sleep(0.005)
        assert rounds[-1] - woken < 0.05  # a lone event: placed at once
        before = len(rounds)
        started = time.monotonic()
        while time.monotonic() - started < 0.3:  # a submit every 5 ms (60 in 0.3 s)
            lcm.wake()
            time.sleep(0.005)
        assert len(rounds) - before <= 0.3 / BURST_ROUND_GAP_S + 2
    finally:
        lcm.stop()
