"""The job monitor's adapter: observes Docker and etcd, asks decide.py, acts.

Observation is event driven: one thread per node follows the Docker event stream of the
platform's containers (label dlaas.managed=<platform id>) on that node's engine, one
watches the job keys in etcd, and one thread per running helper follows its log stream
for the `data_ready` event. Each only marks a job "dirty"; a single worker reconciles
dirty jobs one at a time, so no two reconciles of a job ever race inside this process. A
slow periodic resync (and the deadlines decide() asks for) is the safety net for
anything missed, and on start every active job is reconciled against the containers
that exist: a monitor killed at any moment and started again loses nothing.

Several nodes: the monitor knows every node's engine. A job's containers are looked up
on the nodes of its placement (etcd `<prefix>/jobs/<id>/placement`, written by the LCM),
or on every engine when the job has none. An engine that stops answering is marked down
and its event stream reconnects with backoff; while a node of an active job is down the
monitor leaves that job alone, because node health is the LCM's call (it marks the node
and requeues the job). When the engine answers again every job is looked at.

Leftovers of a deleted job (containers whose status is gone) are removed when this monitor
saw the status key deleted. Containers with no status that it did not see go are left
alone: several platforms (their own etcd each, e.g. tests) may share one Docker engine.

A reconcile reads the job's status (etcd), its containers (Docker) and the monitor's
bookkeeping (kept in the job store's info, so a restarted monitor carries on), calls the
pure `decide()`, then performs its actions. Every action is idempotent: a container or
network already gone is fine, a status write that lost its compare-and-swap stops the
action list and the job is looked at again. The bookkeeping belongs to one run of the job
(from its latest QUEUED entry): a job that is requeued or resumed starts afresh.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

import docker
import docker.errors
import pyetcd.events
import requests.exceptions

from dlaas import jobspec
from dlaas.docker_calls import quiet
from dlaas.errors import DlaasError, JobNotFound, PermanentError
from dlaas.etcd_status import StatusKeeper
from dlaas.manifest import parse_manifest
from dlaas.status import Status
from dlaas.store.base import JobRecord, JobStore
from services.jobmonitor import decide as d

log = logging.getLogger("dlaas.jobmonitor")

# Happy-path targets are walked (skipped steps recorded); failures are a single step.
_WALKED = frozenset({Status.PROCESSING, Status.STORING, Status.COMPLETED})
# Keys the monitor keeps in the job's info.
INFO_RUN = "monitor_run"  # the run (seq of its QUEUED entry) the keys below belong to
INFO_SIGNALLED_AT = "helper_signalled_at"
INFO_RELEASED = "released"
INFO_CLEANED_UP = "cleaned_up"
INFO_LOGS_INCOMPLETE = "logs_incomplete"
INFO_LOGS_NOTE = "logs_note"
INFO_REQUEUE = "restart_requested"  # {"at": time, "reason": why} when it asked the LCM
INFO_HELPER_RESTARTS = "helper_restarts"  # [{"at": time, "reason": why}] in this run
# What a new run starts with: the previous run's bookkeeping no longer applies.
_FRESH_RUN: dict[str, Any] = {
    INFO_SIGNALLED_AT: None,
    INFO_RELEASED: False,
    INFO_CLEANED_UP: False,
    INFO_LOGS_INCOMPLETE: None,
    INFO_LOGS_NOTE: None,
    INFO_REQUEUE: None,
    INFO_HELPER_RESTARTS: None,
}

# The node name used when the monitor is given one engine without a name.
DEFAULT_NODE = "local"

# Errors that mean "the engine does not answer" (as opposed to an API error about one
# object): the connection was refused, broke or timed out.
_UNREACHABLE = (
    requests.exceptions.ConnectionError,
    requests.exceptions.Timeout,
    ConnectionError,
)

Requeue = Callable[..., object]  # requeue(job_id, reason, is_restart=True)


class EngineDown(Exception):
    """A node's Docker engine did not answer."""

    def __init__(self, node: str):
        super().__init__(f"the Docker engine of node {node} does not answer")
        self.node = node


