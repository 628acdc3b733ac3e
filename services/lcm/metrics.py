"""The LCM's training-metrics queries: what the gRPC `JobMetrics` and `FollowMetrics`
(grpc_api.py) call, so integrators of the SDK (dlaas.clients.sdk.LcmClient) read the series that
REST's GET /v1/jobs/{id}/metrics serves.

The series come from dlaas.adapters.job_metrics, as REST's do; the query is checked and cut by
dlaas.domain.metric_query. Who may read: the LCM's one rule for every job call (the use cases'
`owned`): a named user reads only their own jobs, and another user's job is
JobNotFound, exactly as a missing one (as REST answers 404, never 403).

A follow holds one of the gRPC server's threads for as long as it runs, so a replica
serves at most `max_followers` at once (a further one is a TemporaryError: UNAVAILABLE,
which the SDK's channel retries, on another replica where there are several), and a
follower that goes away frees its thread within `check_s` (dlaas.adapters.job_metrics.while_wanted).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from dlaas.adapters.job_metrics import learner_metrics, s3_for_locations, while_wanted
from dlaas.adapters.job_progress import ProgressReader
from dlaas.adapters.logs import LogReader
from dlaas.adapters.store.base import JobRecord
from dlaas.config import PlatformSettings
from dlaas.domain.errors import InvalidRequest, TemporaryError
from dlaas.domain.metric_query import MetricQuery, Selection, select, wanted
from dlaas.domain.metrics import Point
from dlaas.domain.progress import Progress

if TYPE_CHECKING:
    from services.lcm.service import Lcm

# Of the gRPC server's 16 threads (dlaas.adapters.grpc_server), followers may hold half.
MAX_FOLLOWERS = 8
MAX_JOB_ID = 128


class MetricsQueries:
    """`owned(job_id, user)` returns the job's record or raises JobNotFound (the LCM's rule);
    `logs` reads learners' log lines (live from the nodes' engines, else from S3)."""

    def __init__(
        self,
        owned: Callable[[str, str], JobRecord],
        settings: PlatformSettings,
        logs: LogReader,
        *,
        max_followers: int = MAX_FOLLOWERS,
        check_s: float = 0.5,
    ):
        self.owned = owned
        self.settings = settings
        self.logs = logs
        self.max_followers = max_followers
        self.check_s = check_s
        self._followers = threading.BoundedSemaphore(max_followers)
        self.progress_reader = ProgressReader()

    @classmethod
    def of(cls, lcm: Lcm) -> MetricsQueries:
        """The queries of a running LCM: its store, its nodes' engines, its platform S3."""
        from dlaas.adapters.s3 import platform_client

        settings = lcm.settings
        s3_for = s3_for_locations(lambda: platform_client(settings))
        logs = LogReader(lcm.store, settings, lcm.deployers, s3_for)
        return cls(lcm.owned, settings, logs)

    def _record(self, job_id: str, user: str) -> JobRecord:
        if not job_id or len(job_id) > MAX_JOB_ID:
            raise InvalidRequest(f"job_id: required, at most {MAX_JOB_ID} characters")
        return self.owned(job_id, user)

    def series(self, job_id: str, user: str, query: MetricQuery) -> Selection:
        """The learner's series so far, cut to the query."""
        record = self._record(job_id, user)
        source = learner_metrics(record, query.learner, self.settings, self.logs)
        return select(source.series(), query)

    def progress(self, job_id: str, user: str) -> Progress | None:
        """The job's progress (dlaas.adapters.job_progress: this replica's looks)."""
        return self.progress_reader.of(self._record(job_id, user), self.logs)

    def follow(
        self, job_id: str, user: str, query: MetricQuery, active: Callable[[], bool]
    ) -> Iterator[Point]:
        """The learner's points that pass the query, as they come, until the job has ended
        or `active()` turns false (the client went away)."""
        record = self._record(job_id, user)
        source = learner_metrics(record, query.learner, self.settings, self.logs)
        if not self._followers.acquire(blocking=False):
            raise TemporaryError(
                f"this LCM replica already streams {self.max_followers} metric follows; "
                "try again later",
                delay_s=5.0,
            )
        try:
            for p in while_wanted(source.follow(), active, self.check_s):
                if wanted(p, query):
                    yield p
        finally:
            self._followers.release()
