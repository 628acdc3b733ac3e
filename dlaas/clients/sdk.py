"""The integrators' SDK: typed gRPC clients for the LCM and the scheduler.

gRPC failures come back as the platform's domain errors (dlaas.domain.errors), so callers
handle `JobNotFound` or `CapacityExceeded`, not status codes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import grpc

from dlaas.adapters.grpc_channel import CHANNEL_OPTIONS
from dlaas.adapters.grpc_errors import raise_from_rpc
from dlaas.domain.metric_query import metric_query
from dlaas.domain.ports import SchedulerPort
from dlaas.domain.queue import QueueEntry
from dlaas.v1 import lcm_pb2, lcm_pb2_grpc, scheduler_pb2, scheduler_pb2_grpc


@dataclass(frozen=True)
class SubmitResult:
    job_id: str
    status: str
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class NodeUtilization:
    """What a node's job containers use now, as measured; None: unknown (not measured
    there, or not yet), never a guessed 0. GPU utilization is unknown on these nodes."""

    cpus_used: float | None = None  # CPU cores busy
    memory_mb_used: int | None = None
    gpu_percent: float | None = None
    containers: int = 0  # running job containers the sample saw
    sampled_at: float | None = None  # seconds since the epoch; None: never sampled


@dataclass(frozen=True)
class NodeInfo:
    name: str
    cpus: float
    memory_mb: int
    gpus: int
    gpu_type: str
    healthy: bool  # schedulable: ready and active
    state: str = "ready"  # ready, down (a swarm: also unknown, disconnected)
    availability: str = "active"  # active, pause, drain
    labels: dict[str, str] = field(default_factory=dict)
    utilization: NodeUtilization = field(default_factory=NodeUtilization)


@dataclass(frozen=True)
class MetricSeries:
    """A learner's training metrics: series name -> [(step, value), ...] in step order.
    `truncated`: more points follow; ask again with since_step=next_since_step."""

    job_id: str
    learner: int
    series: dict[str, list[tuple[float, float]]]
    truncated: bool = False
    next_since_step: float | None = None


@dataclass(frozen=True)
class MetricPoint:
    """One point of a follow; `source`: "" for the log, else the metric file below LOG_DIR."""

    name: str
    step: float
    value: float
    line: int
    source: str = ""


@dataclass(frozen=True)
class TeamUsage:
    """A team's quota and what its running jobs hold: inside the guarantee and borrowed."""

    team: str
    quota_gpus: int
    quota_cpus: float
    quota_memory_mb: int
    guaranteed_gpus: int
    guaranteed_cpus: float
    guaranteed_memory_mb: int
    borrowed_gpus: int
    borrowed_cpus: float
    borrowed_memory_mb: int
    queued: int


