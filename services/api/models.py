"""What the REST API returns: public views of job records (never the raw manifest).

A record's `manifest_yaml` holds data-store credentials as the user sent them; the API
shows the manifest only as `Manifest.normalized()`, with secrets masked.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dlaas.adapters.store.base import JobRecord
from dlaas.clients.sdk import QueueEntry
from dlaas.domain.errors import InvalidManifest
from dlaas.domain.manifest import MIN_MEMORY_MB, PRIORITY_CLASSES, Manifest, parse_manifest

# Keys of record.info that are never shown, whatever the LCM put there.
_SECRET_WORDS = ("secret", "password", "token", "credential", "access_key")


class ErrorReply(BaseModel):
    """The body of every error answer (4xx, 5xx); never a stack trace."""

    error: str = Field(description="a stable code: not_found, invalid_manifest, unauthorized, ...")
    message: str = Field(description="one line for a person")
    problems: list[str] = Field(
        default=[], description="every problem, each `field: what is wrong`"
    )


# What each error status means on this API. Routes declare theirs with error_responses().
ERROR_MEANINGS: dict[int, str] = {
    401: "no token, or a token that is unknown, expired or revoked (`WWW-Authenticate: Bearer`)",
    403: "only an administrator may do this",
    404: "no such job (another user's job is reported as missing), or no results stored",
    409: "conflicts with what exists: a job status that does not allow this now (resume "
    "of a job that is not HALTED), or a user or team name that is taken",
    413: "the body is larger than the API's limit",
    422: "invalid input: every problem names the field and says what is wrong",
    503: "a platform service does not answer now; retry after `Retry-After` seconds",
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses=` for these error statuses, each answered with an `ErrorReply`."""
    return {code: {"model": ErrorReply, "description": ERROR_MEANINGS[code]} for code in codes}


# Fields whose validators accept more than the type pydantic's JSON schema shows.
_MANIFEST_FIELDS_AS_WRITTEN: dict[str, dict[str, Any]] = {
    "memory": {
        "anyOf": [
            {"type": "integer", "minimum": MIN_MEMORY_MB},
            {"type": "string", "examples": ["512MiB", "2Gb", "16GB"]},
        ],
        "default": 1024,
        "description": "memory per learner: MiB as a number, or a size such as 512MiB or 2Gb",
    },
    "priority": {
        "anyOf": [
            {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1},
            {"type": "string", "enum": sorted(PRIORITY_CLASSES)},
        ],
        "default": 0,
        "description": "a number (higher runs first) or a priority class",
    },
}
# The data store connection keys as the documentation spells them (FfDL's names are the
# aliases pydantic shows; both are accepted).
_CONNECTION_NAMES = {"endpoint": "auth_url", "access_key": "user_name", "secret_key": "password"}
SCHEMA_REF = "#/components/schemas/{model}"


def manifest_schemas() -> dict[str, dict[str, Any]]:
    """OpenAPI component schemas of the manifest: `Manifest` and the models it holds.

    The submit route reads its body by hand (YAML, JSON or multipart), so FastAPI cannot
    derive them; they come from the same pydantic model that validates a submission.
    """
    schema = Manifest.model_json_schema(ref_template=SCHEMA_REF)
    schemas: dict[str, dict[str, Any]] = schema.pop("$defs", {})
    schema["properties"].update(_MANIFEST_FIELDS_AS_WRITTEN)
    schema["description"] = (
        "Manifest v1: what to run. Send it as YAML (the usual form) or JSON; "
        "memory and priority also accept the words shown."
    )
    connection = schemas.get("Connection", {}).get("properties", {})
    for ours, theirs in _CONNECTION_NAMES.items():
        if theirs in connection:
            connection[ours] = {**connection[theirs], "title": ours.replace("_", " ").title()}
            connection[theirs]["description"] = f"FfDL's name for {ours}"
    return {**schemas, "Manifest": schema}


class ComponentHealthPublic(BaseModel):
    ok: bool
    detail: str = Field(description="what it answered, or why it did not")


class HealthReply(BaseModel):
    """`GET /health`: `ok` when the API serves; with `components=true`, `degraded` when a
    component it depends on does not answer (each one's answer in `components`)."""

    status: Literal["ok", "degraded"]
    replica: str | None = Field(default=None, description="which API replica answered")
    components: dict[str, ComponentHealthPublic] | None = None


class SubmitReply(BaseModel):
    job_id: str
    status: str
    warnings: list[str] = []


class TransitionPublic(BaseModel):
    status: str
    at: float
    reason: str
    error_code: str = ""
    exit_code: int | None = None


