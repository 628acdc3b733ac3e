"""Elastic jobs users can predict: the target is the user's, growth past it is lent.

A running elastic job grows back to its target (the size it asked for, or the last `scale N`)
into idle resources; past the target only with auto_grow; and learners above the target are
given back (a shrink toward the target) before any queued job waits for them, under every
policy, whatever the two jobs' priorities and the thrash guard, once the loan is older than
`resize_interval_s` (300 s; a younger one: tests/scheduler/test_elastic_thrash.py).
"""

from __future__ import annotations

import pytest

from services.scheduler.policy import (
    POLICIES,
    Allocation,
    Node,
    QueuedJob,
    RunningJob,
    Snapshot,
    TeamQuota,
    schedule,
)

NOW = 10_000.0


def node(gpus: int = 4, name: str = "n0") -> Node:
    return Node(name, gpus, 32.0, 256_000)


def elastic(
    learners: int, target: int, max_learners: int = 4, auto_grow=False, resized_ago=1.0, **kw
):
    """One-GPU learners on n0's GPUs 0..learners-1, (re)sized `resized_ago` seconds ago (a
    second: inside every thrash guard)."""
    allocs = tuple(Allocation(i, "n0", (i,), 1.0, 1000) for i in range(learners))
    return RunningJob(
        "el",
        "u",
        allocs,
        start_time=NOW - resized_ago,
        last_resize_time=NOW - resized_ago,
        min_learners=1,
        max_learners=max_learners,
        gpus_per_learner=1,
        cpus_per_learner=1.0,
        memory_mb_per_learner=1000,
        target_learners=target,
        auto_grow=auto_grow,
        **kw,
    )


def q(job_id: str, learners: int = 1, gpus: int = 1, **kw) -> QueuedJob:
    return QueuedJob(job_id, "v", learners, gpus, 1.0, 1000, submit_time=NOW - 5, **kw)


def acts(ds) -> list[tuple[str, str, int]]:
    return [(d.action, d.job_id, len(d.allocations)) for d in ds if d.action != "wait"]


def test_a_job_grows_back_to_its_target_but_not_past_it_without_auto_grow():
    shrunk = elastic(1, target=2, resized_ago=3600)
    (grow,) = schedule(Snapshot([node()], [shrunk], []), NOW)
    assert (grow.action, len(grow.allocations)) == ("grow", 1)
    assert "back to 2 (its target 2)" in grow.cause
    # at its target, with max 4 and two idle GPUs: it stays as the user asked
    assert schedule(Snapshot([node()], [elastic(2, target=2, resized_ago=3600)], []), NOW) == []


def test_auto_grow_grows_past_the_target_when_idle_and_says_the_growth_is_lent():
    el = elastic(1, target=1, auto_grow=True, resized_ago=3600)
    (grow,) = schedule(Snapshot([node()], [el], []), NOW)
    assert (grow.action, len(grow.allocations)) == ("grow", 3)
    assert "target 1, max 4, auto_grow" in grow.cause and "lent" in grow.cause
    # queued jobs first: it grows into what they leave idle
    ds = schedule(Snapshot([node()], [el], [q("w")]), NOW)
    assert acts(ds) == [("start", "w", 1), ("grow", "el", 2)]


@pytest.mark.parametrize("policy", POLICIES)
def test_a_queued_job_of_equal_priority_gets_the_lent_learners_in_the_same_round(policy):
    # n0 is full: el holds 4 learners, 3 of them above its target of 1 (grown 300 s ago:
    # the loan is as old as the resize interval). w needs 2 GPUs.
    grown = elastic(4, target=1, auto_grow=True, resized_ago=300.0)
    ds = schedule(Snapshot([node()], [grown], [q("w", gpus=2)]), NOW, policy)
    assert acts(ds) == [("shrink", "el", 2), ("start", "w", 1)]
    shrink = ds[0]
    assert [a.learner for a in shrink.allocations] == [3, 2]  # the last learners go first
    assert "lent" in shrink.cause and "its target 1" in shrink.cause and "for w" in shrink.cause
    assert "given back by el" in ds[1].cause
    # ...and the next round leaves them with w: nothing is idle, nothing grows back
    after = RunningJob(
        "w", "v", tuple(ds[1].allocations), start_time=NOW, gpus_per_learner=2, cpus_per_learner=1.0
    )
    kept = tuple(a for a in grown.allocations if a not in shrink.allocations)
    nxt = Snapshot([node()], [RunningJob(**{**_fields(grown), "allocations": kept}), after], [])
    assert acts(schedule(nxt, NOW + 1, policy)) == []


def _fields(r: RunningJob) -> dict:
    return {name: getattr(r, name) for name in RunningJob.__dataclass_fields__}


def test_only_lent_learners_are_given_back_and_only_as_many_as_needed():
    grown = elastic(4, target=2, auto_grow=True, resized_ago=300.0)
    ds = schedule(Snapshot([node()], [grown], [q("one")]), NOW, "fifo")
    assert acts(ds) == [("shrink", "el", 1), ("start", "one", 1)]
    # a job that needs more than the lent learners: el keeps its target (no class beats it)
    ds = schedule(Snapshot([node()], [grown], [q("three", learners=3)]), NOW, "priority")
    assert acts(ds) == []
    # a job within its target lends nothing
    ds = schedule(Snapshot([node()], [elastic(4, target=4)], [q("w")]), NOW, "fifo")
    assert acts(ds) == []


def test_an_elastic_queued_job_gets_its_whole_size_from_lent_learners():
    # one GPU idle, two lent: w (3 learners, min 1) starts whole instead of with one learner
    grown = elastic(3, target=1, auto_grow=True, resized_ago=300.0)
    ds = schedule(Snapshot([node()], [grown], [q("w", learners=3, min_learners=1)]), NOW)
    assert acts(ds) == [("shrink", "el", 2), ("start", "w", 3)]


def test_lent_learners_go_back_to_another_team_too():
    # el's team has a guarantee of 4 GPUs, yet what it holds above its target is only lent
    grown = elastic(4, target=2, auto_grow=True, team="a", resized_ago=300.0)
    snap = Snapshot([node()], [grown], [q("w", team="b")], quotas={"a": TeamQuota(gpus=4)})
    assert acts(schedule(snap, NOW, "fifo")) == [("shrink", "el", 1), ("start", "w", 1)]
    # a loan a second old goes back at once to a job inside its own team's guarantee
    young = elastic(4, target=2, auto_grow=True, team="a")
    half = TeamQuota(gpus=2, cpus=16.0, memory_mb=128_000)
    quotas = {"a": half, "b": half}
    snap = Snapshot([node()], [young], [q("w", team="b")], quotas=quotas)
    assert acts(schedule(snap, NOW, "fifo")) == [("shrink", "el", 1), ("start", "w", 1)]
