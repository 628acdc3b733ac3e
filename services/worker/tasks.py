"""The worker's Celery app and tasks: purge a deleted job's results, apply retention,
deliver webhooks (services/worker/hooks.py).

`make_app(settings, store, s3, cancelled)` builds the app around its adapters (main.py
passes the real ones). The tasks are registered under the names in dlaas.domain.purge, which is
all the API knows of them (it queues by name, never importing this module).

Delivery: a task is acknowledged only once it returned (`acks_late`), so a worker killed
mid-purge leaves it unacknowledged in Redis, which hands it out again after the
visibility timeout (dlaas.domain.purge.transport_options); every task is idempotent, so running
one twice is harmless. S3 errors, and a deleted job whose record is still there (its
delete is in progress), are retried with exponential backoff, up to MAX_RETRIES times.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from celery import Celery

from dlaas.adapters.s3_purge import purge_prefix
from dlaas.adapters.store.base import JobStore
from dlaas.config import PlatformSettings
from dlaas.domain import hooks, jobspec, purge
from dlaas.domain.accounts import audit_entry
from dlaas.domain.egress import allowed_networks
from dlaas.domain.errors import InvalidManifest, JobNotFound, TemporaryError
from dlaas.domain.locations import job_locations
from dlaas.domain.stored import stored_manifest
from services.worker import hooks as hook_delivery

log = logging.getLogger(__name__)

MAX_RETRIES = 10
ACTOR = "worker"


class JobStillPresent(Exception):
    """The deleted job's record is still in the store: its delete has not finished yet."""


def make_app(
    settings: PlatformSettings,
    store: JobStore,
    s3: Any,
    cancelled: Callable[[str], bool],
    clock: Callable[[], float] = time.time,
) -> Celery:
    """The Celery app with the purge and retention tasks bound to these adapters.

    `s3`: a client for the platform's S3 with the platform's key; `cancelled(request_id)`:
    whether the API called a purge off (its delete failed after queueing it).
    """
    vt = settings.worker_visibility_timeout_s
    app = Celery("dlaas-worker", broker=settings.redis_url, set_as_current=False)
    app.conf.update(
        broker_transport_options=purge.transport_options(vt),
        broker_connection_retry_on_startup=True,
        task_ignore_result=True,
        # One task at a time, taken one at a time: a small, predictable worker.
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
    )
    retry = {
        "acks_late": True,
        # Under a process pool, a child that dies mid-task puts the task back instead of
        # dropping it (the worker runs threads: there a dead worker leaves it unacked).
        "reject_on_worker_lost": True,
        "retry_backoff": True,
        "retry_backoff_max": purge.retry_backoff_max(vt),
        "retry_jitter": False,
        "max_retries": MAX_RETRIES,
    }

    @app.task(
        name=purge.PURGE_TASK,
        autoretry_for=(TemporaryError, JobStillPresent),
        **retry,
    )
    def purge_results(
        bucket: str, prefix: str, endpoint: str, job_id: str = "", request_id: str = ""
    ) -> int:
        """Delete every object under `prefix` in `bucket`, once the job's record is gone."""
        req = purge.PurgeRequest(bucket, prefix, endpoint, job_id, request_id)
        return run_purge(req, settings, store, s3, cancelled)

    @app.task(name=purge.RETENTION_TASK, autoretry_for=(TemporaryError,), **retry)
    def retention_sweep() -> list[str]:
        """Purge the results of the jobs that ended longer ago than the retention."""
        return sweep_retention(settings, store, s3, clock())

    platform_key = settings.secrets_key.get_secret_value()
    allowed = allowed_networks(settings.egress_allow_networks)
    post = functools.partial(hook_delivery.guarded_post, allowed=allowed)

    @app.task(
        name=hooks.DELIVER_TASK,
        bind=True,
        acks_late=True,
        reject_on_worker_lost=True,
        # The delivery log counts the attempts (a redelivery after a crash is one too).
        max_retries=None,
    )
    def deliver_hook(self, hook_id: str, body: dict[str, Any], key: str) -> str:
        """POST one event to one hook, signed; retried with backoff while it may succeed."""
        outcome = hook_delivery.attempt(
            hook_id, body, key, store, platform_key, clock(),
            backoff_cap_s=purge.retry_backoff_max(vt), post=post,
        )  # fmt: skip
        if outcome.state == hooks.PENDING:
            raise self.retry(countdown=outcome.retry_in_s)
        return outcome.state

    return app


def run_purge(
    req: purge.PurgeRequest,
    settings: PlatformSettings,
    store: JobStore,
    s3: Any,
    cancelled: Callable[[str], bool],
) -> int:
    """One attempt at a purge; raises JobStillPresent or TemporaryError for a retry."""
    if req.endpoint != settings.s3_endpoint:
        # The platform's key goes to the platform's S3 only; a request naming another
        # endpoint is wrong and will stay wrong: dropped, not retried.
        log.error("purge of %s/%s refused: endpoint %s is not the platform's S3",
                  req.bucket, req.prefix, req.endpoint)  # fmt: skip
        return 0
    if req.request_id and cancelled(req.request_id):
        log.info("purge %s of %s/%s cancelled by the API (the job's delete failed)",
                 req.request_id, req.bucket, req.prefix)  # fmt: skip
        return 0
    if req.job_id:
        try:
            store.get(req.job_id)
        except JobNotFound:
            pass
        else:
            raise JobStillPresent(f"job {req.job_id} is still being deleted")
    deleted = purge_prefix(s3, req.bucket, req.prefix)
    log.info("purge of %s/%s done: %d object(s) deleted", req.bucket, req.prefix, deleted)
    return deleted


def _ended_records(store: JobStore):
    """Every job in a status retention reaches, page by page."""
    for status in sorted(purge.RETAINED_ENDED):
        offset = 0
        while True:
            page, total = store.list(status=status, offset=offset, limit=200)
            yield from page
            offset += len(page)
            if not page or offset >= total:
                break


def sweep_retention(settings: PlatformSettings, store: JobStore, s3: Any, now: float) -> list[str]:
    """Purge the results of every job past the retention; the ids purged.

    Results in a user's own object store are not the platform's to delete: skipped.
    """
    days = settings.results_retention_days
    records = {r.job_id: r for r in _ended_records(store)} if days > 0 else {}
    done = []
    for job_id in purge.retention_due(records.values(), now, days):
        record = records[job_id]
        try:
            manifest = stored_manifest(record)
        except InvalidManifest as exc:
            log.warning("retention skips %s: its manifest no longer parses (%s)", job_id, exc)
            continue
        _, results = job_locations(manifest, settings, record.team)
        if not results.platform:
            continue
        prefix = results.prefix + jobspec.results_prefix(job_id)
        deleted = purge_prefix(s3, results.bucket, prefix)
        try:
            store.update_info(job_id, {purge.PURGED_INFO: now})
        except JobNotFound:
            continue  # deleted meanwhile: its results are gone all the same
        store.append_audit(
            audit_entry(now, ACTOR, "purge-results", job_id,
                        f"retention {days:g} days: {deleted} object(s) in {results.bucket}")
        )  # fmt: skip
        done.append(job_id)
    if done:
        log.info("retention (%g days) purged the results of %d job(s)", days, len(done))
    return done