class ProgressPublic(BaseModel):
    """A running job's progress read off its learners' logs (dlaas.domain.progress): `done` of
    `total` `unit`s (epochs or steps; total null when neither the log nor the manifest's
    `progress:` says it), the rate, and the expected seconds left and finish (epoch seconds;
    null until two looks saw it move). The job's is its slowest learner's."""

    done: float
    total: float | None = None
    unit: str
    percent: float | None = None
    rate_per_s: float | None = None
    remaining_s: float | None = None
    finish_at: float | None = None


class JobSummary(BaseModel):
    job_id: str
    user: str
    name: str
    status: str
    reason: str
    error_code: str = ""
    exit_code: int | None = None
    created_at: float
    updated_at: float
    progress: ProgressPublic | None = None


class QueueInfo(BaseModel):
    """Where a queued job stands: position (1 = next), why it waits, when it should start.

    The ETA is a range in seconds from now; null when it cannot be estimated (the job
    does not fit the cluster as it is now).
    """

    position: int
    reason: str
    eta_low_s: float | None
    eta_high_s: float | None


class JobPublic(JobSummary):
    history: list[TransitionPublic]
    learners: list[Any] = []
    info: dict[str, Any] = {}
    manifest: dict[str, Any] | None = None
    # Only for a QUEUED job: its place in the scheduler's queue, or null with a note
    # saying why it is unknown (the scheduler is not answering, or has not queued it yet).
    queue: QueueInfo | None = None
    queue_note: str = ""


class JobList(BaseModel):
    jobs: list[JobSummary]
    total: int
    offset: int
    limit: int


class DeleteReply(BaseModel):
    """A deleted job, and what happens to its results."""

    job_id: str
    results: str  # "kept in bucket X under prefix Y" or "purge queued: ..."
    bucket: str
    prefix: str
    purge_queued: bool


class StatusReply(BaseModel):
    """A job's status after a change asked through the API (halt, resume)."""

    job_id: str
    status: str


class ScaleRequest(BaseModel):
    """The body of `POST /v1/jobs/{id}/scale`."""

    model_config = ConfigDict(extra="forbid")

    # Strict: `true` or "3" is a mistake to name, not a number to guess.
    learners: int = Field(strict=True, description="the new learner count")


class ScaleReply(StatusReply):
    learners: int


class QueueEntryPublic(QueueInfo):
    job_id: str


class QueueReply(BaseModel):
    entries: list[QueueEntryPublic]


def _seconds(value: float) -> float | None:
    return value if math.isfinite(value) else None


def queue_info(e: QueueEntry) -> QueueInfo:
    """The scheduler's entry for a job; an infinite ETA ("never, as the cluster is") is null."""
    return QueueInfo(
        position=e.position,
        reason=e.reason,
        eta_low_s=_seconds(e.eta_low_s),
        eta_high_s=_seconds(e.eta_high_s),
    )


def queue_entry(e: QueueEntry) -> QueueEntryPublic:
    return QueueEntryPublic(job_id=e.job_id, **queue_info(e).model_dump())


def _public_info(info: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in info.items() if not any(word in k.lower() for word in _SECRET_WORDS)}


def job_summary(r: JobRecord) -> JobSummary:
    return JobSummary(
        job_id=r.job_id,
        user=r.user,
        name=r.name,
        status=str(r.status),
        reason=r.reason,
        error_code=r.error_code,
        exit_code=r.exit_code,
        created_at=r.created_at,
        updated_at=r.updated_at or r.created_at,
    )


# Manifests shorter than this have their normalized view kept (512 of them: a few MB at
# most); parsing one is most of what showing a job costs (about 1 ms).
CACHED_MANIFEST_BYTES = 16 * 1024


@lru_cache(maxsize=512)
def _normalized_cached(text: str) -> dict[str, Any] | None:
    return _normalized(text)


def _normalized(text: str) -> dict[str, Any] | None:
    # The stored text, secrets sealed (dlaas.domain.stored); None: accepted under older
    # rules and no longer parses; the job is still shown, without its manifest.
    try:
        return parse_manifest(text).normalized()
    except InvalidManifest:
        return None


def job_public(r: JobRecord) -> JobPublic:
    text = r.manifest_yaml
    manifest = (_normalized_cached if len(text) <= CACHED_MANIFEST_BYTES else _normalized)(text)
    info = _public_info(r.info)
    learners = info.pop("learners", [])
    return JobPublic(
        **job_summary(r).model_dump(),
        history=[
            TransitionPublic(
                status=str(t.status),
                at=t.at,
                reason=t.reason,
                error_code=t.error_code,
                exit_code=t.exit_code,
            )
            for t in r.history
        ],
        learners=learners if isinstance(learners, list) else [learners],
        info=info,
        manifest=manifest,
    )
