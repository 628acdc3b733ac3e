"""The scheduler service on a real etcd: gangs start whole, nothing is lost or doubled on restart."""

import json

import pyetcd
import pytest

from dlaas.adapters.nodes import NodeSpec
from dlaas.domain.keys import EtcdKeys
from dlaas.domain.status import JobState, Status
from dlaas.v1 import scheduler_pb2
from services.scheduler.policy import DEFAULT_CONFIG, Allocation, QueuedJob
from services.scheduler.service import SchedulerService, SchedulerState

NODE = NodeSpec(name="local", cpus=2, memory_mb=4096)


@pytest.fixture
def etcd(etcd_server):
    client = pyetcd.client(host=etcd_server.host, port=etcd_server.port)
    yield client
    client.delete_prefix("/t-sched/")


class Ctx:
    """Stands in for grpc.ServicerContext: the servicer methods are called directly."""

    def set_trailing_metadata(self, meta):
        self.meta = meta

    def abort(self, code, message):
        raise AssertionError(f"{code}: {message}")


def service(etcd, clock=lambda: 1000.0):
    return SchedulerService(SchedulerState(etcd, "/t-sched"), [NODE], "fifo", clock)


def gang(job_id, learners=1, cpus=1.0, memory_mb=512):
    return scheduler_pb2.GangRequest(
        job_id=job_id, user="u", learners=learners, cpus=cpus, memory_mb=memory_mb, submit_time=1.0
    )


def started(svc):
    return {d.job_id: d for d in svc.Schedule(scheduler_pb2.SchedEmpty(), Ctx()).decisions}


def test_a_gang_larger_than_the_cluster_is_refused_with_a_reason(etcd):
    reply = service(etcd).Enqueue(gang("big", learners=3), Ctx())
    assert not reply.accepted and reply.reason


def test_fifo_starts_what_fits_and_keeps_the_rest_queued(etcd):
    svc = service(etcd)
    for job_id in ("a", "b", "c"):
        assert svc.Enqueue(gang(job_id), Ctx()).accepted
    decisions = started(svc)
    assert set(decisions) == {"a", "b"}
    assert [len(d.allocations) for d in decisions.values()] == [1, 1]
    assert started(svc) == {}  # the node is full: c waits
    svc.Release(scheduler_pb2.JobId(job_id="a"), Ctx())
    assert set(started(svc)) == {"c"}


def test_restart_neither_loses_nor_doubles_an_allocation(etcd):
    svc = service(etcd)
    svc.Enqueue(gang("a", cpus=2), Ctx())
    svc.Enqueue(gang("b", cpus=2), Ctx())
    assert set(started(svc)) == {"a"}
    restarted = service(etcd)  # a new process: all it knows comes from etcd
    assert restarted.Enqueue(gang("a", cpus=2), Ctx()).accepted  # idempotent re-enqueue
    assert started(restarted) == {}
    assert [j.job_id for j in restarted.state.running()] == ["a"]
    assert [j.job_id for j in restarted.state.queue()] == ["b"]


def prio_gang(job_id, priority, learners=2, lo=None, hi=None, submit_time=1.0):
    return scheduler_pb2.GangRequest(
        job_id=job_id,
        user="u",
        learners=learners,
        cpus=1.0,
        memory_mb=256,
        priority=priority,
        min_learners=lo or learners,
        max_learners=hi or learners,
        submit_time=submit_time,
    )


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_preempted_job_goes_back_to_the_queue_at_its_position(etcd):
    clock = Clock()
    svc = SchedulerService(SchedulerState(etcd, "/t-sched"), [NODE], "priority", clock)
    svc.Enqueue(prio_gang("low", 0), Ctx())
    assert set(started(svc)) == {"low"}
    clock.now += 3600  # past the thrash guard: it ran long enough to be preempted
    svc.Enqueue(prio_gang("high", 100, learners=1, submit_time=2.0), Ctx())
    decisions = started(svc)
    assert decisions["low"].action == "preempt" and len(decisions["low"].allocations) == 2
    assert decisions["high"].action == "start"
    requeued = {j.job_id: j for j in svc.state.queue()}["low"]
    assert requeued.submit_time == 1.0 and requeued.preemptions == 1
    assert [j.job_id for j in svc.state.running()] == ["high"]


