"""What retention reaches and what a purge request accepts (dlaas.domain.purge: pure, no I/O)."""

from __future__ import annotations

import pytest

from dlaas.adapters.store.base import JobRecord
from dlaas.domain import purge
from dlaas.domain.status import Status, Transition

DAY = purge.DAY_S
NOW = 100 * DAY


def job(job_id: str, status: Status, ended_days_ago: float, **info) -> JobRecord:
    at = NOW - ended_days_ago * DAY
    history = [Transition(Status.QUEUED, at - 60, "submitted"), Transition(status, at, "x")]
    return JobRecord(job_id, "alice", "n", "", at - 60, status, at, history=history, info=info)


def test_retention_reaches_completed_and_failed_jobs_past_the_limit_oldest_first():
    records = [
        job("done-old", Status.COMPLETED, 10),
        job("failed-older", Status.FAILED, 20),
        job("done-recent", Status.COMPLETED, 3),
    ]
    assert purge.retention_due(records, NOW, 7) == ["failed-older", "done-old"]


def test_retention_spares_halted_running_and_already_purged_jobs():
    records = [
        job("halted", Status.HALTED, 30),  # may be resumed from its checkpoints
        job("running", Status.PROCESSING, 30),
        job("purged", Status.COMPLETED, 30, **{purge.PURGED_INFO: NOW - DAY}),
    ]
    assert purge.retention_due(records, NOW, 7) == []
    assert frozenset({Status.COMPLETED, Status.FAILED}) == purge.RETAINED_ENDED


def test_retention_zero_keeps_everything():
    assert purge.retention_due([job("old", Status.COMPLETED, 1000)], NOW, 0) == []


def test_a_job_ends_at_its_last_transition_not_its_last_update():
    record = job("done", Status.COMPLETED, 10)
    record.updated_at = NOW  # an info update later on moves nothing
    assert purge.ended_at(record) == NOW - 10 * DAY
    assert purge.retention_due([record], NOW, 7) == ["done"]


@pytest.mark.parametrize("prefix", ["", "job-1"])
def test_a_purge_needs_a_prefix_ending_in_a_slash(prefix):
    # "job-1" without its slash would reach job-10/, job-11/ ...
    with pytest.raises(ValueError, match="prefix"):
        purge.PurgeRequest("bucket", prefix, "http://s3")


def test_a_purge_request_travels_as_plain_keyword_arguments():
    req = purge.PurgeRequest("b", "job-1/", "http://s3", job_id="job-1", request_id="r")
    assert req.task_kwargs() == {
        "bucket": "b", "prefix": "job-1/", "endpoint": "http://s3",
        "job_id": "job-1", "request_id": "r",
    }  # fmt: skip
    with pytest.raises(ValueError, match="bucket"):
        purge.PurgeRequest("", "job-1/", "http://s3")


@pytest.mark.parametrize("vt", [1, 2, 300, 3600, 86400])
def test_retries_never_wait_longer_than_the_visibility_timeout(vt):
    # A retry held by a worker past the timeout would be handed out a second time.
    assert purge.retry_backoff_max(vt) <= max(1, vt / 2)
    assert purge.transport_options(vt)["unacked_restore_interval"] <= max(1, vt / 2)


def test_the_reply_texts_name_the_bucket_and_prefix():
    assert purge.kept_text("team-a--results", "job-1/") == (
        "kept in bucket team-a--results under prefix job-1/"
    )
    assert purge.kept_text("mine", "job-1/", "http://my.s3") == (
        "kept in bucket mine under prefix job-1/ at http://my.s3"
    )
    assert purge.queued_text("b", "job-1/").startswith("purge queued: every object in bucket b")
