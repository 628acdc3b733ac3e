"""The LifecycleManager gRPC service: each call to one LCM use case, errors mapped once
(dlaas.adapters.grpc_errors.translate_errors; translate_stream_errors for a stream). etcd,
the job store, an engine or S3 away is the TemporaryError its adapter raised: UNAVAILABLE
(a 503 at the API), which clients retry; this module names no library's errors.

Besides the job use cases of `Lcm`: training metrics (metrics.py's `MetricsQueries`) and
each node's measured utilization in `Cluster` (utilization.py's sampler; without one,
every node's utilization is unknown).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlaas.adapters.grpc_errors import translate_errors, translate_stream_errors
from dlaas.domain.metric_query import MetricQuery, metric_query
from dlaas.v1 import lcm_pb2, lcm_pb2_grpc
from services.lcm.metrics import MetricsQueries
from services.lcm.utilization import UNKNOWN, Utilization

if TYPE_CHECKING:
    from services.lcm.node_health import NodeRow
    from services.lcm.service import Lcm
    from services.lcm.utilization import UtilizationSampler


class LcmServicer(lcm_pb2_grpc.LifecycleManagerServicer):
    def __init__(
        self,
        lcm: Lcm,
        metrics: MetricsQueries | None = None,
        utilization: UtilizationSampler | None = None,
    ):
        self.lcm = lcm
        self.metrics = metrics or MetricsQueries.of(lcm)
        self.utilization = utilization

    def _usage(self, node: str) -> Utilization:
        return self.utilization.utilization(node) if self.utilization else UNKNOWN

    @translate_errors
    def SubmitJob(self, request, context):
        status, warnings = self.lcm.submit(
            request.job_id, request.user, request.manifest_yaml, request.code_key, request.team
        )
        return lcm_pb2.SubmitJobReply(job_id=request.job_id, status=status, warnings=warnings)

    @translate_errors
    def HaltJob(self, request, context):
        status = self.lcm.halt(request.job_id, request.user, request.reason)
        return lcm_pb2.JobStatusReply(job_id=request.job_id, status=status)

    @translate_errors
    def ResumeJob(self, request, context):
        status = self.lcm.resume(request.job_id, request.user, request.reason)
        return lcm_pb2.JobStatusReply(job_id=request.job_id, status=status)

    @translate_errors
    def RequeueJob(self, request, context):
        status = self.lcm.requeue(request.job_id, request.reason, request.is_restart)
        return lcm_pb2.JobStatusReply(job_id=request.job_id, status=status)

    @translate_errors
    def ScaleJob(self, request, context):
        status = self.lcm.scale(request.job_id, request.user, request.learners)
        return lcm_pb2.JobStatusReply(job_id=request.job_id, status=status)

    @translate_errors
    def DeleteJob(self, request, context):
        self.lcm.delete(request.job_id, request.user)
        return lcm_pb2.Empty()

    @translate_errors
    def Cluster(self, request, context):
        rows = self.lcm.node_rows()
        return lcm_pb2.ClusterReply(nodes=[_node_info(r, self._usage(r.spec.name)) for r in rows])

    @translate_errors
    def SetNodeAvailability(self, request, context):
        row = self.lcm.set_node_availability(request.node, request.availability, request.user)
        return _node_info(row, self._usage(row.spec.name))

    @translate_errors
    def JobMetrics(self, request, context):
        query = _query(request)
        found = self.metrics.series(request.job_id, request.user, query)
        return lcm_pb2.MetricsReply(
            job_id=request.job_id,
            learner=query.learner,
            series=[
                lcm_pb2.Series(
                    name=name, steps=[p[0] for p in points], values=[p[1] for p in points]
                )
                for name, points in found.series.items()
            ],
            truncated=found.truncated,
            next_since_step=found.next_since_step or 0.0,
        )

    @translate_errors
    def JobProgress(self, request, context):
        p = self.metrics.progress(request.job_id, request.user)
        if p is None:
            return lcm_pb2.JobProgressReply(job_id=request.job_id, known=False)
        view = {k: v for k, v in p.view().items() if v is not None}
        return lcm_pb2.JobProgressReply(job_id=request.job_id, known=True, **view)

    @translate_stream_errors
    def FollowMetrics(self, request, context):
        query = _query(request)
        for p in self.metrics.follow(request.job_id, request.user, query, context.is_active):
            yield lcm_pb2.MetricPoint(
                name=p.name, step=p.step, value=p.value, line=p.line, source=p.source
            )


def _query(request: lcm_pb2.MetricsRequest) -> MetricQuery:
    since = request.since_step if request.HasField("since_step") else None
    return metric_query(request.learner, request.names, since, request.limit)


def _utilization(u: Utilization) -> lcm_pb2.NodeUtilization:
    # Unknown values stay unset (proto3 `optional`): a reader tells them from a measured 0.
    return lcm_pb2.NodeUtilization(
        cpus_used=u.cpus_used,
        memory_mb_used=u.memory_mb_used,
        gpu_percent=u.gpu_percent,
        containers=u.containers,
        sampled_at=u.sampled_at,
    )


def _node_info(row: NodeRow, usage: Utilization = UNKNOWN) -> lcm_pb2.NodeInfo:
    n = row.spec
    return lcm_pb2.NodeInfo(
        name=n.name,
        cpus=n.cpus,
        memory_mb=n.memory_mb,
        gpus=n.gpus,
        gpu_type=n.gpu_type,
        healthy=row.healthy,
        state=row.state,
        availability=row.availability,
        labels=dict(n.labels),
        utilization=_utilization(usage),
    )
