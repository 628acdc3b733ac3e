"""The progress reader never makes a caller wait for a look another caller has under way:
only the caller whose turn it is to look (`due`) calls the engine, the others get what the
last look saw at once. The API relies on it to answer those others on its event loop."""

from __future__ import annotations

import threading

from dlaas.adapters.job_progress import ProgressReader
from dlaas.adapters.store.base import JobRecord
from dlaas.domain.status import Status

MANIFEST = """
name: p
learners: 1
framework: {name: pytorch, command: python train.py}
"""


class SlowLogs:
    """FAKE LogReader whose tail blocks until released (an engine that is slow to answer)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.lines = [(99.0, "epoch 1/10 loss=1")]

    def tail(self, job_id: str, learner: int, n: int) -> list[tuple[float, str]]:
        self.entered.set()
        assert self.release.wait(10), "the test never released the look"
        return self.lines[-n:]


def test_only_a_due_look_calls_the_engine_and_nobody_waits_for_it():
    now = [100.0]
    reader = ProgressReader(clock=lambda: now[0], ttl_s=2.0)
    logs = SlowLogs()
    record = JobRecord("j", "u", "p", MANIFEST, 0.0, status=Status.PROCESSING)
    assert reader.due(record)  # never looked at
    looking = threading.Thread(target=reader.of, args=(record, logs))
    looking.start()
    try:
        assert logs.entered.wait(10)
        # The look is under way: nobody else is due, and asking returns at once.
        assert not reader.due(record)
        done = threading.Event()
        threading.Thread(target=lambda: (reader.of(record, logs), done.set())).start()
        assert done.wait(2), "a caller that does not look waited for the look in flight"
    finally:
        logs.release.set()
        looking.join(10)
    assert reader.of(record, logs).position.done == 1  # what the look saw
    now[0] = 103.0  # past the ttl: due again
    assert reader.due(record)
    final = JobRecord("j", "u", "p", MANIFEST, 0.0, status=Status.COMPLETED)
    assert not reader.due(final)  # a final job is never looked at
