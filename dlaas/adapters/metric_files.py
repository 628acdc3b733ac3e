"""Reading the metric files a job's helper stored in its results location (an adapter).

The helper uploads the TensorBoard event files and JSON-lines metric files the learners
write below LOG_DIR to `results prefix + dlaas.domain.jobspec.metrics_prefix(job)`, their
paths kept (services.learner_helper.sync.MetricFiles). This module lists them for one
learner (dlaas.domain.jobspec.metric_file_learner), reads each (event files with TensorBoard's
own reader, `tensorboard.backend.event_processing.event_file_loader`, on a temporary
copy) and turns the records into points with dlaas.domain.metrics' pure extractor.

Bounded, whatever a learner writes: at most MAX_FILES files of at most MAX_FILE_BYTES each
are read for a learner; a file version (S3 ETag and size) is parsed ONCE per process, by
one background thread (`ParsedFiles`), into series kept in at most
dlaas.domain.metric_query.KEEP points each; the parsed versions are kept (least recently
used first out) up to `max_points` points in all. A request waits for a parse at most
`wait_s` and answers with what is parsed so far, saying which files are still being read:
one request of a learner with six 60 MB files (16 M points) used to parse them whole, as
lists of points, on every call (2.3 GB, 228 s).
"""

from __future__ import annotations

import logging
import math
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from dlaas.adapters.logs import split_lines
from dlaas.domain import jobspec, metrics
from dlaas.domain.locations import S3Location
from dlaas.domain.metric_query import KEEP, Decimated

log = logging.getLogger(__name__)

# A metric file larger than this is left out (and logged): one learner must not make the
# API download gigabytes per request.
MAX_FILE_BYTES = 64 * 2**20
# Metric files read for one learner (in path order); the rest are named as left out.
MAX_FILES = 16
# Points (KEEP per series at most) of the parsed file versions a process keeps: 2 M points
# are 32 MB of doubles.
MAX_CACHED_POINTS = 2_000_000
# How long a request waits for the files it needs to be parsed before it answers with
# what is there so far.
WAIT_S = 1.0
# Records handed from the parser to the kept series at a time (one lock per batch).
BATCH = 4096


def tensorboard_scalars(path: Path) -> Iterator[tuple[str, float, float]]:
    """(tag, step, value) of every scalar summary in an event file, in file order.

    TensorBoard's data-compatible loader turns TF1 `simple_value`s into scalar tensors
    with the `scalars` plugin's metadata, so both TF1 and TF2 summaries (and PyTorch's
    SummaryWriter) come out as scalar tensors here. A truncated last record (a file still
    being written) ends the read quietly.
    """
    # Imported here: TensorBoard takes half a second to import and only this needs it.
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    for event in EventFileLoader(str(path)).Load():
        if not event.HasField("summary"):
            continue
        for value in event.summary.value:
            if value.metadata.plugin_data.plugin_name != "scalars" or not value.HasField("tensor"):
                continue
            array = tensor_util.make_ndarray(value.tensor)
            if array.size != 1 or array.dtype.kind not in "fiu":
                continue
            yield value.tag, float(event.step), float(array.item())


def file_records(kind: str, path: Path) -> Iterator[tuple[str, float, float]]:
    """(series, step, value) of one local metric file of `kind` (dlaas.domain.jobspec.METRIC_FILE_*),
    in file order, as they are read; finite values of at most MAX_SERIES series only."""
    if kind == jobspec.METRIC_FILE_TENSORBOARD:
        names: set[str] = set()
        for tag, step, value in tensorboard_scalars(path):
            name = str(tag)[: metrics.MAX_NAME]
            if not math.isfinite(value) or not math.isfinite(step):
                continue
            if name not in names:
                if len(names) >= metrics.MAX_SERIES:
                    continue
                names.add(name)
            yield name, float(step), value
        return
    extractor = metrics.Extractor()  # JSON lines read as a log's lines
    with open(path, "rb") as f:
        for line in split_lines(iter(lambda: f.read(1 << 16), b"")):
            for p in extractor.feed(line):
                yield p.name, float(p.step), p.value


@dataclass
class ParsedFile:
    """One metric file version's series, filled by the parser while requests read it."""

    series: dict[str, Decimated] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    failed: str = ""  # why it could not be read (logged); its series are then empty
    points: int = 0  # points kept, once done

    def add(self, records: list[tuple[str, float, float]]) -> None:
        with self.lock:
            for name, step, value in records:
                kept = self.series.get(name)
                if kept is None:
                    kept = self.series[name] = Decimated(KEEP)
                kept.add(step, value)

    def snapshot(
        self, after: dict[str, float] | None = None
    ) -> dict[str, list[tuple[float, float]]]:
        """name -> its kept points in arrival order (only steps past `after[name]`)."""
        with self.lock:
            return {
                name: kept.points((after or {}).get(name)) for name, kept in self.series.items()
            }

    def finish(self, failed: str = "") -> None:
        with self.lock:
            self.failed = failed
            self.points = sum(len(k.steps) + 1 for k in self.series.values())
        self.done.set()


