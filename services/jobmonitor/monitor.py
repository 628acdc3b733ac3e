"""The job monitor: carries every job of the platform from its containers' outcome to its
final status, by wiring observe -> decide -> act.

Observation is event driven (watchers.py): one thread per node follows that node's engine
events (`dlaas.domain.ports.JobContainers.events`), one watches the job keys in etcd, and one
thread per running helper follows its log stream for the `data_ready` event (observe.py).
Each only marks a job dirty; a single worker takes dirty and due jobs from the work queue
(workqueue.py) and reconciles them one at a time, so no two reconciles of a job ever
race inside this process. A slow periodic resync (and the deadlines decide() asks for)
is the safety net for anything missed, and on start every active job is reconciled
against the containers that exist: a monitor killed at any moment and started again
loses nothing.

A reconcile observes the job (observe.py: status, placement, its containers on the nodes
of its placement, helper events, log tails, the run's bookkeeping), calls the pure
`decide()` (decide.py), then performs the actions (act.py). Engines are reached only
through the port `JobContainers`, one per node (the Docker adapter is
dlaas.adapters.engines.docker_engine.Deployer). An engine that does not answer is marked down and the
jobs on it are left alone, because node health is the LCM's call (it marks the node and
requeues the job); when the engine answers again every job is looked at.

Leftovers of a deleted job (containers whose status is gone) are removed when this monitor
saw the status key deleted. Containers with no status that it did not see go are left
alone: several platforms (their own etcd each, e.g. tests) may share one engine.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from dlaas.adapters.etcd_status import StatusKeeper
from dlaas.adapters.notify import Notifier
from dlaas.adapters.store.base import JobStore
from dlaas.domain.ports import EngineUnreachable, JobContainers, StatusRepo
from services.jobmonitor import decide as d
from services.jobmonitor.act import Actor, Requeue
from services.jobmonitor.activity import Limits
from services.jobmonitor.measured import record_measured
from services.jobmonitor.observe import NoStatus, Observer, Seen, never_placed
from services.jobmonitor.watchers import RECONNECT_MAX_S, Reachability, Watchers
from services.jobmonitor.workqueue import WorkQueue

log = logging.getLogger("dlaas.jobmonitor")


class JobMonitor:
    """One monitor: `run()` it, or drive `reconcile_job` / `reconcile_all` by hand.

    `engines`: node name -> that node's JobContainers. `keeper`: the job status; `run()`
    also watches its etcd keys, so it needs a StatusKeeper there. `release` and `requeue`:
    the scheduler's and the LCM's calls.
    """

    def __init__(
        self,
        engines: Mapping[str, JobContainers],
        keeper: StatusRepo,
        store: JobStore,
        release: Callable[[str, bool], None],
        clock: Callable[[], float] = time.time,
        *,
        requeue: Requeue | None = None,
        helper_timeout_s: float = d.DEFAULT_HELPER_TIMEOUT_S,
        store_timeout_s: float = d.DEFAULT_STORE_TIMEOUT_S,
        requeue_retry_s: float = d.DEFAULT_REQUEUE_RETRY_S,
        resync_s: float = 15.0,
        stop_grace_s: int = 10,
        release_retry_s: float = 5.0,
        reconnect_max_s: float = RECONNECT_MAX_S,
        owns_job: Callable[[str], bool] = lambda job_id: True,
        limits: Limits | None = None,
        notifier: Notifier | None = None,
    ):
        self.engines: dict[str, JobContainers] = dict(engines)
        if not self.engines:
            raise ValueError("the job monitor needs at least one container engine")
        self.keeper = keeper
        self.clock = clock
        self.resync_s = resync_s
        self.reconnect_max_s = reconnect_max_s
        # Which jobs this monitor may touch. Every job of its platform in production; tests
        # sharing one engine narrow it so a monitor never removes another's containers.
        self.owns_job = owns_job

        self._stop = threading.Event()
        self.queue = WorkQueue(clock)
        self.reach = Reachability(clock)
        self.observer = Observer(
            self.engines, self.reach, keeper, store, clock,
            mark=self.mark, stopping=lambda: self._stop.is_set(),
            helper_timeout_s=helper_timeout_s, store_timeout_s=store_timeout_s,
            requeue_retry_s=requeue_retry_s, limits=limits,
        )  # fmt: skip
        self.actor = Actor(
            self.observer, self.queue, keeper, release, requeue, clock,
            mark=self.mark, stop_grace_s=stop_grace_s, release_retry_s=release_retry_s,
            notifier=notifier,
        )  # fmt: skip
        self._deleted: set[str] = set()  # jobs whose status key we saw deleted
        self._unknown: set[str] = set()  # jobs with containers but no status (warned once)

    # ---- entry points ----------------------------------------------------------------

    def mark(self, job_id: str) -> None:
        """Ask the worker to reconcile `job_id` soon."""
        if self.owns_job(job_id):
            self.queue.mark(job_id)

    def status_deleted(self, job_id: str) -> None:
        """The job's status was deleted (the job was): its leftovers may go."""
        self._deleted.add(job_id)

    def reconcile_all(self) -> None:
        """Reconcile every active job and every job that still has resources on an engine."""
        try:
            # A job submitted and never placed is left alone by observe() anyway: not asking
            # about each keeps a resync O(placed jobs), however long the queue is.
            jobs = {j for j, s in self.keeper.active_jobs().items() if not never_placed(s)}
        # Broad: etcd's client raises its own and gRPC's errors; the resync is tried
        # again at the next period, and the cause is logged.
        except Exception:  # broad: etcd's client raises several kinds
            log.exception("resync: could not list jobs")
            return
        jobs |= self._jobs_with_resources()
        for job_id in sorted(j for j in jobs if self.owns_job(j)):
            self._safe_reconcile(job_id)

    def reconcile_job(self, job_id: str) -> d.Decision | None:
        """Observe one job, decide, act. Returns the decision (None: nothing decided)."""
        seen = self.observer.observe(job_id)
        if isinstance(seen, NoStatus):
            self._no_status(job_id, seen)
            return None
        if not isinstance(seen, Seen):
            return None  # left alone this time (see Observer.observe)
        record_measured(self.observer.store, job_id, seen)  # (before act cleans up)
        decision = d.decide(seen.view)
        self.actor.apply(job_id, decision, seen)
        return decision

    def run(self, stop_event: threading.Event) -> None:
        """Watch and reconcile until `stop_event` is set."""
        self._stop = stop_event
        if not isinstance(self.keeper, StatusKeeper):
            raise TypeError("run() watches the job keys in etcd: it needs a StatusKeeper")
        watchers = Watchers(
            self.engines, self.reach, self.keeper,
            on_job=self.mark, on_status_deleted=self.status_deleted, resync=self._resync_soon,
            stop=stop_event, reconnect_max_s=self.reconnect_max_s,
        )  # fmt: skip
        watchers.start()
        self.reconcile_all()
        next_resync = self.clock() + self.resync_s
        while not stop_event.is_set():
            jobs = self.queue.next_batch(next_resync, stop_event)
            if stop_event.is_set():
                break
            if self.clock() >= next_resync:
                self.reconcile_all()
                next_resync = self.clock() + self.resync_s
            for job_id in sorted(jobs):
                self._safe_reconcile(job_id)
        watchers.close()

    # ---- wiring ----------------------------------------------------------------------

    def _no_status(self, job_id: str, seen: NoStatus) -> None:
        """Containers of a job without a status: a deleted job's leftovers, or not ours."""
        if job_id in self._deleted:
            # We watched its status go: the job was deleted; whatever is left of it goes.
            log.info("job %s was deleted; removing its leftovers", job_id)
            self.actor.remove_resources(job_id)
            if not seen.unreachable:  # else again when the engine is back
                self.actor.forget(job_id)
                self._deleted.discard(job_id)
        elif job_id not in self._unknown:
            # Another platform sharing this engine (its own etcd) may own it.
            self._unknown.add(job_id)
            log.warning("job %s has containers but no status here; leaving them", job_id)

    def _safe_reconcile(self, job_id: str) -> None:
        try:
            decision = self.reconcile_job(job_id)
        except EngineUnreachable as exc:
            # Marked down; the engine's watcher looks at every job again once it answers.
            log.warning("job %s: %s", job_id, exc)
            return
        # Broad: one bad job (an adapter's API error, a store hiccup, a bug) must never
        # stop the monitor; it is logged with its traceback and looked at again at the
        # next resync.
        except Exception:  # broad: one bad job must never stop the monitor
            log.exception("reconcile of job %s failed", job_id)
            return
        if decision is not None and decision.recheck_at is not None:
            self.queue.due_at(job_id, decision.recheck_at)

    def _jobs_with_resources(self) -> set[str]:
        jobs: set[str] = set()
        for node, engine in self.observer.reachable():
            try:
                jobs |= self.reach.call(node, engine.jobs_with_resources)
            except EngineUnreachable:
                pass  # marked down; looked at again once it answers
            # Broad: an engine may answer with an error of its own (a 500); one node must
            # not stop the resync of the others. Logged with its cause.
            except Exception:  # broad: one node must not stop the others' resync
                log.exception("resync: could not list the resources on node %s", node)
        return jobs

    def _resync_soon(self) -> None:
        try:
            jobs = set(self.keeper.active_jobs())
        # Broad: as in reconcile_all; the periodic resync will retry, and it is logged.
        except Exception as exc:  # noqa: BLE001 - broad: as in reconcile_all; retried
            log.warning("resync after reconnect failed: %r", exc)
            return
        for job_id in jobs | self._jobs_with_resources():
            self.mark(job_id)
