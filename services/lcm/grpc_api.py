"""The LifecycleManager gRPC service: each call to one LCM use case, errors mapped once
(dlaas.grpc_errors.translate_errors)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlaas.grpc_errors import translate_errors
from dlaas.v1 import lcm_pb2, lcm_pb2_grpc

if TYPE_CHECKING:
    from services.lcm.node_health import NodeRow
    from services.lcm.service import Lcm


class LcmServicer(lcm_pb2_grpc.LifecycleManagerServicer):
    def __init__(self, lcm: Lcm):
        self.lcm = lcm

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
        return lcm_pb2.ClusterReply(nodes=[_node_info(row) for row in self.lcm.node_rows()])

    @translate_errors
    def SetNodeAvailability(self, request, context):
        row = self.lcm.set_node_availability(request.node, request.availability, request.user)
        return _node_info(row)


def _node_info(row: NodeRow) -> lcm_pb2.NodeInfo:
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
    )
