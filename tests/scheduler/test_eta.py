"""Unit tests of the ETA's duration model and forward replay (services/scheduler/policy/eta.py)."""

from __future__ import annotations

import pytest

from services.scheduler.policy import (
    Allocation,
    DurationModel,
    Node,
    QueuedJob,
    RunningJob,
    Snapshot,
    eta,
    forward_starts,
    predict_waiting,
    queue_report,
)
from services.scheduler.replay import simulate
from services.scheduler.trace import TraceJob


def test_remaining_is_conditional_on_time_already_run():
    model = DurationModel([100.0] * 10 + [1_000.0] * 10)
    assert model.remaining(0.0, 0.1) == 100.0
    assert model.remaining(0.0, 0.9) == 1_000.0
    # a job that already outlived every short one can only be a long one
    assert model.remaining(400.0, 0.1) == 600.0


def test_duration_model_keeps_only_the_most_recent_run_times():
    # a batch of short jobs, then a batch of long ones: the model follows the newer batch
    model = DurationModel([100.0] * 10, window=10)
    for _ in range(10):
        model.add(5_000.0)
    assert len(model) == 10
    assert model.remaining(0.0, 0.1) == 5_000.0
    # the same history without a window still mostly believes in short jobs
    assert DurationModel([100.0] * 10 + [5_000.0] * 10, window=100).remaining(0.0, 0.1) == 100.0


def test_window_must_be_positive():
    with pytest.raises(ValueError, match="window"):
        DurationModel(window=0)


def test_forward_replay_counts_what_running_jobs_have_left():
    # 1 GPU, held by a job that ran 700 s of a history where every job ran 1,000 s: the queued
    # job starts in 300 s, then the next one 1,000 s after that.
    model = DurationModel([1_000.0] * 20)
    node = Node("n0", 1, 4.0, 8_000)
    busy = RunningJob("r", "u", (Allocation(0, "n0", (0,), 1.0, 1_000),), attained_service=700.0)
    queue = [QueuedJob(f"w{i}", "u", 1, 1, 1.0, 1_000, 0, 100.0 + i) for i in range(2)]
    starts = forward_starts(Snapshot([node], [busy], queue), 5_000.0, "fifo", model)
    assert starts == {"w0": [5_300.0, 5_300.0], "w1": [6_300.0, 6_300.0]}


def test_without_history_a_short_running_job_is_expected_to_end_soon():
    # The live platform's first minutes: no job ended yet, one ran 30 s. The old prior said a
    # queued job behind it would start "in 20 min-5.1 h"; it started 10 s later.
    model = DurationModel()
    assert model.remaining(30.0, 0.1) < 10.0
    assert model.remaining(30.0, 0.5) == pytest.approx(30.0)  # as likely to run as long again
    # a job that ran for hours is not expected to end in seconds
    assert model.remaining(7_200.0, 0.1) > 600.0


def test_a_few_run_times_set_the_scale_of_a_fresh_job():
    # three jobs ended, each after about a minute: a fresh job is no longer "an hour"
    short = DurationModel([50.0, 60.0, 70.0])
    assert short.remaining(0.0, 0.5) == pytest.approx(60.0)
    assert short.remaining(0.0, 0.9) < DurationModel().remaining(0.0, 0.9)


def _one_gpu_busy(ran: float):
    node = Node("n0", 1, 4.0, 8_000)
    busy = RunningJob("r", "u", (Allocation(0, "n0", (0,), 1.0, 1_000),), attained_service=ran)
    queue = [QueuedJob("w", "u", 1, 1, 1.0, 1_000, 0, 100.0)]
    return Snapshot([node], [busy], queue)


def test_queue_report_without_history_says_seconds_for_a_short_job():
    (entry,) = queue_report(_one_gpu_busy(30.0), 1_000.0, "fifo", DurationModel())
    # the job behind it: a few seconds to a few minutes, said in the reason too
    assert entry.eta_low_s < 60.0 and entry.eta_high_s < 600.0
    assert "expected to start in 3 s-" in entry.reason


