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
    """FAKE LogReader: each learner's log so far, and how often a tail was read."""

    def __init__(self) -> None:
        self.lines: dict[int, list[str]] = {0: [], 1: []}
        self.reads = 0

    def tail(self, job_id: str, learner: int, n: int) -> list[str]:
        self.reads += 1
        return self.lines[learner][-n:]


def test_looks_once_per_ttl_and_estimates_from_the_moves():
    now = [100.0]
    reader = ProgressReader(clock=lambda: now[0], ttl_s=2.0)
    logs = FakeLogs()
    record = JobRecord("j", "u", "p", MANIFEST, 0.0, status=Status.PROCESSING)
    assert reader.of(record, logs) is None  # nothing printed yet
    for t, epoch in ((110.0, 1), (120.0, 2), (130.0, 3)):
        now[0] = t
        logs.lines[0].append(f"epoch {epoch}/10 loss=0.5")
        logs.lines[1].append(f"epoch {epoch}/10 loss=0.5")
        p = reader.of(record, logs)
    assert p.position.done == 3 and p.rate == 0.1 and p.finish_at == 200.0
    reads = logs.reads
    now[0] = 131.0  # within the ttl: no new look, the estimate ages
    p = reader.of(record, logs)
    assert logs.reads == reads and p.remaining_s == 69.0
    # learner 1 falls behind: the gang finishes with it
    now[0] = 140.0
    logs.lines[0].append("epoch 4/10 loss=0.4")
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
    logs.lines[0] = logs.lines[1] = ["epoch 1/10 loss=1"]
    finished = [
        JobRecord(f"f{i}", "u", "p", MANIFEST, 0.0, status=Status.COMPLETED) for i in range(10)
    ]
    running = [
        JobRecord(f"r{i}", "u", "p", MANIFEST, 0.0, status=Status.PROCESSING) for i in range(80)
    ]
    got = ProgressReader(clock=lambda: 0.0).many([*finished, *running], logs)
    assert len(got) == MAX_LOOKS  # finished jobs cost no look and take no look's place
    assert logs.reads == MAX_LOOKS * 2  # two learners each
