"""The LCM's resilience use cases against real etcd, Docker and a real scheduler service.

Restarts count against max_restarts with backoff and are recorded in the history; resume
continues a HALTED job; scale restarts an elastic gang with its new size (and nothing when it
runs at that size already); the scheduler's preempt, shrink and grow decisions are carried out
(stop, requeue, restart with the new learner count), learners grown past the target are lent
to the next queued job; a crash in the
middle of a requeue is finished by the next leader's reconcile; and of two replicas
only the lease holder places jobs, the other taking over when the leader dies.
"""

from __future__ import annotations

import time

import pytest
from lcm_support import containers, submit

from dlaas.adapters.leader import LeaderElection
from dlaas.domain import errors, jobspec
from dlaas.domain.status import Status
from services.scheduler.policy.config import DEFAULT_CONFIG

pytestmark = pytest.mark.docker


def new_id() -> str:
    return f"job-{time.monotonic_ns():x}"


def wait(predicate, timeout=30.0, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def placed_again(lcm, job):
    """Run the leader's loop steps until the job is deployed again."""

    def step():
        lcm._enqueue_due()
        lcm.place_round()
        return lcm.keeper.get(job).status == Status.DOWNLOADING

    return step


def test_restart_is_recorded_backed_off_and_redeployed(lcm, docker_client):
    now = [time.time()]
    lcm.clock = lambda: now[0]
    job = new_id()
    submit(lcm, job, learners=1, extra="max_restarts: 2\n")
    lcm.place_round()
    first = {c.id for c in containers(docker_client, job)}
    assert lcm.requeue(job, "learner 0 killed from outside", is_restart=True) == "QUEUED"
    reason = lcm.keeper.get(job).reason
    assert reason.startswith("restart 1/2 from the last checkpoint at once")
    assert "killed from outside" in reason
    wait(placed_again(lcm, job), what="the restarted gang")  # the clock stands still
    second = {c.id for c in containers(docker_client, job)}
    assert len(second) == 2 and not first & second  # fresh containers, exactly one set
    assert lcm.store.get(job).info["restarts"] == 1
    # The second restart waits 1 s of the LCM's clock.
    lcm.requeue(job, "learner 0 killed from outside", is_restart=True)
    assert lcm.keeper.get(job).reason.startswith("restart 2/2 from the last checkpoint in 1 s")
    wait(lambda: job in lcm._due, what="the teardown")
    assert not placed_again(lcm, job)()
    now[0] += 1.0
    wait(placed_again(lcm, job), what="the restart after its backoff")
    assert lcm.store.get(job).info["restarts"] == 2
    history = [t.status for t in lcm.store.get(job).history]
    assert history == [Status.QUEUED, Status.PENDING, Status.DOWNLOADING] * 3


def test_a_restart_keeps_its_gpus_through_the_backoff(lcm, docker_client):
    job, other = new_id(), new_id()
    submit(lcm, job, learners=4, extra="max_restarts: 2\n")  # 4 x 0.5 cpus: the whole node
    lcm.place_round()
    lcm.store.update_info(job, {"restarts": 1})  # the second restart backs off 1 s
    before = lcm._placement(job)
    submit(lcm, other, learners=4)
    lcm.requeue(job, "learner 0 killed from outside", is_restart=True)
    wait(lambda: job in lcm._due, what="the teardown")
    lcm.place_round()  # the node looks idle during the backoff, yet it is still the job's
    assert lcm.keeper.get(other).status == Status.QUEUED
    wait(placed_again(lcm, job), what="the restart")
    assert lcm._placement(job) == before
    assert "restarted on the GPUs it held" in lcm.store.get(job).history[-2].reason
    assert lcm.keeper.get(other).status == Status.QUEUED


def test_no_restarts_left_fails_the_job_with_the_reason(lcm):
    job = new_id()
    submit(lcm, job, learners=1)  # max_restarts defaults to 0
    lcm.place_round()
    assert lcm.requeue(job, "helper lost its store", is_restart=True) == "FAILED"
    state = lcm.keeper.get(job)
    assert state.error_code == "restarts_exhausted" and "helper lost its store" in state.reason


def test_halted_job_resumes_and_is_placed_again(lcm, docker_client):
    job = new_id()
    submit(lcm, job, learners=1)
    with pytest.raises(errors.InvalidTransition):
        lcm.resume(job, "alice", "")  # only a HALTED job resumes
    lcm.place_round()
    lcm.halt(job, "alice", "pausing")
    with pytest.raises(errors.JobNotFound):
        lcm.resume(job, "mallory", "")
    assert lcm.resume(job, "alice", "") == "QUEUED"
    wait(placed_again(lcm, job), what="the resumed job")
    statuses = [t.status for t in lcm.store.get(job).history]
    assert statuses[-4:] == [Status.HALTED, Status.QUEUED, Status.PENDING, Status.DOWNLOADING]


def test_scale_restarts_an_elastic_gang_with_its_new_size(lcm, docker_client):
    job = new_id()
    submit(lcm, job, learners=2, extra="min_learners: 1\nmax_learners: 3\n")
    lcm.place_round()
    with pytest.raises(
        errors.InvalidRequest,
        match="learners: 4 is outside the job's elastic range; allowed 1 to 3",
    ):
        lcm.scale(job, "alice", 4)
    assert lcm.scale(job, "alice", 3) == "QUEUED"
    wait(placed_again(lcm, job), what="the rescaled job")
    learners = [
        c for c in containers(docker_client, job) if c.labels[jobspec.LABEL_ROLE] == "learner"
    ]
    assert len(learners) == 3
    env = dict(e.split("=", 1) for e in learners[0].attrs["Config"]["Env"])
    assert env["NUM_LEARNERS"] == "3"


def learner_env(docker_client, job):
    learners = [
        c for c in containers(docker_client, job) if c.labels[jobspec.LABEL_ROLE] == "learner"
    ]
    return [dict(e.split("=", 1) for e in c.attrs["Config"]["Env"]) for c in learners]


class LaterClock:
    """The scheduler's clock, moved on by hand past its thrash guard."""

    def __init__(self):
        self.ahead = 0.0

    def __call__(self):
        return time.time() + self.ahead


def test_a_preempted_job_is_stopped_requeued_and_restarted_once_room_frees(
    lcm_factory, docker_client
):
    clock = LaterClock()
    lcm = lcm_factory(policy="priority", clock=clock)
    low, high = new_id(), new_id()
    submit(lcm, low, learners=2, extra="priority: low\n")  # 1 of the node's 2 CPUs
    lcm.place_round()
    clock.ahead = 3600.0  # it ran an hour: past the thrash guard
    submit(lcm, high, learners=4, extra="priority: high\n")  # needs the whole node
    lcm.place_round()
    state = lcm.keeper.get(low)
    assert state.status == Status.QUEUED and state.reason.startswith("preempted: ")
    assert lcm.keeper.get(high).status == Status.DOWNLOADING
    wait(lambda: not containers(docker_client, low), 40, "the preempted gang to be removed")
    lcm.place_round()
    assert lcm.keeper.get(low).status == Status.QUEUED  # no room while the high job runs
    lcm.scheduler.release(high)  # it ended
    wait(placed_again(lcm, low), what="the preempted job's restart")
    history = [t.status for t in lcm.store.get(low).history]
    assert history == [Status.QUEUED, Status.PENDING, Status.DOWNLOADING] * 2
    assert "restarts" not in lcm.store.get(low).info  # a preemption is not a failure


def test_an_elastic_job_is_shrunk_for_a_higher_priority_and_grown_back(lcm_factory, docker_client):
    clock = LaterClock()
    lcm = lcm_factory(policy="priority", clock=clock)
    elastic, high = new_id(), new_id()
    submit(lcm, elastic, learners=4, extra="priority: low\nmin_learners: 2\nmax_learners: 4\n")
    lcm.place_round()
    assert [env["NUM_LEARNERS"] for env in learner_env(docker_client, elastic)] == ["4"] * 4
    clock.ahead = 3600.0
    submit(lcm, high, learners=2, extra="priority: high\n")  # needs 1 CPU: 2 learners must go
    lcm.place_round()
    assert lcm.keeper.get(high).status == Status.DOWNLOADING
    assert lcm.keeper.get(elastic).status == Status.DOWNLOADING
    assert [env["NUM_LEARNERS"] for env in learner_env(docker_client, elastic)] == ["2"] * 2
    reasons = [t.reason for t in lcm.store.get(elastic).history]
    assert any(r.startswith("shrink: ") for r in reasons)
    lcm.scheduler.release(high)  # it ended: the idle CPU goes back to the elastic job
    clock.ahead = 7200.0
    lcm.place_round()
    assert [env["NUM_LEARNERS"] for env in learner_env(docker_client, elastic)] == ["4"] * 4
    assert any(t.reason.startswith("grow: ") for t in lcm.store.get(elastic).history)


def test_an_elastic_job_runs_at_its_size_and_scaling_to_it_restarts_nothing(lcm, docker_client):
    job = new_id()
    submit(lcm, job, learners=2, extra="min_learners: 1\nmax_learners: 3\n")
    lcm.place_round()
    lcm.place_round()  # the node has room for a third learner: without auto_grow it stays 2
    before = {c.id for c in containers(docker_client, job)}
    assert [env["NUM_LEARNERS"] for env in learner_env(docker_client, job)] == ["2"] * 2
    history = lcm.store.get(job).history
    assert lcm.scale(job, "alice", 2) == "DOWNLOADING"
    assert {c.id for c in containers(docker_client, job)} == before
    assert lcm.store.get(job).history == history


def test_grown_learners_are_lent_to_a_queued_job_and_a_scale_to_the_size_keeps_them(
    lcm_factory, docker_client
):
    clock = LaterClock()
    lcm = lcm_factory(clock=clock)
    el, other = new_id(), new_id()
    extra = "min_learners: 1\nmax_learners: 4\nelastic:\n  auto_grow: true\n"
    submit(lcm, el, learners=1, extra=extra)
    lcm.place_round()
    # an hour on, past the resize interval, and nothing arrived since: the idle CPUs should
    # stay idle, so it grows past its target into them
    clock.ahead = 3600.0
    lcm.place_round()
    assert [env["NUM_LEARNERS"] for env in learner_env(docker_client, el)] == ["4"] * 4
    grow = [t.reason for t in lcm.store.get(el).history if t.reason.startswith("grow: ")]
    assert grow and "lent" in grow[0]
    # Past the resize interval again: a loan that old goes back to a job of the same priority
    # (a younger one stays lent: tests/scheduler/test_elastic.py, test_elastic_thrash.py).
    clock.ahead += DEFAULT_CONFIG.resize_interval_s
    submit(lcm, other, learners=1)  # same priority; it needs one of the lent learners
    lcm.place_round()
    assert lcm.keeper.get(other).status == Status.DOWNLOADING
    assert [env["NUM_LEARNERS"] for env in learner_env(docker_client, el)] == ["3"] * 3
    shrink = [t.reason for t in lcm.store.get(el).history if t.reason.startswith("shrink: ")]
    assert shrink and "gave back 1 lent learner(s)" in shrink[0]
    # the user makes the 3 learners it runs with its own: recorded, no restart
    before = {c.id for c in containers(docker_client, el)}
    assert lcm.scale(el, "alice", 3) == "DOWNLOADING"
    assert {c.id for c in containers(docker_client, el)} == before
    assert lcm.store.get(el).info["learners_target"] == 3
    running = lcm.keeper.etcd.get(f"{lcm.keeper.prefix}/sched/running/{el}")[0]
    assert b'"target_learners": 3' in running


def test_scaling_a_fixed_size_job_is_refused_naming_the_field(lcm):
    job = new_id()
    submit(lcm, job, learners=1)
    with pytest.raises(errors.InvalidRequest, match="learners: .* not elastic"):
        lcm.scale(job, "alice", 2)


def test_reconcile_finishes_a_requeue_cut_short_by_a_crash(lcm, docker_client):
    job = new_id()
    submit(lcm, job, learners=1)
    lcm.place_round()
    # The leader wrote QUEUED and died before tearing down or releasing anything.
    lcm.keeper.transition(job, Status.QUEUED, "restart 1/1: simulated crash")
    assert containers(docker_client, job)
    lcm.reconcile()
    wait(placed_again(lcm, job), what="the job placed by the new leader")
    assert len(containers(docker_client, job)) == 2  # one helper, one learner: no duplicates


def test_only_the_leader_places_and_a_standby_takes_over(lcm, etcd_server):
    import pyetcd

    etcd = pyetcd.client(host=etcd_server.host, port=etcd_server.port)
    key = f"{lcm.keeper.prefix}/lcm/leader"
    a = LeaderElection(etcd, key, "a", ttl=1, on_elected=lcm.on_elected, on_lost=lcm.on_lost)
    b = LeaderElection(etcd, key, "b", ttl=1)
    a.start()
    wait(lambda: a.leading, what="a leads")
    b.start()
    time.sleep(0.5)
    assert a.leading and not b.leading and b.leader() == "a"
    # a dies without a word (SIGKILL): its lease simply stops being refreshed.
    a._stop.set()
    a._thread.join()
    died = time.monotonic()
    wait(lambda: b.leading, timeout=5, what="b takes over")
    assert time.monotonic() - died < 2.5
    b.stop()


def test_a_lost_node_gets_its_jobs_requeued_and_no_new_gangs(
    lcm_factory, docker_client, docker_host, tmp_path_factory
):
    import tempfile
    from pathlib import Path

    import docker
    from engine_proxy import EngineProxy

    if not docker_host.startswith("unix://"):
        pytest.skip(f"the engine proxy forwards to a Unix socket, not {docker_host}")
    proxy = EngineProxy(
        Path(tempfile.mkdtemp(prefix="dlaas-n2-")) / "docker.sock",
        docker_host.removeprefix("unix://"),
    )
    proxy.start()
    try:
        n2 = docker.DockerClient(base_url=proxy.url)
        lcm = lcm_factory({"local": docker_client, "n2": n2})
        jobs = [new_id(), new_id()]
        for job in jobs:
            submit(lcm, job, learners=4)  # 4 x 0.5 cpus: a whole node each
        lcm.place_round()
        on = {job: lcm._placement(job)[0]["node"] for job in jobs}
        assert sorted(on.values()) == ["local", "n2"]
        lost = next(j for j, n in on.items() if n == "n2")
        kept = next(j for j, n in on.items() if n == "local")

        proxy.stop()  # the engine of n2 dies
        lcm._last_probe = 0
        lcm.check_nodes()
        lcm._last_probe = 0
        lcm.check_nodes()
        state = lcm.keeper.get(lost)
        assert state.status == Status.QUEUED and "node n2 lost" in state.reason
        assert lcm.keeper.get(kept).status == Status.DOWNLOADING
        health, _ = lcm.keeper.etcd.get(f"{lcm.keeper.prefix}/nodes/n2")
        assert b'"healthy": false' in health
        # (n2 is a proxy to the same engine here: its containers die with it.)
        lcm.deployer.remove_job(lost)
        wait(lambda: lost in lcm._due, what="the requeue to finish")
        lcm._enqueue_due()
        lcm.place_round()
        assert lcm.keeper.get(lost).status == Status.QUEUED  # n2 gets nothing, local is full
        lcm.halt(kept, "alice", "make room")
        wait(placed_again(lcm, lost), what="the lost job on the healthy node")
        assert {p["node"] for p in lcm._placement(lost)} == {"local"}

        proxy.start()  # n2 comes back
        lcm._last_probe = 0
        lcm.check_nodes()
        health, _ = lcm.keeper.etcd.get(f"{lcm.keeper.prefix}/nodes/n2")
        assert b'"healthy": true' in health
    finally:
        proxy.stop()


def test_a_restart_taken_by_a_standby_replica_is_finished_by_it(lcm, docker_client):
    job = new_id()
    submit(lcm, job, learners=1, extra="max_restarts: 1\n")
    lcm.place_round()
    before = lcm._placement(job)
    lcm._leading.clear()  # this replica is a standby: its loop does not place
    lcm.requeue(job, "learner 0 killed from outside", is_restart=True)
    wait(lambda: lcm.keeper.get(job).status == Status.DOWNLOADING, what="the restarted gang")
    assert lcm._placement(job) == before
    assert len(containers(docker_client, job)) == 2