def test_simulator_and_live_report_give_the_same_range():
    # the simulator judges the ETA through predict_waiting; dlaas queue/show read queue_report
    model = DurationModel([100.0, 300.0, 900.0, 2_700.0, 8_100.0] * 4)
    snap, now = _one_gpu_busy(200.0), 1_000.0
    (entry,) = queue_report(snap, now, "fifo", model)
    low, high = predict_waiting(snap, now, "fifo", model, ["w"])["w"]
    assert (entry.eta_low_s, entry.eta_high_s) == (low - now, high - now)
    assert low < high


def test_eta_quantiles_do_not_change_decisions(monkeypatch):
    # The ETA only reports: replaying with other quantiles changes ranges, never who runs when.
    jobs = [TraceJob(f"j{i}", 40.0 * i, 300.0 + 170.0 * (i % 7), 1 + i % 3) for i in range(40)]

    def run() -> dict:
        return simulate(jobs, 2, 2, "default", per_job=True)

    base = run()
    monkeypatch.setattr(eta, "ETA_QUANTILES", (0.4, 0.6))
    other = run()
    starts = [(r[0], r[3], r[4], r[5]) for r in base["_per_job"]]
    assert starts == [(r[0], r[3], r[4], r[5]) for r in other["_per_job"]]
    assert base["avg_jct"] == other["avg_jct"]
    # ...while the ranges did change (the test can fail)
    assert [r[6] for r in base["_per_job"]] != [r[6] for r in other["_per_job"]]


def test_the_waited_score_judges_the_eta_given_at_submit():
    # One GPU. j0 runs 10,000 s; j1 arrives 10 s later, when nothing has ended yet and j0 has run
    # 10 s, so its ETA at submit says "within about 100 s". It starts at 10,000 s: a re-issued
    # ETA would have caught up with that, the one given at submit did not, and that one counts.
    jobs = [TraceJob("j0", 0.0, 10_000.0, 1), TraceJob("j1", 10.0, 100.0, 1)]
    m = simulate(jobs, 1, 1, "fifo", per_job=True, progress=False)
    (low, high) = next(r[6] for r in m["_per_job"] if r[0] == 10.0)
    assert high < 1_000.0
    assert m["waited"] == 1
    assert m["eta_in_range_waited"] == 0.0
    assert m["median_wait_waited"] == pytest.approx(9_990.0)
    assert m["eta_median_width_waited"] == pytest.approx(high - low)


def _heavy_tail_case(started_ago: float):
    # Most jobs ran 100 s, a few 100,000 s: the pessimistic replay says the queued job waits
    # 100,000 s behind the running one, the median replay 100 s.
    model = DurationModel([100.0] * 10 + [100_000.0] * 2)
    node = Node("n0", 1, 4.0, 8_000)
    now = 10_000.0
    busy = RunningJob(
        "r", "u", (Allocation(0, "n0", (0,), 1.0, 1_000),), start_time=now - started_ago
    )
    queue = [QueuedJob("w", "u", 1, 1, 1.0, 1_000, 0, now)]
    return Snapshot([node], [busy], queue), now, model


def test_high_end_is_capped_by_the_median_replay_and_the_queues_pace():
    # The running job started 60 s ago: the queue drains one GPU per 900 s (DRAIN_WINDOW_S), so
    # the pace says 900 s; the cap is the larger of 3 x 100 s and 2 x 900 s.
    snap, now, model = _heavy_tail_case(started_ago=60.0)
    low, high = eta.eta_ranges(snap, now, "fifo", model)["w"]
    assert low == pytest.approx(now + 100.0)
    assert high == pytest.approx(now + eta.HIGH_CAP_DRAIN * eta.DRAIN_WINDOW_S)
    # the uncapped pessimistic replay, for contrast (the test can fail)
    assert forward_starts(snap, now, "fifo", model)["w"][1] == pytest.approx(now + 100_000.0)


