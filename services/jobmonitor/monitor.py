"""The job monitor's adapter: observes Docker and etcd, asks decide.py, acts.

Observation is event driven: one thread follows the Docker event stream of the platform's
containers (label dlaas.managed=<platform id>), one watches the job status keys in etcd, and one
thread per running helper follows its log stream for the `data_ready` event. Each only
marks a job "dirty"; a single worker reconciles dirty jobs one at a time, so no two
reconciles of a job ever race inside this process. A slow periodic resync (and the
deadlines decide() asks for) is the safety net for anything missed, and on start every
active job is reconciled against the containers that exist.

Leftovers of a deleted job (containers whose status is gone) are removed when this monitor
saw the status key deleted. Containers with no status that it did not see go are left
alone: several platforms (their own etcd each, e.g. tests) may share one Docker engine,
and the labels do not yet say which platform a container belongs to.

A reconcile reads the job's status (etcd), its containers (Docker) and the monitor's
bookkeeping (kept in the job store's info, so a restarted monitor carries on), calls the
pure `decide()`, then performs its actions. Every action is idempotent: a container or
network already gone is fine, a status write that lost its compare-and-swap stops the
action list and the job is looked at again.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

import docker
import docker.errors
import pyetcd.events

from dlaas import jobspec
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
INFO_SIGNALLED_AT = "helper_signalled_at"
INFO_RELEASED = "released"
INFO_CLEANED_UP = "cleaned_up"
INFO_LOGS_INCOMPLETE = "logs_incomplete"
INFO_LOGS_NOTE = "logs_note"


class JobMonitor:
    def __init__(
        self,
        docker_client: docker.DockerClient,
        keeper: StatusKeeper,
        store: JobStore,
        release: Callable[[str], None],
        clock: Callable[[], float] = time.time,
        *,
        helper_timeout_s: float = d.DEFAULT_HELPER_TIMEOUT_S,
        store_timeout_s: float = d.DEFAULT_STORE_TIMEOUT_S,
        resync_s: float = 15.0,
        stop_grace_s: int = 10,
        release_retry_s: float = 5.0,
        owns_job: Callable[[str], bool] = lambda job_id: True,
        platform_id: str = "dlaas",
    ):
        self.platform_id = platform_id
        self.docker = docker_client
        self.keeper = keeper
        self.store = store
        self.release = release
        self.clock = clock
        self.helper_timeout_s = helper_timeout_s
        self.store_timeout_s = store_timeout_s
        self.resync_s = resync_s
        self.stop_grace_s = stop_grace_s
        self.release_retry_s = release_retry_s
        # Which jobs this monitor may touch. Every job on its engine in production; tests
        # sharing one Docker engine narrow it so a monitor never removes another's containers.
        self.owns_job = owns_job

        self._lock = threading.Condition()
        self._dirty: set[str] = set()
        self._due: dict[str, float] = {}  # job -> when decide() wants another look
        self._events: dict[str, list[dict]] = {}  # job -> events seen on the helper's stream
        self._followers: dict[str, threading.Thread] = {}
        self._exited_events: dict[str, list[dict]] = {}  # helper container id -> its events
        self._stopping: set[str] = set()  # learner container ids being stopped
        self._learner_info: dict[str, list[dict]] = {}  # job -> last learners info written
        self._manifest_learners: dict[str, int | None] = {}
        self._closers: list[Callable[[], None]] = []
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
            jobs |= self._jobs_with_resources()
        except Exception:
            log.exception("resync: could not list jobs")
            return
        for job_id in sorted(j for j in jobs if self.owns_job(j)):
            self._safe_reconcile(job_id)

    def reconcile_job(self, job_id: str) -> d.Decision | None:
        """Observe one job, decide, act. Returns the decision (None for an orphan)."""
        state = self.keeper.get(job_id)
        containers = self._containers(job_id)
        if state is None:
            if job_id in self._deleted:
                # We watched its status go: the job was deleted; whatever is left of it goes.
                log.info("job %s was deleted; removing its leftovers", job_id)
                self._remove_resources(job_id, containers)
                self._forget(job_id)
                self._deleted.discard(job_id)
            elif job_id not in self._unknown:
                # Another platform sharing this Docker engine (its own etcd) may own it:
                # without a platform label there is no telling, so leave it alone.
                self._unknown.add(job_id)
                log.warning("job %s has containers but no status here; leaving them", job_id)
            return None

        record = self._record(job_id)
        info = dict(record.info) if record is not None else {}
        views = [(c, _view(c)) for c in containers]
        helper = next((c for c, v in views if v.role == jobspec.ROLE_HELPER), None)
        helper_view = next((v for _, v in views if v.role == jobspec.ROLE_HELPER), None)
        if helper is not None and helper_view is not None:
            if helper_view.exited:
                events = self._all_events(helper)
            else:
                events = list(self._events.get(job_id, ()))
                if helper_view.running and not state.final:
                    self._follow(job_id, helper)
        else:
            events = []
        tails = {
            v.learner: _tail(c, d.LOG_TAIL_LINES)
            for c, v in views
            if v.role == jobspec.ROLE_LEARNER
            and v.exited
            and (v.exit_code or v.oom_killed)
            and v.learner is not None
        }
        if state.status != Status.PENDING:  # while PENDING the LCM writes the learners
            self._record_learners(job_id, info, [v for _, v in views])

        view = d.JobView(
            state=state,
            containers=[v for _, v in views],
            helper_events=events,
            log_tails=tails,
            now=self.clock(),
            num_learners=self._num_learners(job_id, record),
            helper_signalled_at=info.get(INFO_SIGNALLED_AT),
            released=bool(info.get(INFO_RELEASED)),
            cleaned_up=bool(info.get(INFO_CLEANED_UP)),
            helper_timeout_s=self.helper_timeout_s,
            store_timeout_s=self.store_timeout_s,
        )
        decision = d.decide(view)
        self._apply(job_id, decision, containers, helper)
        return decision

    def run(self, stop_event: threading.Event) -> None:
        """Watch and reconcile until `stop_event` is set."""
        self._stop = stop_event
        watchers = [
            threading.Thread(target=self._watch_docker, name="docker-events", daemon=True),
            threading.Thread(target=self._watch_etcd, name="etcd-watch", daemon=True),
        ]
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
        for close in list(self._closers):
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
        except Exception:
            # One bad job must never stop the monitor; look again at the next resync.
            log.exception("reconcile of job %s failed", job_id)
            return
        if decision is not None and decision.recheck_at is not None:
            with self._lock:
                self._due[job_id] = min(
                    self._due.get(job_id, decision.recheck_at), decision.recheck_at
                )

    # ---- acting ----------------------------------------------------------------------

    def _apply(self, job_id: str, decision: d.Decision, containers: list, helper) -> None:
        for action in decision.actions:
            log.info("job %s: %s", job_id, action)
            if isinstance(action, d.TransitionTo):
                if not self._transition(job_id, action):
                    # Someone else moved the job (a user halt): look again from scratch.
                    self.mark(job_id)
                    return
            elif isinstance(action, d.SignalHelperFinish):
                if helper is not None:
                    _quiet(helper.kill, signal=jobspec.HELPER_FINISH_SIGNAL)
                self._update_info(job_id, {INFO_SIGNALLED_AT: self.clock()})
            elif isinstance(action, d.KillHelper):
                if helper is not None:
                    _quiet(helper.kill)
            elif isinstance(action, d.StopLearners):
                self._stop_learners(containers)
            elif isinstance(action, d.ReleaseAllocation):
                self._release(job_id)
            elif isinstance(action, d.Cleanup):
                self._remove_resources(job_id, containers)
                facts: dict[str, Any] = {INFO_CLEANED_UP: True}
                if action.logs_incomplete:
                    facts[INFO_LOGS_INCOMPLETE] = True
                    facts[INFO_LOGS_NOTE] = action.reason
                self._update_info(job_id, facts)
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

    def _release(self, job_id: str) -> None:
        try:
            self.release(job_id)
        except PermanentError as exc:
            # The scheduler holds nothing for this job (never placed, or released already).
            log.info("release of job %s: %s", job_id, exc)
        except Exception as exc:  # noqa: BLE001 - scheduler down, network: retry later
            log.warning("release of job %s failed (%s); will retry", job_id, exc)
            with self._lock:
                self._due[job_id] = self.clock() + self.release_retry_s
            return
        self._update_info(job_id, {INFO_RELEASED: True})

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
                    _quiet(c.stop, timeout=self.stop_grace_s)
                except Exception:
                    log.exception("stopping container %s", c.name)
                finally:
                    self._stopping.discard(c.id)

            threading.Thread(target=stop, name=f"stop-{c.name}", daemon=True).start()

    def _remove_resources(self, job_id: str, containers: Iterable) -> None:
        """Remove a job's containers, network and volume; missing ones are fine."""
        for c in containers:
            _quiet(c.remove, force=True)
        label = f"{jobspec.LABEL_JOB}={job_id}"
        for n in self.docker.networks.list(filters={"label": label}):
            _quiet(n.remove)
        for v in self.docker.volumes.list(filters={"label": label}):
            _quiet(v.remove, force=True)

    # ---- observing -------------------------------------------------------------------

    def _containers(self, job_id: str) -> list:
        return self.docker.containers.list(
            all=True,
            filters={
                "label": [
                    f"{jobspec.LABEL_JOB}={job_id}",
                    f"{jobspec.LABEL_MANAGED}={self.platform_id}",
                ]
            },
            ignore_removed=True,
        )

    def _jobs_with_resources(self) -> set[str]:
        managed = {"label": f"{jobspec.LABEL_MANAGED}={self.platform_id}"}
        objs: list = self.docker.containers.list(all=True, filters=managed, sparse=True)
        jobs = {(c.attrs.get("Labels") or {}).get(jobspec.LABEL_JOB) for c in objs}
        for n in self.docker.networks.list(filters=managed):
            jobs.add((n.attrs.get("Labels") or {}).get(jobspec.LABEL_JOB))
        for v in self.docker.volumes.list(filters=managed):
            jobs.add((v.attrs.get("Labels") or {}).get(jobspec.LABEL_JOB))
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
            try:
                text = helper.logs(stdout=True, stderr=True).decode("utf-8", "replace")
            except docker.errors.NotFound:
                return []
            self._exited_events[helper.id] = _events_in(text.splitlines())
        return self._exited_events[helper.id]

    def _follow(self, job_id: str, helper) -> None:
        """Follow the helper's log stream (from its start) in a thread, once per job."""
        with self._lock:
            t = self._followers.get(job_id)
            if t is not None and t.is_alive():
                return
            self._events[job_id] = []
            t = threading.Thread(
                target=self._follow_logs, args=(job_id, helper), name=f"logs-{job_id}", daemon=True
            )
            self._followers[job_id] = t
        t.start()

    def _follow_logs(self, job_id: str, helper) -> None:
        buf = b""
        try:
            stream = helper.logs(stream=True, follow=True, stdout=True, stderr=True)
            for chunk in stream:
                if self._stop.is_set():
                    break
                buf += chunk
                *lines, buf = buf.split(b"\n")
                events = _events_in(x.decode("utf-8", "replace") for x in lines)
                if events:
                    with self._lock:
                        self._events.setdefault(job_id, []).extend(events)
                    self.mark(job_id)
        except docker.errors.NotFound:
            pass
        except Exception:
            log.exception("following the helper logs of job %s", job_id)
        # The stream ends when the helper exits; its die event brings the job back anyway.
        self.mark(job_id)

    def _forget(self, job_id: str) -> None:
        with self._lock:
            self._events.pop(job_id, None)
            self._followers.pop(job_id, None)
            self._learner_info.pop(job_id, None)
            self._manifest_learners.pop(job_id, None)
            self._due.pop(job_id, None)

    # ---- watchers --------------------------------------------------------------------

    def _watch_docker(self) -> None:
        """Follow the Docker event stream; reconnect (and resync) when it breaks."""
        filters = {"type": "container", "label": f"{jobspec.LABEL_MANAGED}={self.platform_id}"}
        since = None
        first = True
        while not self._stop.is_set():
            try:
                stream = self.docker.events(decode=True, filters=filters, since=since)
                self._closers.append(stream.close)
                if not first:
                    self._resync_soon()  # events may have been missed while disconnected
                first = False
                for event in stream:
                    if self._stop.is_set():
                        break
                    since = event.get("time", since)
                    attrs = (event.get("Actor") or {}).get("Attributes") or {}
                    job_id = attrs.get(jobspec.LABEL_JOB)
                    if job_id:
                        self.mark(job_id)
            except Exception as exc:  # noqa: BLE001 - any broken stream: reconnect
                if self._stop.is_set():
                    break
                log.warning("Docker event stream broke (%s); reconnecting", exc)
            self._stop.wait(1.0)

    def _watch_etcd(self) -> None:
        """Watch the job status keys; reconnect when the watch breaks."""
        prefix = self.keeper.jobs_prefix
        while not self._stop.is_set():
            try:
                events, cancel = self.keeper.etcd.watch_prefix(prefix)
                self._closers.append(cancel)
                for event in events:
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
            self._stop.wait(1.0)

    def _resync_soon(self) -> None:
        try:
            for job_id in self.keeper.active_jobs():
                self.mark(job_id)
        except Exception as exc:  # noqa: BLE001 - the periodic resync will retry
            log.warning("resync after reconnect failed: %s", exc)


# ---- helpers --------------------------------------------------------------------------


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


def _tail(c, n: int) -> list[str]:
    try:
        text = c.logs(stdout=True, stderr=True, tail=n).decode("utf-8", "replace")
    except docker.errors.NotFound:
        return []
    return text.splitlines()


def _events_in(lines: Iterable[str]) -> list[dict]:
    return [e for e in (jobspec.parse_event(x.strip()) for x in lines) if e is not None]


def _quiet(fn, *args, **kwargs):
    """Run a Docker call whose target may already be gone (or already stopped)."""
    try:
        return fn(*args, **kwargs)
    except docker.errors.NotFound:
        return None
    except docker.errors.APIError as exc:
        if exc.status_code in (304, 404, 409):
            return None
        raise
