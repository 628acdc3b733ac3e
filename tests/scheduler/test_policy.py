"""Unit tests of the pure scheduling core: one test per rule of issue 3."""

from __future__ import annotations

import pytest

from services.scheduler.policy import (
    Allocation,
    DurationModel,
    Node,
    PolicyConfig,
    QueuedJob,
    RunningJob,
    Snapshot,
    can_ever_fit,
    queue_report,
    schedule,
)


def nodes(n: int, gpus: int = 4, **kw) -> list[Node]:
    return [
        Node(f"n{i}", gpus, 32.0, 256_000, labels={"rack": f"r{i // 2}", "area": "a0"}, **kw)
        for i in range(n)
    ]


def q(job_id, learners=1, gpus=1, prio=0, t=0.0, user="u", **kw) -> QueuedJob:
    return QueuedJob(job_id, user, learners, gpus, 1.0, 1000, prio, t, **kw)


def running(job_id, node_gpus, prio=0, start=0.0, attained=0.0, ckpt=None, user="u", **kw):
    allocs = tuple(
        Allocation(i, node, tuple(ix), 1.0, 1000) for i, (node, ix) in enumerate(node_gpus)
    )
    return RunningJob(job_id, user, allocs, prio, start, attained, ckpt, **kw)


def by_action(decisions, action):
    return [d for d in decisions if d.action == action]


def test_gang_is_placed_whole_or_not_at_all():
    # 3 free GPUs in total, gang wants 2 x 2: it must not get a partial placement.
    snap = Snapshot(
        nodes(2),
        [running("r", [("n0", (0, 1, 2)), ("n1", (0, 1, 2))])],
        [q("g", learners=2, gpus=2)],
    )
    ds = schedule(snap, 1000, "fifo")
    assert by_action(ds, "start") == []
    assert [d.job_id for d in by_action(ds, "wait")] == ["g"]


def test_pack_uses_fewest_nodes_and_spread_uses_many():
    snap = Snapshot(nodes(4), [], [q("p", learners=4, gpus=1, placement="pack")])
    (start,) = schedule(snap, 0, "fifo")
    assert len({a.node for a in start.allocations}) == 1
    snap = Snapshot(nodes(4), [], [q("s", learners=4, gpus=1, placement="spread")])
    (start,) = schedule(snap, 0, "fifo")
    assert len({a.node for a in start.allocations}) == 4


def test_node_placement_keeps_a_gang_on_one_node_even_to_grow():
    # 2 + 2 GPUs free on two nodes: pack splits the 2 x 2 gang, node mode waits for one node.
    busy = [running("b0", [("n0", (0, 1))]), running("b1", [("n1", (0, 1))])]
    gang = q("g", learners=2, gpus=2, placement="node")
    assert by_action(schedule(Snapshot(nodes(2), busy, [gang]), 0, "fifo"), "start") == []
    (start,) = schedule(Snapshot(nodes(2), busy[:1], [gang]), 0, "fifo")
    assert {a.node for a in start.allocations} == {"n1"}
    fits, reason = can_ever_fit(q("big", learners=2, gpus=4, placement="node"), nodes(2))
    assert (
        not fits and "must share one node" in reason and can_ever_fit(q("big", 2, 4), nodes(2))[0]
    )
    # an elastic gang on n0 grows only where it runs, never onto the idle n1
    el = running(
        "el",
        [("n0", (0,))],
        min_learners=1,
        max_learners=4,
        placement="node",
        gpus_per_learner=1,
        auto_grow=True,
    )
    full = running("f", [("n0", (1, 2))])
    (grow,) = by_action(schedule(Snapshot(nodes(2), [el, full], []), 10_000, "default"), "grow")
    assert [(a.node, a.gpu_indices) for a in grow.allocations] == [("n0", (3,))]


def test_topology_prefers_one_rack():
    # n0 (rack r0) and n2 (rack r1) have 2 free GPUs; n3 (rack r1) has 2 free too.
    busy = [
        running("b0", [("n0", (0, 1))]),
        running("b1", [("n1", (0, 1, 2, 3))]),
        running("b2", [("n2", (0, 1))]),
        running("b3", [("n3", (0, 1))]),
    ]
    snap = Snapshot(nodes(4), busy, [q("t", learners=2, gpus=2)])
    (start,) = schedule(snap, 0, "fifo")
    assert {a.node for a in start.allocations} == {"n2", "n3"}


