"""The scheduler service: the queue and the allocations, kept in etcd, decided by the policy.

The adapter around the pure policy (services.scheduler.policy.schedule). Every round reads
the queue and the running allocations from etcd, asks the policy, and records each start
as one etcd transaction (queue entry out, allocation in, guarded on both), so a restart
loses nothing and a GPU is never given twice. The caller (the LCM) carries out the
decisions it gets back.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict

import pyetcd

from dlaas.grpc_errors import translate_errors
from dlaas.nodes import NodeSpec
from dlaas.v1 import scheduler_pb2, scheduler_pb2_grpc
from services.scheduler.policy import (
    Allocation,
    Node,
    QueuedJob,
    RunningJob,
    Snapshot,
    can_ever_fit,
    schedule,
)

log = logging.getLogger(__name__)


def _queued_from(data: dict) -> QueuedJob:
    return QueuedJob(**data)


def _running_from(data: dict) -> RunningJob:
    data = dict(data)
    data["allocations"] = tuple(
        Allocation(**{**a, "gpu_indices": tuple(a["gpu_indices"])}) for a in data["allocations"]
    )
    return RunningJob(**data)


class SchedulerState:
    """Queue and allocations in etcd under `<prefix>/sched/`."""

    def __init__(self, etcd: pyetcd.Etcd3Client, prefix: str = "/dlaas"):
        self.etcd = etcd
        self.queue_prefix = f"{prefix.rstrip('/')}/sched/queue/"
        self.running_prefix = f"{prefix.rstrip('/')}/sched/running/"

    def _all(self, prefix: str) -> dict[str, dict]:
        return {
            meta.key.decode()[len(prefix) :]: json.loads(value)
            for value, meta in self.etcd.get_prefix(prefix)
        }

    def queue(self) -> list[QueuedJob]:
        return [_queued_from(d) for d in self._all(self.queue_prefix).values()]

    def running(self) -> list[RunningJob]:
        return [_running_from(d) for d in self._all(self.running_prefix).values()]

    def enqueue(self, job: QueuedJob) -> bool:
        """Queue the job unless it is queued or running already (idempotent)."""
        tx = self.etcd.transactions
        qk, rk = self.queue_prefix + job.job_id, self.running_prefix + job.job_id
        ok, _ = self.etcd.transaction(
            compare=[tx.version(qk) == 0, tx.version(rk) == 0],
            success=[tx.put(qk, json.dumps(asdict(job)))],
            failure=[],
        )
        return ok

    def start(self, job: QueuedJob, allocations: list[Allocation], now: float) -> bool:
        """Move a queued job to running with its allocations; False if it is no longer queued."""
        tx = self.etcd.transactions
        qk, rk = self.queue_prefix + job.job_id, self.running_prefix + job.job_id
        running = RunningJob(
            job_id=job.job_id,
            user=job.user,
            allocations=tuple(allocations),
            priority=job.priority,
            start_time=now,
            attained_service=job.attained_service,
            min_learners=job.min_learners,
            max_learners=job.max_learners,
            submit_time=job.submit_time,
            gpu_type=job.gpu_type,
            gpus_per_learner=job.gpus_per_learner,
            cpus_per_learner=job.cpus_per_learner,
            memory_mb_per_learner=job.memory_mb_per_learner,
            placement=job.placement,
        )
        ok, _ = self.etcd.transaction(
            compare=[tx.version(qk) > 0, tx.version(rk) == 0],
            success=[tx.delete(qk), tx.put(rk, json.dumps(asdict(running)))],
            failure=[],
        )
        return ok

    def release(self, job_id: str) -> None:
        self.etcd.delete(self.queue_prefix + job_id)
        self.etcd.delete(self.running_prefix + job_id)


def _alloc_pb(a: Allocation) -> scheduler_pb2.LearnerAllocation:
    return scheduler_pb2.LearnerAllocation(
        learner=a.learner, node=a.node, gpu_indices=list(a.gpu_indices)
    )


class SchedulerService(scheduler_pb2_grpc.SchedulerServicer):
    def __init__(
        self,
        state: SchedulerState,
        nodes: list[NodeSpec],
        policy: str = "fifo",
        clock: Callable[[], float] = time.time,
    ):
        self.state = state
        self.nodes = [
            Node(n.name, n.gpus, n.cpus, n.memory_mb, n.gpu_type, dict(n.labels)) for n in nodes
        ]
        self.policy = policy
        self.clock = clock
        # One round at a time: rounds read, decide and write; etcd guards against other writers.
        self._lock = threading.Lock()

    @translate_errors
    def Enqueue(self, request, context):
        job = QueuedJob(
            job_id=request.job_id,
            user=request.user,
            learners=request.learners,
            gpus_per_learner=request.gpus,
            cpus_per_learner=request.cpus,
            memory_mb_per_learner=request.memory_mb,
            priority=request.priority,
            submit_time=request.submit_time or self.clock(),
            gpu_type=request.gpu_type,
            min_learners=request.min_learners or None,
            max_learners=request.max_learners or None,
        )
        fits, reason = can_ever_fit(job, self.nodes)
        if not fits:
            return scheduler_pb2.EnqueueReply(accepted=False, reason=reason)
        self.state.enqueue(job)
        return scheduler_pb2.EnqueueReply(accepted=True)

    @translate_errors
    def Schedule(self, request, context):
        with self._lock:
            now = self.clock()
            queue = {j.job_id: j for j in self.state.queue()}
            snapshot = Snapshot(nodes=self.nodes, running=self.state.running(), queue=list(queue.values()))
            out = []
            for d in schedule(snapshot, now, policy=self.policy):
                if d.action == "wait":
                    continue
                # A start that lost its etcd guard (released meanwhile) is not reported.
                if d.action == "start" and not self.state.start(
                    queue[d.job_id], d.allocations, now
                ):
                    continue
                out.append(
                    scheduler_pb2.Decision(
                        job_id=d.job_id,
                        action=d.action,
                        cause=d.cause,
                        allocations=[_alloc_pb(a) for a in d.allocations],
                    )
                )
            return scheduler_pb2.ScheduleReply(decisions=out)

    @translate_errors
    def Release(self, request, context):
        self.state.release(request.job_id)
        return scheduler_pb2.SchedEmpty()

    @translate_errors
    def Queue(self, request, context):
        from services.scheduler.policy import queue_report

        snapshot = Snapshot(nodes=self.nodes, running=self.state.running(), queue=self.state.queue())
        entries = [
            scheduler_pb2.QueueEntry(
                job_id=job_id, position=pos, reason=reason, eta_low_s=lo, eta_high_s=hi
            )
            for job_id, pos, reason, lo, hi in queue_report(snapshot, self.clock(), self.policy)
        ]
        return scheduler_pb2.QueueReply(entries=entries)
