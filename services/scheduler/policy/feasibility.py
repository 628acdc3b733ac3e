"""Whether a gang can ever fit a cluster, and how a job's shape is named in reasons.

`can_ever_fit` is asked at submit (a job that can never be placed is refused, not queued
forever); `gang_shape` is the "2 x 4 GPU (v100)" every decision's cause uses.
"""

from __future__ import annotations

from collections.abc import Sequence

from .model import Node, QueuedJob
from .placement import FreeIndex


def can_ever_fit(job: QueuedJob, nodes: Sequence[Node]) -> tuple[bool, str]:
    """Whether the gang fits an EMPTY cluster (at its minimum size); else a reason naming why."""
    idx = FreeIndex(nodes, ())
    n = job.min_gang
    if job.gpus_per_learner < 0 or job.cpus_per_learner < 0 or job.memory_mb_per_learner < 0:
        return False, "resources per learner must not be negative"
    if n < 1:
        return False, "learners must be at least 1"
    if job.gpus_per_learner and not any(nf.node.gpus for nf in idx.nodes.values()):
        return False, (
            f"gpus: {job.gpus_per_learner} GPU(s) per learner, and this cluster has no GPU "
            f"(its {len(idx.nodes)} healthy node(s) are CPU-only); set gpus: 0 to train on CPUs"
        )
    if job.gpu_type and not any(nf.node.gpu_type == job.gpu_type for nf in idx.nodes.values()):
        return False, f"no healthy node has gpu_type {job.gpu_type!r}"
    plan = idx.place(
        job.job_id,
        n,
        job.gpus_per_learner,
        job.cpus_per_learner,
        job.memory_mb_per_learner,
        job.gpu_type,
        "node" if job.placement == "node" else "pack",
    )
    if plan is not None:
        return True, ""
    what = (
        f"{n} learner(s) x {job.gpus_per_learner} GPU, {job.cpus_per_learner:g} CPU, "
        f"{job.memory_mb_per_learner} MiB"
    )
    gpus = sum(
        nf.node.gpus
        for nf in idx.nodes.values()
        if not job.gpu_type or nf.node.gpu_type == job.gpu_type
    )
    biggest = max((nf.node for nf in idx.nodes.values()), key=lambda x: x.gpus, default=None)
    one = "; its learners must share one node" if job.placement == "node" else ""
    return False, (
        f"gang of {what} can never fit this cluster{one} ({len(idx.nodes)} healthy nodes, {gpus} "
        f"matching GPUs, largest node {biggest.gpus if biggest else 0} GPU / "
        f"{biggest.cpus if biggest else 0:g} CPU / {biggest.memory_mb if biggest else 0} MiB)"
    )


def gang_shape(j: QueuedJob, learners: int | None = None) -> str:
    """The job's gang as reasons name it: "2 x 4 GPU (v100)", "3 x 0.5 CPU" (a job without
    GPUs in the resource it takes); `learners` of it when not all of them."""
    res = f"{j.gpus_per_learner} GPU" if j.gpus_per_learner else f"{j.cpus_per_learner:g} CPU"
    n = j.learners if learners is None else learners
    return f"{n} x {res}" + (f" ({j.gpu_type})" if j.gpu_type else "")


def placed_shape(j: QueuedJob, placed: int) -> str:
    """What a start placed: "2 x 4 GPU", or "2 x 0.5 CPU, 2 of 3 learners" for an elastic
    job started below its size (never "3 x ..." beside "2 learner(s)")."""
    shape = gang_shape(j, placed)
    return shape if placed == j.learners else f"{shape}, {placed} of {j.learners} learners"
