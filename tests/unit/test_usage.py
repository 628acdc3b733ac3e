"""dlaas/domain/usage.py: allocation intervals from histories, split by UTC day, summed exactly."""

from __future__ import annotations

import datetime as dt

import pytest

from dlaas.adapters.store.base import JobRecord
from dlaas.domain.errors import InvalidRequest
from dlaas.domain.status import Status, Transition
from dlaas.domain.usage import (
    ALLOCATIONS_INFO,
    MEASURED_INFO,
    Interval,
    Shape,
    Usage,
    UsageCache,
    UsageRow,
    group,
    intervals,
    job_usage,
    make_query,
    split_days,
    totals,
)

S = Status
H = 3600.0
# 2026-11-25 00:00:00 UTC
DAY0 = dt.datetime(2026, 11, 25, tzinfo=dt.UTC).timestamp()
MANIFEST = (
    "name: a\nlearners: 3\nmin_learners: 1\nmax_learners: 3\ngpus: 2\ncpus: 0.5\nmemory: 2Gi\n"
    "framework: {name: python, command: 'true'}\n"
)


def history(*steps: tuple[Status, float]) -> list[Transition]:
    return [Transition(st, DAY0 + at, "r") for st, at in steps]


def record(job_id, steps, allocations=None, user="alice", team="ateam", manifest=MANIFEST):
    h = history(*steps)
    info = {ALLOCATIONS_INFO: allocations} if allocations is not None else {}
    return JobRecord(job_id, user, "n", manifest, DAY0, h[-1].status, history=h, info=info,
                     team=team)  # fmt: skip


# Placed with 3 learners, preempted, placed again with 2 (shrunk), restarted after a failure
# with 2, halted by the user, resumed, placed with 1 and finished.
LIFE = (
    (S.QUEUED, 0),
    (S.PENDING, 1 * H),  # seq 1: 3 learners
    (S.DOWNLOADING, 1 * H + 10),
    (S.PROCESSING, 1 * H + 20),
    (S.QUEUED, 2 * H),  # preempted
    (S.PENDING, 3 * H),  # seq 5: 2 learners (shrunk)
    (S.PROCESSING, 3 * H + 5),
    (S.QUEUED, 4 * H),  # restart
    (S.PENDING, 4.5 * H),  # seq 8: 2 learners
    (S.PROCESSING, 4.5 * H + 1),
    (S.HALTED, 5 * H),
    (S.QUEUED, 6 * H),  # resumed
    (S.PENDING, 7 * H),  # seq 12: 1 learner (resized by the user)
    (S.DOWNLOADING, 7 * H + 1),
    (S.PROCESSING, 7 * H + 2),
    (S.STORING, 8 * H),
    (S.COMPLETED, 8 * H + 0.5),
)
ALLOCATED = {"1": 3, "5": 2, "8": 2, "12": 1}