def test_elastic_job_is_shrunk_not_killed_and_keeps_a_whole_allocation(etcd):
    clock = Clock()
    svc = SchedulerService(SchedulerState(etcd, "/t-sched"), [NODE], "priority", clock)
    svc.Enqueue(prio_gang("elastic", 0, learners=2, lo=1, hi=2), Ctx())
    started(svc)
    clock.now += 3600
    svc.Enqueue(prio_gang("high", 100, learners=1, submit_time=2.0), Ctx())
    decisions = started(svc)
    assert decisions["elastic"].action == "shrink"
    # The LCM restarts the gang with what it keeps: one learner, numbered 0.
    assert [a.learner for a in decisions["elastic"].allocations] == [0]
    running = {j.job_id: j for j in svc.state.running()}
    assert running["elastic"].learners == 1 and running["high"].learners == 1


def test_an_unhealthy_node_gets_no_new_gang(etcd):
    svc = service(etcd)
    etcd.put("/t-sched/nodes/local", '{"healthy": false}')
    svc.Enqueue(gang("a"), Ctx())
    assert started(svc) == {}
    etcd.put("/t-sched/nodes/local", '{"healthy": true}')
    assert set(started(svc)) == {"a"}


def test_las_counts_the_service_a_running_job_attained_since_it_started(etcd):
    clock = Clock()
    svc = SchedulerService(SchedulerState(etcd, "/t-sched"), [NODE], "las", clock)
    svc.Enqueue(prio_gang("old", 0), Ctx())
    assert set(started(svc)) == {"old"}
    clock.now += 3600  # 3,600 GPU-seconds (one per CPU-only learner): past las's level 0
    svc.Enqueue(prio_gang("new", 0, learners=1, submit_time=2.0), Ctx())
    decisions = started(svc)
    assert decisions["old"].action == "preempt" and decisions["new"].action == "start"
    requeued = {j.job_id: j for j in svc.state.queue()}["old"]
    assert requeued.attained_service == 3600.0  # counted once, not twice


def test_queue_etas_learn_the_run_times_of_jobs_that_ended(etcd):
    clock = Clock()
    svc = SchedulerService(SchedulerState(etcd, "/t-sched"), [NODE], "fifo", clock)

    def eta_of_b():
        (entry,) = [e for e in svc.Queue(scheduler_pb2.QueueRequest(), Ctx()).entries]
        return entry.eta_low_s, entry.eta_high_s

    svc.Enqueue(gang("a", cpus=2), Ctx())
    started(svc)
    clock.now += 10
    svc.Enqueue(gang("b", cpus=2), Ctx())
    prior_low, prior_high = eta_of_b()
    svc.Release(scheduler_pb2.JobId(job_id="a"), Ctx())  # halted, requeued...: not learned
    started(svc)
    assert len(svc.durations) == 0
    for k in range(5):  # five jobs that each ran 100 s to their end
        clock.now += 100
        svc.Release(scheduler_pb2.JobId(job_id="b" if k == 0 else f"r{k}", ended=True), Ctx())
        svc.Enqueue(gang(f"r{k + 1}", cpus=2), Ctx())
        started(svc)
    assert len(svc.durations) == 5
    svc.Enqueue(gang("b", cpus=2), Ctx())
    clock.now += 10  # r5 has run 10 s of the 100 s such jobs take
    low, high = eta_of_b()
    assert low == pytest.approx(90) and high == pytest.approx(90)
    # before: a has run 10 s and nothing ended: "as likely to run as long again" spans 1-90 s
    assert prior_low < 10 and prior_high == pytest.approx(90)


def test_a_job_moved_to_make_room_for_a_gang_restarts_in_the_same_round(etcd):
    nodes = [NodeSpec(name=f"n{i}", cpus=8, memory_mb=16_000, gpus=4) for i in range(2)]
    clock = Clock()
    svc = SchedulerService(SchedulerState(etcd, "/t-sched"), nodes, "default", clock)
    # One 1-GPU job on each node: 6 GPUs free, but 3 + 3, and the gang needs one whole node.
    for i in range(2):
        job = QueuedJob(f"small{i}", "u", 1, 1, 1.0, 512, submit_time=1.0)
        svc.state.enqueue(job)
        assert svc.state.start(job, [Allocation(0, f"n{i}", (0,), 1.0, 512)], clock.now)
    clock.now += 3600
    svc.Enqueue(
        scheduler_pb2.GangRequest(
            job_id="gang", user="u", learners=1, cpus=1, memory_mb=512, gpus=4, submit_time=2.0
        ),
        Ctx(),
    )
    decisions = svc.Schedule(scheduler_pb2.SchedEmpty(), Ctx()).decisions
    actions = [(d.job_id, d.action) for d in decisions]
    (moved,) = [job for job, action in actions if action == "preempt"]
    assert actions == [(moved, "preempt"), ("gang", "start"), (moved, "start")]
    running = {r.job_id: r for r in svc.state.running()}
    assert set(running) == {"small0", "small1", "gang"} and svc.state.queue() == []
    gang_node = running["gang"].allocations[0].node
    assert running[moved].allocations[0].node != gang_node


