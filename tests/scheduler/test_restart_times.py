"""Restart times measured, not assumed: the estimator (the platform's and each job's median of
the pauses measured, the configured restart_s before any) and the grow rule reading it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dlaas.domain.status import Status
from services.scheduler.policy import DEFAULT_CONFIG, Allocation, Node, RunningJob, Snapshot
from services.scheduler.policy import schedule as run_round
from services.scheduler.policy.restarts import MAX_PAUSE_S, RestartTimes, pause_after_resize

NOW = 100_000.0
# restart 50 s (the prior), payback 1, a job of 1 learner (target 1, max 4) on a 4-GPU node:
# lending it 3 costs 50 x (1 + 4 + 1) = 300 learner-s, gaining 3 x 60 = 180 in a 60 s gap
CFG = replace(
    DEFAULT_CONFIG, restart_s=50.0, grow_payback=1.0, resize_interval_s=600.0, arrival_gap_s=60.0
)


def job(job_id: str = "el", restart_s: float | None = None) -> RunningJob:
    return RunningJob(
        job_id,
        "u",
        (Allocation(0, "n0", (0,), 1.0, 1000),),
        start_time=NOW - 7200,
        min_learners=1,
        max_learners=4,
        gpus_per_learner=1,
        cpus_per_learner=1.0,
        memory_mb_per_learner=1000,
        target_learners=1,
        auto_grow=True,
        restart_s=restart_s,
    )


def grown(times: RestartTimes, running: RunningJob) -> int:
    """Learners the round lends `running` with what `times` measured (0: none)."""
    snap = Snapshot([Node("n0", 4, 32.0, 256_000)], times.running([running]), [])
    ds = run_round(snap, NOW, "default", times.config(CFG), include_waits=False)
    return sum(len(d.allocations) for d in ds if d.action == "grow")


def test_the_configured_restart_s_stands_until_a_pause_is_measured():
    t = RestartTimes(50.0)
    assert (t.platform(), t.of("a")) == (50.0, None)
    assert t.config(CFG) is CFG
    assert t.running([job()]) == [job()]


def test_the_platform_reads_the_median_of_its_last_pauses_and_a_job_its_own():
    t = RestartTimes(50.0, samples=3, per_job=2)
    for job_id, pause in (("a", 100.0), ("b", 4.0), ("a", 6.0), ("c", 8.0)):
        assert t.add(job_id, pause)
    # the platform's window holds the last 3 (4, 6, 8): one slow restart fell out
    assert t.platform() == 6.0
    assert t.config(CFG).restart_s == 6.0
    assert (t.of("a"), t.of("b"), t.of("z")) == (53.0, 4.0, None)  # a: median of 100 and 6
    t.add("a", 2.0)  # a's window holds its last 2 (6, 2)
    assert t.of("a") == 4.0
    (a,) = t.running([job("a")])
    (z,) = t.running([job("z")])
    assert (a.restart_s, z.restart_s) == (4.0, None)  # z reads the platform's, cfg.restart_s


@pytest.mark.parametrize("pause", [-1.0, float("nan"), float("inf"), MAX_PAUSE_S + 1])
def test_what_is_not_a_pause_is_not_counted(pause):
    t = RestartTimes(50.0)
    assert not t.add("a", pause)
    assert (t.platform(), t.of("a")) == (50.0, None)


def test_the_jobs_kept_are_bounded_least_recently_measured_first():
    t = RestartTimes(50.0, jobs=2)
    t.add("a", 1.0)
    t.add("b", 2.0)
    t.add("a", 1.0)  # a measured again: b is now the oldest
    t.add("c", 3.0)
    assert (t.of("a"), t.of("b"), t.of("c")) == (1.0, None, 3.0)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="prior"):
        RestartTimes(-1.0)
    with pytest.raises(ValueError, match="at least 1"):
        RestartTimes(50.0, samples=0)


def test_with_the_payback_off_the_config_is_left_alone():
    t = RestartTimes(50.0)
    t.add("a", 2.0)
    off = replace(CFG, grow_payback=0.0)
    assert t.config(off) is off


@pytest.mark.parametrize(
    ("status", "status_at", "now", "expected"),
    [
        (Status.PROCESSING, 1012.5, 1013.0, 12.5),  # running again since the resize
        (Status.PROCESSING, 990.0, 1001.0, "waiting"),  # running from before: not yet moved
        (Status.QUEUED, 1000.1, 1001.0, "waiting"),
        (Status.PENDING, 1001.0, 1002.0, "waiting"),
        (Status.DOWNLOADING, 1002.0, 1003.0, "waiting"),
        (None, 0.0, 1001.0, "gone"),  # its status was deleted
        (Status.HALTED, 1001.0, 1002.0, "gone"),
        (Status.FAILED, 1001.0, 1002.0, "gone"),
        (Status.STORING, 990.0, 1001.0, "gone"),  # done training: the LCM does not move it
        (Status.DOWNLOADING, 1002.0, 1000.0 + MAX_PAUSE_S + 1, "gone"),  # stuck: no sample
        (Status.PROCESSING, 1000.0 + MAX_PAUSE_S + 5, 1000.0 + MAX_PAUSE_S + 6, "gone"),
    ],
)
def test_a_resized_jobs_status_says_when_its_restart_is_over(status, status_at, now, expected):
    assert pause_after_resize(1000.0, status, status_at, now) == expected


def test_a_loan_follows_the_measured_restart_time():
    # nothing measured: the 50 s prior, and a 60 s gap does not pay for the loan
    assert grown(RestartTimes(50.0), job()) == 0
    # the job itself restarted in 2 s before: the same gap pays for lending it 3
    own = RestartTimes(50.0)
    own.add("el", 2.0)
    assert grown(own, job()) == 3
    # another job measured 2 s: the platform's figure for a job never resized
    platform = RestartTimes(50.0)
    platform.add("other", 2.0)
    assert grown(platform, job()) == 3
    # the other way round: a job measured slow is not lent, whatever the platform's figure
    slow = RestartTimes(2.0)
    for i in range(5):
        slow.add(f"o{i}", 2.0)
    slow.add("el", 55.0)
    assert grown(slow, job()) == 0


def test_a_jobs_own_restart_time_is_the_rules_when_it_has_one():
    from services.scheduler.policy.elastic import min_lent_that_pays

    # lent x 60 >= 50 x (1 + lent + 1) <=> lent >= 10; with its own 2 s: lent >= 4 / 58
    assert min_lent_that_pays(job(), 60.0, CFG) == pytest.approx(10.0)
    assert min_lent_that_pays(job(restart_s=2.0), 60.0, CFG) == pytest.approx(4 / 58)
    assert min_lent_that_pays(job(restart_s=60.0), 60.0, CFG) == float("inf")
