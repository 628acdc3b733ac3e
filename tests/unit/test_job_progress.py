"""The API's and LCM's progress reader: looks at the learners' log tails at most once per
ttl, keeps the trackers between looks, and shows a gang's slowest learner."""

from __future__ import annotations

from dlaas.adapters.job_progress import ProgressReader
from dlaas.adapters.store.base import JobRecord
from dlaas.domain.status import Status

MANIFEST = """
name: p
learners: 2
framework: {name: pytorch, command: python train.py}
"""


class FakeLogs:
    """FAKE LogReader: each learner's log so far, each line with the time the engine stamped
    it (None: no stamp), and how often a tail was read."""

    def __init__(self) -> None:
        self.lines: dict[int, list[tuple[float | None, str]]] = {0: [], 1: []}
        self.reads = 0

    def tail(self, job_id: str, learner: int, n: int) -> list[tuple[float | None, str]]:
        self.reads += 1
        return self.lines[learner][-n:]


RUNNING = JobRecord("j", "u", "p", MANIFEST, 0.0, status=Status.PROCESSING)


def test_looks_once_per_ttl_and_estimates_from_the_moves():
    now = [100.0]
    reader = ProgressReader(clock=lambda: now[0], ttl_s=2.0)
    logs = FakeLogs()
    record = RUNNING
    assert reader.of(record, logs) is None  # nothing printed yet
    for t, epoch in ((110.0, 1), (120.0, 2), (130.0, 3)):
        now[0] = t
        logs.lines[0].append((t, f"epoch {epoch}/10 loss=0.5"))
        logs.lines[1].append((t, f"epoch {epoch}/10 loss=0.5"))
        p = reader.of(record, logs)
    assert p.position.done == 3 and p.rate == 0.1 and p.finish_at == 200.0
    reads = logs.reads
    now[0] = 131.0  # within the ttl: no new look, the estimate ages
    p = reader.of(record, logs)
    assert logs.reads == reads and p.remaining_s == 69.0
    # learner 1 falls behind: the gang finishes with it
    now[0] = 140.0
    logs.lines[0].append((140.0, "epoch 4/10 loss=0.4"))
    p = reader.of(record, logs)
    assert p.position.done == 3 and p.finish_at == 200.0
    # a final job shows what was seen last, without a look
    done = JobRecord("j", "u", "p", MANIFEST, 0.0, status=Status.COMPLETED)
    now[0] = 500.0
    reads = logs.reads
    assert reader.of(done, logs).position.done == 3 and logs.reads == reads


def test_a_page_of_many_jobs_looks_at_most_max_looks_running_ones():
    from dlaas.adapters.job_progress import MAX_LOOKS

    logs = FakeLogs()
    logs.lines[0] = logs.lines[1] = [(1.0, "epoch 1/10 loss=1")]
    finished = [
        JobRecord(f"f{i}", "u", "p", MANIFEST, 0.0, status=Status.COMPLETED) for i in range(10)
    ]
    running = [
        JobRecord(f"r{i}", "u", "p", MANIFEST, 0.0, status=Status.PROCESSING) for i in range(80)
    ]
    got = ProgressReader(clock=lambda: 0.0).many([*finished, *running], logs)
    assert len(got) == MAX_LOOKS  # finished jobs cost no look and take no look's place
    assert logs.reads == MAX_LOOKS * 2  # two learners each


def test_one_look_at_a_tail_with_two_moves_estimates_from_the_lines_times():
    """A reader that never looked before (another API replica, a restarted one) estimates
    at its first look: the lines' own times give the rate, not when looks saw them."""
    logs = FakeLogs()
    for t, epoch in ((110.0, 1), (120.0, 2), (130.0, 3)):
        for learner in (0, 1):
            logs.lines[learner].append((t, f"epoch {epoch}/10 loss=0.5"))
    p = ProgressReader(clock=lambda: 135.0).of(RUNNING, logs)
    # From the first move on (epoch 2 at 120 s to epoch 3 at 130 s): 0.1 epochs a second.
    assert p.position.done == 3 and p.rate == 0.1 and p.finish_at == 200.0
    assert p.remaining_s == 65.0


def test_lines_read_again_in_a_later_tail_do_not_restart_the_run():
    now = [135.0]
    reader = ProgressReader(clock=lambda: now[0], ttl_s=1.0)
    logs = FakeLogs()
    for t, epoch in ((110.0, 1), (120.0, 2), (130.0, 3)):
        for learner in (0, 1):
            logs.lines[learner].append((t, f"epoch {epoch}/10 loss=0.5"))
    reader.of(RUNNING, logs)
    now[0] = 145.0
    for learner in (0, 1):
        logs.lines[learner].append((140.0, "epoch 4/10 loss=0.5"))
    p = reader.of(RUNNING, logs)  # the tail holds epochs 1-3 again, then 4
    assert p.position.done == 4 and p.rate == 0.1 and p.finish_at == 200.0
    # A learner resumed from an earlier checkpoint (a new line, back at epoch 2): a new run.
    now[0] = 160.0
    for learner in (0, 1):
        logs.lines[learner].append((150.0, "epoch 2/10 loss=0.6"))
    p = reader.of(RUNNING, logs)
    assert p.position.done == 2 and p.rate is None


def test_lines_without_stamps_count_as_seen_at_the_look():
    now = [100.0]
    reader = ProgressReader(clock=lambda: now[0], ttl_s=1.0)
    logs = FakeLogs()
    for t, epoch in ((110.0, 1), (120.0, 2), (130.0, 3)):
        now[0] = t
        for learner in (0, 1):
            logs.lines[learner].append((None, f"epoch {epoch}/10 loss=0.5"))
        p = reader.of(RUNNING, logs)
    assert p.position.done == 3 and p.rate == 0.1 and p.finish_at == 200.0