# Calls that find a replica gone (UNAVAILABLE) are retried on another one.
_SERVICE_CONFIG = json.dumps(
    {
        "loadBalancingConfig": [{"round_robin": {}}],
        "methodConfig": [
            {
                "name": [{}],
                "retryPolicy": {
                    "maxAttempts": 5,
                    "initialBackoff": "0.05s",
                    "maxBackoff": "0.5s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ],
    }
)


def channel(addr: str) -> grpc.Channel:
    """A channel to one address, or to every replica of "host:port,host:port,..."; its
    connections its own and its reconnects soon (dlaas.adapters.grpc_channel)."""
    target = f"ipv4:{addr}" if "," in addr else addr
    return grpc.insecure_channel(
        target,
        options=[
            ("grpc.service_config", _SERVICE_CONFIG),
            ("grpc.enable_retries", 1),
            *CHANNEL_OPTIONS,
        ],
    )


class _Client:
    service = "service"

    def __init__(self, addr: str, timeout: float = 10.0):
        self.addr = addr
        self.timeout = timeout
        self._channel = channel(addr)

    def _call(self, method, request):
        try:
            return method(request, timeout=self.timeout, wait_for_ready=False)
        except grpc.RpcError as exc:
            raise_from_rpc(exc, f"{self.service} at {self.addr}")

    def close(self) -> None:
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class LcmClient(_Client):
    service = "the lifecycle manager"

    def __init__(self, addr: str, timeout: float = 30.0):
        super().__init__(addr, timeout)
        self._stub = lcm_pb2_grpc.LifecycleManagerStub(self._channel)

    def submit(
        self, job_id: str, user: str, manifest_yaml: str, code_key: str = "", team: str = ""
    ) -> SubmitResult:
        reply = self._call(
            self._stub.SubmitJob,
            lcm_pb2.SubmitJobRequest(
                job_id=job_id, user=user, manifest_yaml=manifest_yaml, code_key=code_key, team=team
            ),
        )
        return SubmitResult(reply.job_id, reply.status, list(reply.warnings))

    def halt(self, job_id: str, user: str = "", reason: str = "halted by the user") -> str:
        reply = self._call(
            self._stub.HaltJob, lcm_pb2.JobRef(job_id=job_id, user=user, reason=reason)
        )
        return reply.status

    def resume(self, job_id: str, user: str = "", reason: str = "resumed by the user") -> str:
        reply = self._call(
            self._stub.ResumeJob, lcm_pb2.JobRef(job_id=job_id, user=user, reason=reason)
        )
        return reply.status

    def requeue(self, job_id: str, reason: str, is_restart: bool = False) -> str:
        reply = self._call(
            self._stub.RequeueJob,
            lcm_pb2.RequeueRequest(job_id=job_id, reason=reason, is_restart=is_restart),
        )
        return reply.status

    def scale(self, job_id: str, learners: int, user: str = "") -> str:
        reply = self._call(
            self._stub.ScaleJob, lcm_pb2.ScaleRequest(job_id=job_id, user=user, learners=learners)
        )
        return reply.status

    def delete(self, job_id: str, user: str = "") -> None:
        self._call(self._stub.DeleteJob, lcm_pb2.JobRef(job_id=job_id, user=user))

    def cluster(self) -> list[NodeInfo]:
        reply = self._call(self._stub.Cluster, lcm_pb2.Empty())
        return [_node_info(n) for n in reply.nodes]

    def set_node_availability(self, node: str, availability: str, user: str = "") -> NodeInfo:
        request = lcm_pb2.NodeAvailabilityRequest(node=node, availability=availability, user=user)
        return _node_info(self._call(self._stub.SetNodeAvailability, request))

    def job_progress(self, job_id: str, user: str = "") -> dict | None:
        """A job's progress (REST's job view `progress`: done, total, unit, percent,
        rate_per_s, remaining_s, finish_at; None for what is not known), or None when no
        learner's log says where it is. Another user's job is JobNotFound."""
        reply = self._call(self._stub.JobProgress, lcm_pb2.JobRef(job_id=job_id, user=user))
        if not reply.known:
            return None
        return {
            "done": reply.done,
            "unit": reply.unit,
            **{
                k: getattr(reply, k) if reply.HasField(k) else None
                for k in ("total", "percent", "rate_per_s", "remaining_s", "finish_at")
            },
        }

    def job_metrics(
        self,
        job_id: str,
        user: str = "",
        *,
        learner: int = 0,
        names: Iterable[str] = (),
        since_step: float | None = None,
        limit: int = 0,
    ) -> MetricSeries:
        """A learner's metric series (REST's GET /v1/jobs/{id}/metrics): only `names` (all
        if empty), only steps after `since_step`, at most `limit` points (0: 10000; whole
        steps). Another user's job is JobNotFound; a bad filter InvalidRequest naming it."""
        request = _metrics_request(job_id, user, learner, names, since_step, limit)
        reply = self._call(self._stub.JobMetrics, request)
        return MetricSeries(
            reply.job_id,
            reply.learner,
            {s.name: list(zip(s.steps, s.values, strict=True)) for s in reply.series},
            reply.truncated,
            reply.next_since_step if reply.truncated else None,
        )

    def follow_metrics(
        self,
        job_id: str,
        user: str = "",
        *,
        learner: int = 0,
        names: Iterable[str] = (),
        since_step: float | None = None,
        timeout: float | None = None,
    ) -> Iterator[MetricPoint]:
        """A learner's metric points as they come, until the job has ended (or `timeout`
        seconds: TemporaryError). Closing the iterator ends the stream on the server too."""
        request = _metrics_request(job_id, user, learner, names, since_step, 0)
        call = self._stub.FollowMetrics(request, timeout=timeout)
        try:
            for p in call:
                yield MetricPoint(p.name, p.step, p.value, p.line, p.source)
        except grpc.RpcError as exc:
            raise_from_rpc(exc, f"{self.service} at {self.addr}")
        finally:
            call.cancel()


def _metrics_request(
    job_id: str, user: str, learner: int, names: Iterable[str], since: float | None, limit: int
) -> lcm_pb2.MetricsRequest:
    # Checked here first (the LCM checks again): a value the wire cannot carry (a limit past
    # 64 bits) gets the same message naming the field instead of protobuf's range error.
    q = metric_query(learner, names, since, limit)
    return lcm_pb2.MetricsRequest(
        job_id=job_id, user=user, learner=q.learner, names=sorted(q.names),
        since_step=q.since_step, limit=limit,
    )  # fmt: skip


def _node_info(n: lcm_pb2.NodeInfo) -> NodeInfo:
    u = n.utilization
    known = u.HasField
    return NodeInfo(
        n.name, n.cpus, n.memory_mb, n.gpus, n.gpu_type, n.healthy,
        n.state, n.availability, dict(n.labels),
        NodeUtilization(
            u.cpus_used if known("cpus_used") else None,
            u.memory_mb_used if known("memory_mb_used") else None,
            u.gpu_percent if known("gpu_percent") else None,
            u.containers,
            u.sampled_at or None,
        ),
    )  # fmt: skip


class SchedulerClient(_Client, SchedulerPort):
    service = "the scheduler"

    def __init__(self, addr: str, timeout: float = 10.0):
        super().__init__(addr, timeout)
        self._stub = scheduler_pb2_grpc.SchedulerStub(self._channel)

    def enqueue(self, gang: scheduler_pb2.GangRequest) -> tuple[bool, str]:
        reply = self._call(self._stub.Enqueue, gang)
        return reply.accepted, reply.reason

    def schedule(self) -> list[scheduler_pb2.Decision]:
        return list(self._call(self._stub.Schedule, scheduler_pb2.SchedEmpty()).decisions)

    def release(self, job_id: str, ended: bool = False) -> None:
        """Free the job's allocation; `ended`: it ran to its end (its run time is learned)."""
        self._call(self._stub.Release, scheduler_pb2.JobId(job_id=job_id, ended=ended))

    def queue(self, remaining_s: dict[str, float] | None = None) -> list[QueueEntry]:
        """The queue with ETAs; `remaining_s`: running jobs' expected seconds left, where
        their progress says it (the others are guessed from the jobs that ended)."""
        request = scheduler_pb2.QueueRequest(remaining_s=remaining_s or {})
        reply = self._call(self._stub.Queue, request)
        return [
            QueueEntry(e.job_id, e.position, e.reason, e.eta_low_s, e.eta_high_s)
            for e in reply.entries
        ]

    def set_team_quota(self, team: str, gpus: int, cpus: float, memory_mb: int) -> None:
        """Set the team's guaranteed share (all zero removes it); `InvalidRequest` names a bad
        field."""
        self._call(
            self._stub.SetTeamQuota,
            scheduler_pb2.TeamQuota(team=team, gpus=gpus, cpus=cpus, memory_mb=memory_mb),
        )

    def teams(self) -> list[TeamUsage]:
        reply = self._call(self._stub.Teams, scheduler_pb2.SchedEmpty())
        return [
            TeamUsage(
                t.team,
                t.quota_gpus,
                t.quota_cpus,
                t.quota_memory_mb,
                t.guaranteed_gpus,
                t.guaranteed_cpus,
                t.guaranteed_memory_mb,
                t.borrowed_gpus,
                t.borrowed_cpus,
                t.borrowed_memory_mb,
                t.queued,
            )
            for t in reply.teams
        ]
