"""`GET /v1/jobs/{id}/metrics`: a learner's training metrics, read from its log stream.

The series are computed from the learner's log (dlaas.logs.LogReader) by the pure
extractor in dlaas.metrics, with the regex groups of the job's `evaluation_metrics` if
it has any. The log stream is stored with the job's results and continues across
restarts without gaps or duplicates, so the series are as durable as the log: nothing
else is stored. With `follow`, each point is sent as one JSON line as its log line comes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from dlaas import metrics
from dlaas.errors import InvalidRequest
from dlaas.secretbox import SecretBox
from dlaas.stored import stored_manifest_or_none
from services.api.models import error_responses
from services.api.routes import MAX_OFFSET, CallerDep, DepsDep, _owned
from services.api.rules import learners_with_logs

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1", tags=["jobs"])


class MetricsReply(BaseModel):
    job_id: str
    learner: int
    series: dict[str, list[tuple[float, float]]] = Field(
        description="series name -> [[step, value], ...] in step order"
    )


@router.get(
    "/jobs/{job_id}/metrics",
    response_model=MetricsReply,
    responses={
        200: {
            "content": {"application/x-ndjson": {}},
            "description": "the series; with `follow`, one JSON point "
            '`{"name", "step", "value", "line"}` per line as the log comes',
        },
        **error_responses(404, 422),
    },
)
def job_metrics(
    job_id: str,
    deps: DepsDep,
    caller: CallerDep,
    learner: Annotated[int, Query(ge=0, le=MAX_OFFSET, description="learner index")] = 0,
    follow: Annotated[bool, Query(description="stream points until the job ends")] = False,
):
    """A learner's metrics series, extracted from its log; `follow` streams new points."""
    record = _owned(deps, caller, job_id)
    box = SecretBox(deps.settings.secrets_key.get_secret_value())
    # None when stored by an older version: the default conventions still apply.
    manifest = stored_manifest_or_none(record, box)
    requested = manifest.learners if manifest is not None else 1
    learners = learners_with_logs(requested, record.info)
    if learner >= learners:
        raise InvalidRequest(f"learner: the job has learners 0..{learners - 1}, not {learner}")
    # A bad regex group is the manifest's fault: InvalidManifest names the field (422).
    spec = metrics.compile_spec(manifest.evaluation_metrics if manifest is not None else None)
    lines = deps.logs.lines(job_id, learner, follow=follow)
    if not follow:
        return MetricsReply(
            job_id=job_id, learner=learner, series=metrics.series(metrics.points(lines, spec))
        )

    def events() -> Iterator[str]:
        try:
            for p in metrics.points(lines, spec):
                event = {"name": p.name, "step": p.step, "value": p.value, "line": p.line}
                yield json.dumps(event) + "\n"
        # Broad: the status line is already sent, so whatever breaks the stream, all that
        # is left is to end it; the trace is kept here.
        except Exception:
            log.exception("metrics stream of %s learner %d broke", job_id, learner)

    return StreamingResponse(events(), media_type="application/x-ndjson")