def test_gpu_type_constraint():
    cluster = [Node("k80", 4, 8, 64000, gpu_type="k80"), Node("v100", 4, 8, 64000, gpu_type="v100")]
    (start,) = schedule(Snapshot(cluster, [], [q("j", gpus=2, gpu_type="v100")]), 0, "fifo")
    assert start.allocations[0].node == "v100"
    ok, reason = can_ever_fit(q("x", gpus=1, gpu_type="a100"), cluster)
    assert not ok and "a100" in reason


def test_can_ever_fit_refuses_a_gang_bigger_than_the_cluster():
    ok, reason = can_ever_fit(q("big", learners=3, gpus=4), nodes(2))
    assert not ok and "never fit" in reason
    assert can_ever_fit(q("ok", learners=2, gpus=4), nodes(2)) == (True, "")


def test_a_gpu_job_on_a_cpu_only_cluster_is_refused_saying_the_cluster_has_no_gpu():
    ok, reason = can_ever_fit(q("gpu", learners=1, gpus=1), [Node("local", 0, 2.0, 4096)])
    assert not ok
    assert reason == (
        "gpus: 1 GPU(s) per learner, and this cluster has no GPU (its 1 healthy node(s) are "
        "CPU-only); set gpus: 0 to train on CPUs"
    )


def test_cpu_only_jobs_are_placed_by_cpu_and_memory():
    box = [Node("local", 0, 2.0, 4096)]
    queue = [QueuedJob(f"j{i}", "u", 1, 0, 0.5, 512, 0, float(i)) for i in range(6)]
    ds = schedule(Snapshot(box, [], queue), 0, "fifo")
    assert [d.job_id for d in by_action(ds, "start")] == ["j0", "j1", "j2", "j3"]
    assert len(by_action(ds, "wait")) == 2


def test_priority_preempts_minimal_victims_and_never_half_a_job():
    # Four 1-node jobs and one 2-node job hold the 4 nodes... a 1-node job arrives at prio 5.
    busy = [
        running("a", [("n0", (0, 1, 2, 3))], start=0),
        running("b", [("n1", (0, 1, 2, 3))], start=0),
        running("gang", [("n2", (0, 1, 2, 3)), ("n3", (0, 1, 2, 3))], start=0),
    ]
    snap = Snapshot(nodes(4), busy, [q("hi", gpus=4, prio=5, t=100)])
    ds = schedule(snap, 10_000, "priority")
    pre = by_action(ds, "preempt")
    assert len(pre) == 1, ds  # one victim is enough
    victim = next(r for r in busy if r.job_id == pre[0].job_id)
    assert len(pre[0].allocations) == len(victim.allocations)  # the whole gang, never half
    assert by_action(ds, "start")[0].job_id == "hi"
    assert ds.index(pre[0]) < ds.index(by_action(ds, "start")[0])


def test_preemption_prefers_the_most_recent_checkpoint():
    busy = [
        running("old_ckpt", [("n0", (0, 1, 2, 3))], start=0, ckpt=100),
        running("new_ckpt", [("n1", (0, 1, 2, 3))], start=0, ckpt=9_900),
    ]
    ds = schedule(Snapshot(nodes(2), busy, [q("hi", gpus=4, prio=1)]), 10_000, "priority")
    assert [d.job_id for d in by_action(ds, "preempt")] == ["new_ckpt"]


def test_thrash_guard_protects_just_started_jobs():
    busy = [running("fresh", [("n0", (0, 1, 2, 3))], start=9_950)]
    ds = schedule(
        Snapshot(nodes(1), busy, [q("hi", gpus=4, prio=1)]),
        10_000,
        "priority",
        PolicyConfig(min_run_s=300),
    )
    assert by_action(ds, "preempt") == [] and by_action(ds, "wait")


def test_equal_priority_never_preempts():
    busy = [running("a", [("n0", (0, 1, 2, 3))])]
    ds = schedule(Snapshot(nodes(1), busy, [q("b", gpus=4)]), 10_000, "priority")
    assert by_action(ds, "preempt") == []