def test_without_a_recent_start_the_pessimistic_replay_stands():
    # Nothing (re)started in the last DRAIN_WINDOW_S: the queue's pace is unknown, no cap.
    snap, now, model = _heavy_tail_case(started_ago=5_000.0)
    low, high = eta.eta_ranges(snap, now, "fifo", model)["w"]
    assert (low, high) == (pytest.approx(now + 100.0), pytest.approx(now + 100_000.0))


def test_a_job_that_can_never_fit_has_an_infinite_range():
    snap, now, model = _heavy_tail_case(started_ago=60.0)
    big = QueuedJob("big", "u", 2, 1, 1.0, 1_000, 0, now)
    snap = Snapshot(snap.nodes, snap.running, [*snap.queue, big])
    (entry,) = [e for e in queue_report(snap, now, "fifo", model) if e.job_id == "big"]
    assert entry.eta_low_s == entry.eta_high_s == float("inf")
    assert "can never fit this cluster" in entry.reason


def test_a_cpu_only_cluster_counts_running_jobs_by_their_allocated_cpus():
    # A running job that declared no CPUs per learner (cpus_per_learner None) holds what it
    # was allocated: 2 CPUs of the node's 3. The replay used to multiply by None (TypeError).
    node = Node("n0", 0, 3.0, 8_000)
    busy = RunningJob("r", "u", (Allocation(0, "n0", (), 2.0, 1_000),), attained_service=700.0)
    queue = [QueuedJob("w", "u", 1, 0, 2.0, 1_000, 0, 100.0)]
    model = DurationModel([1_000.0] * 10)
    starts = forward_starts(Snapshot([node], [busy], queue), 5_000.0, "fifo", model)
    # 1 CPU free, 2 needed: w starts when r ends (1,000 s run, 700 s of it done)
    assert starts == {"w": [5_300.0, 5_300.0]}


def test_a_running_jobs_progress_sets_when_the_queue_behind_it_starts():
    """A job whose progress says it has 100 s left frees its GPUs then, whatever the model
    would guess from its run time (here: 10,000 s jobs only)."""
    node = Node("n0", 1, 8.0, 8_000)
    alloc = Allocation(0, "n0", (0,), 1.0, 1_000)
    waiting = QueuedJob("q", "u", 1, 1, 1.0, 1_000, 0, 5.0)
    model = DurationModel([10_000.0] * 20)

    def eta_of(remaining: float | None) -> tuple[float, float]:
        running = RunningJob(
            "r", "u", (alloc,), start_time=0.0, attained_service=50.0, remaining_s=remaining
        )
        snap = Snapshot([node], [running], [waiting])
        return predict_waiting(snap, 50.0, "fifo", model, ["q"])["q"]

    lo, hi = eta_of(100.0)
    assert lo == pytest.approx(50.0 + 80.0) and hi == pytest.approx(50.0 + 120.0)
    lo, hi = eta_of(None)  # unknown: the model's 10,000 s jobs
    assert lo == pytest.approx(50.0 + 9_950.0)


def test_the_simulators_eta_knows_running_jobs_time_left_from_the_trace():
    """The case above with progress known (the default): j0's 9,990 s left put j1's range
    around its real start (0.8-1.2x of the wait), where the model alone said ~100 s."""
    jobs = [TraceJob("j0", 0.0, 10_000.0, 1), TraceJob("j1", 10.0, 100.0, 1)]
    m = simulate(jobs, 1, 1, "fifo", per_job=True)
    (low, high) = next(r[6] for r in m["_per_job"] if r[0] == 10.0)
    assert (low, high) == pytest.approx((10.0 + 0.8 * 9_990.0, 10.0 + 1.2 * 9_990.0))
    assert m["eta_in_range_waited"] == 1.0