# --------------------------------------------------------------------------- team quotas

GPU_NODES = [NodeSpec(name=f"g{i}", cpus=8, memory_mb=16_000, gpus=4) for i in range(2)]


def team_gang(job_id, team, gpus=4, submit_time=1.0):
    return scheduler_pb2.GangRequest(
        job_id=job_id,
        user="u",
        learners=1,
        cpus=1.0,
        memory_mb=512,
        gpus=gpus,
        submit_time=submit_time,
        team=team,
    )


def set_quota(svc, team, gpus, cpus=8.0, memory_mb=16_000):
    req = scheduler_pb2.TeamQuota(team=team, gpus=gpus, cpus=cpus, memory_mb=memory_mb)
    svc.SetTeamQuota(req, Ctx())


def teams(svc):
    return {t.team: t for t in svc.Teams(scheduler_pb2.SchedEmpty(), Ctx()).teams}


def test_quotas_survive_a_restart_and_a_team_reclaims_borrowed_gpus(etcd):
    clock = Clock()
    svc = SchedulerService(SchedulerState(etcd, "/t-sched"), GPU_NODES, "priority", clock)
    set_quota(svc, "vision", 4)
    set_quota(svc, "nlp", 4)
    # nlp fills the cluster: one node inside its guarantee, one borrowed
    svc.Enqueue(team_gang("n1", "nlp"), Ctx())
    svc.Enqueue(team_gang("n2", "nlp", submit_time=2.0), Ctx())
    assert set(started(svc)) == {"n1", "n2"}
    usage = teams(svc)
    assert (usage["nlp"].guaranteed_gpus, usage["nlp"].borrowed_gpus) == (4, 4)
    assert usage["vision"].quota_gpus == 4 and usage["vision"].guaranteed_gpus == 0

    clock.now += 10  # well inside the thrash guard: borrowed work is not protected by it
    restarted = SchedulerService(SchedulerState(etcd, "/t-sched"), GPU_NODES, "priority", clock)
    restarted.Enqueue(team_gang("v1", "vision", submit_time=3.0), Ctx())
    decisions = started(restarted)
    assert decisions["n2"].action == "preempt" and "reclaimed for v1" in decisions["n2"].cause
    assert decisions["v1"].action == "start"
    usage = teams(restarted)
    assert usage["vision"].guaranteed_gpus == 4 and usage["nlp"].borrowed_gpus == 0
    assert usage["nlp"].queued == 1
    (entry,) = restarted.Queue(scheduler_pb2.QueueRequest(), Ctx()).entries
    assert entry.job_id == "n2"
    assert entry.reason.startswith(
        "team nlp uses 4/4 guaranteed GPUs (this job needs 4); "
        "4 borrowable GPUs are held by team vision's guaranteed jobs"
    )


def test_an_all_zero_quota_removes_the_team(etcd):
    svc = SchedulerService(SchedulerState(etcd, "/t-sched"), GPU_NODES, "priority")
    set_quota(svc, "vision", 4)
    set_quota(svc, "vision", 0, cpus=0, memory_mb=0)
    assert teams(svc) == {} and svc.state.quotas() == {}


@pytest.mark.parametrize(
    ("team", "gpus", "cpus", "memory_mb", "field"),
    [
        ("", 1, 1.0, 1, "team"),
        ("a/b", 1, 1.0, 1, "team"),
        ("ok", -1, 1.0, 1, "gpus"),
        ("ok", 1, float("nan"), 1, "cpus"),
        ("ok", 1, 1.0, -5, "memory_mb"),
    ],
)
def test_a_bad_quota_is_refused_naming_the_field(etcd, team, gpus, cpus, memory_mb, field):
    svc = SchedulerService(SchedulerState(etcd, "/t-sched"), GPU_NODES, "priority")
    req = scheduler_pb2.TeamQuota(team=team, gpus=gpus, cpus=cpus, memory_mb=memory_mb)
    with pytest.raises(AssertionError, match=rf"INVALID_ARGUMENT: {field}: "):
        svc.SetTeamQuota(req, Ctx())
    assert svc.state.quotas() == {}


