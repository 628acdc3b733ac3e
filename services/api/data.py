"""The REST API's data routes: upload and list training data in the caller's team namespace.

`dlaas data upload BUCKET FILES` and `dlaas data ls` go through here, so a user never holds
the platform's S3 key: the API writes with it, into `team--bucket` only (dlaas.domain.namespace).

A team with a storage quota (`dlaas teams set --storage-quota`) has each upload counted
against it first: the bytes its buckets hold now, by a listing of every `team--*` bucket
(S3 keeps no per-prefix total; a counter of our own would miss what jobs write there and
what is deleted). The listing stops as soon as the sum is past what still fits, and is
bounded at MAX_COUNTED_OBJECTS objects (a page of 1,000 per S3 call): a team with more
objects than that is refused, told to delete some. An upload past the quota is a 413
naming the quota and the current use. Two uploads at once may both fit alone and overshoot
together by at most one upload each (max_data_object_mb).
"""

from __future__ import annotations

import tempfile
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel

from dlaas.adapters.s3 import ensure_bucket, list_page
from dlaas.domain.account_ops import storage_refusal
from dlaas.domain.errors import InvalidRequest, PayloadTooLarge
from dlaas.domain.namespace import NamespaceError, check_bucket, team_bucket, user_bucket
from services.api.deps import CallerDep, DepsDep, audit
from services.api.models import error_responses

router = APIRouter(prefix="/v1/data", tags=["data"])

MAX_KEY = 512
# The most objects one upload's quota check lists (100 S3 calls).
MAX_COUNTED_OBJECTS = 100_000
# Bodies are spooled to disk beyond this, then streamed to S3.
SPOOL_BYTES = 8 * 2**20


class DataObject(BaseModel):
    key: str
    size: int


class BucketListing(BaseModel):
    bucket: str
    objects: list[DataObject]
    truncated: bool


class UploadReply(BaseModel):
    bucket: str
    key: str
    size: int


def _bucket(caller, name: str) -> str:
    try:
        return team_bucket(caller.team, check_bucket(caller.team, name))
    except NamespaceError as exc:
        raise InvalidRequest(f"bucket: {exc}") from None


def _key(key: str) -> str:
    if not key or len(key) > MAX_KEY or "\x00" in key or key.startswith("/"):
        raise InvalidRequest(f"key: must be 1-{MAX_KEY} characters, no NUL, not starting with '/'")
    if ".." in key.split("/"):
        raise InvalidRequest("key: must not contain '..' segments")
    return key


def team_bytes(s3, team: str, stop_above: int) -> int:
    """Bytes the team's buckets hold, or a number past `stop_above` as soon as the listing
    gets there; PayloadTooLarge past MAX_COUNTED_OBJECTS objects."""
    prefix = team_bucket(team, "")
    total = counted = 0
    pages = s3.get_paginator("list_objects_v2")
    for b in s3.list_buckets().get("Buckets", []):
        if not prefix or not b["Name"].startswith(prefix):
            continue
        for page in pages.paginate(Bucket=b["Name"], PaginationConfig={"PageSize": 1000}):
            for o in page.get("Contents", []):
                total += int(o.get("Size") or 0)
                counted += 1
            if total > stop_above:
                return total
            if counted >= MAX_COUNTED_OBJECTS:
                raise PayloadTooLarge(
                    f"storage quota: team {team}'s buckets hold more than "
                    f"{MAX_COUNTED_OBJECTS} objects, too many to count against its quota; "
                    "delete some, or ask an administrator to lift the quota"
                )
    return total


def check_storage_quota(deps, team: str, adding: int) -> None:
    """Refuse (413) an upload of `adding` bytes that would take the team past its quota."""
    found = deps.store.get_team(team)
    quota = found.storage_quota_bytes if found is not None else 0
    if not quota:
        return
    used = team_bytes(deps.s3, team, stop_above=max(0, quota - adding))
    refusal = storage_refusal(team, quota, used, adding)
    if refusal:
        raise PayloadTooLarge(refusal)


@router.get("", response_model=list[str])
def list_buckets(deps: DepsDep, caller: CallerDep) -> list[str]:
    """Your team's buckets (names as you use them in manifests)."""
    prefix = team_bucket(caller.team, "")
    names = [b["Name"] for b in deps.s3.list_buckets().get("Buckets", [])]
    return sorted(user_bucket(caller.team, n) for n in names if prefix and n.startswith(prefix))


@router.get("/{bucket}", response_model=BucketListing, responses=error_responses(422))
def list_objects(
    bucket: str,
    deps: DepsDep,
    caller: CallerDep,
    prefix: Annotated[str, Query(max_length=MAX_KEY)] = "",
    limit: Annotated[int, Query(ge=1, le=1000)] = 1000,
) -> BucketListing:
    """Objects in one of your team's buckets."""
    real = _bucket(caller, bucket)
    page = list_page(deps.s3, real, prefix, limit)
    if page is None:
        raise InvalidRequest(f"bucket: your team has no bucket {bucket!r}")
    return BucketListing(
        bucket=bucket,
        objects=[DataObject(key=o["Key"], size=o["Size"]) for o in page.get("Contents", [])],
        truncated=bool(page.get("IsTruncated")),
    )


@router.put("/{bucket}/{key:path}", response_model=UploadReply, responses=error_responses(413, 422))
async def upload(bucket: str, key: str, request: Request, deps: DepsDep, caller: CallerDep):
    """Upload one object (the request body) into one of your team's buckets (made if new);
    413 past the body limit or the team's storage quota."""
    real, key = _bucket(caller, bucket), _key(key)
    limit = deps.api.max_data_object_mb * 2**20
    size = 0
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"body: larger than {deps.api.max_data_object_mb} MiB")
            spool.write(chunk)
        spool.seek(0)

        def put() -> None:
            check_storage_quota(deps, caller.team, size)
            ensure_bucket(deps.s3, real)
            deps.s3.upload_fileobj(spool, real, key)

        await run_in_threadpool(put)
    audit(deps, caller, "data-upload", f"{bucket}/{key}", f"{size} bytes")
    return UploadReply(bucket=bucket, key=key, size=size)