def test_shrink_before_kill_and_never_below_min():
    elastic = running(
        "el",
        [("n0", (0, 1)), ("n0", (2, 3)), ("n1", (0, 1)), ("n1", (2, 3))],
        min_learners=2,
        max_learners=4,
    )
    ds = schedule(Snapshot(nodes(2), [elastic], [q("hi", gpus=4, prio=1)]), 10_000, "priority")
    assert by_action(ds, "preempt") == []
    (shrink,) = by_action(ds, "shrink")
    assert len(shrink.allocations) == 2  # 4 -> 2 learners, exactly the min
    assert by_action(ds, "start")[0].job_id == "hi"
    # Asking for more than shrinking can give kills the job instead (whole).
    ds = schedule(
        Snapshot(nodes(2), [elastic], [q("huge", learners=2, gpus=4, prio=1)]), 10_000, "priority"
    )
    assert by_action(ds, "shrink") == [] and len(by_action(ds, "preempt")[0].allocations) == 4


def test_auto_grow_grows_into_idle_gpus_up_to_max():
    elastic = running(
        "el", [("n0", (0, 1))], min_learners=1, max_learners=3, gpus_per_learner=2, auto_grow=True
    )
    ds = schedule(Snapshot(nodes(1), [elastic], []), 10_000, "default")
    (grow,) = by_action(ds, "grow")
    assert len(grow.allocations) == 1 and grow.allocations[0].gpu_indices == (2, 3)
    # but not while someone waits who could use them
    ds = schedule(Snapshot(nodes(1), [elastic], [q("w", gpus=2)]), 10_000, "fifo")
    assert by_action(ds, "grow") == [] and by_action(ds, "start")[0].job_id == "w"


def test_big_gang_is_not_starved_by_small_jobs():
    # 2 nodes, one GPU busy on each. A 2x4 gang waits; a stream of 1-GPU jobs arrives behind it.
    cfg = PolicyConfig(reserve_after_s=0, reserve_policies=("fifo",))
    busy = [running("x", [("n0", (0,))]), running("y", [("n1", (0,))])]
    queue = [q("gang", learners=2, gpus=4, t=0)] + [q(f"s{i}", t=1 + i) for i in range(6)]
    ds = schedule(Snapshot(nodes(2), busy, queue), 10, "fifo", cfg)
    assert [d.job_id for d in by_action(ds, "start")] == []  # nothing eats the reserved nodes
    # once x and y end, the gang starts first
    ds = schedule(Snapshot(nodes(2), [], queue), 20, "fifo", cfg)
    assert by_action(ds, "start")[0].job_id == "gang"


def test_backfill_outside_the_reservation():
    cfg = PolicyConfig(reserve_after_s=0, reserve_policies=("fifo",))
    busy = [running("x", [("n0", (0,))]), running("y", [("n1", (0,))])]
    queue = [q("gang", learners=1, gpus=4, t=0), q("small", t=1)]
    ds = schedule(Snapshot(nodes(2), busy, queue), 10, "fifo", cfg)
    (gang_wait,) = [d for d in by_action(ds, "wait") if d.job_id == "gang"]
    assert "reserved" in gang_wait.cause
    (small,) = by_action(ds, "start")
    assert small.job_id == "small" and small.allocations[0].node == "n1"  # n0 is held


def test_fair_share_between_two_users():
    # alice holds the whole cluster; bob and alice both queue; bob goes first on free GPUs.
    busy = [running("a0", [("n0", (0, 1, 2))], user="alice")]
    queue = [q("a1", t=1, user="alice"), q("b1", t=2, user="bob"), q("b2", t=3, user="bob")]
    ds = schedule(Snapshot(nodes(1), busy, queue), 10, "fair")
    assert [d.job_id for d in by_action(ds, "start")] == ["b1"]
    # With two free GPUs, shares alternate: bob (0) then ... bob again (1/4 < 3/4)
    busy = [running("a0", [("n0", (0, 1))], user="alice")]
    ds = schedule(Snapshot(nodes(1), busy, queue), 10, "fair")
    assert [d.job_id for d in by_action(ds, "start")] == ["b1", "b2"]


def test_las_demotes_long_running_jobs():
    # a long-running job (level 2) is preempted by a fresh one (level 0) under las
    busy = [running("long", [("n0", (0, 1, 2, 3))], start=0, attained=400_000)]
    ds = schedule(Snapshot(nodes(1), busy, [q("new", gpus=4, t=5000)]), 100_000, "las")
    assert [d.job_id for d in by_action(ds, "preempt")] == ["long"]


