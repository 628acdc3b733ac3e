"""A learner's training metrics, read from its log and its metric files: the one use case
behind REST's `GET /v1/jobs/{id}/metrics` (services/api/metrics.py) and the LCM's gRPC
`JobMetrics` / `FollowMetrics` (services/lcm/grpc_api.py), so both transports answer
with the same series.

Two sources, both in the job's results location and so as durable as the results:
- the learner's log (dlaas.adapters.logs.LogReader), through the pure extractor in dlaas.domain.metrics
  with the regex groups of the job's `evaluation_metrics` if it has any. The log stream
  continues across restarts without gaps or duplicates;
- the metric files the learner wrote below LOG_DIR (TensorBoard event files, JSON lines),
  which the helper stores there (dlaas.adapters.metric_files: each file version parsed
  once per process, in the background). A resumed learner that writes a step again
  replaces the point, it does not add one.

Bounded: every series is kept in at most dlaas.domain.metric_query.KEEP points per
source, evenly spread over the run, and a follow waits on nobody's thread: its rounds
(`follow_rounds`) yield `PAUSE` where they used to block.

The caller checks who may read the job (each transport has its own identity) and hands
over the record; `learner_metrics` checks the learner and the manifest's regex groups.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from dlaas.adapters.logs import PAUSE, LogReader, Pause
from dlaas.adapters.metric_files import MetricFileReader
from dlaas.adapters.s3 import client_for_location
from dlaas.adapters.store.base import JobRecord
from dlaas.config import PlatformSettings
from dlaas.domain import metrics
from dlaas.domain.locations import S3Location, job_locations
from dlaas.domain.metric_query import (
    KEEP,
    Decimated,
    Series,
    check_learner,
    learners_with_logs,
    merge_series,
    whole,
)
from dlaas.domain.secretbox import SecretBox
from dlaas.domain.stored import stored_manifest_or_none

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MetricsRead:
    """A learner's series so far (dlaas.domain.metric_query.Series), the metric files still
    being parsed (their points so far are in) and the ones left out, with why."""

    series: Series
    reading: list[str]
    left_out: dict[str, str]


@dataclass(frozen=True)
class LearnerMetrics:
    """One learner's metric sources: its log's lines and, when the job's manifest is known,
    its metric files."""

    job_id: str
    learner: int
    logs: LogReader
    spec: metrics.RegexSpec | None
    files: MetricFileReader | None

    def read(self) -> MetricsRead:
        """Every series so far, each kept in at most KEEP points (the log's read through
        once, the files' parses reused): the log's, then the files'."""
        from_log: dict[str, Decimated] = {}
        for p in metrics.points(self.logs.lines(self.job_id, self.learner), self.spec):
            kept = from_log.get(p.name)
            if kept is None:
                kept = from_log[p.name] = Decimated(KEEP)
            kept.add(p.step, p.value)
        log_part = {name: kept.points() for name, kept in from_log.items()}
        if self.files is None:
            return MetricsRead(merge_series([log_part]), [], {})
        found = self.files.read()
        parts = [log_part] + [part.snapshot() for part in found.parts.values()]
        return MetricsRead(merge_series(parts), found.reading, found.left_out)

    def series(self) -> Series:
        return self.read().series

    def follow_rounds(self) -> Iterator[metrics.Point | Pause]:
        """Each point as it comes, `PAUSE` between rounds (never a wait), until the job is
        final and its sources are read out: the log's points as its lines come, and every
        `poll_s` the metric files' points past the last step sent of each series. The job's
        record is read now: a job the store cannot read raises here."""
        return self._follow(self.logs.rounds(self.job_id, self.learner, follow=True))

    def _follow(self, rounds: Iterator[str | Pause]) -> Iterator[metrics.Point | Pause]:
        extractor = metrics.Extractor(self.spec)
        sent: dict[tuple[str, str], float] = {}  # (file, series) -> last step sent

        def file_points() -> tuple[list[metrics.Point], bool]:
            """The files' new points, and whether a file is still being parsed."""
            if self.files is None:
                return [], False
            found = self.files.read(wait=False)
            out = []
            for rel, part in found.parts.items():
                after = {name: step for (r, name), step in sent.items() if r == rel}
                for name, points in part.snapshot(after).items():
                    for step, value in points:
                        out.append(metrics.Point(name, whole(step), value, -1, rel))
                    if points:
                        sent[(rel, name)] = max(step for step, _ in points)
            return out, bool(found.reading)

        yield from file_points()[0]
        next_poll = time.monotonic() + self.logs.poll_s
        for item in rounds:
            if isinstance(item, Pause):
                if time.monotonic() >= next_poll:  # a busy log must not starve the files
                    yield from file_points()[0]
                    next_poll = time.monotonic() + self.logs.poll_s
                yield item
                continue
            yield from extractor.feed(item)
        while True:  # the job has ended: the files a last time, once parsed
            found, reading = file_points()
            yield from found
            if not reading:
                return
            yield PAUSE

    def follow(self) -> Iterator[metrics.Point]:
        """`follow_rounds`, sleeping `poll_s` between rounds (for a thread of its own)."""
        for item in self.follow_rounds():
            if isinstance(item, Pause):
                self.logs.sleep(self.logs.poll_s)
            else:
                yield item


def learner_metrics(
    record: JobRecord, learner: int, settings: PlatformSettings, logs: LogReader
) -> LearnerMetrics:
    """The sources of `record`'s learner `learner` (the caller has checked the owner).

    Raise InvalidRequest naming `learner` for one the job never had, InvalidManifest
    naming the field for a bad regex group of the manifest.
    """
    box = SecretBox(settings.secrets_key.get_secret_value())
    # None when stored by an older version: the default conventions still apply.
    manifest = stored_manifest_or_none(record, box)
    requested = manifest.learners if manifest is not None else 1
    check_learner(learner, learners_with_logs(requested, record.info))
    spec = metrics.compile_spec(manifest.evaluation_metrics if manifest is not None else None)
    files = None
    if manifest is not None:
        _, results = job_locations(manifest, settings, record.team)
        files = MetricFileReader(logs.s3_for(results), results, record.job_id, learner)
    return LearnerMetrics(record.job_id, learner, logs, spec, files)


def s3_for_locations(platform: Callable[[], Any]) -> Callable[[S3Location], Any]:
    """`LogReader.s3_for` for a service: `dlaas.adapters.s3.client_for_location`, with the platform's
    client made by `platform()` at the first use, then kept."""
    made: list[Any] = []

    def platform_once() -> Any:
        if not made:
            made.append(platform())
        return made[0]

    return lambda loc: client_for_location(loc, platform_once)


_END = object()


def while_wanted(
    items: Iterator[Any], wanted: Callable[[], bool], check_s: float = 0.5
) -> Iterator[Any]:
    """`items`, consumed in a thread of its own, until they end or `wanted()` turns false.

    A follow's source may block for as long as the learner prints nothing; a server thread
    that serves the follow must still notice within `check_s` that its client went away,
    so it waits here, not inside the source. The source's thread stops at its next item.
    Whatever the source raises is raised here.
    """
    handed: queue.Queue[object] = queue.Queue(maxsize=256)
    gone = threading.Event()

    def put(item: object) -> bool:
        while not gone.is_set():
            try:
                handed.put(item, timeout=check_s)
                return True
            except queue.Full:
                continue
        return False

    def pump() -> None:
        try:
            for item in items:
                if not put(item):
                    return
        except Exception as exc:  # noqa: BLE001 - broad: handed to the consumer's thread, raised there
            put(exc)
            return
        put(_END)

    threading.Thread(target=pump, name="metrics-follow-pump", daemon=True).start()
    try:
        while wanted():
            try:
                item = handed.get(timeout=check_s)
            except queue.Empty:
                continue
            if item is _END:
                return
            if isinstance(item, Exception):
                raise item
            yield item
    finally:
        gone.set()
