"""`tiresias-las`: 2D-LAS as Tiresias' own simulator runs it, and 8-GPU node shapes."""

from __future__ import annotations

from test_policy import by_action, nodes, q, running

from services.scheduler.policy import POLICIES, Node, PolicyConfig, Snapshot, policy_for, schedule
from services.scheduler.replay import _gang, simulate
from services.scheduler.trace import TraceJob


def queued_class(j, now, policy, cfg):
    return policy_for(policy).queued_class(j, now, cfg)


def test_tiresias_las_is_a_policy_with_tiresias_thresholds():
    assert "tiresias-las" in POLICIES
    cfg = PolicyConfig()
    assert cfg.tiresias_thresholds == (3_250.0, 7_200.0)  # jobs.py, dlas-gpu, 3 queues
    assert queued_class(q("a", attained_service=3_249.0), 0, "tiresias-las", cfg) == (0, 0)
    assert queued_class(q("b", attained_service=3_250.0), 0, "tiresias-las", cfg) == (0, 1)
    assert queued_class(q("c", attained_service=9e9), 0, "tiresias-las", cfg) == (0, 2)


def test_tiresias_las_preempts_a_demoted_job_that_just_restarted():
    # no thrash guard: a job demoted past 3,250 GPU-s is a victim even 10 s after it started
    snap = Snapshot(
        nodes(1, gpus=1),
        [running("old", [("n0", (0,))], start=990.0, attained=4_000.0)],
        [q("new", t=995.0)],
    )
    ds = schedule(snap, 1_000.0, "tiresias-las")
    assert [d.job_id for d in by_action(ds, "preempt")] == ["old"]
    assert [d.job_id for d in by_action(ds, "start")] == ["new"]
    # default keeps its thrash guard
    assert by_action(schedule(snap, 1_000.0, "default"), "preempt") == []


def test_tiresias_las_never_promotes_a_starving_job():
    # waited 100x its executed time: las promotes it to level 0, tiresias-las (dlas-gpu,
    # solve_starvation=0) leaves it at its level
    j = q("s", attained_service=8_000.0, last_preempted_time=0.0)
    assert queued_class(j, 800_000.0, "las", PolicyConfig()) == (0, 0)
    assert queued_class(j, 800_000.0, "tiresias-las", PolicyConfig()) == (0, 2)


def test_tiresias_las_reserves_nothing_so_small_jobs_pass_a_blocked_gang():
    # 2 x 4 GPUs, 2 GPUs busy on each node: the 4-GPU gang cannot start; the 1-GPU job behind
    # it may (no reservation), where las reserves nodes for the gang
    snap = Snapshot(
        nodes(2),
        [
            running("r0", [("n0", (0, 1))], start=0.0, attained=10.0),
            running("r1", [("n1", (0, 1))], start=0.0, attained=10.0),
        ],
        [q("gang", gpus=4, t=1.0), q("small", t=2.0)],
    )
    ds = schedule(snap, 100.0, "tiresias-las")
    assert [d.job_id for d in by_action(ds, "start")] == ["small"]


def test_multi_node_gangs_span_whole_8_gpu_nodes():
    assert _gang(16, 8) == (2, 8)
    assert _gang(64, 8) == (8, 8)
    assert _gang(12, 8) == (2, 6)
    # 2 x 8 GPUs: a 1-GPU job holds part of one node, so the 16-GPU gang (two whole nodes)
    # waits for it although 15 GPUs are free
    jobs = [TraceJob("one", 0, 1_000, 1), TraceJob("gang", 10, 500, 16)]
    m = simulate(jobs, 2, 8, "tiresias-las", per_job=True)
    starts = {p[2]: p[3] for p in m["_per_job"]}
    assert starts[16] >= 1_000


def test_default_moves_enough_jobs_to_clear_an_8_gpu_node():
    # two 8-GPU nodes each half full of 1-GPU jobs (8 free GPUs in all, 4 + 4): an 8-GPU job
    # needs 4 moves, within the cap; a cap of 3 leaves it waiting
    run = [running(f"a{i}", [("n0", (i,))], start=0.0, attained=1.0) for i in range(4)]
    run += [running(f"b{i}", [("n1", (i,))], start=0.0, attained=1.0) for i in range(4)]
    snap = Snapshot([Node(f"n{i}", 8, 64.0, 512_000) for i in range(2)], run, [q("big", gpus=8)])
    ds = schedule(snap, 10_000.0, "default")
    assert "big" in [d.job_id for d in by_action(ds, "start")]
    assert len(by_action(ds, "preempt")) == 4
    capped = schedule(snap, 10_000.0, "default", PolicyConfig(max_moves=3))
    assert "big" not in [d.job_id for d in by_action(capped, "start")]


def test_gpu_count_lets_a_gang_take_scattered_free_gpus():
    # Tiresias' simulator's placement model: a 15-GPU job takes the 15 free GPUs of two 8-GPU
    # nodes beside a 1-GPU job; as learners placed whole (3 x 5 GPUs) it can never fit two
    # 8-GPU nodes, and is refused at submit rather than left waiting forever
    jobs = [TraceJob("one", 0, 1_000, 1), TraceJob("gang", 10, 500, 15)]
    whole = simulate(jobs, 2, 8, "tiresias-las", per_job=True)
    assert whole["refused"] == 1 and whole["jobs"] == 1
    count = simulate(jobs, 2, 8, "tiresias-las", per_job=True, gpu_count=True)
    assert count["refused"] == 0
    start = {p[2]: p[3] for p in count["_per_job"]}
    assert start[15] < 100
