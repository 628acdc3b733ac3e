"""Usage accounting over the REAL LCM (tests/lcm_fakes.py's in-memory ports, a fake clock):
the allocation the LCM records at each placement and the history it mirrors into the job
store give exactly the learner-hours the job held, through a preemption, a shrink, a
restart, a halt and a resume."""

from __future__ import annotations

from lcm_fakes import fake_lcm

from dlaas.domain.status import Status
from dlaas.domain.usage import ALLOCATIONS_INFO, job_usage
from dlaas.v1 import scheduler_pb2

MANIFEST = (
    "name: j\nlearners: 3\nmin_learners: 1\nmax_learners: 3\ngpus: 0\ncpus: 0.5\nmemory: 1Gi\n"
    "max_restarts: 2\nframework: {name: python, command: python3 train.py}\n"
)
T0 = 1_795_000_000.0  # 2026-11-18 (a UTC day's middle: no midnight in the test)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def _place(lcm, job_id: str, learners: int) -> None:
    lcm.scheduler.decisions = [
        scheduler_pb2.Decision(
            job_id=job_id,
            action="start",
            cause="fits",
            allocations=[
                scheduler_pb2.LearnerAllocation(learner=i, node="local") for i in range(learners)
            ],
        )
    ]
    lcm.place_round()
    assert lcm.keeper.get(job_id).status == Status.DOWNLOADING


def test_the_lcm_records_each_placement_and_usage_follows_the_history(job_store):
    clock = Clock()
    lcm = fake_lcm(job_store, clock=clock)
    lcm.submit("job-u", "alice", MANIFEST, "")
    held = []  # (seconds, learners) the test knows the job held

    clock.now += 10
    _place(lcm, "job-u", 3)
    clock.now += 600
    held.append((600, 3))
    lcm.requeue("job-u", "preempted by job-x", is_restart=False)

    clock.now += 100
    _place(lcm, "job-u", 2)  # shrunk: placed with fewer learners
    clock.now += 300
    held.append((300, 2))
    lcm.requeue("job-u", "learner 0 exited 137", is_restart=True)

    clock.now += 50
    _place(lcm, "job-u", 2)
    clock.now += 120
    held.append((120, 2))
    lcm.halt("job-u", "alice", "halted by the user")
    clock.now += 1000
    lcm.resume("job-u", "alice", "resumed by the user")

    clock.now += 5
    _place(lcm, "job-u", 1)
    clock.now += 200
    lcm.keeper.transition("job-u", Status.PROCESSING, "training")
    clock.now += 250
    held.append((450, 1))
    lcm.keeper.walk_to("job-u", Status.COMPLETED, "done")

    record = job_store.get("job-u")
    placed = [str(seq) for seq, t in enumerate(record.history) if t.status == Status.PENDING]
    assert record.info[ALLOCATIONS_INFO] == dict(zip(placed, [3, 2, 2, 1], strict=True))
    (row,) = job_usage(record, now=clock.now + 9999)
    learner_ms = sum(s * 1000 * n for s, n in held)
    assert row.usage.millicpu_ms == 500 * learner_ms
    assert row.usage.memory_mib_ms == 1024 * learner_ms
    assert row.usage.gpu_ms == 0