def test_eta_range_contains_the_start_in_a_deterministic_scenario():
    # Every finished job ran exactly 1000 s; a running job started 400 s ago holds the node.
    model = DurationModel([1000.0] * 50)
    busy = [running("r", [("n0", (0, 1, 2, 3))], start=0, attained=400 * 4)]
    snap = Snapshot(nodes(1), busy, [q("w", gpus=4, t=400)])
    (entry,) = queue_report(snap, 400, "fifo", model)
    assert entry.position == 1
    assert entry.eta_low_s <= 600 <= entry.eta_high_s  # it will start when r ends, at t=1000
    assert "expected to start" in entry.reason


def test_pending_reason_has_a_counterfactual():
    busy = [running("r0", [("n0", (0, 1))]), running("r1", [("n1", (0, 1))])]
    snap = Snapshot(nodes(2), busy, [q("w", gpus=4)])
    (entry,) = queue_report(snap, 10, "fifo")
    assert "largest free block 2" in entry.reason
    assert "would start now as 2x2 GPUs" in entry.reason


def test_unknown_policy_is_refused_by_name():
    with pytest.raises(ValueError, match="policy"):
        schedule(Snapshot(nodes(1)), 0, "nope")


@pytest.mark.parametrize(
    ("mode", "short_starts", "fragmented_starts"),
    [("count", False, True), ("gang", False, False), ("none", True, True)],
)
def test_fifo_head_blocks_by_configured_rule(mode, short_starts, fragmented_starts):
    cfg = PolicyConfig(fifo_blocking=mode)
    queue = [q("head", gpus=4, t=0), q("small", t=1)]
    # 3 GPUs free in all: fewer than the head needs
    short = [running("x", [("n0", (0,))]), running("y", [("n1", (0, 1, 2, 3))])]
    ds = schedule(Snapshot(nodes(2), short, queue), 10, "fifo", cfg)
    assert [d.job_id for d in by_action(ds, "start")] == (["small"] if short_starts else [])
    # 4 GPUs free, but 2 + 2: enough by count, fragmented for the gang
    frag = [running("x", [("n0", (0, 1))]), running("y", [("n1", (0, 1))])]
    ds = schedule(Snapshot(nodes(2), frag, queue), 10, "fifo", cfg)
    assert [d.job_id for d in by_action(ds, "start")] == (["small"] if fragmented_starts else [])


def test_default_fifo_blocks_on_the_gpu_count():
    assert PolicyConfig().fifo_blocking == "count"


def test_default_prefers_small_gangs_at_equal_level():
    busy = [running("r", [("n0", (0, 1))], start=0, attained=100)]
    queue = [q("big", gpus=2, t=0), q("s1", t=1), q("s2", t=2)]
    ds = schedule(Snapshot(nodes(1), busy, queue), 50, "default")
    assert [d.job_id for d in by_action(ds, "start")] == ["s1", "s2"]
    ds = schedule(Snapshot(nodes(1), busy, queue), 50, "fifo")
    assert [d.job_id for d in by_action(ds, "start")] == ["big"]


def test_default_order_inside_a_demoted_level_is_arrival_or_least_attained():
    # both were preempted in level 1 (20,000 <= attained < 200,000 GPU-s); one GPU frees up
    busy = [running("r", [("n0", (0, 1, 2))], start=0, attained=10)]
    queue = [
        q("older", t=0, attained_service=90_000, last_preempted_time=100),
        q("younger", t=50, attained_service=30_000, last_preempted_time=100),
    ]
    snap = Snapshot(nodes(1), busy, queue)
    ds = schedule(snap, 200, "default")  # arrival order (measured better on the trace)
    assert [d.job_id for d in by_action(ds, "start")] == ["older"]
    ds = schedule(snap, 200, "default", PolicyConfig(level_order_by_attained=True))
    assert [d.job_id for d in by_action(ds, "start")] == ["younger"]


