"""The REST job routes: submit, list, show, queue, halt, resume, scale and delete; thin use
cases over the job store (reads), the LCM (changes) and S3 (code). A job's logs and results
are read in outputs.py, `/health` and `/metrics` answer in system.py.

Every `/v1` route needs a bearer token; a job that is not the caller's is reported as
missing. Errors are raised as domain errors and mapped to HTTP in app.py.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from typing import Annotated, Any, TypeVar

import yaml
from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from dlaas.adapters.job_progress import MAX_LOOKS
from dlaas.adapters.s3 import ensure_bucket
from dlaas.adapters.store.base import JobRecord
from dlaas.domain import jobspec, purge
from dlaas.domain.errors import (
    DlaasError,
    InvalidManifest,
    InvalidRequest,
    PayloadTooLarge,
)
from dlaas.domain.locations import check_buckets, job_locations
from dlaas.domain.manifest import Manifest, check_shape, parse_manifest
from dlaas.domain.manifest_yaml import MAX_DEPTH, MAX_MANIFEST_BYTES
from dlaas.domain.namespace import user_bucket
from dlaas.domain.progress import Progress
from dlaas.domain.status import Status
from dlaas.domain.stored import stored_manifest, stored_manifest_or_none
from dlaas.domain.triage import label_problem
from services.api.admission import admit
from services.api.archive import normalize_archive
from services.api.auth import Caller
from services.api.deps import MAX_OFFSET, CallerDep, Deps, DepsDep, audit, owned_job
from services.api.models import (
    DeleteReply,
    JobList,
    JobPublic,
    JobSummary,
    ProgressPublic,
    QueueReply,
    ScaleReply,
    ScaleRequest,
    StatusReply,
    SubmitReply,
    error_responses,
    job_public,
    job_summary,
    queue_entry,
    queue_info,
)
from services.api.rules import check_scale

JobSummaryT = TypeVar("JobSummaryT", bound=JobSummary)

log = logging.getLogger(__name__)

# A code archive may unpack to this many times its size limit on the job volume.
UNPACK_FACTOR = 10
CODE_PREFIX = "code/"

router = APIRouter(prefix="/v1", tags=["jobs"])


def new_job_id() -> str:
    return "job-" + secrets.token_hex(6)


def code_key(job_id: str) -> str:
    return f"{CODE_PREFIX}{job_id}.tar.gz"


# --------------------------------------------------------------------------- submit


async def _read_bounded(upload: UploadFile, limit: int, field: str) -> bytes:
    """At most `limit` bytes of an upload; PayloadTooLarge if there are more."""
    chunks, size = [], 0
    while chunk := await upload.read(256 * 1024):
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"{field}: larger than the limit of {limit // 2**20} MiB")
        chunks.append(chunk)
    return b"".join(chunks)


def _text(data: bytes, field: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidManifest([f"({field}): not UTF-8 text"]) from None


def _manifest_text(value: Any) -> str:
    """A manifest given as JSON (an object or YAML text) -> YAML text."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        check_shape(value)  # the YAML dumper recurses per level: bound the depth first
        return yaml.safe_dump(value, sort_keys=False)
    raise InvalidManifest(["(manifest): must be YAML text or a JSON object"])


