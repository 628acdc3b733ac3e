"""Reading the metric files a job's helper stored in its results location (an adapter).

The helper uploads the TensorBoard event files and JSON-lines metric files the learners
write below LOG_DIR to `results prefix + dlaas.domain.jobspec.metrics_prefix(job)`, their
paths kept (services.learner_helper.sync.MetricFiles). This module lists them for one
learner (dlaas.domain.jobspec.metric_file_learner), reads each (event files with TensorBoard's
own reader, `tensorboard.backend.event_processing.event_file_loader`, on a temporary
copy) and turns the records into dlaas.domain.metrics points with its pure functions.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from dlaas.adapters.logs import split_lines
from dlaas.domain import jobspec, metrics
from dlaas.domain.locations import S3Location

log = logging.getLogger(__name__)

# A metric file larger than this is left out (and logged): one learner must not make the
# API download gigabytes per request.
MAX_FILE_BYTES = 64 * 2**20


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


def file_points(kind: str, path: Path, source: str) -> list[metrics.Point]:
    """The points of one local metric file of `kind` (dlaas.domain.jobspec.METRIC_FILE_*)."""
    if kind == jobspec.METRIC_FILE_TENSORBOARD:
        return metrics.scalar_points(tensorboard_scalars(path), source)
    with open(path, "rb") as f:
        return metrics.jsonl_points(split_lines(iter(lambda: f.read(1 << 16), b"")), source)


class MetricFileReader:
    """One learner's metric files in a job's results location."""

    def __init__(self, s3: Any, results: S3Location, job_id: str, learner: int):
        self.s3, self.results, self.learner = s3, results, learner
        self.prefix = results.prefix + jobspec.metrics_prefix(job_id)

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

    def read(self, rel: str, size: int) -> list[metrics.Point]:
        """The points of one file; none (logged) if it is too large or vanished."""
        kind = jobspec.metric_file_kind(rel)
        if kind is None:
            return []
        if size > MAX_FILE_BYTES:
            log.warning("metric file %s%s is %d bytes: left out", self.prefix, rel, size)
            return []
        with tempfile.TemporaryDirectory(prefix="dlaas-metrics-") as tmp:
            # The loader wants a file name: TensorBoard reads event files from paths.
            path = Path(tmp) / "file"
            try:
                self.s3.download_file(self.results.bucket, self.prefix + rel, str(path))
            except (ClientError, BotoCoreError) as exc:
                log.warning("metric file %s%s could not be read: %s", self.prefix, rel, exc)
                return []
            return file_points(kind, path, rel)

    def points(self) -> list[metrics.Point]:
        """Every point of every file of this learner, file by file in path order."""
        return [p for rel, (_, size) in self.listing().items() for p in self.read(rel, size)]