class JobMonitor:
    def __init__(
        self,
        engines: docker.DockerClient | Mapping[str, docker.DockerClient],
        keeper: StatusKeeper,
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
        reconnect_max_s: float = 10.0,
        owns_job: Callable[[str], bool] = lambda job_id: True,
        platform_id: str = "dlaas",
    ):
        self.platform_id = platform_id
        # Node name -> its Docker engine. One engine without a name is the local node.
        self.engines: dict[str, docker.DockerClient] = (
            dict(engines) if isinstance(engines, Mapping) else {DEFAULT_NODE: engines}
        )
        if not self.engines:
            raise ValueError("the job monitor needs at least one Docker engine")
        self.keeper = keeper
        self.store = store
        self.release = release
        self.requeue = requeue
        self.clock = clock
        self.helper_timeout_s = helper_timeout_s
        self.store_timeout_s = store_timeout_s
        self.requeue_retry_s = requeue_retry_s
        self.resync_s = resync_s
        self.stop_grace_s = stop_grace_s
        self.release_retry_s = release_retry_s
        self.reconnect_max_s = reconnect_max_s
        # Which jobs this monitor may touch. Every job of its platform in production; tests
        # sharing one Docker engine narrow it so a monitor never removes another's containers.
        self.owns_job = owns_job

        self._lock = threading.Condition()
        self._dirty: set[str] = set()
        self._due: dict[str, float] = {}  # job -> when decide() wants another look
        self._down: set[str] = set()  # nodes whose engine does not answer
        self._lost_at: dict[str, float] = {}  # node -> when its engine was last lost
        self._waiting: set[str] = set()  # jobs left alone while a node is down (logged once)
        # Helper container id -> events seen on its log stream / its follower thread.
        self._events: dict[str, list[dict]] = {}
        self._followers: dict[str, threading.Thread] = {}
        self._helpers: dict[str, set[str]] = {}  # job -> helper container ids seen
        self._exited_events: dict[str, list[dict]] = {}  # helper container id -> its events
        self._stopping: set[str] = set()  # learner container ids being stopped
        self._learner_info: dict[str, list[dict]] = {}  # job -> last learners info written
        self._manifest_learners: dict[str, int | None] = {}
        self._closers: dict[str, Callable[[], None]] = {}  # stream -> how to close it
        self._deleted: set[str] = set()  # jobs whose status key we saw deleted
        self._unknown: set[str] = set()  # jobs with containers but no status (warned once)
        self._stop = threading.Event()

    # ---- entry points ----------------------------------------------------------------

    def mark(self, job_id: str) -> None:
        """Ask the worker to reconcile `job_id` soon."""
        if not self.owns_job(job_id):
            return
        with self._lock:
            self._dirty.add(job_id)
            self._lock.notify()

    def reconcile_all(self) -> None:
        """Reconcile every active job and every job that still has Docker resources."""
        try:
            jobs = set(self.keeper.active_jobs())
        except Exception:
            log.exception("resync: could not list jobs")
            return
        jobs |= self._jobs_with_resources()
        for job_id in sorted(j for j in jobs if self.owns_job(j)):
            self._safe_reconcile(job_id)

    def reconcile_job(self, job_id: str) -> d.Decision | None:
        """Observe one job, decide, act. Returns the decision (None: nothing decided)."""
        state = self.keeper.get(job_id)
        placement = self._placement(job_id) if state is not None and not state.final else None
        # An active job lives on the nodes of its placement; anything else (a final job's
        # leftovers, a job placed before placements existed) may be on any engine.
        nodes = sorted({p["node"] for p in placement}) if placement else sorted(self.engines)
        containers, unreachable = self._gather(job_id, nodes)
        if state is None:
            if job_id in self._deleted:
                # We watched its status go: the job was deleted; whatever is left of it goes.
                log.info("job %s was deleted; removing its leftovers", job_id)
                self._remove_resources(job_id, containers)
                if not unreachable:  # else again when the engine is back
                    self._forget(job_id)
                    self._deleted.discard(job_id)
            elif job_id not in self._unknown:
                # Another platform sharing this Docker engine (its own etcd) may own it.
                self._unknown.add(job_id)
                log.warning("job %s has containers but no status here; leaving them", job_id)
            return None
        if unreachable and not state.final:
            # Its containers may be fine, or gone with the node: the LCM decides (it marks
            # the node unhealthy and requeues the job). Failing it here would lose the job.
            if job_id not in self._waiting:
                self._waiting.add(job_id)
                log.warning(
                    "job %s: node %s does not answer (or has no engine configured here); "
                    "leaving the job to the LCM",
                    job_id,
                    ", ".join(unreachable),
                )
            return None
        self._waiting.discard(job_id)

        record = self._record(job_id)
        if record is not None and record.last_seq > state.seq:
            # The job moved on while its containers were gathered (a requeue and a new run,
            # say): these views may be the old run's, judged as the new one's. The status
            # change's own watch event brings the job back.
            return None
        info = dict(record.info) if record is not None else {}
        run = _run_of(record)
        mine = info if info.get(INFO_RUN, 0) == run else {}  # this run's bookkeeping only
        views = [(c, _view(c)) for c in containers]
        helper = next((c for c, v in views if v.role == jobspec.ROLE_HELPER), None)
        helper_view = next((v for _, v in views if v.role == jobspec.ROLE_HELPER), None)
        events: list[dict] = []
        if helper is not None and helper_view is not None:
            with self._lock:
                self._helpers.setdefault(job_id, set()).add(helper.id)
            if helper_view.exited:
                events = self._all_events(helper)
            else:
                events = list(self._events.get(helper.id, ()))
                if helper_view.running and not state.final and state.status != Status.QUEUED:
                    self._follow(job_id, helper)
        tails = {
            v.learner: _tail(c, d.LOG_TAIL_LINES)
            for c, v in views
            if v.role == jobspec.ROLE_LEARNER
            and v.exited
            and (v.exit_code or v.oom_killed)
            and v.learner is not None
        }
        # While QUEUED the containers are the previous run's; while PENDING the LCM writes
        # the learners.
        if state.status not in (Status.QUEUED, Status.PENDING):
            self._record_learners(job_id, info, [v for _, v in views])

        requested = mine.get(INFO_REQUEUE)
        view = d.JobView(
            state=state,
            containers=[v for _, v in views],
            helper_events=events,
            log_tails=tails,
            now=self.clock(),
            num_learners=len(placement) if placement else self._num_learners(job_id, record),
            engine_lost_at=self._engine_lost_at(placement),
            helper_signalled_at=mine.get(INFO_SIGNALLED_AT),
            released=bool(mine.get(INFO_RELEASED)),
            cleaned_up=bool(mine.get(INFO_CLEANED_UP)),
            helper_timeout_s=self.helper_timeout_s,
            store_timeout_s=self.store_timeout_s,
            requeue_requested_at=requested.get("at") if isinstance(requested, dict) else None,
            requeue_retry_s=self.requeue_retry_s,
            helper_restarts=len(mine.get(INFO_HELPER_RESTARTS) or []),
        )
        decision = d.decide(view)
        self._apply(job_id, decision, containers, helper, _RunInfo(self, job_id, run, info))
        return decision

    def run(self, stop_event: threading.Event) -> None:
        """Watch and reconcile until `stop_event` is set."""
        self._stop = stop_event
        watchers = [
            threading.Thread(
                target=self._watch_docker, args=(node,), name=f"docker-events-{node}", daemon=True
            )
            for node in sorted(self.engines)
        ]
        watchers.append(threading.Thread(target=self._watch_etcd, name="etcd-watch", daemon=True))
        for t in watchers:
            t.start()
        self.reconcile_all()
        next_resync = self.clock() + self.resync_s
        while not stop_event.is_set():
            jobs = self._next_batch(next_resync)
            if stop_event.is_set():
                break
            if self.clock() >= next_resync:
                self.reconcile_all()
                next_resync = self.clock() + self.resync_s
            for job_id in sorted(jobs):
                self._safe_reconcile(job_id)
        for close in list(self._closers.values()):
            with contextlib.suppress(Exception):  # a stream that already broke
                close()
        for t in watchers:
            t.join(timeout=5)

    # ---- worker ----------------------------------------------------------------------

    def _next_batch(self, next_resync: float) -> set[str]:
        """Wait for dirty jobs, a due deadline, the resync time or stop; return the jobs."""
        with self._lock:
            while not self._stop.is_set():
                now = self.clock()
                due = {j for j, at in self._due.items() if at <= now}
                if self._dirty or due or now >= next_resync:
                    for j in due:
                        del self._due[j]
                    jobs, self._dirty = self._dirty | due, set()
                    return jobs
                # Short waits: deadlines follow the injected clock, and stop must be prompt.
                self._lock.wait(0.5)
        return set()

    def _safe_reconcile(self, job_id: str) -> None:
        try:
            decision = self.reconcile_job(job_id)
        except EngineDown as exc:
            # Marked down; the engine's watcher looks at every job again once it answers.
            log.warning("job %s: %s", job_id, exc)
            return
        except Exception:
            # One bad job must never stop the monitor; look again at the next resync.
            log.exception("reconcile of job %s failed", job_id)
            return
        if decision is not None and decision.recheck_at is not None:
            self._due_at(job_id, decision.recheck_at)

    def _due_at(self, job_id: str, at: float) -> None:
        with self._lock:
            self._due[job_id] = min(self._due.get(job_id, at), at)

    # ---- acting ----------------------------------------------------------------------

    def _apply(
        self, job_id: str, decision: d.Decision, containers: list, helper, info: _RunInfo
    ) -> None:
        for action in decision.actions:
            log.info("job %s: %s", job_id, action)
            if isinstance(action, d.TransitionTo):
                if not self._transition(job_id, action):
                    # Someone else moved the job (a user halt): look again from scratch.
                    self.mark(job_id)
                    return
            elif isinstance(action, d.Requeue):
                self._requeue(job_id, action, info)
            elif isinstance(action, d.RestartHelper):
                if helper is not None:
                    quiet(helper.start)
                same_run = info.info.get(INFO_RUN, 0) == info.run
                restarts = list(info.info.get(INFO_HELPER_RESTARTS) or []) if same_run else []
                info.update(
                    {
                        INFO_HELPER_RESTARTS: [
                            *restarts,
                            {"at": self.clock(), "reason": action.reason},
                        ]
                    }
                )
            elif isinstance(action, d.SignalHelperFinish):
                if helper is not None:
                    quiet(helper.kill, signal=jobspec.HELPER_FINISH_SIGNAL)
                info.update({INFO_SIGNALLED_AT: self.clock()})
            elif isinstance(action, d.KillHelper):
                if helper is not None:
                    quiet(helper.kill)
            elif isinstance(action, d.StopLearners):
                self._stop_learners(containers)
            elif isinstance(action, d.ReleaseAllocation):
                self._release(job_id, info, action.ended)
            elif isinstance(action, d.Cleanup):
                self._remove_resources(job_id, containers)
                facts: dict[str, Any] = {INFO_CLEANED_UP: True}
                if action.logs_incomplete:
                    facts[INFO_LOGS_INCOMPLETE] = True
                    facts[INFO_LOGS_NOTE] = action.reason
                info.update(facts)
                self._forget(job_id)

    def _transition(self, job_id: str, action: d.TransitionTo) -> bool:
        if action.target in _WALKED:
            new = self.keeper.walk_to(job_id, action.target, action.reason)
        else:
            new = self.keeper.try_transition(
                job_id,
                action.target,
                action.reason,
                error_code=action.error_code,
                exit_code=action.exit_code,
            )
        return new is not None

    def _requeue(self, job_id: str, action: d.Requeue, info: _RunInfo) -> None:
        """Ask the LCM to restart the gang; it checks max_restarts, records, tears down."""
        if self.requeue is None:
            log.error("job %s needs a restart (%s) but no LCM is configured", job_id, action)
            return
        try:
            status = self.requeue(job_id, action.reason, is_restart=True)
        except PermanentError as exc:
            # The LCM refuses for good (the job moved on, was deleted): nothing to retry
            # before the usual long wait; a changed status brings the job back anyway.
            log.info("restart of job %s refused: %s", job_id, exc)
        except Exception as exc:  # noqa: BLE001 - LCM down, failing over: ask again soon
            log.warning("restart request for job %s failed (%s); will retry", job_id, exc)
            self._due_at(job_id, self.clock() + self.release_retry_s)
            return
        else:
            log.info("job %s: restart requested (%s); the LCM answered %s", job_id, action, status)
        info.update({INFO_REQUEUE: {"at": self.clock(), "reason": action.reason}})

    def _release(self, job_id: str, info: _RunInfo, ended: bool) -> None:
        try:
            self.release(job_id, ended)
        except PermanentError as exc:
            # The scheduler holds nothing for this job (never placed, or released already).
            log.info("release of job %s: %s", job_id, exc)
        except Exception as exc:  # noqa: BLE001 - scheduler down, network: retry later
            log.warning("release of job %s failed (%s); will retry", job_id, exc)
            self._due_at(job_id, self.clock() + self.release_retry_s)
            return
        info.update({INFO_RELEASED: True})

    def _stop_learners(self, containers: list) -> None:
        """Stop running learners in the background (SIGTERM, SIGKILL after the grace time)."""
        for c in containers:
            labels = c.labels or {}
            if labels.get(jobspec.LABEL_ROLE) != jobspec.ROLE_LEARNER or c.id in self._stopping:
                continue
            if c.attrs.get("State", {}).get("Status") not in d.RUNNING_STATES:
                continue
            self._stopping.add(c.id)

            def stop(c=c):
                try:
                    quiet(c.stop, timeout=self.stop_grace_s)
                except Exception:
                    log.exception("stopping container %s", c.name)
                finally:
                    self._stopping.discard(c.id)

            threading.Thread(target=stop, name=f"stop-{c.name}", daemon=True).start()

    def _remove_resources(self, job_id: str, containers: Iterable) -> None:
        """Remove a job's containers, networks and volumes on every engine that answers."""
        for c in containers:
            quiet(c.remove, force=True)
        label = {"label": [f"{jobspec.LABEL_JOB}={job_id}", self._managed]}
        for node, engine in self._reachable():
            try:
                for n in engine.networks.list(filters=label):
                    quiet(n.remove)
                for v in engine.volumes.list(filters=label):
                    quiet(v.remove, force=True)
            except _UNREACHABLE:
                self._mark_down(node)

    # ---- observing -------------------------------------------------------------------

    @property
    def _managed(self) -> str:
        return f"{jobspec.LABEL_MANAGED}={self.platform_id}"

    def _reachable(self) -> list[tuple[str, docker.DockerClient]]:
        with self._lock:
            down = set(self._down)
        return [(n, e) for n, e in sorted(self.engines.items()) if n not in down]

    def _engine_lost_at(self, placement: list[dict] | None) -> float | None:
        """When the engine of one of the job's nodes (every node if unknown) was last lost."""
        nodes = {p["node"] for p in placement} if placement else set(self.engines)
        with self._lock:
            return max((self._lost_at[n] for n in nodes if n in self._lost_at), default=None)

    def _mark_down(self, node: str) -> None:
        with self._lock:
            if node in self._down:
                return
            self._down.add(node)
            self._lost_at[node] = self.clock()
        log.warning("the Docker engine of node %s does not answer", node)

    def _mark_up(self, node: str) -> bool:
        """Note that the engine answers; True when it was down."""
        with self._lock:
            if node not in self._down:
                return False
            self._down.discard(node)
        log.info("the Docker engine of node %s answers again", node)
        return True

    def _gather(self, job_id: str, nodes: list[str]) -> tuple[list, list[str]]:
        """The job's containers on `nodes`, and the nodes that could not be asked."""
        found: list = []
        unreachable: list[str] = []
        filters = {"label": [f"{jobspec.LABEL_JOB}={job_id}", self._managed]}
        with self._lock:
            down = set(self._down)
        for node in nodes:
            engine = self.engines.get(node)
            if engine is None:
                # Placed on a node this monitor was not configured with: it cannot tell
                # what runs there, so it must not judge the job.
                unreachable.append(node)
                continue
            if node in down:
                unreachable.append(node)
                continue
            try:
                found += engine.containers.list(all=True, filters=filters, ignore_removed=True)
            except _UNREACHABLE:
                self._mark_down(node)
                unreachable.append(node)
        return found, unreachable

    def _placement(self, job_id: str) -> list[dict] | None:
        """The LCM's placement of the job's learners on nodes; None when there is none."""
        value, _ = self.keeper.etcd.get(f"{self.keeper.prefix}/jobs/{job_id}/placement")
        if value is None:
            return None
        try:
            placement = json.loads(value)
        except ValueError:
            log.warning("job %s: unreadable placement %r", job_id, value[:200])
            return None
        ok = isinstance(placement, list) and all(
            isinstance(p, dict) and isinstance(p.get("node"), str) for p in placement
        )
        return placement if ok and placement else None

    def _jobs_with_resources(self) -> set[str]:
        managed = {"label": self._managed}
        jobs: set[str | None] = set()
        for node, engine in self._reachable():
            try:
                objs: list = engine.containers.list(all=True, filters=managed, sparse=True)
                jobs |= {(c.attrs.get("Labels") or {}).get(jobspec.LABEL_JOB) for c in objs}
                for n in engine.networks.list(filters=managed):
                    jobs.add((n.attrs.get("Labels") or {}).get(jobspec.LABEL_JOB))
                for v in engine.volumes.list(filters=managed):
                    jobs.add((v.attrs.get("Labels") or {}).get(jobspec.LABEL_JOB))
            except _UNREACHABLE:
                self._mark_down(node)
            except Exception:
                log.exception("resync: could not list the resources on node %s", node)
        return {j for j in jobs if j}

    def _record(self, job_id: str) -> JobRecord | None:
        try:
            return self.store.get(job_id)
        except JobNotFound:
            log.warning("job %s has a status but no record in the store", job_id)
            return None

    def _num_learners(self, job_id: str, record: JobRecord | None) -> int | None:
        """How many learners the job runs: as the LCM placed them, else as the manifest asks."""
        if record is None:
            return None
        placed = record.info.get("learners")
        if isinstance(placed, list) and placed:
            return len(placed)
        if job_id not in self._manifest_learners:
            try:
                self._manifest_learners[job_id] = parse_manifest(record.manifest_yaml).learners
            except DlaasError:  # an unreadable manifest: trust the containers that exist
                self._manifest_learners[job_id] = None
        return self._manifest_learners[job_id]

    def _update_info(self, job_id: str, facts: dict) -> None:
        try:
            self.store.update_info(job_id, facts)
        except JobNotFound:
            log.warning("job %s has a status but no record in the store", job_id)

    def _record_learners(self, job_id: str, info: dict, views: list[d.ContainerView]) -> None:
        """Mirror learner states into the job info (only when they changed)."""
        learners = sorted(
            (v for v in views if v.role == jobspec.ROLE_LEARNER), key=lambda v: v.learner or 0
        )
        if not learners:
            return
        previous = {e.get("id"): e for e in info.get("learners", []) if isinstance(e, dict)}
        entries = []
        for v in learners:
            entry = dict(previous.get(v.learner, {}))  # keeps what the LCM wrote (node, ...)
            entry.update(id=v.learner, container=v.name, state=v.state, exit_code=v.exit_code)
            if v.oom_killed:
                entry["oom_killed"] = True
            entries.append(entry)
        if entries != self._learner_info.get(job_id) and entries != info.get("learners"):
            self._update_info(job_id, {"learners": entries})
        self._learner_info[job_id] = entries

    def _all_events(self, helper) -> list[dict]:
        """Every event an exited helper printed (its logs are complete; read once)."""
        if helper.id not in self._exited_events:
            raw = _logs(helper, stdout=True, stderr=True)
            if raw is None:
                return []
            self._exited_events[helper.id] = _events_in(raw.decode("utf-8", "replace").splitlines())
        return self._exited_events[helper.id]

    def _follow(self, job_id: str, helper) -> None:
        """Follow the helper's log stream (from its start) in a thread, once per helper.

        Keyed by the container: a requeued job's new helper must not inherit the old
        one's `data_ready`.
        """
        with self._lock:
            t = self._followers.get(helper.id)
            if t is not None and t.is_alive():
                return
            self._events[helper.id] = []  # the stream starts from the beginning again
            t = threading.Thread(
                target=self._follow_logs, args=(job_id, helper), name=f"logs-{job_id}", daemon=True
            )
            self._followers[helper.id] = t
        t.start()

    def _follow_logs(self, job_id: str, helper) -> None:
        buf = b""
        try:
            stream = _logs(helper, stream=True, follow=True, stdout=True, stderr=True)
            for chunk in stream or ():
                if self._stop.is_set():
                    break
                buf += chunk
                *lines, buf = buf.split(b"\n")
                events = _events_in(x.decode("utf-8", "replace") for x in lines)
                if events:
                    with self._lock:
                        self._events.setdefault(helper.id, []).extend(events)
                    self.mark(job_id)
        except docker.errors.NotFound:
            pass
        except _UNREACHABLE as exc:
            log.warning("helper log stream of job %s broke: %s", job_id, exc)
        except Exception:
            log.exception("following the helper logs of job %s", job_id)
        # The stream ends when the helper exits; its die event brings the job back anyway.
        self.mark(job_id)

    def _forget(self, job_id: str) -> None:
        with self._lock:
            for helper_id in self._helpers.pop(job_id, set()):
                self._events.pop(helper_id, None)
                self._followers.pop(helper_id, None)
                self._exited_events.pop(helper_id, None)
            self._learner_info.pop(job_id, None)
            self._manifest_learners.pop(job_id, None)
            self._due.pop(job_id, None)
            self._waiting.discard(job_id)

    # ---- watchers --------------------------------------------------------------------

    def _watch_docker(self, node: str) -> None:
        """Follow one engine's event stream; reconnect with backoff when it breaks.

        A successful (re)connection also tells the monitor that the engine answers again:
        every job is looked at, since events were missed while it was away.
        """
        engine = self.engines[node]
        filters = {"type": "container", "label": self._managed}
        since = None
        delay = 0.5
        first = True
        while not self._stop.is_set():
            try:
                stream = engine.events(decode=True, filters=filters, since=since)
                self._closers[f"docker-{node}"] = stream.close
                if self._mark_up(node) or not first:
                    self._resync_soon()
                first = False
                delay = 0.5
                for event in stream:
                    if self._stop.is_set():
                        break
                    since = event.get("time", since)
                    attrs = (event.get("Actor") or {}).get("Attributes") or {}
                    job_id = attrs.get(jobspec.LABEL_JOB)
                    if job_id:
                        self.mark(job_id)
                if self._stop.is_set():
                    break
                # The stream ended: the engine went away or restarted. Probe it next.
                with self._lock:
                    self._lost_at[node] = self.clock()
                log.warning("Docker event stream of node %s ended; reconnecting", node)
            except _UNREACHABLE as exc:
                if self._stop.is_set():
                    break
                self._mark_down(node)
                log.debug("node %s: %s; next try in %.1f s", node, exc, delay)
                first = False
            except Exception as exc:  # noqa: BLE001 - any broken stream: reconnect
                if self._stop.is_set():
                    break
                log.warning("Docker event stream of node %s broke (%s); reconnecting", node, exc)
                first = False
            self._stop.wait(delay)
            delay = min(delay * 2, self.reconnect_max_s)

    def _watch_etcd(self) -> None:
        """Watch the job keys; reconnect when the watch breaks."""
        prefix = self.keeper.jobs_prefix
        delay = 0.5
        while not self._stop.is_set():
            try:
                events, cancel = self.keeper.etcd.watch_prefix(prefix)
                self._closers["etcd"] = cancel
                for event in events:
                    delay = 0.5
                    if self._stop.is_set():
                        break
                    key = event.key.decode()
                    job_id = key[len(prefix) :].split("/", 1)[0]
                    if not job_id:
                        continue
                    if isinstance(event, pyetcd.events.DeleteEvent) and key.endswith("/status"):
                        self._deleted.add(job_id)
                    self.mark(job_id)
            except Exception as exc:  # noqa: BLE001 - any broken stream: reconnect
                if self._stop.is_set():
                    break
                log.warning("etcd watch broke (%s); reconnecting", exc)
            self._stop.wait(delay)
            delay = min(delay * 2, self.reconnect_max_s)

    def _resync_soon(self) -> None:
        try:
            jobs = set(self.keeper.active_jobs())
        except Exception as exc:  # noqa: BLE001 - the periodic resync will retry
            log.warning("resync after reconnect failed: %s", exc)
            return
        for job_id in jobs | self._jobs_with_resources():
            self.mark(job_id)


