"""Progress read off real log shapes (the examples' and tqdm's), and the finish estimate."""

from __future__ import annotations

import pytest

from dlaas.domain.errors import InvalidManifest
from dlaas.domain.manifest import manifest_from_dict
from dlaas.domain.progress import (
    Position,
    Progress,
    ProgressSpec,
    Tracker,
    job_progress,
    position,
    timed_positions,
)

# What examples/pytorch and examples/pytorch-ddp print (rank 0).
PYTORCH = [
    "torch 2.5.1: 1437 training, 360 test images",
    "epoch 1/20 loss=2.1000 accuracy=0.4100",
    "epoch 2/20 loss=1.5000 accuracy=0.6100",
    "epoch 3/20 loss=0.4200 acc=0.9100 epoch_s=0.512",
]
# Keras' fit(verbose=2) in examples/keras: the header when an epoch starts, a line when it ends.
KERAS = [
    "Epoch 1/5",
    "22/22 - 2s - 95ms/step - accuracy: 0.5012 - loss: 1.6341",
    "Epoch 2/5",
    "22/22 - 0s - 9ms/step - accuracy: 0.8747 - loss: 0.5183",
    "Epoch 3/5",
]


def test_epoch_lines_of_the_examples():
    assert position(PYTORCH) == Position(3.0, 20.0, "epoch")
    assert position(PYTORCH).fraction == pytest.approx(0.15)


def test_keras_header_counts_the_epoch_as_started_not_done():
    assert position(KERAS) == Position(2.0, 5.0, "epoch")
    assert position(KERAS[:4]) == Position(2.0, 5.0, "epoch")
    # verbose=1: the bar inside epoch 3 adds its share
    bar = "11/22 [=============>...............] - ETA: 0s - accuracy: 0.9 - loss: 0.3"
    assert position([*KERAS, bar]).done == pytest.approx(2.5)
    keras3 = "\r11/22 \u2501\u2501\u2501\u2501\u2501\u2501 0s 20ms/step - accuracy: 0.9 - loss: 0.3"
    assert position([*KERAS, keras3]).done == pytest.approx(2.5)


def test_tqdm_counter_alone_and_after_an_epoch_line():
    tqdm = " 45%|████▌     | 450/1000 [00:10<00:12, 43.2it/s]"
    assert position(["starting", tqdm]) == Position(450.0, 1000.0, "step")
    # a carriage-return-rewritten bar: its last state counts
    assert (
        position(["  1%|  | 10/1000 [00:00<01:40]\r 45%|████▌ | 450/1000 [00:10<00:12]"]).done
        == 450
    )
    # a bar per epoch: after `epoch 1/4` the bar is epoch 2's share
    after = ["epoch 1/4 loss=0.5", " 50%|█████     | 25/50 [00:01<00:01, 25it/s]"]
    assert position(after) == Position(1.5, 4.0, "epoch")


def test_step_with_a_manifest_total_and_without():
    lines = ["step=100 loss=0.9", "step=200 loss=0.8", "iteration: 250 lr=0.1"]
    assert position(lines, ProgressSpec(total_steps=1000)) == Position(250.0, 1000.0, "step")
    assert position(lines).fraction is None  # no total: a position, no percentage
    assert position(["global_step=30/120 loss=1"]) == Position(30.0, 120.0, "step")
    assert position(["epoch 7 loss=1"], ProgressSpec(total_epochs=10)).fraction == 0.7


def test_lines_that_are_not_progress():
    assert position(["downloading 2026/11/26 data", "loss=0.3", "ranks 1/2 ready"]) is None
    # the ddp example's last line (`steps=` is a count, not a position) changes nothing
    assert position([*PYTORCH, "steps=300 seconds=3.1 steps_per_s=96.7"]) == Position(
        3.0, 20.0, "epoch"
    )


def test_the_manifest_field_is_bounded_and_named():
    base = {"name": "j", "framework": {"name": "pytorch", "command": "python t.py"}}
    assert (
        manifest_from_dict({**base, "progress": {"total_steps": 500}}).progress.total_steps == 500
    )
    assert manifest_from_dict(base).progress == ProgressSpec()
    for bad in ({"total_steps": 0}, {"steps": 5}):
        with pytest.raises(InvalidManifest) as exc:
            manifest_from_dict({**base, "progress": bad})
        assert "progress" in str(exc.value)


def test_rate_and_finish_from_when_the_position_moved():
    t = Tracker()
    line = lambda e: [f"epoch {e}/10 loss=1"]
    assert t.observe(position(["starting"]), 0.0) is None
    assert t.observe(position(line(1)), 10.0).rate is None  # one sample: no rate yet
    assert t.observe(position(line(1)), 15.0).rate is None  # the same position again
    p = t.observe(position(line(2)), 20.0)
    assert p.rate == pytest.approx(0.1)
    assert p.finish_at == pytest.approx(20.0 + 8 / 0.1)
    # three samples: the rate counts from the first move (the first look's time is unsure)
    p = t.observe(position(line(4)), 30.0)
    assert p.rate == pytest.approx(0.2)
    assert p.remaining_s == pytest.approx(30.0)
    # looked at later without a move: the finish stands, the time left shrinks
    p = t.observe(position(line(4)), 40.0)
    assert p.finish_at == pytest.approx(60.0) and p.remaining_s == pytest.approx(20.0)
    # overdue: finishes now at the earliest
    assert t.observe(position(line(4)), 90.0).remaining_s == 0.0


def test_a_learner_resumed_from_an_earlier_checkpoint_starts_a_new_run():
    t = Tracker()
    for when, epoch in ((0.0, 1), (10.0, 2), (20.0, 3)):
        t.observe(Position(epoch, 10, "epoch"), when)
    p = t.observe(Position(2, 10, "epoch"), 100.0)
    assert p.rate is None and t.samples == [(100.0, 2)]


def test_job_progress_is_its_slowest_learner():
    a = Progress(Position(5, 10, "epoch"), 0.0, 0.1, 50.0, 50.0)
    b = Progress(Position(3, 10, "epoch"), 0.0, 0.1, 70.0, 70.0)
    c = Progress(Position(9, None, "step"), 0.0)
    assert job_progress({0: a, 1: b, 2: c}) is b
    assert job_progress({2: c}) is c
    assert job_progress({}) is None
    assert b.view()["percent"] == 30.0 and b.view()["remaining_s"] == 70.0


def test_timed_positions_are_the_lines_that_moved_it_at_their_times():
    lines = [
        (1.0, "Epoch 3/10"),  # Keras' header: 2 done, the counters after it add the share
        (2.0, "50/100 [=====>....] - ETA: 1s - loss: 0.5"),
        (2.5, "some warning"),
        (3.0, "100/100 [==========] - 2s - loss: 0.4"),
    ]
    got = [(at, p.done) for at, p in timed_positions(lines)]
    assert got == [(1.0, 2.0), (2.0, 2.5), (3.0, 3.0)]
    # A tracker fed the same tail twice keeps one run; the header read again sets the context.
    tracker = Tracker()
    tracker.observe_lines(lines[:2], None, 2.0)
    p = tracker.observe_lines(lines, None, 3.5)
    assert p.position.done == 3.0 and p.rate == pytest.approx(0.5)  # from 2.5 at 2 s to 3 at 3 s
