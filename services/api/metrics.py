"""`GET /v1/jobs/{id}/metrics`: a learner's training metrics, from its log and metric files.

Two sources, both in the job's results location and so as durable as the results:
- the learner's log (dlaas.logs.LogReader), through the pure extractor in dlaas.metrics
  with the regex groups of the job's `evaluation_metrics` if it has any. The log stream
  continues across restarts without gaps or duplicates;
- the metric files the learner wrote below LOG_DIR (TensorBoard event files, JSON lines),
  which the helper stores there (dlaas.metric_files). A resumed learner that writes a
  step again replaces the point, it does not add one.
With `follow`, each point is sent as one JSON line as it comes: the log's as its line
comes, the files' as the helper uploads them (each file's new points only).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from dlaas import metrics
from dlaas.errors import InvalidRequest
from dlaas.locations import job_locations
from dlaas.metric_files import MetricFileReader
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
    box = SecretBox(deps.settings.secrets_key.get_secret_value())
    # None when stored by an older version: the default conventions still apply.
    manifest = stored_manifest_or_none(record, box)
    requested = manifest.learners if manifest is not None else 1
    learners = learners_with_logs(requested, record.info)
    if learner >= learners:
        raise InvalidRequest(f"learner: the job has learners 0..{learners - 1}, not {learner}")
    # A bad regex group is the manifest's fault: InvalidManifest names the field (422).
    spec = metrics.compile_spec(manifest.evaluation_metrics if manifest is not None else None)
    files = None
    if manifest is not None:
        _, results = job_locations(manifest, deps.settings, record.team)
        files = MetricFileReader(deps.logs.s3_for(results), results, job_id, learner)
    lines = deps.logs.lines(job_id, learner, follow=follow)
    if not follow:
        found = list(metrics.points(lines, spec))
        if files is not None:
            found += files.points()
        return MetricsReply(job_id=job_id, learner=learner, series=metrics.series(found))
    poll_s = deps.logs.poll_s

    def events() -> Iterator[str]:
        try:
            for p in merged(metrics.points(lines, spec), files, poll_s):
                yield json.dumps(p.event()) + "\n"
        # Broad: the status line is already sent, so whatever breaks the stream, all that
        # is left is to end it; the trace is kept here.
        except Exception:  # broad: the reply has begun; only ending it is left
            log.exception("metrics stream of %s learner %d broke", job_id, learner)

    return StreamingResponse(events(), media_type="application/x-ndjson")


_END = object()


def merged(
    log_points: Iterator[metrics.Point], files: MetricFileReader | None, poll_s: float
) -> Iterator[metrics.Point]:
    """The log's points as they come, and every `poll_s` the metric files' new points,
    until the log stream ends (the job is final); then the files a last time.

    The log stream blocks while it waits for lines, so it runs in a thread of its own
    that hands points over a queue. A follower that goes away leaves that thread until
    the learner's next line (or the job's end), which then finds nobody and stops.
    """
    if files is None:
        yield from log_points
        return
    handed: queue.Queue[object] = queue.Queue(maxsize=1024)
    gone = threading.Event()

    def pump() -> None:
        try:
            for p in log_points:
                if gone.is_set():
                    return
                handed.put(p)
        except Exception as exc:  # noqa: BLE001 - broad: raised in the follower's thread
            handed.put(exc)
        handed.put(_END)

    threading.Thread(target=pump, name="metrics-log-pump", daemon=True).start()
    unseen = metrics.Unseen()
    sizes: dict[str, tuple[str, int]] = {}

    def new_file_points() -> list[metrics.Point]:
        out = []
        for rel, version in files.listing().items():
            if sizes.get(rel) != version:
                sizes[rel] = version
                out += unseen.new(files.read(rel, version[1]))
        return out

    try:
        yield from new_file_points()
        next_poll = time.monotonic() + poll_s
        while True:
            try:
                item = handed.get(timeout=max(0.0, next_poll - time.monotonic()))
            except queue.Empty:
                item = None
            if time.monotonic() >= next_poll:  # a busy log must not starve the files
                yield from new_file_points()
                next_poll = time.monotonic() + poll_s
            if item is None:
                continue
            if item is _END:
                yield from new_file_points()
                return
            if isinstance(item, Exception):
                raise item
            assert isinstance(item, metrics.Point)
            yield item
    finally:
        gone.set()
