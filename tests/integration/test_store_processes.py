"""Two processes append to one SQLite job store at once and nothing is lost: every seq of a
shared job's history is inserted exactly once, by one of the two (each write is a short
`BEGIN IMMEDIATE` transaction; (job_id, seq) is the history's key). Real forked processes, so not in tests/unit; the store's contract
and its threads are in tests/unit/test_store_contract.py.
"""

from __future__ import annotations

import multiprocessing

from dlaas.adapters.store.base import JobRecord
from dlaas.adapters.store.sqlite import SqliteJobStore
from dlaas.domain.status import Status, Transition


def job(job_id: str, user: str = "alice", created_at: float = 100.0) -> JobRecord:
    return JobRecord(
        job_id=job_id,
        user=user,
        name=f"name-{job_id}",
        manifest_yaml="name: x\n",
        created_at=created_at,
        history=[Transition(Status.QUEUED, created_at, "submitted")],
    )


def t(status: Status, at: float, reason: str = "r") -> Transition:
    return Transition(status, at, reason)


SEQS = 150
OWN_JOBS = 30


def _hammer(path: str, worker: int, barrier, results) -> None:
    """One process: its own jobs, then every seq of the shared job (racing the other)."""
    s = SqliteJobStore(path)
    barrier.wait(timeout=20)
    for i in range(OWN_JOBS):
        s.create(job(f"w{worker}-{i}", user=f"u{worker}", created_at=float(i)))
        s.record_transition(f"w{worker}-{i}", 1, t(Status.PENDING, float(i) + 0.5))
    won = 0
    for seq in range(1, SEQS + 1):
        won += s.record_transition("shared", seq, t(Status.PENDING, float(seq), f"w{worker}"))
        if seq % 10 == 0:
            s.update_info("shared", {f"w{worker}": seq})
    s.close()
    results.put(won)


def test_sqlite_two_processes_append_without_loss(tmp_path):
    path = str(tmp_path / "jobs.db")
    s = SqliteJobStore(path)
    s.create(job("shared"))
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_hammer, args=(path, w, barrier, results)) for w in (0, 1)]
    for p in procs:
        p.start()
    try:
        won = [results.get(timeout=30) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    assert [p.exitcode for p in procs] == [0, 0]
    # Every seq was inserted exactly once, by one of the two.
    assert sum(won) == SEQS
    shared = s.get("shared")
    assert len(shared.history) == SEQS + 1
    assert shared.last_seq == SEQS
    assert shared.history[-1].at == float(SEQS)
    assert shared.info == {"w0": SEQS, "w1": SEQS}
    for w in (0, 1):
        jobs, total = s.list(user=f"u{w}", status=Status.PENDING, limit=1000)
        assert total == OWN_JOBS and len(jobs) == OWN_JOBS
    s.close()
