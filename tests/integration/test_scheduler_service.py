"""The scheduler service on a real etcd: gangs start whole, nothing is lost or doubled on restart."""

import pyetcd
import pytest

from dlaas.nodes import NodeSpec
from dlaas.v1 import scheduler_pb2
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
