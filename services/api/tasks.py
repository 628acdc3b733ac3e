"""The API's way to queue asynchronous work for the worker (services/worker).

`TaskQueue` is what a route sees; `CeleryTaskQueue` publishes to the Redis broker by
task name (dlaas.domain.purge holds the names: the API never imports the worker's code). A
publish returns once Redis holds the message, so the work survives this process; a
broker that cannot be reached is a TemporaryError (503): the caller changes nothing.
"""

from __future__ import annotations

import abc
import logging
import uuid

from dlaas.adapters.celery_producer import producer
from dlaas.domain import purge
from dlaas.domain.errors import TemporaryError

log = logging.getLogger(__name__)


class TaskQueue(abc.ABC):
    @abc.abstractmethod
    def enqueue_purge(self, req: purge.PurgeRequest) -> str:
        """Queue a purge; its request id. TemporaryError if the queue is unreachable."""

    @abc.abstractmethod
    def cancel_purge(self, request_id: str) -> None:
        """Call a queued purge off (best effort: a purge already done stays done)."""


class CeleryTaskQueue(TaskQueue):
    def __init__(self, redis_url: str, visibility_timeout_s: float, timeout_s: float = 3.0):
        self.redis_url = redis_url
        self.timeout_s = timeout_s
        self._app = None
        self._visibility_timeout_s = visibility_timeout_s

    def _celery(self):
        if self._app is None:
            self._app = producer(
                "dlaas-api", self.redis_url, self._visibility_timeout_s, self.timeout_s
            )
        return self._app

    def enqueue_purge(self, req: purge.PurgeRequest) -> str:
        from kombu.exceptions import OperationalError

        request_id = req.request_id or uuid.uuid4().hex
        kwargs = {**req.task_kwargs(), "request_id": request_id}
        try:
            # retry=False: a broker that is down answers now, not after kombu's retries.
            self._celery().send_task(
                purge.PURGE_TASK, kwargs=kwargs, task_id=request_id, retry=False
            )
        except (OperationalError, OSError) as exc:
            log.warning("cannot queue a purge of %s/%s: %s", req.bucket, req.prefix, exc)
            raise TemporaryError(
                "purge: the task queue (Redis) is unreachable; nothing was deleted, "
                "try again later",
                delay_s=5.0,
            ) from None
        return request_id

    def cancel_purge(self, request_id: str) -> None:
        import redis

        try:
            client = redis.Redis.from_url(
                self.redis_url, socket_timeout=self.timeout_s, socket_connect_timeout=self.timeout_s
            )
            client.set(purge.cancel_key(request_id), "1", ex=purge.CANCEL_TTL_S)
        except redis.RedisError:
            # The purge then runs once the job is deleted by a later request, which the
            # user asked for with this one.
            log.warning("could not cancel purge %s", request_id, exc_info=True)