async def _read_submission(request: Request, max_code: int) -> tuple[str, bytes | None, str]:
    """(manifest text, code archive bytes or None, archive file name) from any accepted body."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype in ("multipart/form-data", "application/x-www-form-urlencoded"):
        form = await request.form(max_files=2, max_fields=8)
        manifest = form.get("manifest")
        if manifest is None:
            raise InvalidRequest(
                "manifest: missing; send the manifest as the form field 'manifest'"
            )
        if isinstance(manifest, UploadFile):
            text = _text(await _read_bounded(manifest, MAX_MANIFEST_BYTES, "manifest"), "manifest")
        else:
            text = manifest
        code = form.get("code")
        if code is None or (isinstance(code, str) and not code):
            return text, None, ""
        if not isinstance(code, UploadFile):
            raise InvalidRequest("code: must be a file upload (.tar.gz or .zip)")
        return text, await _read_bounded(code, max_code, "code"), code.filename or ""
    body = await request.body()
    if len(body) > MAX_MANIFEST_BYTES:
        raise PayloadTooLarge(f"manifest: larger than {MAX_MANIFEST_BYTES // 2**20} MiB")
    if not body.strip():
        raise InvalidRequest(
            "manifest: missing; send multipart with a 'manifest' field, or the manifest as the body"
        )
    if ctype == "application/json":
        text = _text(body, "manifest")  # JSON is UTF-8 (RFC 8259); anything else is refused
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidManifest([f"(manifest): malformed JSON: {exc.msg}"]) from None
        except RecursionError:  # the decoder recurses once per level of nesting
            raise InvalidManifest([f"(manifest): nested deeper than {MAX_DEPTH} levels"]) from None
        if isinstance(data, dict) and "manifest" in data and len(data) == 1:
            data = data["manifest"]
        return _manifest_text(data), None, ""
    # YAML (application/yaml, text/yaml, text/plain, or no type at all).
    return _text(body, "manifest"), None, ""


def _submit(deps: Deps, caller: Caller, text: str, manifest: Manifest, code: bytes | None):
    # Bucket names resolve in the caller's team namespace: refuse any other before storing.
    check_buckets(manifest, caller.team)
    admit(manifest, caller, deps.store, deps.settings)  # store endpoints, priority ceiling
    job_id = new_job_id()
    key = ""
    if code is not None:
        key = code_key(job_id)
        ensure_bucket(deps.s3, deps.settings.s3_bucket)
        deps.s3.put_object(Bucket=deps.settings.s3_bucket, Key=key, Body=code)
    try:
        result = deps.lcm.submit(job_id, caller.user, text, key, team=caller.team)
    except BaseException:  # broad: Ctrl-C too; the archive goes, the error goes on
        # Nothing half-created: a job refused or failed for whatever reason leaves no
        # archive behind (the error goes on to the caller).
        if key:
            _delete_code(deps, key)
        raise
    audit(deps, caller, "submit", job_id, f"team={caller.team} learners={manifest.learners}")
    return result


def _delete_code(deps: Deps, key: str) -> None:
    try:
        deps.s3.delete_object(Bucket=deps.settings.s3_bucket, Key=key)
    # Broad: this runs while the submit's own error is on its way to the caller; a failure
    # here must not replace it (the caller would get a 500 instead of the refusal).
    except Exception:  # broad: must not replace the submit's own error
        log.warning("could not delete code archive %s", key, exc_info=True)


_MANIFEST_REF = {"$ref": "#/components/schemas/Manifest"}  # app.py adds the schema
_SUBMIT_BODY = {
    "requestBody": {
        "required": True,
        "description": "The manifest (schema `Manifest`), with a code archive in multipart.",
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["manifest"],
                    "properties": {
                        "manifest": {
                            "type": "string",
                            "format": "binary",
                            "description": "the manifest as a YAML file (schema `Manifest`)",
                        },
                        "code": {
                            "type": "string",
                            "format": "binary",
                            "description": "the job's code: a .tar.gz or .zip archive",
                        },
                    },
                }
            },
            "application/yaml": {
                "schema": {"type": "string", "description": "the manifest as YAML text"}
            },
            "application/json": {
                "schema": {
                    "anyOf": [
                        _MANIFEST_REF,
                        {
                            "type": "object",
                            "required": ["manifest"],
                            "properties": {
                                "manifest": {"anyOf": [_MANIFEST_REF, {"type": "string"}]}
                            },
                            "additionalProperties": False,
                        },
                    ]
                }
            },
        },
    }
}


@router.post(
    "/jobs",
    status_code=201,
    response_model=SubmitReply,
    openapi_extra=_SUBMIT_BODY,
    responses=error_responses(413, 422),
)
async def submit_job(request: Request, deps: DepsDep, caller: CallerDep) -> SubmitReply:
    """Submit a job: a manifest (YAML) and optionally a code archive (.tar.gz or .zip)."""
    try:
        max_code = deps.api.max_code_archive_mb * 2**20
        text, code, filename = await _read_submission(request, max_code)
        manifest = parse_manifest(text)
        if code is not None:
            code = await run_in_threadpool(
                normalize_archive, code, filename, max_code * UNPACK_FACTOR
            )
        result = await run_in_threadpool(_submit, deps, caller, text, manifest, code)
    except DlaasError as exc:
        deps.metrics.refused.labels(exc.code).inc()
        raise
    deps.metrics.submitted.inc()
    return SubmitReply(job_id=result.job_id, status=result.status, warnings=result.warnings)


# --------------------------------------------------------------------------- read


@router.get("/jobs", response_model=JobList, responses=error_responses(422))
async def list_jobs(
    deps: DepsDep,
    caller: CallerDep,
    status: Annotated[str | None, Query(description="only jobs in this status")] = None,
    label: Annotated[
        str | None,
        Query(description="only jobs whose last error code is this (a FAILED job's triage label)"),
    ] = None,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> JobList:
    """List your jobs, newest first (the admin sees everyone's), filtered and paged."""
    wanted = None
    if status:
        try:
            wanted = Status(status.upper())
        except ValueError:
            raise InvalidRequest(
                f"status: {status!r} is not a status; use one of {', '.join(Status)}"
            ) from None
    if label and (problem := label_problem(label)):
        raise InvalidRequest(f"label: {problem}")
    records, total = deps.store.list(
        user=caller.user_filter, status=wanted, label=label or None, offset=offset, limit=limit
    )
    progress = await _progress(deps, records)
    jobs = [_with_progress(job_summary(r), progress.get(r.job_id)) for r in records]
    return JobList(jobs=jobs, total=total, offset=offset, limit=limit)


# The read routes are `async` and read the store on the event loop: a read by key or one
# page of an index costs less than the hop to a worker thread and back, and the hop's
# wait behind other requests was most of a read's latency under load. What may wait on
# another service (a look at a running job's logs, the scheduler's queue) still runs on a
# worker thread.


async def _progress(deps: Deps, records: list[JobRecord]) -> dict[str, Progress]:
    """The jobs' progress: a look at a running job's learners' logs (an engine call, once
    per job and `ttl_s`) on a worker thread; otherwise what this process saw last, here."""
    if any(deps.progress.due(r) for r in records):
        return await run_in_threadpool(deps.progress.many, records, deps.logs)
    return deps.progress.many(records, deps.logs)


def _with_progress(job: JobSummaryT, progress: Progress | None) -> JobSummaryT:
    """The job view with its `progress` (dlaas.adapters.job_progress), if any is known."""
    if progress is not None:
        job.progress = ProgressPublic(**progress.view())
    return job


@router.get("/jobs/{job_id}", response_model=JobPublic, responses=error_responses(404))
async def get_job(job_id: str, deps: DepsDep, caller: CallerDep) -> JobPublic:
    """A job's status, status history, learners and normalized manifest (secrets masked)."""
    record = owned_job(deps, caller, job_id)
    if record.status == Status.QUEUED:
        return await run_in_threadpool(_job_view, deps, record)  # its place: the scheduler
    if deps.progress.due(record):
        if not deps.progress.looked(record):
            # The first look at its logs in this process: nothing seen yet to show.
            return await run_in_threadpool(_job_view, deps, record)
        # This view shows what the last look saw, the next runs in the background: a view
        # that waited for a look (or its lock) took an engine call's time, the p99 under load.
        deps.look_later(record)
    return _job_view(deps, record, look=False)


def _job_view(deps: Deps, record: JobRecord, look: bool = True) -> JobPublic:
    public = _with_progress(job_public(record), deps.progress.of(record, deps.logs, look=look))
    if record.status == Status.QUEUED:
        _add_queue_info(deps, public, record)
    return public


def _add_queue_info(deps: Deps, job: JobPublic, record: JobRecord) -> None:
    """Where a QUEUED job stands in the scheduler's queue, or a note why that is unknown.

    The job itself is always shown: a scheduler that does not answer costs the caller
    the position and ETA, never the job.
    """
    try:
        entries = deps.scheduler.queue(_running_left(deps))
    except DlaasError as exc:
        log.warning("queue position of %s unknown: %s", job.job_id, exc.message)
        job.queue_note = "the scheduler is not answering; position and ETA unknown for now"
        return
    entry = next((e for e in entries if e.job_id == job.job_id), None)
    if entry is None:
        job.queue_note = _not_queued_note(record.info, time.time())
        return
    job.queue = queue_info(entry)


def _not_queued_note(info: dict[str, Any], now: float) -> str:
    """Why a QUEUED job is not in the scheduler's queue (yet)."""
    try:
        wait = float(info.get("not_before") or 0) - now
    except (TypeError, ValueError):
        wait = 0.0
    if wait > 0:
        # The LCM holds a restarting gang back (backoff) before it hands it over.
        return f"restarting after a failure; handed to the scheduler in {wait:.0f} s (back-off)"
    # Between the status write and the scheduler's enqueue, or the scheduler lost it and
    # the LCM hands it over again: both are transient.
    return "not in the scheduler's queue yet; position and ETA follow shortly"


def _queued_job_ids(deps: Deps, user: str) -> set[str]:
    """Ids of a user's QUEUED jobs: one paged store query instead of one read per entry."""
    ids: set[str] = set()
    offset, page = 0, 500
    while True:
        records, total = deps.store.list(user=user, status=Status.QUEUED, offset=offset, limit=page)
        ids.update(r.job_id for r in records)
        offset += page
        if not records or offset >= total:
            return ids


def _running_left(deps: Deps) -> dict[str, float]:
    """The running jobs' expected seconds left where their progress says it (the first
    MAX_LOOKS running jobs looked at, at most once per the reader's ttl), for the queue's ETA."""
    records, _ = deps.store.list(status=Status.PROCESSING, limit=MAX_LOOKS)
    progress = deps.progress.many(records, deps.logs)
    return {j: p.remaining_s for j, p in progress.items() if p.remaining_s is not None}


@router.get("/queue", response_model=QueueReply)
def get_queue(deps: DepsDep, caller: CallerDep) -> QueueReply:
    """The scheduler's queue (your jobs; the admin's: all), with positions, reasons and ETAs."""
    entries = deps.scheduler.queue(_running_left(deps))
    if caller.user_filter is not None:
        # The scheduler queues only QUEUED jobs; a job it still lists a moment after its
        # start (the store says PENDING already) is simply not shown.
        mine = _queued_job_ids(deps, caller.user_filter)
        entries = [e for e in entries if e.job_id in mine]
    return QueueReply(entries=[queue_entry(e) for e in entries])


# --------------------------------------------------------------------------- change


@router.post("/jobs/{job_id}/halt", response_model=StatusReply, responses=error_responses(404, 409))
def halt_job(job_id: str, deps: DepsDep, caller: CallerDep) -> StatusReply:
    """Halt a job: its learners checkpoint and stop, its logs are kept, it ends HALTED."""
    record = owned_job(deps, caller, job_id)
    status = deps.lcm.halt(job_id, record.user, f"halted by {caller.user} through the API")
    audit(deps, caller, "halt", job_id)
    return StatusReply(job_id=job_id, status=status)


@router.post(
    "/jobs/{job_id}/resume", response_model=StatusReply, responses=error_responses(404, 409)
)
def resume_job(job_id: str, deps: DepsDep, caller: CallerDep) -> StatusReply:
    """Resume a HALTED job: it is queued again and continues from its last checkpoint."""
    record = owned_job(deps, caller, job_id)
    status = deps.lcm.resume(job_id, record.user, f"resumed by {caller.user} through the API")
    audit(deps, caller, "resume", job_id)
    return StatusReply(job_id=job_id, status=status)


@router.post(
    "/jobs/{job_id}/scale", response_model=ScaleReply, responses=error_responses(404, 409, 422)
)
def scale_job(job_id: str, body: ScaleRequest, deps: DepsDep, caller: CallerDep) -> ScaleReply:
    """Change an elastic job's learner count within its manifest's [min_learners, max_learners]."""
    record = owned_job(deps, caller, job_id)
    manifest = stored_manifest_or_none(record)  # None: older rules, the LCM alone decides
    if manifest is not None:
        check_scale(manifest, body.learners, job_id)
    status = deps.lcm.scale(job_id, body.learners, record.user)
    audit(deps, caller, "scale", job_id, f"learners={body.learners}")
    return ScaleReply(job_id=job_id, status=status, learners=body.learners)


@router.delete("/jobs/{job_id}", responses=error_responses(404, 409, 422))
def delete_job(
    job_id: str,
    deps: DepsDep,
    caller: CallerDep,
    purge_results: Annotated[
        bool,
        Query(alias="purge", description="also delete the job's results (by the worker)"),
    ] = False,
) -> DeleteReply:
    """Delete a job: its record, containers and uploaded code; its results stay unless `purge`."""
    record = owned_job(deps, caller, job_id)
    _, results = job_locations(stored_manifest(record), deps.settings, record.team)
    prefix = results.prefix + jobspec.results_prefix(job_id)
    # The bucket as the user names it (inside the team's namespace).
    shown = user_bucket(record.team, results.bucket) if results.platform else results.bucket
    if not purge_results:
        deps.lcm.delete(job_id, record.user)
        own = "" if results.platform else results.endpoint
        text = purge.kept_text(shown, prefix, own)
    else:
        if not results.platform:
            raise InvalidRequest(
                f"purge: the results are in your own object store ({results.endpoint}); "
                "the platform deletes nothing there. Nothing was deleted"
            )
        # Queued first: the record goes only once the purge is safe in Redis (503 and
        # nothing deleted otherwise). The worker waits for the record to be gone.
        request_id = deps.tasks.enqueue_purge(
            purge.PurgeRequest(results.bucket, prefix, results.endpoint, job_id)
        )
        try:
            deps.lcm.delete(job_id, record.user)
        except BaseException:  # broad: whatever failed, the purge is cancelled; re-raised
            deps.tasks.cancel_purge(request_id)
            raise
        text = purge.queued_text(shown, prefix)
    if record.code_key:
        _delete_code(deps, record.code_key)
    audit(deps, caller, "delete", job_id, "results purge queued" if purge_results else text)
    return DeleteReply(
        job_id=job_id,
        results=text,
        bucket=shown,
        prefix=prefix,
        purge_queued=purge_results,
    )
