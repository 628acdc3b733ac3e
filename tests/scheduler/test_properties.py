"""Property test: no round ever hands out a GPU, CPU or MiB twice or beyond a node's size."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from services.scheduler.policy import (
    POLICIES,
    Allocation,
    Node,
    PolicyConfig,
    QueuedJob,
    RunningJob,
    Snapshot,
    schedule,
)


@st.composite
def snapshots(draw):
    n_nodes = draw(st.integers(1, 5))
    cluster = [
        Node(
            f"n{i}",
            draw(st.integers(0, 8)),
            float(draw(st.integers(1, 16))),
            draw(st.integers(1, 8)) * 1024,
            gpu_type=draw(st.sampled_from(["", "a", "b"])),
            labels={"rack": f"r{i % 2}"},
        )
        for i in range(n_nodes)
    ]
    # Running jobs built by honest first-fit so the starting state itself is valid.
    free = {n.name: [list(range(n.gpus)), n.cpus, n.memory_mb] for n in cluster}
    running = []
    for k in range(draw(st.integers(0, 6))):
        g, c, m = draw(st.integers(0, 2)), draw(st.sampled_from([0.5, 1.0])), 512
        allocs = []
        for li in range(draw(st.integers(1, 3))):
            for name, (gs, cpus, mem) in free.items():
                if len(gs) >= g and cpus >= c and mem >= m:
                    allocs.append(Allocation(li, name, tuple(gs[:g]), c, m))
                    free[name] = [gs[g:], cpus - c, mem - m]
                    break
        if allocs:
            lo = draw(st.integers(1, len(allocs)))
            running.append(
                RunningJob(
                    f"r{k}",
                    draw(st.sampled_from(["u1", "u2"])),
                    tuple(allocs),
                    draw(st.integers(0, 2)),
                    float(draw(st.integers(0, 5000))),
                    float(draw(st.integers(0, 100_000))),
                    None,
                    lo,
                    len(allocs) + draw(st.integers(0, 2)),
                    # a target below the size: the rest is lent (grown with auto_grow)
                    target_learners=draw(st.integers(lo, len(allocs))),
                    auto_grow=draw(st.booleans()),
                )
            )
    queue = []
    for k in range(draw(st.integers(0, 8))):
        learners = draw(st.integers(1, 4))
        queue.append(
            QueuedJob(
                f"q{k}",
                draw(st.sampled_from(["u1", "u2", "u3"])),
                learners,
                draw(st.integers(0, 4)),
                draw(st.sampled_from([0.5, 1.0, 2.0])),
                draw(st.sampled_from([256, 1024])),
                draw(st.integers(0, 2)),
                float(draw(st.integers(0, 5000))),
                gpu_type=draw(st.sampled_from(["", "a"])),
                min_learners=draw(st.integers(1, learners)),
                placement=draw(st.sampled_from(["pack", "spread", "topology"])),
                attained_service=float(draw(st.integers(0, 50_000))),
            )
        )
    return Snapshot(cluster, running, queue)


@settings(max_examples=250, deadline=None)
@given(snapshots(), st.sampled_from(POLICIES), st.integers(0, 20_000))
def test_no_decision_over_allocates(snap, policy, now):
    decisions = schedule(snap, float(now), policy, PolicyConfig(reserve_after_s=0, min_run_s=0))
    held: dict[str, list[Allocation]] = {r.job_id: list(r.allocations) for r in snap.running}
    queued = {j.job_id: j for j in snap.queue}
    for d in decisions:
        if d.action == "preempt":
            assert sorted(d.allocations, key=lambda a: a.learner) == sorted(
                held.pop(d.job_id), key=lambda a: a.learner
            )  # whole job, never half
            # back in the queue: a job moved to make room restarts later in the same round
            r = next(r for r in snap.running if r.job_id == d.job_id)
            g, c, m = r.per_learner()
            queued[d.job_id] = QueuedJob(
                r.job_id, r.user, r.learners, g, c, m, min_learners=min(r.min_gang, r.learners)
            )
        elif d.action == "shrink":
            job = next(r for r in snap.running if r.job_id == d.job_id)
            rest = [a for a in held[d.job_id] if a not in d.allocations]
            assert len(rest) >= job.min_gang
            if "lent" in d.cause:  # giving back lent learners never takes the job's own
                assert len(rest) >= job.target
            held[d.job_id] = rest
        elif d.action == "grow":
            job = next(r for r in snap.running if r.job_id == d.job_id)
            held[d.job_id] += d.allocations
            assert len(held[d.job_id]) <= job.max_gang
            if not job.auto_grow:  # growth past the user's target only when allowed
                assert len(held[d.job_id]) <= job.target
        elif d.action == "start":
            j = queued.pop(d.job_id)
            assert j.min_gang <= len(d.allocations) <= j.learners
            for a in d.allocations:
                assert len(a.gpu_indices) == j.gpus_per_learner
            held[d.job_id] = list(d.allocations)
    nodes = {n.name: n for n in snap.nodes}
    gpus_used: dict[str, list[int]] = defaultdict(list)
    cpus: dict[str, float] = defaultdict(float)
    mem: dict[str, int] = defaultdict(int)
    for allocs in held.values():
        for a in allocs:
            gpus_used[a.node] += list(a.gpu_indices)
            cpus[a.node] += a.cpus
            mem[a.node] += a.memory_mb
    for name, used in gpus_used.items():
        assert len(used) == len(set(used)), f"GPU handed out twice on {name}"
        assert all(0 <= i < nodes[name].gpus for i in used)
    for name, used_cpus in cpus.items():
        assert used_cpus <= nodes[name].cpus + 1e-6
        assert mem[name] <= nodes[name].memory_mb
