"""Which running job `default` preempts when several of one class would make room.

The default ranks victims in the reverse of its queue order (biggest gang, then the latest
submitted), sparing jobs that have already waited `starve_after_s` in all; the other policies
keep "least work lost since the last (re)start" (Tiresias' simulator preempts the job that
resumed last). See `Default.victim_key`.
"""

from __future__ import annotations

from services.scheduler.policy import (
    Allocation,
    Node,
    PolicyConfig,
    QueuedJob,
    RunningJob,
    Snapshot,
    schedule,
)

# one level threshold, so every job that attained 1,000 GPU-s is demoted (level 1)
CFG = PolicyConfig(default_thresholds=(1_000.0,), starve_after_s=50_000)


def nodes(n: int, gpus: int = 8) -> list[Node]:
    return [Node(f"n{i}", gpus, 64.0, 512_000) for i in range(n)]


def run(job_id: str, node_gpus, submit: float, start: float, attained: float) -> RunningJob:
    allocs = tuple(
        Allocation(i, node, tuple(ix), 1.0, 1000) for i, (node, ix) in enumerate(node_gpus)
    )
    return RunningJob(job_id, "u", allocs, 0, start, attained, submit_time=submit)


def fresh(job_id: str, gpus: int, t: float) -> QueuedJob:
    return QueuedJob(job_id, "u", 1, gpus, 1.0, 1000, 0, t)


def preempted(decisions) -> list[str]:
    return [d.job_id for d in decisions if d.action == "preempt"]


EIGHT = tuple(range(8))


def test_the_job_that_just_resumed_is_not_the_next_victim():
    # 'old' (submitted first) resumed 400 s ago, 'young' has run since long before: a fresh
    # job takes young's node, not old's again (old is first in the queue's order)
    busy = [
        run("old", [("n0", EIGHT)], submit=0, start=9_600, attained=8 * 5_000),
        run("young", [("n1", EIGHT)], submit=100, start=1_000, attained=8 * 9_000),
    ]
    ds = schedule(Snapshot(nodes(2), busy, [fresh("new", 8, 9_990)]), 10_000, "default", CFG)
    assert preempted(ds) == ["young"]
    # the base order (least work lost since the last start) picks old: tiresias-las keeps it
    ds = schedule(Snapshot(nodes(2), busy, [fresh("new", 8, 9_990)]), 10_000, "tiresias-las", CFG)
    assert preempted(ds) == ["old"]


def test_a_bigger_gang_of_the_same_class_goes_first():
    # the queue puts a 16-GPU gang behind an 8-GPU job of its level: it is preempted first,
    # although it was submitted earlier
    busy = [
        run("gang16", [("n0", EIGHT), ("n1", EIGHT)], submit=0, start=500, attained=16 * 3_000),
        run("job8", [("n2", EIGHT)], submit=100, start=500, attained=8 * 3_000),
    ]
    ds = schedule(Snapshot(nodes(3), busy, [fresh("new", 8, 9_990)]), 10_000, "default", CFG)
    assert preempted(ds) == ["gang16"]


def test_a_job_that_waited_long_in_all_is_the_last_victim_of_its_class():
    # 'waited' ran 2,000 s of the 60,000 since its submit (58,000 s waiting > 50,000): the
    # later-submitted 'other' goes instead, although the order would otherwise pick 'waited'
    busy = [
        run("waited", [("n0", EIGHT)], submit=1_000, start=59_000, attained=8 * 2_000),
        run("other", [("n1", EIGHT)], submit=500, start=20_000, attained=8 * 41_000),
    ]
    now = 61_000
    ds = schedule(Snapshot(nodes(2), busy, [fresh("new", 8, now - 10)]), now, "default", CFG)
    assert preempted(ds) == ["other"]
    # the same two without the long wait: the later-submitted one goes
    rested = run("waited", [("n0", EIGHT)], submit=1_000, start=3_000, attained=8 * 57_000)
    snap = Snapshot(nodes(2), [rested, busy[1]], [fresh("new", 8, now - 10)])
    ds = schedule(snap, now, "default", CFG)
    assert preempted(ds) == ["waited"]
