"""The REST routes that read what a job produced: a learner's log (streamed, or followed
until the job ends without holding a thread) and the job's results as one tar.gz.
"""

from __future__ import annotations

import tarfile
import zlib
from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import StreamingResponse

from dlaas.adapters.logs import Pause
from dlaas.adapters.s3 import STORE_ERRORS, missing_bucket, store_error
from dlaas.domain import jobspec
from dlaas.domain.errors import InvalidRequest
from dlaas.domain.locations import job_locations
from dlaas.domain.secretbox import SecretBox
from dlaas.domain.stored import stored_manifest, stored_manifest_or_none
from services.api.auth import Caller
from services.api.deps import MAX_OFFSET, CallerDep, Deps, DepsDep, owned_job
from services.api.errors import NoResults
from services.api.follows import REFUSED_DOC, follows_of
from services.api.models import error_responses
from services.api.rules import learners_with_logs

router = APIRouter(prefix="/v1", tags=["jobs"])


@router.get(
    "/jobs/{job_id}/logs",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"text/plain": {}}, "description": "the log, one line per line"},
        **error_responses(404, 422),
        **REFUSED_DOC,
    },
)
async def job_logs(
    request: Request,
    job_id: str,
    deps: DepsDep,
    caller: CallerDep,
    learner: Annotated[int, Query(ge=0, le=MAX_OFFSET, description="learner index")] = 0,
    offset: Annotated[
        int, Query(ge=0, le=MAX_OFFSET, description="lines to skip, to resume a stream")
    ] = 0,
    follow: Annotated[bool, Query(description="keep streaming until the job ends")] = False,
) -> Response:
    """Stream a learner's log as text, one line per line; `follow` waits for the job's end.

    A follow holds no thread while it waits (services.api.follows); a user's follows on a
    replica are limited (429 with `Retry-After` beyond)."""
    follows = follows_of(request)
    user = caller.user if follow else None
    if user is not None and (refused := follows.take(user)) is not None:
        return refused.response()
    try:
        rounds = await follows.call(_log_rounds, deps, caller, job_id, learner, offset, follow)
    except BaseException:  # broad: the slot goes back whatever failed (re-raised)
        if user is not None:
            follows.give_back(user)
        raise
    lines = follows.stream(
        rounds,
        lambda line: line + "\n",
        deps.logs.poll_s / 2,  # a line is seen within about 0.5 s (poll_s 0.5)
        what=f"log stream of {job_id} learner {learner}",
        user=user,
    )
    return StreamingResponse(lines, media_type="text/plain; charset=utf-8")


def _log_rounds(
    deps: Deps, caller: Caller, job_id: str, learner: int, offset: int, follow: bool
) -> Iterator[str | Pause]:
    """The rounds of the learner's log, their first step taken before the status line goes
    out: a job whose store the platform may not connect to (EgressRefused, 422), that
    refuses the read (422) or does not answer (503) is an error, as on the metrics and
    results routes, not an empty 200."""
    record = owned_job(deps, caller, job_id)
    manifest = stored_manifest_or_none(record)
    requested = manifest.learners if manifest is not None else 1
    learners = learners_with_logs(requested, record.info)
    if learner >= learners:
        raise InvalidRequest(f"learner: the job has learners 0..{learners - 1}, not {learner}")
    box = SecretBox(deps.settings.secrets_key.get_secret_value())
    _, results = job_locations(stored_manifest(record, box), deps.settings, record.team)
    rounds = deps.logs.stream_rounds(results, job_id, learner, offset=offset, follow=follow)
    try:
        first = next(rounds, None)
    except STORE_ERRORS as exc:
        raise store_error(exc, results.endpoint, "read the log") from None

    def rest() -> Iterator[str | Pause]:
        if first is not None:
            yield first
            yield from rounds

    return rest()


def _tar_gz_stream(s3, bucket: str, objects: list[dict], strip: str) -> Iterator[bytes]:
    """A tar.gz of S3 objects, produced object by object without holding any in memory."""
    gz = zlib.compressobj(6, zlib.DEFLATED, 31)  # wbits 31: gzip framing
    for obj in objects:
        info = tarfile.TarInfo(obj["Key"][len(strip) :] or obj["Key"])
        info.size = obj["Size"]
        info.mtime = int(obj["LastModified"].timestamp()) if "LastModified" in obj else 0
        info.mode = 0o644
        yield gz.compress(info.tobuf(format=tarfile.PAX_FORMAT))
        body = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"]
        sent = 0
        for chunk in body.iter_chunks(256 * 1024):
            chunk = chunk[: info.size - sent]  # never more than the header promised
            sent += len(chunk)
            yield gz.compress(chunk)
        if sent < info.size:  # the object shrank under us: pad, keep the tar readable
            yield gz.compress(b"\0" * (info.size - sent))
        if info.size % tarfile.BLOCKSIZE:
            yield gz.compress(b"\0" * (tarfile.BLOCKSIZE - info.size % tarfile.BLOCKSIZE))
    yield gz.compress(b"\0" * (2 * tarfile.BLOCKSIZE))
    yield gz.flush()


@router.get(
    "/jobs/{job_id}/results",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"application/gzip": {}}, "description": "the results as a tar.gz"},
        **error_responses(404, 422),
    },
)
def job_results(job_id: str, deps: DepsDep, caller: CallerDep) -> StreamingResponse:
    """Download every result object of a job (model, logs, ...) as one tar.gz."""
    record = owned_job(deps, caller, job_id)
    manifest = stored_manifest(record, SecretBox(deps.settings.secrets_key.get_secret_value()))
    _, results = job_locations(manifest, deps.settings, record.team)
    s3 = deps.s3_for(results)
    prefix = results.prefix + jobspec.results_prefix(job_id)
    objects: list[dict] = []
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=results.bucket, Prefix=prefix
        ):
            objects.extend(o for o in page.get("Contents", []) if not o["Key"].endswith("/"))
    except STORE_ERRORS as exc:
        if not missing_bucket(exc):
            raise store_error(exc, results.endpoint, "list the results") from None
    if not objects:
        raise NoResults(f"job {job_id} has no results stored (status {record.status})")
    return StreamingResponse(
        _tar_gz_stream(s3, results.bucket, objects, prefix),
        media_type="application/gzip",
        headers={"Content-Disposition": f'attachment; filename="{job_id}-results.tar.gz"'},
    )