def test_a_gang_with_a_bad_team_name_is_refused_with_a_reason(etcd):
    svc = SchedulerService(SchedulerState(etcd, "/t-sched"), GPU_NODES, "priority")
    reply = svc.Enqueue(team_gang("x", "no spaces"), Ctx())
    assert not reply.accepted and reply.reason.startswith("team: ")


def test_a_gang_outside_its_own_elastic_range_is_refused_naming_learners(etcd):
    svc = SchedulerService(SchedulerState(etcd, "/t-sched"), GPU_NODES, "priority")
    with pytest.raises(AssertionError, match=r"INVALID_ARGUMENT: learners: 3 is outside"):
        svc.Enqueue(prio_gang("x", 0, learners=3, lo=1, hi=2), Ctx())
    assert svc.state.queue() == []


def test_the_sdk_sets_and_lists_quotas_over_grpc(etcd):
    from dlaas.adapters.grpc_server import start_server
    from dlaas.clients.sdk import SchedulerClient
    from dlaas.domain.errors import InvalidRequest
    from dlaas.local.processes import free_port
    from dlaas.v1 import scheduler_pb2_grpc

    svc = SchedulerService(SchedulerState(etcd, "/t-sched"), GPU_NODES, "priority")
    addr = f"127.0.0.1:{free_port()}"
    server = start_server(
        addr,
        lambda s: scheduler_pb2_grpc.add_SchedulerServicer_to_server(svc, s),
        ["dlaas.v1.Scheduler"],
    )
    try:
        with SchedulerClient(addr) as client:
            client.set_team_quota("vision", 4, 2.5, 8_000)
            client.enqueue(team_gang("v1", "vision", gpus=2))
            client.schedule()
            (usage,) = client.teams()
            assert (usage.team, usage.quota_gpus, usage.quota_cpus) == ("vision", 4, 2.5)
            assert (usage.guaranteed_gpus, usage.guaranteed_cpus, usage.borrowed_gpus) == (2, 1, 0)
            with pytest.raises(InvalidRequest, match="gpus: must not be negative"):
                client.set_team_quota("vision", -1, 0, 0)
    finally:
        server.stop(0)


def test_what_an_elastic_job_grew_into_is_lent_to_the_next_queued_job(etcd):
    # max above the target: the LCM sends that only for `elastic: {auto_grow: true}`
    clock = Clock()
    svc = SchedulerService(SchedulerState(etcd, "/t-sched"), [NODE], "default", clock)
    svc.Enqueue(prio_gang("el", 0, learners=1, lo=1, hi=2), Ctx())
    assert [len(d.allocations) for d in started(svc).values()] == [1]  # its target, not its max
    # grown once the resize interval after its start has passed (and, with one arrival in
    # 300 s, idle capacity is expected to stay idle long enough to pay for the loan)
    clock.now += DEFAULT_CONFIG.resize_interval_s
    grow = started(svc)["el"]
    assert grow.action == "grow" and "lent" in grow.cause
    clock.now += 1  # inside the resize interval: a loan this young stays lent to an equal
    svc.Enqueue(prio_gang("w", 0, learners=1, submit_time=2.0), Ctx())
    assert started(svc) == {}
    clock.now += DEFAULT_CONFIG.resize_interval_s  # an older loan goes back to it
    decisions = started(svc)
    assert decisions["el"].action == "shrink" and "lent" in decisions["el"].cause
    assert decisions["w"].action == "start"
    running = {j.job_id: j for j in svc.state.running()}
    assert (running["el"].learners, running["el"].target) == (1, 1)


def test_the_service_lends_idle_learners_only_once_arrivals_slow_down(etcd):
    clock = Clock()
    svc = SchedulerService(SchedulerState(etcd, "/t-sched"), [NODE], "default", clock)
    svc.Enqueue(prio_gang("el", 0, learners=1, lo=1, hi=2), Ctx())
    started(svc)
    for i in range(10):  # a short job every 10 s, each gone before the next
        clock.now += 10
        svc.Enqueue(prio_gang(f"s{i}", 0, learners=1, submit_time=clock.now), Ctx())
        assert started(svc)[f"s{i}"].action == "start"
        svc.Release(scheduler_pb2.JobId(job_id=f"s{i}", ended=True), Ctx())
    # past the resize interval, one CPU idle: 11 arrivals in 300 s, a loan would not pay
    clock.now = 1000.0 + DEFAULT_CONFIG.resize_interval_s
    assert started(svc) == {}
    # nothing arrived for a while: the idle CPU is lent
    clock.now = 3000.0
    assert started(svc)["el"].action == "grow"


