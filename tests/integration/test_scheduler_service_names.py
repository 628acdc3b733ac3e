"""The scheduler service on a real etcd keeps a job's name from its request to its end, so the
queue's ETA learns run times per user and name (eta.DurationModel, run_key)."""

import pyetcd
import pytest

from dlaas.adapters.nodes import NodeSpec
from dlaas.v1 import scheduler_pb2
from services.scheduler.policy import run_key
from services.scheduler.service import SchedulerService, SchedulerState

NODE = NodeSpec(name="local", cpus=2, memory_mb=4096)


class Ctx:
    """Stands in for grpc.ServicerContext: the servicer methods are called directly."""

    def set_trailing_metadata(self, meta):
        self.meta = meta

    def abort(self, code, message):
        raise AssertionError(f"{code}: {message}")


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def etcd(etcd_server):
    client = pyetcd.client(host=etcd_server.host, port=etcd_server.port)
    yield client
    client.delete_prefix("/t-names/")


def test_a_finished_jobs_run_time_is_kept_under_its_user_and_name(etcd):
    clock = Clock()
    svc = SchedulerService(SchedulerState(etcd, "/t-names"), [NODE], "fifo", clock)
    for i in range(5):
        gang = scheduler_pb2.GangRequest(
            job_id=f"j{i}", user="u", learners=1, cpus=2.0, memory_mb=512, name="short"
        )
        assert svc.Enqueue(gang, Ctx()).accepted
        assert svc.state.queue()[0].name == "short"
        decisions = svc.Schedule(scheduler_pb2.SchedEmpty(), Ctx()).decisions
        assert [d.job_id for d in decisions] == [f"j{i}"]
        assert svc.state.running()[0].name == "short"
        clock.now += 10.0 + i  # each runs 10-14 s
        svc.Release(scheduler_pb2.JobId(job_id=f"j{i}", ended=True), Ctx())
    assert svc.durations.remaining(0.0, 0.9, run_key("u", "short")) == 14.0
    # another user's job of that name has seen none of these as its own
    svc.durations.add(300.0)
    assert svc.durations.remaining(0.0, 0.9, run_key("v", "short")) == 300.0
