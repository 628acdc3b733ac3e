"""A learner's training metrics, read from its log and its metric files: the one use case
behind REST's `GET /v1/jobs/{id}/metrics` (services/api/metrics.py) and the LCM's gRPC
`JobMetrics` / `FollowMetrics` (services/lcm/grpc_api.py), so both transports answer
with the same series.

Two sources, both in the job's results location and so as durable as the results:
- the learner's log (dlaas.adapters.logs.LogReader), through the pure extractor in dlaas.domain.metrics
  with the regex groups of the job's `evaluation_metrics` if it has any. The log stream
  continues across restarts without gaps or duplicates;
- the metric files the learner wrote below LOG_DIR (TensorBoard event files, JSON lines),
  which the helper stores there (dlaas.adapters.metric_files). A resumed learner that writes a
  step again replaces the point, it does not add one.

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

from dlaas.adapters.logs import LogReader
from dlaas.adapters.metric_files import MetricFileReader
from dlaas.adapters.s3 import client_for_location
from dlaas.adapters.store.base import JobRecord
from dlaas.config import PlatformSettings
from dlaas.domain import metrics
from dlaas.domain.locations import S3Location, job_locations
from dlaas.domain.metric_query import check_learner, learners_with_logs
from dlaas.domain.secretbox import SecretBox
from dlaas.domain.stored import stored_manifest_or_none

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LearnerMetrics:
    """One learner's metric sources: its log's lines and, when the job's manifest is known,
    its metric files."""

    job_id: str
    learner: int
    logs: LogReader
    spec: metrics.RegexSpec | None
    files: MetricFileReader | None

    def points(self) -> list[metrics.Point]:
        """Every point so far: the log's, then the files'."""
        found = list(metrics.points(self.logs.lines(self.job_id, self.learner), self.spec))
        if self.files is not None:
            found += self.files.points()
        return found

    def series(self) -> dict[str, list[list[float]]]:
        return metrics.series(self.points())

    def follow(self) -> Iterator[metrics.Point]:
        """Each point as it comes, until the job is final and its sources are read out."""
        lines = self.logs.lines(self.job_id, self.learner, follow=True)
        return merged(metrics.points(lines, self.spec), self.files, self.logs.poll_s)


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
        except Exception as exc:  # noqa: BLE001 - broad: handed to the follower's thread, raised there
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
