"""The round's garbage-collector pause is safe with rounds on several threads.

`schedule()` pauses the process-wide collector; the scheduler serves on many threads. The
rounds here are FAKES (`GatedRound`: it decides nothing and waits where the test says), so
two rounds overlap exactly as the test orders them.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from typing import ClassVar

import pytest

from services.scheduler.policy import Node, Snapshot, schedule
from services.scheduler.policy import round as round_module

SNAPSHOT = Snapshot(nodes=[Node("n", 1, 1.0, 1024)], running=[], queue=[])
WAIT_S = 10.0  # a bound on a hang, not a timing assertion


@pytest.fixture(autouse=True)
def collector_on():
    gc.enable()
    yield
    gc.enable()


class GatedRound:
    """FAKE round: at `run()`, calls the hook registered for its `now`, decides nothing."""

    hooks: ClassVar[dict[float, Callable[[], object]]] = {}

    def __init__(self, snapshot, now, policy, cfg, include_waits):
        self.now = now

    def run(self):
        self.hooks[self.now]()
        return []


def test_a_round_ending_does_not_cut_an_overlapping_rounds_pause_short(monkeypatch):
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen_by_b = []

    def round_a():
        a_in.set()
        assert b_in.wait(WAIT_S)  # both rounds are in

    def round_b():
        b_in.set()
        assert a_out.wait(WAIT_S)  # round A has returned meanwhile
        seen_by_b.append(gc.isenabled())

    monkeypatch.setattr(round_module, "Round", GatedRound)
    monkeypatch.setattr(GatedRound, "hooks", {1.0: round_a, 2.0: round_b})
    ta = threading.Thread(target=schedule, args=(SNAPSHOT, 1.0, "fifo"))
    tb = threading.Thread(target=schedule, args=(SNAPSHOT, 2.0, "fifo"))
    ta.start()
    assert a_in.wait(WAIT_S)
    tb.start()
    ta.join(WAIT_S)
    assert not ta.is_alive()
    a_out.set()
    tb.join(WAIT_S)
    assert not tb.is_alive()
    assert seen_by_b == [False]  # still paused while B runs
    assert gc.isenabled()  # and on again once both are done


def test_a_collector_turned_off_before_the_round_stays_off():
    gc.disable()
    schedule(SNAPSHOT, 1.0, "fifo")
    assert not gc.isenabled()


def test_the_collector_is_paused_during_a_round_and_back_after_one_that_raised(monkeypatch):
    seen = []

    def boom():
        seen.append(gc.isenabled())
        raise RuntimeError("a bug in the round")

    monkeypatch.setattr(round_module, "Round", GatedRound)
    monkeypatch.setattr(GatedRound, "hooks", {1.0: boom})
    with pytest.raises(RuntimeError):
        schedule(SNAPSHOT, 1.0, "fifo")
    assert seen == [False] and gc.isenabled()


def test_pauses_nest():
    with round_module.gc_paused():
        with round_module.gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