def test_default_first_threshold_is_high():
    # a 1-GPU job that ran 10,000 s is still in level 0: a fresh job does not preempt it ...
    busy = [running("mid", [("n0", (0, 1, 2, 3))], start=0, attained=4 * 2_500)]
    ds = schedule(Snapshot(nodes(1), busy, [q("new", gpus=4, t=5)]), 3_000, "default")
    assert by_action(ds, "preempt") == []
    # ... one past 20,000 GPU-s is demoted and is
    busy = [running("long", [("n0", (0, 1, 2, 3))], start=0, attained=4 * 6_000)]
    ds = schedule(Snapshot(nodes(1), busy, [q("new", gpus=4, t=5)]), 7_000, "default")
    assert [d.job_id for d in by_action(ds, "preempt")] == ["long"]


def test_default_starvation_promotion_reorders_but_never_preempts():
    cfg = PolicyConfig(starve_after_s=3_600)
    # the node is held by a demoted job (level 1); 'starved' (also level 1) waited 2 h
    busy = [running("held", [("n0", (0, 1, 2, 3))], start=0, attained=4 * 10_000)]
    starved = q("starved", gpus=4, t=0, attained_service=50_000, last_preempted_time=2_800)
    snap = Snapshot(nodes(1), busy, [starved])
    ds = schedule(snap, 10_000, "default", cfg)
    assert by_action(ds, "preempt") == []  # promotion is not a licence to preempt
    # a fresh job behind it still preempts (its class is better), and the promoted job keeps
    # the first queue position
    snap = Snapshot(nodes(1), busy, [starved, q("fresh", gpus=4, t=9_000)])
    ds = schedule(snap, 10_000, "default", cfg)
    assert [d.job_id for d in by_action(ds, "preempt")] == ["held"]
    assert [d.job_id for d in by_action(ds, "start")] == ["fresh"]
    entries = queue_report(snap, 10_000, "default", config=cfg)
    assert [e.job_id for e in entries] == ["starved", "fresh"]


def test_preemption_storm_guard_caps_victims_per_round():
    many = [Node(f"m{i}", 1, 4.0, 8_000) for i in range(30)]
    busy = [running(f"r{i}", [(f"m{i}", (0,))], start=0, attained=500_000) for i in range(30)]
    queue = [q(f"n{i}", t=10 + i) for i in range(30)]
    cfg = PolicyConfig(max_preemptions_per_round=5)
    ds = schedule(Snapshot(many, busy, queue), 100_000, "default", cfg)
    assert len(by_action(ds, "preempt")) == 5 and len(by_action(ds, "start")) == 5
    ds = schedule(Snapshot(many, busy, queue), 100_000, "default")
    assert len(by_action(ds, "preempt")) == 30


def test_default_moves_small_jobs_to_start_a_gang_on_scattered_free_gpus():
    # 6 GPUs free, but 3 + 3: a whole-node gang fits only if one 1-GPU job moves over.
    busy = [
        running("a", [("n0", (0,))], start=0, attained=10),
        running("b", [("n1", (0,))], start=0, attained=10),
    ]
    snap = Snapshot(nodes(2), busy, [q("gang", gpus=4, t=5)])
    ds = schedule(snap, 10_000, "default")
    (pre,) = by_action(ds, "preempt")
    starts = {d.job_id: d for d in by_action(ds, "start")}
    assert set(starts) == {"gang", pre.job_id}  # the moved job restarts in the same round
    assert ds.index(pre) < ds.index(starts["gang"]) < ds.index(starts[pre.job_id])
    gang_node = starts["gang"].allocations[0].node
    assert pre.allocations[0].node == gang_node
    assert starts[pre.job_id].allocations[0].node != gang_node
    # fifo does not move; nor does default when fewer GPUs are free than the gang needs
    assert by_action(schedule(snap, 10_000, "fifo"), "preempt") == []
    short = Snapshot(nodes(2), [*busy, running("c", [("n1", (1, 2, 3))])], snap.queue)
    assert by_action(schedule(short, 10_000, "default"), "preempt") == []


def test_moves_respect_the_thrash_guard_and_the_cap():
    busy = [running("a", [("n0", (0,))], start=9_900), running("b", [("n1", (0,))], start=9_900)]
    snap = Snapshot(nodes(2), busy, [q("gang", gpus=4, t=5)])
    assert by_action(schedule(snap, 10_000, "default"), "preempt") == []  # both just started
    old = [running("a", [("n0", (0,))]), running("b", [("n1", (0,))])]
    snap = Snapshot(nodes(2), old, snap.queue)
    assert by_action(schedule(snap, 10_000, "default", PolicyConfig(max_moves=0)), "start") == []
