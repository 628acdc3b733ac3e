"""A job that has waited `evict_after_s` evicts the fewest jobs off the nodes cheapest to clear.

Under `default` a preempted multi-node gang drops past the last level within hours and needs
whole nodes back, while 1-GPU jobs of better levels hold a GPU or two on every node. Once it
has waited `evict_after_s` (6 h) it preempts, whatever their class, the running jobs on the
nodes that take the fewest victims per learner; it spares jobs of a higher priority, jobs
inside the thrash guard and jobs that have themselves waited `starve_after_s` in all. See
`PolicyConfig.evict_after_s` and `Preemption.try_evict`.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from services.scheduler.policy import (
    Allocation,
    Node,
    PolicyConfig,
    QueuedJob,
    RunningJob,
    Snapshot,
    schedule,
)

# levels: < 1,000 GPU-s, < 100,000, the rest; no learned threshold (no history here)
CFG = PolicyConfig(default_thresholds=(1_000.0, 100_000.0), evict_after_s=6 * 3600)
NOW = 1_000_000.0
HOUR = 3600.0


def nodes(n: int) -> list[Node]:
    return [Node(f"n{i}", 8, 64.0, 512_000) for i in range(n)]


def one_gpu(job_id: str, node: str, gpu: int, **kw) -> RunningJob:
    """A 1-GPU job of level 1 (5,000 GPU-s), submitted an hour before it started."""
    start = kw.pop("start", NOW - 5_000)
    return RunningJob(
        job_id,
        "u",
        (Allocation(0, node, (gpu,), 1.0, 1000),),
        kw.pop("priority", 0),
        start,
        5_000.0,
        submit_time=kw.pop("submit", start - HOUR),
        **kw,
    )


def filled(node: str, gpus=range(8), prefix: str = "") -> list[RunningJob]:
    return [one_gpu(f"{prefix or node}-{g}", node, g) for g in gpus]


def gang(learners: int, waited_s: float) -> QueuedJob:
    """A demoted gang of 8-GPU learners (level 2), preempted `waited_s` ago."""
    return QueuedJob(
        "gang",
        "u",
        learners,
        8,
        1.0,
        1000,
        submit_time=NOW - 30 * HOUR,
        attained_service=learners * 8 * 20_000.0,
        preemptions=1,
        last_preempted_time=NOW - waited_s,
    )


def evicted(decisions) -> set[str]:
    return {d.job_id for d in decisions if d.action == "preempt"}


def started(decisions, job_id: str = "gang") -> set[str]:
    return {
        a.node
        for d in decisions
        if d.action == "start" and d.job_id == job_id
        for a in d.allocations
    }


def test_a_gang_that_waited_six_hours_clears_the_cheapest_nodes():
    # n0 and n1 hold eight 1-GPU jobs each, n2 four (four GPUs free): a 2 x 8-GPU gang takes
    # n2 (4 victims for its learner) and n0 (8; n1 costs the same, names break the tie)
    busy = filled("n0") + filled("n1") + filled("n2", range(4))
    ds = schedule(Snapshot(nodes(3), busy, [gang(2, 7 * HOUR)]), NOW, "default", CFG)
    assert evicted(ds) == {f"n0-{g}" for g in range(8)} | {f"n2-{g}" for g in range(4)}
    assert started(ds) == {"n0", "n2"}
    reasons = [d.cause for d in ds if d.action == "preempt"]
    assert all(r.startswith("evicted for gang, which has waited 7.0 h") for r in reasons)


def test_before_six_hours_the_gang_only_waits():
    # the 1-GPU jobs are a better level: no preemption, and 5 h is short of the bound
    busy = filled("n0") + filled("n1") + filled("n2", range(4))
    ds = schedule(Snapshot(nodes(3), busy, [gang(2, 5 * HOUR)]), NOW, "default", CFG)
    assert evicted(ds) == set()
    assert started(ds) == set()


@pytest.mark.parametrize(
    "spared",
    [
        pytest.param({"priority": 1}, id="higher-priority"),
        pytest.param({"start": NOW - 100}, id="inside-the-thrash-guard"),
        # ran 5,000 s of the two days since its submit: it waited a day in all itself
        pytest.param({"submit": NOW - 48 * HOUR}, id="starved-itself"),
    ],
)
def test_a_node_with_a_spared_job_is_not_cleared(spared):
    # n0 would cost 4 victims, n1 eight; one of n0's jobs is spared, so n0 cannot hold an
    # 8-GPU learner and n1 is cleared instead
    busy = [one_gpu("keep", "n0", 0, **spared)] + filled("n0", range(1, 4)) + filled("n1")
    ds = schedule(Snapshot(nodes(2), busy, [gang(1, 7 * HOUR)]), NOW, "default", CFG)
    assert "keep" not in evicted(ds)
    assert evicted(ds) == {f"n1-{g}" for g in range(8)}
    assert started(ds) == {"n1"}


def test_more_victims_than_the_cap_means_no_eviction():
    # 23 victims for a 3 x 8-GPU gang, over max_victims (16)
    busy = filled("n0") + filled("n1") + filled("n2", range(7))
    ds = schedule(Snapshot(nodes(3), busy, [gang(3, 7 * HOUR)]), NOW, "default", CFG)
    assert evicted(ds) == set()
    ds = schedule(
        Snapshot(nodes(3), busy, [gang(3, 7 * HOUR)]), NOW, "default", replace(CFG, max_victims=24)
    )
    assert len(evicted(ds)) == 23


@pytest.mark.parametrize(
    "policy, cfg",
    [("default", replace(CFG, evict_after_s=0)), ("tiresias-las", CFG), ("las", CFG)],
)
def test_only_default_evicts_and_zero_turns_it_off(policy, cfg):
    busy = filled("n0") + filled("n1") + filled("n2", range(4))
    ds = schedule(Snapshot(nodes(3), busy, [gang(2, 7 * HOUR)]), NOW, policy, cfg)
    assert not any(d.cause.startswith("evicted") for d in ds)
