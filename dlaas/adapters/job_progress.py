"""Each running job's progress, read off the last lines of its learners' logs: the one use
case behind the `progress` of the job view (REST's `GET /v1/jobs[/{id}]`, the CLI's `show`
and `list`, the dashboard) and the running jobs' remaining times the queue's ETA uses.

The parsing and the estimate are dlaas.domain.progress'; this keeps one `Tracker` per
learner in memory, per API process, and feeds it a look at the learner's last
`TAIL_LINES` lines (one small `logs(tail=...)` engine call, dlaas.adapters.logs.LogReader.tail)
at most once per `ttl_s` per job: a `list` of many jobs, or many clients asking, costs at
most one look per job and `ttl_s`, and a caller that does not look never waits for
another's look (`due` tells the API which calls look: it runs those on a worker thread,
the others on its event loop). The rate comes from the times the engine stamped the
lines that moved the position, so one look at a tail holding two moves estimates: every
API replica and the LCM estimate alike, a restarted one at once (lines without a stamp
count as printed when a look saw them, and only the last position is used). Nothing is
stored: a final job shows the progress this process saw last, and none after a restart.

Bounded: at most `MAX_LEARNERS` learners looked at per job, `MAX_JOBS` jobs remembered
(the least recently asked forgotten), `MAX_LOOKS` jobs looked at in one call of `many`.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

from dlaas.adapters.logs import LogReader
from dlaas.adapters.store.base import JobRecord
from dlaas.domain.metric_query import learners_with_logs
from dlaas.domain.progress import Progress, ProgressSpec, Tracker, job_progress, position
from dlaas.domain.status import Status
from dlaas.domain.stored import stored_manifest_or_none

TAIL_LINES = 40
MAX_LEARNERS = 8
MAX_JOBS = 4096
MAX_LOOKS = 64


class _Job:
    def __init__(self) -> None:
        self.lock = threading.Lock()  # one look at a time (the API answers in threads)
        self.trackers: dict[int, Tracker] = {}
        self.looked_at = float("-inf")
        self.progress: Progress | None = None


class ProgressReader:
    """The progress of jobs, from looks at their learners' log tails (see the module)."""

    def __init__(self, clock: Callable[[], float] = time.time, ttl_s: float = 1.0) -> None:
        self.clock = clock
        self.ttl_s = ttl_s
        self._jobs: OrderedDict[str, _Job] = OrderedDict()
        self._lock = threading.Lock()

    def _job(self, job_id: str) -> _Job:
        with self._lock:
            job = self._jobs.pop(job_id, None) or _Job()
            self._jobs[job_id] = job
            while len(self._jobs) > MAX_JOBS:
                self._jobs.popitem(last=False)
            return job

    def due(self, record: JobRecord) -> bool:
        """Whether `of` would look at the job's logs now (the one case where it calls the
        engine): it is PROCESSING and not looked at within `ttl_s`."""
        if record.status != Status.PROCESSING:
            return False
        with self._lock:
            job = self._jobs.get(record.job_id)
        return job is None or self._due(job, record, self.clock())

    def looked(self, record: JobRecord) -> bool:
        """Whether this process looked at the job's logs before: `of(..., look=False)` then
        answers with what that look saw while the next one is under way."""
        with self._lock:
            job = self._jobs.get(record.job_id)
        return job is not None and job.looked_at > float("-inf")

    def _due(self, job: _Job, record: JobRecord, now: float) -> bool:
        return record.status == Status.PROCESSING and now - job.looked_at >= self.ttl_s

    def of(self, record: JobRecord, logs: LogReader, *, look: bool = True) -> Progress | None:
        """The job's progress: a fresh look if it is PROCESSING and the last is older than
        `ttl_s` (and `look`), else what the last look saw, without waiting for a look
        another caller has under way."""
        job = self._job(record.job_id)
        if not (look and self._due(job, record, self.clock())):
            return self._seen(job, record, self.clock())
        with job.lock:
            return self._of(job, record, logs, look)

    def _seen(self, job: _Job, record: JobRecord, now: float) -> Progress | None:
        return _aged(job.progress, now) if record.status == Status.PROCESSING else job.progress

    def _of(self, job: _Job, record: JobRecord, logs: LogReader, look: bool) -> Progress | None:
        now = self.clock()
        if look and self._due(job, record, now):
            job.looked_at = now
            manifest = stored_manifest_or_none(record)
            spec = manifest.progress if manifest is not None else ProgressSpec()
            requested = manifest.learners if manifest is not None else 1
            n = min(learners_with_logs(requested, record.info), MAX_LEARNERS)
            seen: dict[int, Progress] = {}
            for learner in range(n):
                lines = logs.tail(record.job_id, learner, TAIL_LINES)
                tracker = job.trackers.setdefault(learner, Tracker())
                timed = [(at, text) for at, text in lines if at is not None]
                if len(timed) == len(lines):
                    p = tracker.observe_lines(timed, spec, now)
                else:
                    p = tracker.observe(position((text for _, text in lines), spec), now)
                    if p is None and tracker.last is not None:
                        p = tracker.progress(now)  # its last lines say nothing now: as before
                if p is not None:
                    seen[learner] = p
            job.progress = job_progress(seen) or job.progress
        return self._seen(job, record, now)

    def many(self, records: Iterable[JobRecord], logs: LogReader) -> dict[str, Progress]:
        """`of` for several jobs (a page of `list`), fresh looks for at most MAX_LOOKS."""
        out = {}
        looks = 0
        for record in records:
            p = self.of(record, logs, look=looks < MAX_LOOKS)
            looks += record.status == Status.PROCESSING
            if p is not None:
                out[record.job_id] = p
        return out


def _aged(p: Progress | None, now: float) -> Progress | None:
    """A running job's progress as of `now`: the finish stands, the time left shrinks."""
    if p is None or p.finish_at is None:
        return p
    finish = max(now, p.finish_at)
    return Progress(p.position, now, p.rate, finish - now, finish)
