"""Where a job's log lines come from, for the API's log stream and anyone else.

While a learner's container exists its lines come from `docker logs` (live, with
follow); once the job monitor has removed it, from the learner's log object in the
job's results location (`jobspec.log_object_key`), which the helper uploaded before
the clean-up. Both sources hold the learner's whole log from its first line, so a
`LineCursor` that counts lines already consumed makes the hand-over from container to
S3 free of gaps and duplicates, and lets a client resume at any line `offset`.

Assumption shared with the helper: the log object holds the same lines, in the same
order, as `docker logs` of the learner (stdout and stderr).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from botocore.exceptions import ClientError

from dlaas import jobspec
from dlaas.config import PlatformSettings
from dlaas.errors import JobNotFound
from dlaas.locations import S3Location, job_locations
from dlaas.manifest import parse_manifest
from dlaas.s3 import client_for
from dlaas.status import FINAL
from dlaas.store.base import JobStore


class LineCursor:
    """Counts the lines consumed so far; yields only lines past both that count and `offset`.

    Pure: every source replays a log from its first line, and the cursor drops the
    ones already handed out (or skipped by the client's offset).
    """

    def __init__(self, offset: int = 0):
        if offset < 0:
            raise ValueError("offset must be >= 0")
        self.offset = offset
        self.consumed = 0

    def take(self, lines_from_start: Iterable[str]) -> Iterator[str]:
        for index, line in enumerate(lines_from_start):
            if index < self.consumed:
                continue
            self.consumed = index + 1
            if index >= self.offset:
                yield line


def split_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """Byte chunks (cut anywhere) -> text lines without their newline; a last partial line too."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for raw in complete:
            yield raw.removesuffix(b"\r").decode("utf-8", "replace")
    if pending:
        yield pending.removesuffix(b"\r").decode("utf-8", "replace")


class LogReader:
    """Reads one learner's log lines from its container or, once it is gone, from S3.

    `docker` is a docker.DockerClient or None (then only S3 is read); `s3_for` turns a
    job's results location into a boto3 client (the platform's own client is reused
    for the platform's S3). `sleep` and `poll_s` pace the follow loop.
    """

    def __init__(
        self,
        store: JobStore,
        settings: PlatformSettings,
        docker: Any | None,
        s3_for: Callable[[S3Location], Any] = client_for,
        *,
        poll_s: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.store = store
        self.settings = settings
        self.docker = docker
        self.s3_for = s3_for
        self.poll_s = poll_s
        self.sleep = sleep

    # --- adapters -------------------------------------------------------------------

    def _container(self, job_id: str, learner: int):
        if self.docker is None:
            return None
        import docker.errors  # local: keeps the module importable where no engine is used

        try:
            return self.docker.containers.get(jobspec.learner_name(job_id, learner))
        except docker.errors.NotFound:
            return None
        except (docker.errors.DockerException, OSError):
            # The engine is not answering: behave as if the container were gone, so the
            # reader falls back to S3 and tries the engine again on the next round.
            return None

    def _container_lines(self, container, follow: bool) -> Iterator[str]:
        import docker.errors

        try:
            if follow:
                chunks = container.logs(stdout=True, stderr=True, stream=True, follow=True)
            else:
                chunks = [container.logs(stdout=True, stderr=True)]
            yield from split_lines(chunks)
        except (docker.errors.DockerException, OSError):
            return  # removed while we read: the next round reads S3 from where we are

    def _s3_lines(self, results: S3Location, job_id: str, learner: int) -> Iterator[str] | None:
        s3 = self.s3_for(results)
        key = results.prefix + jobspec.log_object_key(job_id, learner)
        try:
            body = s3.get_object(Bucket=results.bucket, Key=key)["Body"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "NoSuchBucket", "404"):
                return None
            raise
        return split_lines(body.iter_chunks(64 * 1024))

    def _final(self, job_id: str) -> bool:
        try:
            return self.store.get(job_id).status in FINAL
        except JobNotFound:
            return True  # deleted while we followed: nothing more will come

    # --- the stream -----------------------------------------------------------------

    def lines(
        self, job_id: str, learner: int = 0, *, offset: int = 0, follow: bool = False
    ) -> Iterator[str]:
        """Learner `learner`'s log lines from line `offset` on; with `follow`, until the job
        is final and every line is out. Raise JobNotFound for an unknown job."""
        record = self.store.get(job_id)
        _, results = job_locations(parse_manifest(record.manifest_yaml), self.settings)
        cursor = LineCursor(offset)
        while True:
            # Status first: if the job was already final before we read a source, that
            # source holds every line there will ever be.
            final = self._final(job_id)
            container = self._container(job_id, learner)
            if container is not None:
                running = container.status in ("running", "restarting")
                yield from cursor.take(self._container_lines(container, follow and running))
                done = not running
            else:
                from_s3 = self._s3_lines(results, job_id, learner)
                if from_s3 is not None:
                    yield from cursor.take(from_s3)
                # Containers gone and the job final: the monitor removes containers only
                # after the logs are in S3, so there is nothing more to wait for.
                done = True
            if not follow or (final and done):
                return
            self.sleep(self.poll_s)