class _RunInfo:
    """The monitor's bookkeeping for one run of a job, written through to the job store.

    The first write of a new run also clears the previous run's keys, so a requeued or
    resumed job is never taken for released, cleaned up or already restarted.
    """

    def __init__(self, monitor: JobMonitor, job_id: str, run: int, info: dict):
        self.monitor = monitor
        self.job_id = job_id
        self.run = run
        self.info = info

    def update(self, facts: dict[str, Any]) -> None:
        if self.info.get(INFO_RUN, 0) != self.run:
            facts = {**_FRESH_RUN, INFO_RUN: self.run, **facts}
        self.monitor._update_info(self.job_id, facts)
        self.info.update(facts)


# ---- helpers --------------------------------------------------------------------------


def _run_of(record: JobRecord | None) -> int:
    """The seq of the job's latest QUEUED entry: a new run starts at each (re)queue."""
    if record is None:
        return 0
    return max(
        (i for i, t in enumerate(record.history) if t.status == Status.QUEUED),
        default=0,
    )


def _view(c) -> d.ContainerView:
    labels = c.labels or {}
    state = c.attrs.get("State") or {}
    learner = labels.get(jobspec.LABEL_LEARNER)
    return d.ContainerView(
        role=labels.get(jobspec.LABEL_ROLE, jobspec.ROLE_LEARNER),
        learner=int(learner) if learner not in (None, "") else None,
        state=state.get("Status", "unknown"),
        exit_code=state.get("ExitCode") if state.get("Status") in d.EXITED_STATES else None,
        oom_killed=bool(state.get("OOMKilled")),
        name=c.name,
        finished_at=_epoch(state.get("FinishedAt", "")),
    )


def _epoch(stamp: str) -> float | None:
    """Docker's RFC 3339 time with nanoseconds as seconds; None for its zero time."""
    if not stamp or stamp.startswith("0001-"):
        return None
    head, _, frac = stamp.rstrip("Z").partition(".")
    try:
        t = datetime.fromisoformat(head + "+00:00").timestamp()
    except ValueError:
        return None
    return t + (float("0." + frac) if frac.isdigit() else 0.0)


def _logs(c, **kwargs):
    """`c.logs(**kwargs)`; None, with one log line, when the container is gone or being
    removed (Docker answers 409 for a log asked of a container marked for removal: a
    race with a cleanup, not a failure worth a traceback)."""
    raw = quiet(c.logs, **kwargs)
    if raw is None:
        log.info("container %s is gone or being removed; its log is not read", c.name)
    return raw


def _tail(c, n: int) -> list[str]:
    raw = _logs(c, stdout=True, stderr=True, tail=n)
    return [] if raw is None else raw.decode("utf-8", "replace").splitlines()


def _events_in(lines: Iterable[str]) -> list[dict]:
    return [e for e in (jobspec.parse_event(x.strip()) for x in lines) if e is not None]
