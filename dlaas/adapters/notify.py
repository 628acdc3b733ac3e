"""Queues webhook deliveries for job transitions, never holding a transition up.

The status keeper (dlaas.adapters.etcd_status) calls `Notifier.transition` once for every
transition it is the first to mirror into the job store. `HookNotifier` maps it to an
event (dlaas.domain.hooks.event_for), and only if that is one, hands it to a thread of its own:
that thread looks up the owner's hooks that want the event (a small store query) and
publishes one Celery task per hook to the Redis broker, by name (the worker in
services/worker delivers it). So a slow store, a broker that is down or a receiver that
hangs costs a transition nothing: at worst, with the thread's backlog full, events are
dropped and logged.

What is not guaranteed: an event whose process dies after the store recorded the
transition and before the task reached Redis is lost (the mirror is not replayed, as it
is recorded). From Redis on, delivery is at least once.
"""

from __future__ import annotations

import abc
import logging
import queue
import threading

from dlaas.adapters.celery_producer import producer
from dlaas.adapters.store.base import JobStore
from dlaas.config import PlatformSettings
from dlaas.domain import hooks
from dlaas.domain.errors import JobNotFound
from dlaas.domain.status import Status, Transition

log = logging.getLogger(__name__)

BACKLOG = 10_000


class Notifier(abc.ABC):
    @abc.abstractmethod
    def transition(self, job_id: str, previous: Status | None, seq: int, t: Transition) -> None:
        """Job `job_id` left `previous` (None: it was just submitted) by transition `seq`.
        Returns at once; never raises."""

    def event(self, job_id: str, event: str, seq: int, t: Transition, occurrence: str) -> None:
        """An event that is no transition (hooks.STALLED), `t` its body's status and reason:
        queued like a transition's, its deliveries' idempotency key ending in `occurrence`
        (one per occurrence). Returns at once; never raises."""
        return


class NoNotifier(Notifier):
    """Nobody hears of transitions (tools and tests that need no webhooks)."""

    def transition(self, job_id: str, previous: Status | None, seq: int, t: Transition) -> None:
        return None


class HookNotifier(Notifier):
    """Publishes deliveries to the users' hooks through Celery on `redis_url`."""

    def __init__(
        self,
        store: JobStore,
        redis_url: str,
        visibility_timeout_s: float,
        *,
        publish_timeout_s: float = 3.0,
        backlog: int = BACKLOG,
    ):
        self.store = store
        self.redis_url = redis_url
        self.visibility_timeout_s = visibility_timeout_s
        self.publish_timeout_s = publish_timeout_s
        self._queue: queue.Queue[tuple[str, int, Transition, str, str]] = queue.Queue(backlog)
        self._app = None
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._dropped = 0

    def transition(self, job_id: str, previous: Status | None, seq: int, t: Transition) -> None:
        event = hooks.event_for(previous, t)
        if event is not None:
            self.event(job_id, event, seq, t, "")

    def event(self, job_id: str, event: str, seq: int, t: Transition, occurrence: str) -> None:
        self._ensure_thread()
        try:
            self._queue.put_nowait((job_id, seq, t, event, occurrence))
        except queue.Full:
            self._dropped += 1
            log.warning("webhooks: backlog full, event %s of job %s dropped (%d so far)",
                        event, job_id, self._dropped)  # fmt: skip

    def _ensure_thread(self) -> None:
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="webhooks", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            job_id, seq, t, event, occurrence = self._queue.get()
            try:
                self.publish(job_id, seq, t, event, occurrence)
            except Exception:  # broad: the thread must outlive any one event's trouble
                log.warning("webhooks: event %s of job %s not queued", event, job_id,
                            exc_info=True)  # fmt: skip

    def publish(
        self, job_id: str, seq: int, t: Transition, event: str, occurrence: str = ""
    ) -> int:
        """Queue one delivery per hook of the job's owner that wants `event`; how many."""
        from kombu.exceptions import OperationalError

        try:
            user = self.store.get(job_id).user
        except JobNotFound:
            return 0  # deleted meanwhile: its owner asked to hear no more of it
        queued = 0
        for hook in self.store.hooks_for(user, event):
            key = hooks.idempotency_key(hook.hook_id, job_id, seq)
            key += f".{occurrence}" if occurrence else ""
            kwargs = {
                "hook_id": hook.hook_id,
                "body": hooks.payload(event, job_id, seq, t, key),
                "key": key,
            }
            try:
                # retry=False: a broker that is down answers now; the backlog waits meanwhile.
                self._celery().send_task(hooks.DELIVER_TASK, kwargs=kwargs, retry=False)
            except (OperationalError, OSError) as exc:
                log.warning("webhooks: cannot queue %s of job %s for %s: %s",
                            event, job_id, hook.hook_id, exc)  # fmt: skip
                continue
            queued += 1
        return queued

    def _celery(self):
        if self._app is None:
            self._app = producer(
                "dlaas-notify", self.redis_url, self.visibility_timeout_s, self.publish_timeout_s
            )
        return self._app


def hook_notifier(settings: PlatformSettings, store: JobStore) -> HookNotifier:
    """The notifier a service's main.py gives its StatusKeeper."""
    return HookNotifier(store, settings.redis_url, settings.worker_visibility_timeout_s)
