"""`GET /v1/nodes`: each node's capacity, state, what the running jobs hold of it and what
they really use; `PUT /v1/nodes/{name}/availability`: an administrator drains or
activates a node.

The dashboard's capacity page and `dlaas nodes` read it. Capacity, health, state and
availability (on a swarm: the swarm's node objects) come from the LCM (`Cluster`, the
nodes it deploys to; `SetNodeAvailability` for a drain, which moves the node's jobs);
the allocation is summed from the jobs that hold one (placed and not yet ended), each
learner counted on the node the LCM deployed it to (`info.learners[].node`) with the
resources its manifest asks for. `allocation()` is that sum, pure; the route is the
adapter around it. The utilization is measured, not summed: the LCM samples the job
containers' CPU and memory on each node every few seconds (services/lcm/utilization.py)
and `Cluster` hands out the last sample; a value it cannot know (a swarm node, no sample
yet, GPUs: no GPU telemetry here) is null, never 0.

Totals count every job (they are the cluster's); the jobs listed per node are only the
caller's own, or all of them for an administrator.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field

from dlaas.adapters.store.base import JobRecord
from dlaas.clients.sdk import NodeInfo, NodeUtilization
from dlaas.domain.errors import InvalidManifest
from dlaas.domain.manifest import parse_manifest
from dlaas.domain.status import ACTIVE, Status
from services.api.deps import CallerDep, DepsDep, audit
from services.api.models import error_responses

router = APIRouter(prefix="/v1", tags=["cluster"])

# Placed jobs hold their allocation until they end; a QUEUED job holds nothing yet.
HOLDING = frozenset(ACTIVE - {Status.QUEUED})


@dataclass(frozen=True)
class Placed:
    """One job's learners as deployed: what each learner asks for and where each runs."""

    job_id: str
    user: str
    cpus: float
    memory_mb: int
    gpus: int
    nodes: tuple[str, ...]  # one entry per learner


@dataclass
class NodeUse:
    cpus: float = 0.0
    memory_mb: int = 0
    gpus: int = 0
    learners: int = 0
    jobs: set[str] = field(default_factory=set)


def allocation(placed: Iterable[Placed]) -> dict[str, NodeUse]:
    """Node name -> what the placed jobs hold on it (learners of a job on one node add up)."""
    use: dict[str, NodeUse] = {}
    for job in placed:
        for node in job.nodes:
            u = use.setdefault(node, NodeUse())
            u.cpus += job.cpus
            u.memory_mb += job.memory_mb
            u.gpus += job.gpus
            u.learners += 1
            u.jobs.add(job.job_id)
    return use


def placed_job(record: JobRecord, manifest_yaml: str) -> Placed | None:
    """A record as `Placed`, or None when it says of no learner where it runs."""
    learners = record.info.get("learners")
    if not isinstance(learners, list):
        return None
    nodes = tuple(
        e["node"] for e in learners if isinstance(e, dict) and isinstance(e.get("node"), str)
    )
    if not nodes:
        return None
    try:
        m = parse_manifest(manifest_yaml)
    except InvalidManifest:
        return None  # accepted under older rules: its size is unknown, not guessed
    return Placed(record.job_id, record.user, m.cpus, m.memory_mb, m.gpus, nodes)


class NodeAllocation(BaseModel):
    cpus: float
    memory_mb: int
    gpus: int
    learners: int


class NodeUtilizationPublic(BaseModel):
    cpus: float | None = Field(
        description="CPU cores the job containers on the node use now, as measured "
        "(1.5: one and a half cores busy); null: unknown"
    )
    memory_mb: int | None = Field(
        description="memory they use now (page cache left out, as `docker stats`); null: unknown"
    )
    gpu_percent: float | None = Field(
        description="GPU utilization in percent; null: unknown (no GPU telemetry on the node)"
    )
    containers: int = Field(description="running job containers (helpers and learners) seen")
    sampled_at: float | None = Field(
        description="when it was measured (seconds since the epoch); null: not measured"
    )


