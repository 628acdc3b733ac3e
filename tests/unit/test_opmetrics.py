"""services/api/opmetrics.py's pure part: what job histories say for the operator's series."""

from __future__ import annotations

from dlaas.adapters.store.base import JobRecord
from dlaas.domain.status import Status, Transition
from services.api.opmetrics import buckets, summarize

S = Status


def record(job_id: str, *steps: tuple[Status, float, str] | tuple[Status, float, str, str]):
    history = [Transition(st[0], st[1], st[2], *(st[3:])) for st in steps]
    return JobRecord(job_id, "u", "n", "", 0.0, status=history[-1].status, history=history)


def test_waits_deploys_requeues_and_failures_come_from_the_histories():
    jobs = [
        # Placed after 10 s, deployed in 2 s, preempted, placed again after 30 s, ...
        record(
            "a",
            (S.QUEUED, 0, "submitted"),
            (S.PENDING, 10, "placed"),
            (S.DOWNLOADING, 12, "helper up"),
            (S.PROCESSING, 20, "training"),
            (S.QUEUED, 25, "preempted: by job-b"),
            (S.PENDING, 55, "placed"),
            # ... the helper step seen late: the deploy ends at PROCESSING.
            (S.PROCESSING, 60, "training"),
            (S.QUEUED, 70, "restart 1/3 from the last checkpoint at once: node lost"),
        ),
        # A deploy that failed ends no deploy duration; its code is counted.
        record(
            "b",
            (S.QUEUED, 0, "submitted"),
            (S.PENDING, 1, "placed"),
            (S.FAILED, 3, "image missing", "image_unavailable"),
        ),
        record("c", (S.QUEUED, 0, "submitted"), (S.FAILED, 5, "no capacity")),
        record("d", (S.QUEUED, 90, "submitted")),
    ]
    s = summarize(jobs, now=100)
    assert s.by_status == {S.QUEUED: 2, S.FAILED: 2}
    assert sorted(s.waits) == [1, 10, 30]
    assert s.oldest_wait == 30  # job a, requeued at 70; d waits only 10 s
    assert sorted(s.deploys) == [2, 5]
    assert s.requeues == {"preempted": 1, "restarted": 1}
    assert s.failures == {"image_unavailable": 1, "unknown": 1}


def test_a_resume_is_its_own_cause():
    halted = record(
        "h", (S.QUEUED, 0, "submitted"), (S.HALTED, 1, "by user"), (S.QUEUED, 2, "resumed")
    )
    assert summarize([halted], now=3).requeues == {"resumed": 1}


def test_buckets_are_cumulative_and_end_with_inf():
    assert buckets([0.5, 2, 2, 50], (1, 5, 10)) == [
        ("1.0", 1.0),
        ("5.0", 3.0),
        ("10.0", 3.0),
        ("+Inf", 4.0),
    ]