class ParsedFiles:
    """Parsed metric file versions of this process, by (bucket, key, ETag, size); each is
    parsed once, in the order asked for, by `workers` background threads."""

    def __init__(self, max_points: int = MAX_CACHED_POINTS, workers: int = 1):
        self.max_points = max_points
        self._files: OrderedDict[tuple[str, str, str, int], ParsedFile] = OrderedDict()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="metric-files")
        self.parses = 0  # file versions parsed so far (a reuse does not count)

    def get(self, s3: Any, bucket: str, key: str, etag: str, size: int, kind: str) -> ParsedFile:
        """The file version's parse, started if it is not known yet."""
        ident = (bucket, key, etag, size)
        with self._lock:
            found = self._files.get(ident)
            if found is not None:
                self._files.move_to_end(ident)
                return found
            # An older version of the same file is superseded by this one.
            for old in [k for k in self._files if k[:2] == (bucket, key)]:
                del self._files[old]
            parsed = self._files[ident] = ParsedFile()
            self.parses += 1
        self._pool.submit(self._parse, parsed, s3, bucket, key, kind)
        return parsed

    def _parse(self, parsed: ParsedFile, s3: Any, bucket: str, key: str, kind: str) -> None:
        failed = ""
        try:
            with tempfile.TemporaryDirectory(prefix="dlaas-metrics-") as tmp:
                # The loader wants a file name: TensorBoard reads event files from paths.
                path = Path(tmp) / "file"
                s3.download_file(bucket, key, str(path))
                batch: list[tuple[str, float, float]] = []
                for record in file_records(kind, path):
                    batch.append(record)
                    if len(batch) >= BATCH:
                        parsed.add(batch)
                        batch = []
                parsed.add(batch)
        except (ClientError, BotoCoreError, OSError) as exc:
            log.warning("metric file %s could not be read: %s", key, exc)
            failed = "could not be read"
        except Exception:  # broad: a parser thread finishes its file, never dies
            log.exception("metric file %s could not be parsed", key)
            failed = "could not be parsed"
        parsed.finish(failed)
        self._evict()

    def _evict(self) -> None:
        with self._lock:
            total = sum(f.points for f in self._files.values())
            for ident in list(self._files):
                if total <= self.max_points:
                    break
                f = self._files[ident]
                if f.done.is_set():
                    total -= f.points
                    del self._files[ident]


PARSED = ParsedFiles()


@dataclass
class FilesRead:
    """What one read of a learner's metric files found: the parsed series of each file
    read, the files still being parsed and the ones left out (with why)."""

    parts: dict[str, ParsedFile]  # path below LOG_DIR -> its parse
    reading: list[str]
    left_out: dict[str, str]


class MetricFileReader:
    """One learner's metric files in a job's results location."""

    def __init__(
        self,
        s3: Any,
        results: S3Location,
        job_id: str,
        learner: int,
        parsed: ParsedFiles | None = None,
        wait_s: float = WAIT_S,
    ):
        self.s3, self.results, self.learner = s3, results, learner
        self.prefix = results.prefix + jobspec.metrics_prefix(job_id)
        self.parsed = parsed or PARSED
        self.wait_s = wait_s

    def listing(self) -> dict[str, tuple[str, int]]:
        """path below LOG_DIR -> (ETag, size) of this learner's metric files, by path."""
        found: dict[str, tuple[str, int]] = {}
        try:
            pages = self.s3.get_paginator("list_objects_v2").paginate(
                Bucket=self.results.bucket, Prefix=self.prefix
            )
            for page in pages:
                for obj in page.get("Contents", []):
                    rel = obj["Key"][len(self.prefix) :]
                    if (
                        jobspec.metric_file_kind(rel) is not None
                        and jobspec.metric_file_learner(rel) == self.learner
                    ):
                        found[rel] = (str(obj.get("ETag", "")), int(obj.get("Size", 0)))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchBucket", "404"):
                return {}
            raise
        return dict(sorted(found.items()))

    def read(
        self, listing: dict[str, tuple[str, int]] | None = None, wait: bool = True
    ) -> FilesRead:
        """The parses of the learner's files (of `listing`, else listed now), each started
        if new; with `wait`, waits up to `wait_s` in all for them to finish."""
        listing = self.listing() if listing is None else listing
        parts: dict[str, ParsedFile] = {}
        left_out: dict[str, str] = {}
        for rel, (etag, size) in listing.items():
            kind = jobspec.metric_file_kind(rel)
            if kind is None:
                continue
            if size > MAX_FILE_BYTES:
                left_out[rel] = f"{size} bytes, over the {MAX_FILE_BYTES} byte limit"
            elif len(parts) >= MAX_FILES:
                left_out[rel] = f"more than {MAX_FILES} metric files"
            else:
                key = self.prefix + rel
                parts[rel] = self.parsed.get(self.s3, self.results.bucket, key, etag, size, kind)
        deadline = time.monotonic() + (self.wait_s if wait else 0.0)
        for part in parts.values():
            part.done.wait(max(0.0, deadline - time.monotonic()))
        for rel, part in parts.items():
            if part.done.is_set() and part.failed:
                left_out[rel] = part.failed
        reading = [rel for rel, part in parts.items() if not part.done.is_set()]
        return FilesRead(parts, reading, left_out)
