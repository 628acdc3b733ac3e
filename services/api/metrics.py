"""`GET /v1/jobs/{id}/metrics`: a learner's training metrics, from its log and metric files.

The sources and how they are read are dlaas.adapters.job_metrics' (the LCM's gRPC `JobMetrics`
serves the same series from there); this route checks the owner and answers.

Bounded: a reply holds at most `limit` points (pages go on from `next_since_step`), each
series downsampled to `max_points` if asked (charts); the series are kept in at most
dlaas.domain.metric_query.KEEP points each, and a metric file version is parsed once per
replica, in the background (`reading` names the files still being parsed: their points so
far are in; ask again). With `follow`, each point is sent as one JSON line as it comes:
the log's as its line comes, the files' as the helper uploads them (each series' points
past the last step sent); the follow holds no thread while it waits (services.api.follows).
"""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from dlaas.adapters.job_metrics import LearnerMetrics, learner_metrics
from dlaas.domain.metric_query import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    MAX_POINTS,
    metric_query,
    select,
    wanted,
)
from services.api.auth import Caller
from services.api.deps import MAX_OFFSET, CallerDep, Deps, DepsDep, owned_job
from services.api.follows import REFUSED_DOC, follows_of
from services.api.models import error_responses

router = APIRouter(prefix="/v1", tags=["jobs"])


class MetricsReply(BaseModel):
    job_id: str
    learner: int
    series: dict[str, list[tuple[float, float]]] = Field(
        description="series name -> [[step, value], ...] in step order"
    )
    truncated: bool = Field(False, description="more points follow past `next_since_step`")
    next_since_step: float | None = Field(
        None, description="ask again with `since_step` set to this for the next page"
    )
    reading: list[str] = Field(
        default_factory=list,
        description="metric files still being parsed (their points so far are in): ask again",
    )
    left_out: dict[str, str] = Field(
        default_factory=dict, description="metric files not read, with why (too large, too many)"
    )


@router.get(
    "/jobs/{job_id}/metrics",
    response_model=MetricsReply,
    responses={
        200: {
            "content": {"application/x-ndjson": {}},
            "description": "the series; with `follow`, one JSON point "
            '`{"name", "step", "value", "line"}` per line as the log comes, with '
            '`"source"` (the path below LOG_DIR) for a point of a metric file (its '
            '`"line"` is -1: a long file\'s points are a sample)',
        },
        **error_responses(404, 422),
        **REFUSED_DOC,
    },
)
async def job_metrics(
    request: Request,
    job_id: str,
    deps: DepsDep,
    caller: CallerDep,
    learner: Annotated[int, Query(ge=0, le=MAX_OFFSET, description="learner index")] = 0,
    names: Annotated[
        list[str] | None, Query(description="only these series (repeat the parameter)")
    ] = None,
    since_step: Annotated[
        float | None, Query(description="only steps after this one (the next page)")
    ] = None,
    limit: Annotated[
        int, Query(ge=0, le=MAX_LIMIT, description=f"points at most (0: {DEFAULT_LIMIT})")
    ] = 0,
    max_points: Annotated[
        int,
        Query(ge=0, le=MAX_POINTS, description="downsample each series to this many (0: all)"),
    ] = 0,
    follow: Annotated[bool, Query(description="stream points until the job ends")] = False,
) -> Response:
    """A learner's metrics series, extracted from its log and metric files, one page of
    them; `follow` streams new points."""
    query = metric_query(learner, names or (), since_step, limit, max_points)
    if not follow:
        found = await run_in_threadpool(lambda: _source(deps, caller, job_id, learner).read())
        page = select(found.series, query)
        reply = MetricsReply(
            job_id=job_id,
            learner=learner,
            series=page.series,  # type: ignore[arg-type]
            truncated=page.truncated,
            next_since_step=page.next_since_step,
            reading=found.reading,
            left_out=found.left_out,
        )
        return Response(reply.model_dump_json(), media_type="application/json")
    follows = follows_of(request)
    if (refused := follows.take(caller.user)) is not None:
        return refused.response()
    try:
        # Opened before the status line goes out: a job the store cannot read is an error.
        rounds = await follows.call(lambda: _source(deps, caller, job_id, learner).follow_rounds())
    except BaseException:  # broad: the slot goes back whatever failed (re-raised)
        follows.give_back(caller.user)
        raise
    events = follows.stream(
        rounds,
        lambda p: json.dumps(p.event()) + "\n" if wanted(p, query) else "",
        deps.logs.poll_s / 2,  # a line is seen within about 0.5 s (poll_s 0.5)
        what=f"metrics stream of {job_id} learner {learner}",
        user=caller.user,
    )
    return StreamingResponse(events, media_type="application/x-ndjson")


def _source(deps: Deps, caller: Caller, job_id: str, learner: int) -> LearnerMetrics:
    """The learner's metric sources, once the caller is known to own the job. A learner the
    job never had is named (422), as is a bad regex group of the manifest."""
    record = owned_job(deps, caller, job_id)
    return learner_metrics(record, learner, deps.settings, deps.logs)
