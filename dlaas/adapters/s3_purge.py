"""Delete a job's results from the platform's S3: the core of the worker's purge task
(services.worker.tasks), with no broker.

`purge_prefix` lists and deletes every object under a prefix, a page (up to 1000 keys)
at a time. It is idempotent: what is gone stays gone, a missing bucket is nothing to do,
and a run that stopped halfway (a crash, an S3 error) is finished by the next one. Errors
other than "no such bucket" are raised as TemporaryError, for the task to retry.
"""

from __future__ import annotations

import logging

from botocore.exceptions import BotoCoreError, ClientError

from dlaas.adapters.s3 import missing_bucket
from dlaas.domain import errors

log = logging.getLogger(__name__)


def purge_prefix(s3, bucket: str, prefix: str) -> int:
    """Delete every object in `bucket` under `prefix`; how many this call deleted."""
    # The request model refuses empty and unterminated prefixes already; this is the last
    # line before a delete that would reach other jobs' results.
    if not prefix or not prefix.endswith("/"):
        raise ValueError(f"purge: prefix {prefix!r} must be non-empty and end in '/'")
    deleted = 0
    seen: set[str] = set()
    try:
        while True:
            # Always the first page again: the previous page's keys are gone, and a
            # continuation token would skip objects written meanwhile.
            page = s3.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1000)
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if not keys:
                return deleted
            if all(k["Key"] in seen for k in keys):
                # Deleted without an error yet still listed: stop rather than loop.
                raise errors.TemporaryError(
                    f"purge of {bucket}/{prefix}: {keys[0]['Key']} is listed after its delete"
                )
            seen.update(k["Key"] for k in keys)
            reply = s3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
            refused = reply.get("Errors") or []
            if refused:
                first = refused[0]
                raise errors.TemporaryError(
                    f"purge of {bucket}/{prefix}: {len(refused)} object(s) not deleted, first "
                    f"{first.get('Key')}: {first.get('Code', 'DeleteFailed')} "
                    f"{first.get('Message', '')}"
                )
            deleted += len(keys)
            log.info("purged %d object(s) from %s/%s", len(keys), bucket, prefix)
    except ClientError as exc:
        if missing_bucket(exc):
            return deleted
        raise errors.TemporaryError(f"purge of {bucket}/{prefix}: {exc}") from exc
    except BotoCoreError as exc:
        raise errors.unavailable("the platform's S3", exc) from exc
