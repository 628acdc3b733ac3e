"""How long a resize pauses a job: the restart times the grow rule pays for, as measured.

Pure (no clock, no I/O). Every resize is a gang restart from the job's checkpoint, and the
grow rule (`elastic.min_lent_that_pays`) lends idle learners only if they stay idle long
enough to pay for two of them. What a restart costs differs by job (its image, its data,
its checkpoint's size) and by platform (a swarm pulls images, a laptop does not), so the
rule reads the pauses this platform measured, from the job's own resizes where it has been
resized before (`RunningJob.restart_s`) and from every job's otherwise (`PolicyConfig.restart_s`
each round), with the configured `restart_s` as the prior until one was measured.

`RestartTimes` keeps them: a bounded window of the platform's last pauses and of each job's,
the median of each (one slow restart, an image pulled once, does not set the rule for an
hour). The caller measures: the live service from its resized jobs' statuses
(services/scheduler/restarts.py: from the resize to RUNNING again), the simulator from the
pause it simulates (checkpoint save + restore). `pause_after_resize` is the one reading of
"restarted" both the service and its tests use.
"""

from __future__ import annotations

import math
import statistics
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import replace
from typing import Literal

from dlaas.domain.status import Status

from .config import PolicyConfig
from .model import RunningJob

# The platform's window: enough to smooth a restart that pulled an image, few enough to
# follow a change of the platform (new nodes, a slower store).
PLATFORM_SAMPLES = 32
# A job's own window: its last few resizes (its image and checkpoint rarely change).
JOB_SAMPLES = 5
# Jobs whose pauses are kept (least recently measured dropped first): bounds the memory of a
# long-lived scheduler; a dropped job falls back to the platform's figure.
MAX_JOBS = 10_000
# A pause longer than this is not a restart but something else (the LCM did not carry the
# resize out, the job was halted and resumed, the node was lost): not a sample. The most
# DLAAS_SCHEDULER_RESTART_S may be.
MAX_PAUSE_S = 3_600.0

# Statuses a resized job passes through on its way back to RUNNING (requeued, placed,
# loading its data and checkpoint).
RESTARTING = frozenset({Status.QUEUED, Status.PENDING, Status.DOWNLOADING})
RUNNING = Status.PROCESSING


def pause_after_resize(
    resized_at: float, status: Status | None, status_at: float, now: float
) -> float | Literal["waiting", "gone"]:
    """What a resized job's current status (None: it has none) says about its restart.

    The pause in seconds once it is RUNNING again since the resize (`status_at` >=
    `resized_at`); "waiting" while it may still be on its way (restarting, or RUNNING from
    before: the resize is carried out after the round); "gone" when nothing will be measured
    (no status, it left the way back to RUNNING, or MAX_PAUSE_S passed).
    """
    if status == RUNNING and resized_at <= status_at <= resized_at + MAX_PAUSE_S:
        return status_at - resized_at
    if now - resized_at <= MAX_PAUSE_S and (status in RESTARTING or status == RUNNING):
        return "waiting"
    return "gone"


class RestartTimes:
    """The measured pauses of resizes: the platform's and each job's, medians of windows.

    `prior` is the configured restart_s: the platform's figure until a pause was measured.
    """

    def __init__(
        self,
        prior: float,
        samples: int = PLATFORM_SAMPLES,
        per_job: int = JOB_SAMPLES,
        jobs: int = MAX_JOBS,
    ) -> None:
        if not math.isfinite(prior) or prior < 0:
            raise ValueError(f"prior: must be a number of seconds >= 0, got {prior}")
        if min(samples, per_job, jobs) < 1:
            raise ValueError("samples, per_job and jobs must each be at least 1")
        self.prior = prior
        self._platform: deque[float] = deque(maxlen=samples)
        self._per_job = per_job
        self._max_jobs = jobs
        self._jobs: OrderedDict[str, deque[float]] = OrderedDict()

    def add(self, job_id: str, pause_s: float) -> bool:
        """Count one measured pause of `job_id`; False (ignored) if it is not a pause
        (negative, not finite, or longer than MAX_PAUSE_S)."""
        if not (math.isfinite(pause_s) and 0 <= pause_s <= MAX_PAUSE_S):
            return False
        self._platform.append(pause_s)
        kept = self._jobs.pop(job_id, None)
        if kept is None:
            kept = deque(maxlen=self._per_job)
        kept.append(pause_s)
        self._jobs[job_id] = kept  # the most recently measured last
        while len(self._jobs) > self._max_jobs:
            self._jobs.popitem(last=False)
        return True

    def platform(self) -> float:
        """The median of the platform's last pauses; the prior before any."""
        return statistics.median(self._platform) if self._platform else self.prior

    def of(self, job_id: str) -> float | None:
        """The median of the job's own last pauses; None if it was never measured."""
        kept = self._jobs.get(job_id)
        return statistics.median(kept) if kept else None

    def config(self, cfg: PolicyConfig) -> PolicyConfig:
        """`cfg` with the platform's figure as `restart_s` (unchanged before any sample)."""
        if not self._platform or cfg.grow_payback <= 0:
            return cfg  # nothing measured, or the rule is off: nothing to read
        return replace(cfg, restart_s=self.platform())

    def running(self, jobs: Iterable[RunningJob]) -> list[RunningJob]:
        """The running jobs, each measured one with its own figure as `restart_s`."""
        if not self._jobs:
            return list(jobs)
        out = []
        for r in jobs:
            own = self.of(r.job_id)
            out.append(r if own is None else replace(r, restart_s=own))
        return out
