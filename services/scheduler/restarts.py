"""The live scheduler's restart times: each resize's pause, measured from the job's status.

The adapter that feeds `policy.restarts.RestartTimes` (the estimator the grow rule reads).
What the service already knows is when it resized a job: its running entry's
`last_resize_time`, set in the same etcd write that records the resize (the LCM carries it
out at once: checkpoint, QUEUED, placed, DOWNLOADING, PROCESSING again). Each round reads
the live status (`<prefix>/jobs/<id>/status`, the JobState the LCM and the monitor write)
of the jobs resized and not yet measured; once it is PROCESSING again since the resize,
the pause is its entry's time minus the resize's. One etcd read per such job per round,
and only until its restart is over (a few rounds); nothing is read for the others.

Kept in memory, as the service's other learned figures: after a restart of the scheduler
the configured restart_s stands in again until resizes are measured (a resize still
restarting then is measured too: its entry says when it was resized).
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from dlaas.domain.keys import EtcdKeys
from dlaas.domain.status import JobState, Status
from services.scheduler.policy import PolicyConfig, Snapshot
from services.scheduler.policy.restarts import RestartTimes, pause_after_resize

if TYPE_CHECKING:  # the etcd client's type, for the annotations only
    import pyetcd

log = logging.getLogger(__name__)


class RestartWatch:
    """Measures the restarts of the jobs a round sees resized; `round()` applies them."""

    def __init__(self, etcd: pyetcd.Etcd3Client, keys: EtcdKeys, prior: float):
        self.etcd = etcd
        self.keys = keys
        self.times = RestartTimes(prior)
        # job id -> the resize (its last_resize_time) already measured or given up on;
        # only running jobs are kept (a round drops the others).
        self._settled: dict[str, float] = {}

    def _status(self, job_id: str) -> tuple[Status | None, float]:
        value, _ = self.etcd.get(self.keys.status(job_id))
        if not value:
            return None, 0.0
        try:
            state = JobState.from_dict(json.loads(value))
        except (ValueError, KeyError, TypeError):  # not a JobState: nothing to measure
            return None, 0.0
        return state.status, state.at

    def observe(self, snapshot: Snapshot, now: float) -> None:
        """Measure the resized running jobs whose restart ended since the last round."""
        settled: dict[str, float] = {}
        for r in snapshot.running:
            at = r.last_resize_time
            if at is None:
                continue
            if self._settled.get(r.job_id) == at:
                settled[r.job_id] = at
                continue
            status, status_at = self._status(r.job_id)
            pause = pause_after_resize(at, status, status_at, now)
            if pause == "waiting":
                continue
            if not isinstance(pause, str) and self.times.add(r.job_id, pause):
                log.info("%s restarted %.1f s after its resize", r.job_id, pause)
            settled[r.job_id] = at
        self._settled = settled

    def round(
        self, snapshot: Snapshot, cfg: PolicyConfig, now: float
    ) -> tuple[Snapshot, PolicyConfig]:
        """The round's snapshot and configuration with the restart times measured so far:
        each measured job's own (`RunningJob.restart_s`), the platform's (`cfg.restart_s`)."""
        self.observe(snapshot, now)
        snapshot = replace(snapshot, running=self.times.running(snapshot.running))
        return snapshot, self.times.config(cfg)