def utilization_public(u: NodeUtilization) -> NodeUtilizationPublic:
    return NodeUtilizationPublic(
        cpus=u.cpus_used,
        memory_mb=u.memory_mb_used,
        gpu_percent=u.gpu_percent,
        containers=u.containers,
        sampled_at=u.sampled_at,
    )


class NodePublic(BaseModel):
    name: str
    healthy: bool = Field(description="schedulable: new gangs may be placed there")
    state: str = Field(description="ready or down (a swarm also says unknown, disconnected)")
    availability: str = Field(description="active, pause (no new gangs) or drain (jobs moved)")
    labels: dict[str, str] = Field(description="topology labels (rack, area, ...)")
    gpu_type: str
    capacity: NodeAllocation = Field(description="what the node offers (learners: 0)")
    allocated: NodeAllocation = Field(description="what placed, unfinished jobs hold on it")
    utilization: NodeUtilizationPublic = Field(
        description="what the job containers on it use now, measured every few seconds"
    )
    jobs: list[str] = Field(description="jobs with learners here (yours; every one for an admin)")


class NodesReply(BaseModel):
    nodes: list[NodePublic]


def nodes_public(
    nodes: list[NodeInfo], use: dict[str, NodeUse], visible: set[str] | None
) -> NodesReply:
    """The reply; `visible`: the job ids the caller may see (None: all)."""
    out = []
    for n in nodes:
        u = use.get(n.name, NodeUse())
        jobs = sorted(u.jobs if visible is None else u.jobs & visible)
        out.append(
            NodePublic(
                name=n.name,
                healthy=n.healthy,
                state=n.state,
                availability=n.availability,
                labels=dict(n.labels),
                gpu_type=n.gpu_type,
                capacity=NodeAllocation(
                    cpus=n.cpus, memory_mb=n.memory_mb, gpus=n.gpus, learners=0
                ),
                allocated=NodeAllocation(
                    cpus=round(u.cpus, 3), memory_mb=u.memory_mb, gpus=u.gpus, learners=u.learners
                ),
                utilization=utilization_public(n.utilization),
                jobs=jobs,
            )
        )
    return NodesReply(nodes=out)


def _holding_records(deps) -> Iterator[JobRecord]:
    page = 500
    for status in sorted(HOLDING):
        offset = 0
        while True:
            records, total = deps.store.list(status=status, offset=offset, limit=page)
            yield from records
            offset += page
            if not records or offset >= total:
                break


@router.get("/nodes", response_model=NodesReply)
def list_nodes(deps: DepsDep, caller: CallerDep) -> NodesReply:
    """Each node's capacity, health, what running jobs hold of it and what they use now."""
    placed = []
    for record in _holding_records(deps):
        # Sealed secrets stay sealed: only the sizes are read.
        job = placed_job(record, record.manifest_yaml)
        if job is not None:
            placed.append(job)
    visible = {p.job_id for p in placed if caller.can_see(p.user)}
    return nodes_public(deps.lcm.cluster(), allocation(placed), visible)


class AvailabilityBody(BaseModel):
    availability: Literal["active", "pause", "drain"] = Field(
        description="drain: no new gangs, its jobs moved off from their checkpoints (elastic "
        "ones shrink, never below min); pause: no new gangs; active: in use again"
    )


@router.put(
    "/nodes/{name}/availability",
    response_model=NodePublic,
    responses=error_responses(403, 422),
)
def set_availability(
    name: str, body: AvailabilityBody, deps: DepsDep, caller: CallerDep
) -> NodePublic:
    """Drain, pause or activate a node (administrators; a swarm only)."""
    caller.require_admin()
    node = deps.lcm.set_node_availability(name, body.availability, caller.user)
    audit(deps, caller, "node-availability", name, f"availability={body.availability}")
    return nodes_public([node], {}, None).nodes[0]