def test_intervals_follow_preemptions_resizes_restarts_and_halts():
    spans = intervals(history(*LIFE), ALLOCATED, default_learners=3, now=DAY0 + 99 * H)
    ms = round(DAY0 * 1000)
    hour = 3_600_000
    assert spans == [
        Interval(ms + 1 * hour, ms + 2 * hour, 3, seq=1),
        Interval(ms + 3 * hour, ms + 4 * hour, 2, seq=5),
        Interval(ms + 4 * hour + hour // 2, ms + 5 * hour, 2, seq=8),
        # STORING still holds the allocation: the interval ends at COMPLETED.
        Interval(ms + 7 * hour, ms + 8 * hour + 500, 1, seq=12),
    ]


def test_job_usage_is_learners_times_shape_times_hours():
    rows = job_usage(record("j1", LIFE, ALLOCATED), now=DAY0 + 99 * H)
    learner_hours = 3 * 1 + 2 * 1 + 2 * 0.5 + 1 * (1 + 0.5 / H)
    assert [r.day for r in rows] == ["2026-11-25"]
    u = rows[0].usage
    assert u.gpu_hours == pytest.approx(2 * learner_hours)
    assert u.cpu_hours == pytest.approx(0.5 * learner_hours)
    assert u.memory_gib_hours == pytest.approx(2 * learner_hours)
    # Exact integers: 2 GPUs x learner-milliseconds.
    assert u.gpu_ms == 2 * (3 * 3_600_000 + 2 * 3_600_000 + 2 * 1_800_000 + 3_600_500)


def test_an_unrecorded_placement_counts_the_manifests_learners():
    spans = intervals(history(*LIFE), {"5": 2}, default_learners=3, now=DAY0)
    assert [s.learners for s in spans] == [3, 2, 3, 3]


def test_a_job_still_placed_is_charged_up_to_now_and_a_queued_one_nothing():
    running = record("r", ((S.QUEUED, 0), (S.PENDING, 10), (S.PROCESSING, 20)), {"1": 1})
    (row,) = job_usage(running, now=DAY0 + 10 + H)
    assert row.usage.gpu_ms == 2 * 3_600_000
    queued = record("q", ((S.QUEUED, 0),))
    assert job_usage(queued, now=DAY0 + H) == []


def test_intervals_split_at_midnight_utc():
    day = 86_400_000
    start = round(DAY0 * 1000) + day - 1000  # one second before midnight
    parts = split_days(Interval(start, start + 2 * day + 3000, 1))
    assert parts == [
        ("2026-11-25", 1000),
        ("2026-11-26", day),
        ("2026-11-27", day),
        ("2026-11-28", 2000),
    ]
    assert sum(ms for _, ms in parts) == 2 * day + 3000


def test_a_job_over_midnight_has_a_row_per_day():
    late = record("n", ((S.QUEUED, 0), (S.PENDING, 23 * H), (S.FAILED, 25 * H)), {"1": 1})
    rows = job_usage(late, now=DAY0 + 30 * H)
    assert [(r.day, r.usage.gpu_hours) for r in rows] == [("2026-11-25", 2.0), ("2026-11-26", 2.0)]


def test_a_manifest_that_no_longer_parses_is_not_guessed():
    bad = record("b", ((S.QUEUED, 0), (S.PENDING, 1)), manifest="learners: [")
    assert job_usage(bad, now=DAY0 + H) == []


def test_group_and_totals_sum_exactly_in_any_order():
    u = Usage(1, 2, 3)
    rows = [
        UsageRow("2026-11-25", "t1", "alice", "j1", u),
        UsageRow("2026-11-25", "t1", "alice", "j2", u),
        UsageRow("2026-11-25", "t1", "bob", "j3", u),
        UsageRow("2026-11-26", "t2", "alice", "j4", u),
    ]
    assert [(r.day, r.team, r.user, r.usage) for r in group(rows, "team")] == [
        ("2026-11-25", "t1", "", Usage(3, 6, 9)),
        ("2026-11-26", "t2", "", u),
    ]
    assert [(r.user, r.usage) for r in group(rows, "user")] == [
        ("alice", Usage(2, 4, 6)),
        ("bob", u),
        ("alice", u),
    ]
    assert len(group(rows, "job")) == 4
    assert totals(rows, "user") == {"alice": Usage(3, 6, 9), "bob": u}
    assert totals(reversed(rows), "team") == totals(rows, "team")


def test_queries_check_their_dates_and_grouping():
    today = dt.date(2026, 11, 26)
    q = make_query("", "", "", "", "user", today)
    assert (q.since, q.until) == ("2026-10-28", "2026-11-26")
    with pytest.raises(InvalidRequest, match="since: 'yesterday' is not a date"):
        make_query("yesterday", "", "", "", "user", today)
    with pytest.raises(InvalidRequest, match="since: 2026-11-27 is after until"):
        make_query("2026-11-27", "", "", "", "user", today)
    with pytest.raises(InvalidRequest, match="since: at most 366 days"):
        make_query("2020-01-01", "", "", "", "user", today)
    with pytest.raises(InvalidRequest, match="by: must be one of team, user, job"):
        make_query("", "", "", "", "node", today)
    row = UsageRow("2026-11-20", "t", "u", "j", Usage())
    assert make_query("2026-11-20", "2026-11-20", "t", "u", "job", today).wants(row)
    assert not make_query("2026-11-21", "", "", "", "job", today).wants(row)
    assert not make_query("", "", "other", "", "job", today).wants(row)


def test_the_cache_keeps_ended_jobs_until_their_history_changes():
    cache = UsageCache(size=1)
    ended = record("e", ((S.QUEUED, 0), (S.PENDING, 0), (S.FAILED, H)), {"1": 1})
    first = cache.rows(ended, now=DAY0 + 2 * H)
    assert cache.rows(ended, now=DAY0 + 3 * H) is first
    ended.history.append(Transition(S.QUEUED, DAY0 + 2 * H, "r"))  # not a real edge: a change
    assert cache.rows(ended, now=DAY0 + 3 * H) is not first
    running = record("r", ((S.QUEUED, 0), (S.PENDING, 0)), {"1": 1})
    assert cache.rows(running, now=DAY0 + H)[0].usage.gpu_hours == 2.0
    assert cache.rows(running, now=DAY0 + 2 * H)[0].usage.gpu_hours == 4.0


def test_shape_holds_per_learner():
    assert Shape(1, 500, 1024).held(2, 3_600_000).hours() == {
        "gpu_hours": 2.0,
        "cpu_hours": 1.0,
        "memory_gib_hours": 2.0,
        "cpu_used_hours": 0.0,  # measured use: none here
        "memory_peak_gib_hours": 0.0,
    }


def measured_record(job_id, steps, allocations, measured):
    r = record(job_id, steps, allocations)
    r.info[MEASURED_INFO] = measured
    return r


def test_measured_use_is_charged_to_the_run_it_was_measured_in():
    # The run queued at seq 7 (placed at seq 8, 2 learners x 0.5 CPU for 30 min: 1,800
    # CPU-s held) used 900 CPU-s and peaked at 300 + 212 MiB; the others were not measured
    # (preempted, halted: ended from outside) but for the last run, queued at seq 11.
    used = {
        "7": {"0": {"cpu_s": 500.25, "memory_peak_mib": 300}, "1": {"cpu_s": 399.75, "memory_peak_mib": 212}},
        "11": {"0": {"cpu_s": 1800.0, "memory_peak_mib": 1024}},
    }  # fmt: skip
    (row,) = job_usage(measured_record("m", LIFE, ALLOCATED, used), now=DAY0 + 99 * H)
    u = row.usage
    assert u.used_millicpu_ms == (900 + 1800) * 1_000_000  # exact: CPU-s x 10^6
    assert u.hours()["cpu_used_hours"] == pytest.approx((900 + 1800) / 3600)
    # peaks x the time each run held its allocation: 512 MiB x 30 min + 1 GiB x 1 h 0.5 s
    assert u.peak_memory_mib_ms == 512 * 1_800_000 + 1024 * 3_600_500
    # next to what the runs held (the last: 1 learner x 0.5 CPU x 1 h = the 1,800 CPU-s used)
    assert u.cpu_hours == pytest.approx(0.5 * (3 + 2 + 1 + 1 + 0.5 / H))


def test_measured_cpu_is_spread_over_the_days_of_its_run_exactly():
    # placed at 23:00, done at 02:00 the next day: a third of the CPU on the first day
    steps = ((S.QUEUED, 0), (S.PENDING, 23 * H), (S.PROCESSING, 23 * H + 1), (S.COMPLETED, 26 * H))
    used = {"0": {"0": {"cpu_s": 100.000001, "memory_peak_mib": 10}}}
    rows = job_usage(measured_record("d", steps, {"1": 1}, used), now=DAY0 + 99 * H)
    assert [r.day for r in rows] == ["2026-11-25", "2026-11-26"]
    first, second = (r.usage.used_millicpu_ms for r in rows)
    assert first + second == 100_000_001  # the remainder is not lost
    assert first == 100_000_001 // 3
    assert [r.usage.peak_memory_mib_ms for r in rows] == [10 * 3_600_000, 10 * 7_200_000]


@pytest.mark.parametrize(
    "bad",
    [
        "not a dict",
        {"x": {"0": {"cpu_s": 1.0, "memory_peak_mib": 1}}},  # not a run's seq
        {"0": "not learners"},
        {"0": {"0": {"cpu_s": -1.0, "memory_peak_mib": -5}}},
        {"0": {"0": {"cpu_s": float("nan"), "memory_peak_mib": 1.5}}},
    ],
)
def test_a_bad_measured_record_counts_nothing_measured(bad):
    steps = ((S.QUEUED, 0), (S.PENDING, H), (S.COMPLETED, 2 * H))
    (row,) = job_usage(measured_record("b", steps, {"1": 1}, bad), now=DAY0 + 99 * H)
    assert (row.usage.used_millicpu_ms, row.usage.gpu_ms) == (0, 2 * 3_600_000)


def test_the_cache_sees_measured_use_recorded_after_the_jobs_end():
    steps = ((S.QUEUED, 0), (S.PENDING, H), (S.COMPLETED, 2 * H))
    r = record("late", steps, {"1": 1})
    cache = UsageCache()
    assert cache.rows(r, now=DAY0 + 3 * H)[0].usage.used_millicpu_ms == 0
    r.info[MEASURED_INFO] = {"0": {"0": {"cpu_s": 2.0, "memory_peak_mib": 1}}}
    assert cache.rows(r, now=DAY0 + 3 * H)[0].usage.used_millicpu_ms == 2_000_000
