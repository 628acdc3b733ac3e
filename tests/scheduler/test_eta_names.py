"""The ETA's run-time model by job name (services/scheduler/policy/eta.py): a user's finished
jobs of a name set how long its next one is expected to run, once enough of them ended."""

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
    predict_waiting,
    run_key,
)

SHORT = run_key("u", "short")


def model_with_a_stalled_job(shorts: int) -> DurationModel:
    """`shorts` 10 s runs of u's "short", and one 300 s run of a job that stalled."""
    model = DurationModel()
    for _ in range(shorts):
        model.add(10.0, SHORT)
    model.add(300.0, run_key("u", "hangs"))
    return model


def test_a_names_own_runs_set_its_time_once_five_ended():
    model = model_with_a_stalled_job(6)
    assert model.remaining(0.0, 0.9, SHORT) == 10.0
    # every job's runs: the stalled one is the 0.9 quantile
    assert model.remaining(0.0, 0.9) == 300.0
    # a job of a name nobody ran yet has only every job's runs to go by
    assert model.remaining(0.0, 0.9, run_key("u", "new")) == 300.0


def test_fewer_than_five_runs_of_a_name_fall_back_to_every_job():
    model = model_with_a_stalled_job(4)
    assert model.remaining(0.0, 0.9, SHORT) == model.remaining(0.0, 0.9) == 300.0
    # and a job that already ran longer than most of its name's runs: every job's, too
    model = model_with_a_stalled_job(6)
    for _ in range(5):
        model.add(400.0)
    assert model.remaining(20.0, 0.1, SHORT) == 280.0


def test_names_are_per_user_and_a_job_without_a_name_has_none():
    assert run_key("a", "train") != run_key("b", "train")
    assert run_key("a", "") == ""
    model = DurationModel()
    for _ in range(6):
        model.add(10.0, run_key("a", "train"))
    model.add(300.0)
    assert model.remaining(0.0, 0.9, run_key("a", "train")) == 10.0
    assert model.remaining(0.0, 0.9, run_key("b", "train")) == 300.0


def test_what_the_model_keeps_per_name_is_bounded():
    model = DurationModel()
    for i in range(eta.KEYED_WINDOW + 10):
        model.add(float(i), SHORT)
    # the name's last KEYED_WINDOW runs only: the oldest (0..9 s) are forgotten
    assert model.remaining(0.0, 0.0, SHORT) == 10.0
    for i in range(eta.KEYED_NAMES - 1):
        for _ in range(5):
            model.add(1_000.0, run_key("u", f"job{i}"))
    assert model.remaining(0.0, 0.0, SHORT) == 10.0  # KEYED_NAMES names: all kept
    for _ in range(5):
        model.add(1_000.0, run_key("u", "one-more"))
    # one more: the name that ended longest ago is forgotten, every job's runs again
    assert model.remaining(0.0, 0.0, SHORT) == model.remaining(0.0, 0.0) == 1_000.0
    assert model.remaining(0.0, 0.0, run_key("u", "job0")) == 1_000.0


def test_a_queued_jobs_range_comes_from_its_names_runs():
    """Ten short jobs queued behind a job with 100 s left, one GPU: a stalled job's 300 s in
    the history widens their ranges unless their name's runs say 10 s."""
    node = Node("n0", 1, 8.0, 8_000)
    running = RunningJob(
        "r", "u", (Allocation(0, "n0", (0,), 1.0, 1_000),), start_time=0.0, remaining_s=100.0
    )
    model = model_with_a_stalled_job(6)

    def ranges(name: str) -> dict[str, tuple[float, float]]:
        queue = [
            QueuedJob(f"q{i}", "u", 1, 1, 1.0, 1_000, 0, 1.0 + i, name=name) for i in range(10)
        ]
        snap = Snapshot([node], [running], queue)
        return predict_waiting(snap, 50.0, "fifo", model, [j.job_id for j in queue])

    named, unnamed = ranges("short"), ranges("")
    # the last one starts after the running job's 80-120 s and nine 10 s runs
    assert named["q9"] == pytest.approx((50.0 + 80.0 + 90.0, 50.0 + 120.0 + 90.0))
    assert unnamed["q9"][1] - unnamed["q9"][0] > 10 * (named["q9"][1] - named["q9"][0])
    # the low ends agree: the optimistic replay never reached for the stalled run
    assert unnamed["q9"][0] == named["q9"][0]
