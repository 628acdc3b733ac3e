"""The job monitor's disk limit on a running job: a learner's writable layer and its node's
job volume, against the learner's disk size (the manifest's `disk`, else the platform's
DLAAS_LEARNER_DISK_MB). See docs/operations.md, "Disk limits".

Two measures, each where it can be taken on every engine:
- the job volume: the node's helper walks it and prints the `disk_full` event past the
  disk size of its node's learners (services/learner_helper/diskwatch.py);
- each learner's writable layer: `DiskWatch` asks the learner's engine for its size
  (Docker's SizeRw, `JobContainers.layer_bytes`) at most every `poll_s` per running job.
  An engine that cannot say (the swarm's manager reports no sizes) leaves the layers to
  the engine's own bound, where its storage driver has one (docker_engine's storage_opt).

`disk_full()` (pure) turns either into the job's failure, `disk_full`, with the last log
lines of the learner that wrote too much (of learner 0 for the volume, which every learner
of the node shares): decide.py fails the job, and its final steps stop the learners and
store the logs. Other jobs are not touched: each job has its own volume and layers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from dlaas.domain import jobspec
from dlaas.domain.jobspec import EVENT_DISK_FULL, JobErrorCode
from dlaas.domain.ports import Container
from dlaas.domain.sizes import MIB, size_text
from dlaas.domain.status import Status, between
from services.jobmonitor.classify import LOG_TAIL_LINES

ERROR_DISK_FULL = JobErrorCode.DISK_FULL
# How often a running job's learners' writable layers are measured (each measure walks
# the layers' upper directories on their engine: bounded by what the learners wrote).
DEFAULT_DISK_POLL_S = 10.0
_WATCHED = between(Status.DOWNLOADING, Status.PROCESSING)


def limit_bytes(asked_mb: int, default_mb: int) -> int:
    """A learner's disk size in bytes: the manifest's, else the platform's default."""
    return (asked_mb or default_mb) * MIB


def over_limit(
    status: Status, layer: Mapping[int, int], limit: int, events: Sequence[Mapping]
) -> int | None:
    """The learner of a running job whose disk is over `limit` (0: not watched): one whose
    layer is, or learner 0 when a helper reported its volume full; None when all are within."""
    if limit <= 0 or status not in _WATCHED:
        return None
    over = sorted(i for i, n in layer.items() if n > limit)
    if over:
        return over[0]
    return 0 if any(e.get("event") == EVENT_DISK_FULL for e in events) else None


def disk_full(
    status: Status,
    layer: Mapping[int, int],
    limit: int,
    events: Sequence[Mapping],
    tails: Mapping[int, Sequence[str]],
) -> tuple[str, str] | None:
    """(reason, error code) when a running job is over its disk size, else None."""
    who = over_limit(status, layer, limit, events)
    if who is None:
        return None
    if layer.get(who, 0) > limit:
        what = (
            f"learner {who} wrote {size_text(layer[who])} to its container's file system; "
            f"its disk size is {size_text(limit)}"
        )
    else:
        full = next(e for e in events if e.get("event") == EVENT_DISK_FULL)
        what = (
            f"the job volume holds {size_text(float(full.get('bytes') or 0))}; its "
            f"learners' disk sizes add up to {size_text(float(full.get('limit') or 0))}"
        )
    reason = f"disk_full: {what} (the manifest's `disk`): the job was stopped"
    lines = [x for x in tails.get(who, ()) if x.strip()][-LOG_TAIL_LINES:]
    if lines:
        reason += f"; last log lines of learner {who}:\n" + "\n".join(lines)
    return reason, ERROR_DISK_FULL


class DiskWatch:
    """The writable-layer sizes of every running job's learners, measured at most every
    `poll_s` per job (kept in memory between measures)."""

    def __init__(self, poll_s: float = DEFAULT_DISK_POLL_S, clock: Callable[[], float] = time.time):
        self.poll_s = poll_s
        self.clock = clock
        self._seen: dict[str, tuple[float, dict[int, int]]] = {}

    def look(
        self,
        job_id: str,
        status: Status,
        containers: Sequence[Container],
        nodes: Sequence[str],
        measure: Callable[[str], Mapping[str, int] | None],
        limit: int,
    ) -> dict[int, int]:
        """Learner index -> its writable layer's bytes; `measure(node)` gives container id
        -> bytes for the job's containers there (None: that engine cannot say). Nothing is
        measured for a job with no limit (0)."""
        if status not in _WATCHED or limit <= 0:
            self._seen.pop(job_id, None)
            return {}
        now = self.clock()
        seen = self._seen.get(job_id)
        if seen is not None and now - seen[0] < self.poll_s:
            return seen[1]
        sizes: dict[str, int] = {}
        for node in nodes:
            sizes.update(measure(node) or {})
        out = {
            c.learner: sizes[c.id]
            for c in containers
            if c.role == jobspec.ROLE_LEARNER and c.learner is not None and c.id in sizes
        }
        self._seen[job_id] = (now, out)
        return out

    def next_look(self, job_id: str) -> float | None:
        """When the job's layers are due to be measured again (None: not watched)."""
        seen = self._seen.get(job_id)
        return seen[0] + self.poll_s if seen is not None else None

    def forget(self, job_id: str) -> None:
        self._seen.pop(job_id, None)
