"""What deleting a job does to its results, and the contract of the purge task (pure).

A job's results (model, metrics, checkpoints/, logs/) stay in its results bucket under
`<job_id>/` when the job is deleted, unless the user asks for a purge (`dlaas delete JOB
--purge`) or the administrator's retention (`DLAAS_RESULTS_RETENTION_DAYS`) is past.
Purges run in the worker (services/worker), a Celery worker on a Redis broker: the API
only queues them, by task name, so a purge survives an API crash, and a worker crash
(the task is acknowledged only when done, so Redis hands it out again).

This module is the one place both sides read: the task names and arguments, the broker
options, which jobs retention reaches, and the sentences the API answers with. It does no
I/O and imports no broker or storage library.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from dlaas.domain.status import TERMINAL

if TYPE_CHECKING:
    from dlaas.adapters.store.base import JobRecord

PURGE_TASK = "dlaas.purge_results"
RETENTION_TASK = "dlaas.retention_sweep"
# The API marks a purge it queued for a delete that then failed: the worker drops it
# instead of deleting results the user still has a job (and maybe a later plain delete) for.
CANCEL_KEY_PREFIX = "dlaas:purge-cancelled:"
CANCEL_TTL_S = 7 * 86400  # longer than any purge waits in the queue
# The info key the worker sets on a job whose results retention purged.
PURGED_INFO = "results_purged"

# Retention reaches jobs that can never run again. HALTED is final too, but the user may
# resume it from the checkpoints kept with its results: those are not retention's to take.
RETAINED_ENDED = TERMINAL

DAY_S = 86400.0


@dataclass(frozen=True)
class PurgeRequest:
    """One purge: every object under `prefix` in `bucket` of the platform's S3 at `endpoint`.

    `job_id`: the deleted job; the worker waits until its record is gone (the LCM has torn
    its containers down, so nothing writes under the prefix any more). "" purges at once.
    `request_id`: the Celery task id, and the key the API cancels it by.
    """

    bucket: str
    prefix: str
    endpoint: str
    job_id: str = ""
    request_id: str = ""

    def __post_init__(self) -> None:
        # An empty prefix (or one without its "/") would reach other jobs' results.
        if not self.bucket:
            raise ValueError("purge: bucket is empty")
        if not self.prefix or not self.prefix.endswith("/"):
            raise ValueError(f"purge: prefix {self.prefix!r} must be non-empty and end in '/'")

    def task_kwargs(self) -> dict[str, Any]:
        return asdict(self)


def cancel_key(request_id: str) -> str:
    return CANCEL_KEY_PREFIX + request_id


def transport_options(visibility_timeout_s: float) -> dict[str, Any]:
    """Kombu's Redis options, alike for the API (producer) and the worker (consumer).

    A message a worker took and never acknowledged is put back after the visibility
    timeout; the unacked sweep runs often enough for that timeout to be what decides.
    """
    return {
        "visibility_timeout": visibility_timeout_s,
        "unacked_restore_interval": max(1, min(10, int(visibility_timeout_s / 2))),
        "unacked_restore_throttle": 1,
    }


def retry_backoff_max(visibility_timeout_s: float) -> int:
    """The longest wait between a task's retries: under the visibility timeout, so that a
    retry waiting in a worker is never handed out a second time meanwhile."""
    return max(1, min(600, int(visibility_timeout_s / 2)))


def ended_at(record: JobRecord) -> float:
    """When the job reached its final status (its last transition), else its last update."""
    return record.history[-1].at if record.history else record.updated_at


def retention_due(records: Iterable[JobRecord], now: float, days: float) -> list[str]:
    """Ids of the jobs whose results retention purges now, oldest ending first.

    Those that ended (RETAINED_ENDED) more than `days` ago and were not purged yet;
    `days` 0 keeps everything forever.
    """
    if days <= 0:
        return []
    cutoff = now - days * DAY_S
    due = [
        r
        for r in records
        if r.status in RETAINED_ENDED and PURGED_INFO not in r.info and ended_at(r) < cutoff
    ]
    return [r.job_id for r in sorted(due, key=ended_at)]


def where(bucket: str, prefix: str, endpoint: str = "") -> str:
    at = f" at {endpoint}" if endpoint else ""
    return f"bucket {bucket} under prefix {prefix}{at}"


def kept_text(bucket: str, prefix: str, endpoint: str = "") -> str:
    return f"kept in {where(bucket, prefix, endpoint)}"


def queued_text(bucket: str, prefix: str) -> str:
    return f"purge queued: every object in {where(bucket, prefix)} will be deleted"
