"""Where a job's log lines come from, for the API's log stream and anyone else.

One learner's log is ONE stream of lines across every run of the job (a requeued,
preempted or resumed job gets a new gang: new containers with the same names, whose
`docker logs` start empty). Two sources hold it:

- the learner's log object in the job's results location (`jobspec.log_object_key`),
  uploaded by the helper: at the start of every run (after it put the log so far back
  in LOG_DIR, where the learner wrapper appends to it), now and then while the run goes
  on, and at its end. Its user metadata `RUN_START_META` ("dlaas-run-start-line")
  says how many of its lines the earlier runs wrote: the object holds
  `earlier runs' lines ++ (a prefix of) the current run's lines`;
- the current learner container's log (`docker logs`, read through the port
  `dlaas.domain.ports.JobContainers` of the learner's node): the current run's lines only.

So the stream is `object[:run_start] ++ docker logs`, while the container exists, and
the whole object once it is gone (the monitor removes containers only after the helper
stored the logs). Line `i` of the container is line `run_start + i` of the stream, and
a `LineCursor` that counts the lines consumed so far hands out every line once, from
the client's `offset` on, whichever source it came from.

When to read `run_start`: the helper writes it before it releases the learners
(`data_ready`), so it is read once the container has printed its first line; until
then every line of the object precedes the container's and is handed out at once.
A run that lost lines (a node died before its helper could upload the tail) gives
the next run a `run_start` below what the reader already handed out; the cursor then
counts on from `run_start` rather than drop the new run's lines.

Following never blocks on a source: each round reads a snapshot of the sources (the
container's log so far, the object) and the cursor hands out what is new; between rounds
`rounds` yields `PAUSE` (the caller waits `poll_s`, on its event loop or by sleeping).
So a follower holds no thread while the learner is quiet, its stream can end the moment
its client goes, and the follow ends once the job is final on every engine (a Swarm
task's log stream, `follow=true`, did not end when the task did). Rounds of many
followers of a job that is not final yet share their container lookups and log reads
for a quarter `poll_s` (`Recent`): a stale snapshot only delays a line by a round, and the
round that sees the job final reads fresh. A running learner's last line is handed out
once its newline is there (a round may catch it half written).

Assumptions shared with the helper and the LCM: the log object holds the same lines, in
the same order, as the learner's `docker logs` (the wrapper writes both); the LCM
removes a gang's containers before it starts the next gang. A gang the job monitor restarts
in place keeps its containers on one engine (each container's log goes on: the same id, the
same run start), and gets new ones on a swarm (new tasks: their helper marks the new run's
start in the log object before they may print, services.learner_helper.presence).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from itertools import chain, islice
from typing import Any

from botocore.exceptions import ClientError

from dlaas.adapters.s3 import client_for
from dlaas.adapters.store.base import JobStore
from dlaas.config import PlatformSettings
from dlaas.domain import jobspec
from dlaas.domain.errors import JobNotFound
from dlaas.domain.locations import S3Location, job_locations
from dlaas.domain.ports import Container, EngineUnreachable, JobContainers
from dlaas.domain.secretbox import SecretBox
from dlaas.domain.status import FINAL
from dlaas.domain.stored import stored_manifest
from dlaas.learner.paths import RUN_START_META

# A log object at most this large is read once for every follower of its job that asks
# within a quarter poll; a larger one is streamed to each.
SHARED_BYTES = 1 << 20
_LARGE = object()


class Pause:
    """Between two rounds of a follow: nothing new before the next poll."""


PAUSE = Pause()


class Recent:
    """Values read in the last `ttl_s` seconds, by key (thread-safe; at most `size` kept)."""

    def __init__(self, ttl_s: float, size: int = 1024, clock: Callable[[], float] = time.monotonic):
        self.ttl_s, self.size, self.clock = ttl_s, size, clock
        self._values: dict[Any, tuple[float, Any]] = {}
        self._lock = threading.Lock()

    def get(self, key: Any, read: Callable[[], Any]) -> Any:
        now = self.clock()
        with self._lock:
            hit = self._values.get(key)
        if hit is not None and now - hit[0] < self.ttl_s:
            return hit[1]
        value = read()
        with self._lock:
            if len(self._values) >= self.size:
                self._values = {k: v for k, v in self._values.items() if now - v[0] < self.ttl_s}
                if len(self._values) >= self.size:
                    self._values.clear()
            self._values[key] = (now, value)
        return value


class LineCursor:
    """Counts the lines consumed so far; yields only lines past both that count and `offset`.

    Pure: every source replays its part of the stream from its first line (`start` is
    that line's index in the whole stream), and the cursor drops the ones already
    handed out (or skipped by the client's offset).
    """

    def __init__(self, offset: int = 0):
        if offset < 0:
            raise ValueError("offset must be >= 0")
        self.offset = offset
        self.consumed = 0

    def take(self, lines: Iterable[str], start: int = 0) -> Iterator[str]:
        for index, line in enumerate(lines, start):
            if index < self.consumed:
                continue
            self.consumed = index + 1
            if index >= self.offset:
                yield line

    def rewind(self, to: int) -> None:
        """The stream lost its lines past `to` (they will never come): count on from there."""
        self.consumed = min(self.consumed, to)


def run_start(metadata: dict[str, str] | None) -> int:
    """Lines of earlier runs at the head of a log object (0 for objects without the mark)."""
    value = (metadata or {}).get(RUN_START_META, "0")
    return int(value) if value.isdigit() else 0


@dataclass
class S3Log:
    """One read of a log object: its earlier runs' line count and its lines."""

    run_start: int
    lines: Iterator[str]


def stamped(line: str) -> tuple[float | None, str]:
    """A line the engine read with its time (`2026-11-27T00:12:34.123456789Z text`, UTC):
    (the time in seconds since the epoch, the text); (None, line) without a stamp."""
    stamp, _, text = line.partition(" ")
    if not stamp.endswith("Z") or "T" not in stamp:
        return None, line
    try:
        # Python reads at most microseconds: the nanoseconds' last three digits are cut.
        at = datetime.fromisoformat(stamp[:-1][:26]).replace(tzinfo=UTC)
    except ValueError:
        return None, line
    return at.timestamp(), text


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


@dataclass(frozen=True)
class LiveContainer:
    """A learner's container and the node view that reported it (its logs are read there)."""

    engine: JobContainers
    container: Container

    @property
    def id(self) -> str:
        return self.container.id

    @property
    def status(self) -> str:
        return self.container.state


class LogReader:
    """Reads one learner's log lines from its container or, once it is gone, from S3.

    `engines` maps node names to their JobContainers (one view alone is the only node; None
    or empty: only S3 is read); the learner's container is looked for on the node the LCM
    recorded for it (the job's info["learners"][i]["node"]), or on every node. `s3_for`
    turns a job's results location into a boto3 client (the platform's own client is
    reused for the platform's S3). `poll_s` paces a follow's rounds; `sleep` waits them
    out in the blocking `lines`/`stream`.
    """

    def __init__(
        self,
        store: JobStore,
        settings: PlatformSettings,
        engines: Mapping[str, JobContainers] | JobContainers | None,
        s3_for: Callable[[S3Location], Any] = client_for,
        *,
        poll_s: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.store = store
        self.settings = settings
        if isinstance(engines, JobContainers):
            engines = {"": engines}
        self.engines: dict[str, JobContainers] = dict(engines or {})
        self.s3_for = s3_for
        self.poll_s = poll_s
        self.sleep = sleep
        # A quarter poll: a line waits at most about a round and a quarter to be seen.
        self.recent = Recent(poll_s / 4)

    # --- adapters -------------------------------------------------------------------

    def _engines_for(self, job_id: str, learner: int) -> list[JobContainers]:
        """The view of the learner's node when the job's record names it, else every one."""
        if len(self.engines) <= 1:
            return list(self.engines.values())
        try:
            placed = self.store.get(job_id).info.get("learners")
        except JobNotFound:
            placed = None
        node = next(
            (e.get("node") for e in placed or () if isinstance(e, dict) and e.get("id") == learner),
            None,
        )
        if node in self.engines:
            return [self.engines[node]]
        return [self.engines[n] for n in sorted(self.engines)]

    def _container(self, job_id: str, learner: int, shared: bool = False) -> LiveContainer | None:
        """The learner's container; `shared`: a lookup of the last `poll_s` will do."""
        for engine in self._engines_for(job_id, learner):
            try:
                if shared:
                    found = self.recent.get(
                        ("containers", id(engine), job_id), partial(engine.job_containers, job_id)
                    )
                else:
                    found = engine.job_containers(job_id)
            except EngineUnreachable:
                # Behave as if the container were gone, so the reader falls back to S3 and
                # tries the engine again on the next round.
                continue
            mine = [c for c in found if c.role == jobspec.ROLE_LEARNER and c.learner == learner]
            if mine:
                # The LCM removes a gang before it starts the next: one, or a running one.
                return LiveContainer(engine, max(mine, key=lambda c: c.running))
        return None

    def _container_lines(
        self, live: LiveContainer, shared: bool = False, skip: int = 0, complete: bool = False
    ) -> Iterator[str] | None:
        """The container's log so far, from its line `skip` on (the lines before are skipped
        as bytes, not decoded: a follow reads the whole log every round); None when it
        cannot be read (removed, or being removed). `shared`: a read of the last quarter
        `poll_s` will do; `complete`: without a last line that has no newline yet (a running
        learner is still writing it; the next round has it whole)."""
        try:
            if shared:
                raw = self.recent.get(
                    ("logs", id(live.engine), live.id), lambda: live.engine.logs(live.container)
                )
            else:
                raw = live.engine.logs(live.container)
        except (EngineUnreachable, OSError):
            return None
        if raw is None:
            return None
        if complete:
            raw = raw[: raw.rfind(b"\n") + 1]
        if skip:
            parts = raw.split(b"\n", skip)
            raw = parts[skip] if len(parts) > skip else b""
        return split_lines([raw])

    def _has_output(self, live: LiveContainer) -> bool:
        try:
            raw = live.engine.logs(live.container, tail=1)
        except (EngineUnreachable, OSError):
            return True  # gone: do not read ahead in S3, the next round sorts it out
        return True if raw is None else bool(raw)  # None: gone, as above

    def _s3_log(
        self, results: S3Location, job_id: str, learner: int, shared: bool = False
    ) -> S3Log | None:
        """The learner's log object, None while there is none; `shared`: a read of the
        last quarter `poll_s` will do (kept for sharing if at most SHARED_BYTES)."""
        if shared:
            ident = ("object", results.endpoint, results.bucket, results.prefix, job_id, learner)
            kept = self.recent.get(ident, partial(self._s3_small, results, job_id, learner))
            if kept is None:
                return None
            if kept is not _LARGE:
                start, body = kept
                return S3Log(start, split_lines([body]))
        obj = self._s3_object(results, job_id, learner)
        if obj is None:
            return None
        return S3Log(
            run_start(obj.get("Metadata")), split_lines(obj["Body"].iter_chunks(64 * 1024))
        )

    def _s3_object(self, results: S3Location, job_id: str, learner: int) -> dict | None:
        s3 = self.s3_for(results)
        key = results.prefix + jobspec.log_object_key(job_id, learner)
        try:
            return s3.get_object(Bucket=results.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "NoSuchBucket", "404"):
                return None
            raise

    def _s3_small(self, results: S3Location, job_id: str, learner: int) -> Any:
        """(run start, bytes) of the log object if it is small, None if there is none,
        else _LARGE (read it as a stream)."""
        obj = self._s3_object(results, job_id, learner)
        if obj is None:
            return None
        if int(obj.get("ContentLength") or 0) > SHARED_BYTES:
            obj["Body"].close()
            return _LARGE
        return run_start(obj.get("Metadata")), obj["Body"].read()

    def _final(self, job_id: str, shared: bool = False) -> bool:
        """Whether the job is final; `shared`: a read of the last quarter `poll_s` will do
        (a stale "not yet" only delays the end by a round)."""
        if shared:
            return self.recent.get(("final", job_id), partial(self._final, job_id))
        try:
            return self.store.get(job_id).status in FINAL
        except JobNotFound:
            return True  # deleted while we followed: nothing more will come

    def tail(
        self, job_id: str, learner: int, n: int, max_bytes: int = 64 * 1024
    ) -> list[tuple[float | None, str]]:
        """The last `n` lines (at most `max_bytes`) of the learner's container, each with the
        time the engine stamped it (None where it has none), one small engine call (shared
        for a quarter `poll_s`); [] when it has no container here."""
        live = self._container(job_id, learner, shared=True)
        if live is None:
            return []
        try:
            raw = live.engine.logs(live.container, tail=n, timestamps=True) or b""
        except (EngineUnreachable, OSError):
            return []
        lines = list(split_lines([raw[-max_bytes:]]))
        if len(raw) > max_bytes:
            lines = lines[1:]  # cut at its start: its stamp is gone
        return [stamped(line) for line in lines]

    # --- the stream -----------------------------------------------------------------

    def lines(
        self, job_id: str, learner: int = 0, *, offset: int = 0, follow: bool = False
    ) -> Iterator[str]:
        """Learner `learner`'s log lines from line `offset` on; with `follow`, until the job
        is final and every line is out (sleeping between rounds). Raise JobNotFound for an
        unknown job."""
        return self._paced(self.rounds(job_id, learner, offset=offset, follow=follow))

    def rounds(
        self, job_id: str, learner: int = 0, *, offset: int = 0, follow: bool = False
    ) -> Iterator[str | Pause]:
        """`lines` without the waits: `PAUSE` between a follow's rounds, never a sleep; each
        step reads its sources once. Raise JobNotFound for an unknown job."""
        record = self.store.get(job_id)
        box = SecretBox(self.settings.secrets_key.get_secret_value())
        manifest = stored_manifest(record, box)
        _, results = job_locations(manifest, self.settings, record.team)
        return self.stream_rounds(results, job_id, learner, offset=offset, follow=follow)

    def _paced(self, items: Iterator[str | Pause]) -> Iterator[str]:
        for item in items:
            if isinstance(item, Pause):
                self.sleep(self.poll_s)
            else:
                yield item

    def stream(
        self, results: S3Location, job_id: str, learner: int, *, offset: int, follow: bool
    ) -> Iterator[str]:
        """The stream of `lines` once the job's results location is known."""
        return self._paced(
            self.stream_rounds(results, job_id, learner, offset=offset, follow=follow)
        )

    def stream_rounds(
        self, results: S3Location, job_id: str, learner: int, *, offset: int, follow: bool
    ) -> Iterator[str | Pause]:
        """The rounds of `stream`."""
        cursor = LineCursor(offset)
        current: tuple[str, int] | None = None  # (container id, its first line's index)

        def whole_object() -> Iterator[str]:
            log = self._s3_log(results, job_id, learner, shared)
            return cursor.take(log.lines) if log is not None else iter(())

        while True:
            # Status first: if the job was already final before we read a source, that
            # source holds every line there will ever be.
            final = self._final(job_id, follow)
            shared = follow and not final
            container = self._container(job_id, learner, shared)
            if container is None:
                current = None
                yield from whole_object()
                # Containers gone and the job final: the monitor removes containers only
                # after the logs are in S3, so there is nothing more to wait for.
                done = True
            else:
                running = container.status in ("running", "restarting")
                if current is not None and current[0] != container.id:
                    current = None  # a new run (restart) under the same name
                object_read = current is None and not self._has_output(container)
                if object_read:
                    # Nothing printed yet: every line of the object precedes this run's.
                    yield from whole_object()
                skip = 0 if current is None else max(0, cursor.consumed - current[1])
                lines = self._container_lines(container, shared, skip, follow and running)
                if lines is None:
                    # It is being removed (the monitor cleans up after the helper stored
                    # the log; Docker may still list it with its log file gone): the object
                    # holds its lines, those this stream already gave skipped.
                    if not object_read:
                        yield from whole_object()
                    lines = iter(())
                if current is None:
                    first = next(lines, None)
                    if first is not None:
                        # The helper wrote this run's start before the learner could print.
                        log = self._s3_log(results, job_id, learner, shared)
                        start = log.run_start if log is not None else 0
                        if start < cursor.consumed:
                            cursor.rewind(start)  # the last run's tail was lost with its node
                        if log is not None:
                            yield from cursor.take(islice(log.lines, start))
                        current = (container.id, start)
                        lines = chain([first], lines)
                if current is not None:
                    yield from cursor.take(lines, current[1] + skip)
                done = not running
            if not follow or (final and done):
                return
            yield PAUSE
