"""`GET /v1/jobs/{id}/metrics`: a learner's training metrics, from its log and metric files.

The sources and how they are read are dlaas.adapters.job_metrics' (the LCM's gRPC `JobMetrics`
serves the same series from there); this route checks the owner and answers.
With `follow`, each point is sent as one JSON line as it comes: the log's as its line
comes, the files' as the helper uploads them (each file's new points only).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from dlaas.adapters.job_metrics import learner_metrics
from services.api.deps import CallerDep, DepsDep
from services.api.models import error_responses
from services.api.routes import MAX_OFFSET, _owned

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
            '`{"name", "step", "value", "line"}` per line as the log comes, with '
            '`"source"` (the path below LOG_DIR) for a point of a metric file',
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
    # A learner the job never had is named (422), as is a bad regex group of the manifest.
    source = learner_metrics(record, learner, deps.settings, deps.logs)
    if not follow:
        return MetricsReply(job_id=job_id, learner=learner, series=source.series())
    # Opened before the status line goes out: a job the store cannot read is still an error.
    points = source.follow()

    def events() -> Iterator[str]:
        try:
            for p in points:
                yield json.dumps(p.event()) + "\n"
        # Broad: the status line is already sent, so whatever breaks the stream, all that
        # is left is to end it; the trace is kept here.
        except Exception:  # broad: the reply has begun; only ending it is left
            log.exception("metrics stream of %s learner %d broke", job_id, learner)

    return StreamingResponse(events(), media_type="application/x-ndjson")