def test_enqueue_of_a_running_job_sets_its_target_without_a_restart(etcd):
    clock = Clock()
    svc = SchedulerService(SchedulerState(etcd, "/t-sched"), [NODE], "default", clock)
    svc.Enqueue(prio_gang("el", 0, learners=1, lo=1, hi=2), Ctx())
    started(svc)
    clock.now += DEFAULT_CONFIG.resize_interval_s
    assert started(svc)["el"].action == "grow"
    # the user scales it to the 2 learners it runs with: they are its own now
    assert svc.Enqueue(prio_gang("el", 0, learners=2, lo=1, hi=2), Ctx()).accepted
    assert started(svc) == {}  # no restart
    assert [(j.job_id, j.learners, j.target) for j in svc.state.running()] == [("el", 2, 2)]
    assert svc.state.queue() == []
    svc.Enqueue(prio_gang("w", 0, learners=1, submit_time=2.0), Ctx())
    assert started(svc) == {}  # nothing is lent any more: w waits


def test_the_queue_request_names_running_jobs_time_left(etcd):
    """The API sends the running jobs' time left read off their progress: the replay ends
    them then (0.8-1.2x) instead of the model's prior guess (hours, before any job ended)."""
    clock = Clock()
    svc = SchedulerService(SchedulerState(etcd, "/t-sched"), [NODE], "fifo", clock)
    svc.Enqueue(gang("a", cpus=2), Ctx())
    started(svc)
    clock.now += 10
    svc.Enqueue(gang("b", cpus=2), Ctx())

    def eta_of_b(request):
        (entry,) = svc.Queue(request, Ctx()).entries
        return entry.eta_low_s, entry.eta_high_s

    guessed = eta_of_b(scheduler_pb2.QueueRequest())
    known = eta_of_b(scheduler_pb2.QueueRequest(remaining_s={"a": 100.0, "gone": 5.0}))
    assert known == pytest.approx((80.0, 120.0))
    assert guessed != known
    bad = eta_of_b(scheduler_pb2.QueueRequest(remaining_s={"a": float("nan")}))
    assert bad == guessed  # not a time: ignored


@pytest.mark.parametrize(("pause", "grows"), [(2.0, True), (60.0, False), (None, False)])
def test_a_loan_pays_for_the_restart_time_measured_not_the_prior(etcd, pause, grows):
    """The grow rule reads the pauses the job's resizes took (its status from the resize to
    PROCESSING again), the configured 50 s until one is measured: with short jobs arriving
    every 14 s (41 s between arrivals) a job that restarts in 2 s is lent an idle CPU, one
    that takes 60 s or was never measured is not."""
    clock = Clock()
    svc = SchedulerService(SchedulerState(etcd, "/t-sched"), [NODE], "default", clock)
    interval = DEFAULT_CONFIG.resize_interval_s

    def running_again():  # what the LCM and the monitor write once the gang runs again
        if pause is not None:
            state = JobState(Status.PROCESSING, clock.now + pause, "learners training", seq=4)
            etcd.put(EtcdKeys("/t-sched").status("el"), json.dumps(state.to_dict()))

    svc.Enqueue(prio_gang("el", 0, learners=1, lo=1, hi=2), Ctx())
    started(svc)
    clock.now += interval  # one arrival in 300 s: the loan pays even at 50 s a restart
    assert started(svc)["el"].action == "grow"
    running_again()
    clock.now += interval
    svc.Enqueue(prio_gang("w", 0, learners=1, submit_time=clock.now), Ctx())
    assert started(svc)["el"].action == "shrink"  # the loan goes back to w
    resized_at = clock.now
    assert svc.restarts.times.of("el") == pause  # the grow's restart, measured
    running_again()
    clock.now += 10
    svc.Release(scheduler_pb2.JobId(job_id="w", ended=True), Ctx())
    for i in range(20):  # short jobs, each gone before the next
        clock.now += 14
        svc.Enqueue(prio_gang(f"s{i}", 0, learners=1, submit_time=clock.now), Ctx())
        assert started(svc)[f"s{i}"].action == "start"
        svc.Release(scheduler_pb2.JobId(job_id=f"s{i}", ended=True), Ctx())
    clock.now = resized_at + interval  # the shrink is an interval old: el may grow again
    assert ("el" in started(svc)) is grows
    assert svc.restarts.times.platform() == (50.0 if pause is None else pause)
