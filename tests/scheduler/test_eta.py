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
    forward_starts,
)


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
