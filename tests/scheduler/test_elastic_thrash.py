"""Elastic growth without thrash: grow only into capacity that stays idle long enough to pay
for the restarts, and at most once per `resize_interval_s`, while a higher class (and, for
lent learners, a job of higher priority or inside its team's guarantee) still takes learners
inside the interval.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from services.scheduler.policy import (
    DEFAULT_CONFIG,
    Allocation,
    Node,
    QueuedJob,
    RunningJob,
    Snapshot,
    schedule,
)
from services.scheduler.policy.elastic import IdleForecast, min_lent_that_pays

NOW = 100_000.0
# restart 50 s, payback 1: lending 3 learners to a 1-learner job (1 -> 4 -> 1) costs
# 50 x (1 + 4 + 1) = 300 learner-s, so it pays when they stay idle >= 100 s
CFG = replace(DEFAULT_CONFIG, restart_s=50.0, grow_payback=1.0, resize_interval_s=600.0)


def node(gpus: int = 4) -> Node:
    return Node("n0", gpus, 32.0, 256_000)


def elastic(learners: int, target: int, ago: float, priority: int = 0, auto_grow: bool = True):
    """One-GPU learners on n0, max 4, (re)sized `ago` seconds ago."""
    return RunningJob(
        "el",
        "u",
        tuple(Allocation(i, "n0", (i,), 1.0, 1000) for i in range(learners)),
        priority=priority,
        start_time=NOW - 7200,
        last_resize_time=NOW - ago,
        min_learners=1,
        max_learners=4,
        gpus_per_learner=1,
        cpus_per_learner=1.0,
        memory_mb_per_learner=1000,
        target_learners=target,
        auto_grow=auto_grow,
    )


def q(job_id: str, learners: int = 1, gpus: int = 1, priority: int = 0) -> QueuedJob:
    return QueuedJob(job_id, "v", learners, gpus, 1.0, 1000, priority, submit_time=NOW - 5)


def acts(ds) -> list[tuple[str, str, int]]:
    return [(d.action, d.job_id, len(d.allocations)) for d in ds if d.action != "wait"]


def grows(running, queue=(), cfg=CFG, policy="default"):
    return acts(schedule(Snapshot([node()], [running], list(queue)), NOW, policy, cfg))


def test_no_loan_when_an_arrival_is_expected_before_it_pays():
    at_target = elastic(1, target=1, ago=3600)
    assert grows(at_target, cfg=replace(CFG, arrival_gap_s=60.0)) == []
    # idle long enough: all 3 idle GPUs lent
    assert grows(at_target, cfg=replace(CFG, arrival_gap_s=3600.0)) == [("grow", "el", 3)]
    # unknown pace (nothing seen yet): lent as before the rule
    assert grows(at_target) == [("grow", "el", 3)]
    # the rule off
    off = replace(CFG, arrival_gap_s=60.0, grow_payback=0.0)
    assert grows(at_target, cfg=off) == [("grow", "el", 3)]


def test_no_loan_while_a_waiting_gang_is_about_to_fit():
    # w needs 2 learners of 4 GPUs: it cannot use n0's 3 idle GPUs, it waits for a finish
    at_target = elastic(1, target=1, ago=3600)
    gang = q("w", learners=2, gpus=4)
    soon = replace(CFG, arrival_gap_s=3600.0, finish_gap_s=30.0)
    assert grows(at_target, [gang], soon) == []
    late = replace(CFG, arrival_gap_s=3600.0, finish_gap_s=3600.0)
    assert grows(at_target, [gang], late) == [("grow", "el", 3)]
    # finishes matter only while a gang waits for them
    assert grows(at_target, cfg=soon) == [("grow", "el", 3)]


def test_a_loan_too_small_to_pay_is_not_made_but_the_jobs_own_learners_come_back():
    # 130 s idle: (130 - 50) x lent >= 50 x (2 + 2) needs 2.5 lent learners; only 2 fit
    cfg = replace(CFG, arrival_gap_s=130.0)
    assert grows(elastic(2, target=2, ago=3600), cfg=cfg) == []
    # shrunk below its target of 2: it grows back to 2, lends nothing past it
    assert grows(elastic(1, target=2, ago=3600), cfg=cfg) == [("grow", "el", 1)]
    # the arithmetic the round uses
    r = elastic(2, target=2, ago=3600)
    assert min_lent_that_pays(r, 130.0, cfg) == pytest.approx(2.5)
    assert min_lent_that_pays(r, 50.0, cfg) == float("inf")
    assert min_lent_that_pays(r, None, cfg) == 0.0


def test_no_second_resize_inside_the_interval():
    idle = replace(CFG, arrival_gap_s=3600.0)
    # resized (grown, then gave its loan back) 100 s ago: not grown again before 600 s
    assert grows(elastic(1, target=1, ago=100), cfg=idle) == []
    assert grows(elastic(1, target=1, ago=599), cfg=idle) == []
    assert grows(elastic(1, target=1, ago=600), cfg=idle) == [("grow", "el", 3)]
    # growing back to its own target waits for the interval too
    assert grows(elastic(1, target=2, ago=100, auto_grow=False), cfg=idle) == []
    # a fresh (re)start counts as a resize: a job started 10 s ago is not grown either
    fresh = replace(elastic(1, target=2, ago=3600, auto_grow=False), start_time=NOW - 10)
    assert grows(fresh, cfg=idle) == []
    # 0 turns the interval off
    assert grows(elastic(1, target=1, ago=1), cfg=replace(idle, resize_interval_s=0.0)) == [
        ("grow", "el", 3)
    ]


def test_a_loan_stands_for_the_interval_unless_a_higher_priority_needs_it():
    # lent learners a second after the grow: a job of equal priority waits (a give-back
    # now would cost the loan's two restarts for a second of use)...
    lent = elastic(4, target=1, ago=1)
    for policy in ("default", "fifo", "priority"):
        assert grows(lent, [q("w", gpus=2)], policy=policy) == []
    # ...until the loan is as old as the interval (600 s here)
    assert grows(elastic(4, target=1, ago=599), [q("w", gpus=2)]) == []
    old = elastic(4, target=1, ago=600)
    assert grows(old, [q("w", gpus=2)]) == [("shrink", "el", 2), ("start", "w", 1)]
    # a job of higher priority takes it back at once, under every policy
    for policy in ("default", "fifo", "priority"):
        hi = q("hi", gpus=2, priority=1)
        assert grows(lent, [hi], policy=policy) == [("shrink", "el", 2), ("start", "hi", 1)]
    # (0 turns the interval off: back to anyone at once)
    assert grows(lent, [q("w", gpus=2)], cfg=replace(CFG, resize_interval_s=0.0)) == [
        ("shrink", "el", 2),
        ("start", "w", 1),
    ]


def test_learners_are_still_taken_inside_the_interval():
    # and a higher class shrinks the job's own learners inside the interval (past the
    # preemption thrash guard, min_run_s 300 s < 400 s < the 600 s interval)
    full = elastic(4, target=4, ago=400)
    hi = q("hi", gpus=2, priority=5)
    assert grows(full, [hi], policy="priority") == [("shrink", "el", 2), ("start", "hi", 1)]
    # an equal class does not
    assert grows(full, [q("eq", gpus=2)], policy="priority") == []


def test_idle_forecast_learns_the_gaps_up_to_now():
    f = IdleForecast(events=4)
    assert f.config(CFG, 0.0).arrival_gap_s is None
    for t in (0.0, 10.0, 20.0, 30.0, 40.0):  # the first falls out of the window of 4
        f.arrived(t)
    f.finished(100.0)
    cfg = f.config(CFG, 50.0)
    assert cfg.arrival_gap_s == pytest.approx((50.0 - 10.0) / 4)
    assert cfg.finish_gap_s == 0.0  # (a finish "later" than now does not go negative)
    # a quiet spell lengthens the gap
    assert f.config(CFG, 410.0).arrival_gap_s == pytest.approx(100.0)
    # the rule off: the config as it was
    off = replace(CFG, grow_payback=0.0)
    assert f.config(off, 50.0) is off
    with pytest.raises(ValueError, match="events"):
        IdleForecast(events=0)


def test_the_live_scheduler_reads_the_interval_and_the_payback_from_its_environment(monkeypatch):
    from services.scheduler.main import load_settings

    for name in ("RESIZE_INTERVAL_S", "RESTART_S", "GROW_PAYBACK"):
        monkeypatch.delenv(f"DLAAS_SCHEDULER_{name}", raising=False)
    cfg = load_settings().policy_config()
    assert (cfg.resize_interval_s, cfg.restart_s, cfg.grow_payback) == (300.0, 50.0, 1.0)
    monkeypatch.setenv("DLAAS_SCHEDULER_RESIZE_INTERVAL_S", "900")
    monkeypatch.setenv("DLAAS_SCHEDULER_RESTART_S", "120")
    monkeypatch.setenv("DLAAS_SCHEDULER_GROW_PAYBACK", "0")
    cfg = load_settings().policy_config()
    assert (cfg.resize_interval_s, cfg.restart_s, cfg.grow_payback) == (900.0, 120.0, 0.0)
    assert cfg.max_moves == DEFAULT_CONFIG.max_moves  # the rest as the default
    monkeypatch.setenv("DLAAS_SCHEDULER_RESIZE_INTERVAL_S", "-5")
    with pytest.raises(SystemExit) as exc:
        load_settings()
    assert "DLAAS_SCHEDULER_RESIZE_INTERVAL_S" in str(exc.value)
    assert "greater than or equal to 0" in str(exc.value)
