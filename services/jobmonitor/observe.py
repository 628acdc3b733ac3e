"""What the job monitor sees of one job: the JobView that decide() reads, and the context
the actions need.

A job's status (etcd, through StatusRepo), its placement, its containers on the nodes of
that placement (each node's `JobContainers`), the events its helper printed (followed on
its log stream while it runs, one thread per helper; read once when it has exited), the
last log lines of failed learners, and the monitor's bookkeeping for the job's current
run (`RunInfo`, kept in the job store's info so a restarted monitor carries on; a run
starts at the job's latest QUEUED entry, so a requeued or resumed job starts afresh).

A job with a node whose engine does not answer (or that this monitor has no engine for)
is not observed at all: node health is the LCM's call, and it requeues such jobs itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dlaas.adapters.store.base import JobRecord, JobStore
from dlaas.domain import jobspec
from dlaas.domain.errors import JobNotFound
from dlaas.domain.manifest import Manifest
from dlaas.domain.namespace import user_text
from dlaas.domain.ports import Container, EngineUnreachable, JobContainers, StatusRepo
from dlaas.domain.status import JobState, Status, between
from dlaas.domain.stored import stored_manifest_or_none
from dlaas.domain.triage import rules_for
from services.jobmonitor import decide as d
from services.jobmonitor.activity import ACTIVITY_TAIL_LINES, Limits, LogActivity, TeamRunTimes
from services.jobmonitor.classify import LOG_TAIL_LINES
from services.jobmonitor.disk import DiskWatch, over_limit
from services.jobmonitor.fold import events_in, fold_events, fold_helpers
from services.jobmonitor.watchers import Reachability

log = logging.getLogger("dlaas.jobmonitor")

# Keys the monitor keeps in the job's info.
INFO_RUN = "monitor_run"  # the run (seq of its QUEUED entry) the keys below belong to
INFO_SIGNALLED_AT = "helper_signalled_at"
INFO_RELEASED = "released"
INFO_CLEANED_UP = "cleaned_up"
INFO_LOGS_INCOMPLETE = "logs_incomplete"
INFO_LOGS_NOTE = "logs_note"
INFO_REQUEUE = "restart_requested"  # {"at": time, "reason": why} when it asked the LCM
INFO_HELPER_RESTARTS = "helper_restarts"  # [{"at": time, "reason": why}] in this run
INFO_LEARNER_RESTARTS = "learner_restarts"  # the gang's restarts in place, as above
INFO_RESTARTS = "restarts"  # the job's restarts of every kind (the LCM counts its own too)
INFO_STALL = "stall"  # the stall last marked in this run: {"at", "since", "reason", "learners"}
INFO_STALLS = "stalls"  # every stall marked (the last MAX_STALLS), across runs
# What a new run starts with: the previous run's bookkeeping no longer applies.
_FRESH_RUN: dict[str, Any] = {
    INFO_SIGNALLED_AT: None,
    INFO_RELEASED: False,
    INFO_CLEANED_UP: False,
    INFO_LOGS_INCOMPLETE: None,
    INFO_LOGS_NOTE: None,
    INFO_REQUEUE: None,
    INFO_HELPER_RESTARTS: None,
    INFO_LEARNER_RESTARTS: None,
    INFO_STALL: None,
}


class RunInfo:
    """The monitor's bookkeeping for one run of a job, written through to the job store.

    The first write of a new run also clears the previous run's keys, so a requeued or
    resumed job is never taken for released, cleaned up or already restarted.
    """

    def __init__(self, store: JobStore, job_id: str, run: int, info: dict):
        self.store = store
        self.job_id = job_id
        self.run = run
        self.info = info

    def update(self, facts: dict[str, Any]) -> None:
        if self.info.get(INFO_RUN, 0) != self.run:
            facts = {**_FRESH_RUN, INFO_RUN: self.run, **facts}
        update_info(self.store, self.job_id, facts)
        self.info.update(facts)


def update_info(store: JobStore, job_id: str, facts: dict) -> None:
    try:
        store.update_info(job_id, facts)
    except JobNotFound:
        log.warning("job %s has a status but no record in the store", job_id)


def never_placed(state: JobState) -> bool:
    """Submitted and never placed: no container of the job can exist, and nothing about a
    QUEUED job is the monitor's to decide."""
    return state.status == Status.QUEUED and state.seq == 0


def run_of(record: JobRecord | None) -> int:
    """The seq of the job's latest QUEUED entry: a new run starts at each (re)queue."""
    if record is None:
        return 0
    return max(
        (i for i, t in enumerate(record.history) if t.status == Status.QUEUED),
        default=0,
    )


@dataclass
class Seen:
    """A job observed: what decide() reads, and what acting on its decision needs."""

    view: d.JobView
    containers: list[Container]
    where: dict[str, str]  # container id -> the node whose engine reported it
    helper: Container | None  # the job's helper
    run: RunInfo
    helpers: list[Container] = field(default_factory=list)  # every node's, the job's first


@dataclass
class NoStatus:
    """Containers (or nothing) of a job that has no status: deleted, or another platform's."""

    containers: list[Container] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)


class Observer:
    """Observes jobs for one monitor; keeps what it learned between reconciles (helper
    events, the learners last written) and forgets a job once it is cleaned up."""

    def __init__(
        self,
        engines: Mapping[str, JobContainers],
        reach: Reachability,
        keeper: StatusRepo,
        store: JobStore,
        clock: Callable[[], float],
        *,
        mark: Callable[[str], None],
        stopping: Callable[[], bool],
        helper_timeout_s: float,
        store_timeout_s: float,
        requeue_retry_s: float,
        limits: Limits | None = None,
    ):
        self.engines = engines
        self.reach = reach
        self.keeper = keeper
        self.store = store
        self.clock = clock
        self.mark = mark
        self.stopping = stopping
        self.helper_timeout_s = helper_timeout_s
        self.store_timeout_s = store_timeout_s
        self.requeue_retry_s = requeue_retry_s
        self.limits = limits or Limits()

        self._lock = threading.Lock()
        # Helper container id -> events seen on its log stream / its follower thread.
        self._events: dict[str, list[dict]] = {}
        self._followers: dict[str, threading.Thread] = {}
        self._helpers: dict[str, set[str]] = {}  # job -> helper container ids seen
        self._exited_events: dict[str, list[dict]] = {}  # helper container id -> its events
        self._learner_info: dict[str, list[dict]] = {}  # job -> last learners info written
        self._manifests: dict[str, Manifest | None] = {}
        self._activity = LogActivity(clock)
        self._teams = TeamRunTimes(lambda name: self.store.get_team(name), clock)  # deadlines
        self._disk = DiskWatch(self.limits.disk_poll_s, clock)
        self._waiting: set[str] = set()  # jobs left alone while a node is down (logged once)

    def observe(self, job_id: str) -> Seen | NoStatus | None:
        """The job as it is now; None when it must be left alone this time (a node of it
        does not answer; the job moved on while its containers were read)."""
        state = self.keeper.get(job_id)
        if state is not None and never_placed(state):
            # Left alone without asking the engines or the store (every submit's status key
            # brings it here once).
            return None
        placement = self.placement(job_id) if state is not None and not state.final else None
        # An active job lives on the nodes of its placement; anything else (a final job's
        # leftovers, a job placed before placements existed) may be on any engine.
        nodes = sorted({p["node"] for p in placement}) if placement else sorted(self.engines)
        containers, where, unreachable = self.gather(job_id, nodes)
        if state is None:
            return NoStatus(containers, unreachable)
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

        record = self.record(job_id)
        if record is not None and record.last_seq > state.seq:
            # The job moved on while its containers were gathered (a requeue and a new run,
            # say): these may be the old run's, judged as the new one's. The status
            # change's own watch event brings the job back.
            return None
        info = dict(record.info) if record is not None else {}
        run = run_of(record)
        mine = info if info.get(INFO_RUN, 0) == run else {}  # this run's bookkeeping only
        # The job's helper first; a gang spanning nodes has one more per other node.
        helpers = sorted(
            (c for c in containers if c.role == jobspec.ROLE_HELPER),
            key=lambda c: c.name != jobspec.helper_name(job_id),
        )
        per_helper = [self.helper_events(job_id, state, h, where[h.id]) for h in helpers]
        helper = helpers[0] if helpers else None
        events = fold_events(per_helper)
        if record is not None and record.team:
            # Its messages name the team's real buckets; the user knows them without prefix.
            events = [
                {**e, "message": user_text(record.team, e["message"])}
                if isinstance(e.get("message"), str)
                else e
                for e in events
            ]
        judged = containers
        if len(helpers) > 1:
            others = [c for c in containers if c.role != jobspec.ROLE_HELPER]
            judged = [*others, fold_helpers(helpers)]
        tails = {
            c.learner: self.tail(c, where[c.id], LOG_TAIL_LINES)
            for c in containers
            if c.role == jobspec.ROLE_LEARNER
            and c.exited
            and (c.exit_code or c.oom_killed)
            and c.learner is not None
        }
        # While QUEUED the containers are the previous run's; while PENDING the LCM writes
        # the learners.
        if state.status not in between(Status.QUEUED, Status.PENDING):
            self.record_learners(job_id, info, containers)

        requested = mine.get(INFO_REQUEUE)
        manifest = self.manifest(job_id, record)
        lim = self.limits.of(manifest, self._teams.get(record.team if record else ""))
        activity = (
            self._activity.look(
                job_id,
                state.status,
                containers,
                lambda c: self.reach.call(
                    where[c.id], self.engines[where[c.id]].logs, c, tail=ACTIVITY_TAIL_LINES
                ),
                mine.get(INFO_STALL),
            )
            if lim["stall_after_s"] > 0
            else {}
        )
        layer = self._disk.look(
            job_id, state.status, containers, nodes,
            lambda n: self.reach.call(n, self.engines[n].layer_bytes, job_id),
            lim["disk_limit_bytes"],
        )  # fmt: skip
        who = over_limit(state.status, layer, lim["disk_limit_bytes"], events)
        for c in containers:  # the reason of a disk_full names its learner's last lines
            if c.learner is not None and c.learner == who and c.role == jobspec.ROLE_LEARNER:
                tails.setdefault(who, self.tail(c, where[c.id], LOG_TAIL_LINES))
        stall = mine.get(INFO_STALL)
        in_place = [r for r in mine.get(INFO_LEARNER_RESTARTS) or [] if isinstance(r, dict)]
        view = d.JobView(
            state=state,
            containers=judged,
            helper_events=events,
            log_tails=tails,
            now=self.clock(),
            num_learners=len(placement) if placement else self.num_learners(job_id, record),
            engine_lost_at=self.engine_lost_at(placement),
            helper_signalled_at=mine.get(INFO_SIGNALLED_AT),
            released=bool(mine.get(INFO_RELEASED)),
            cleaned_up=bool(mine.get(INFO_CLEANED_UP)),
            helper_timeout_s=self.helper_timeout_s,
            store_timeout_s=self.store_timeout_s,
            requeue_requested_at=requested.get("at") if isinstance(requested, dict) else None,
            requeue_retry_s=self.requeue_retry_s,
            helper_restarts=len(mine.get(INFO_HELPER_RESTARTS) or []),
            max_restarts=manifest.max_restarts if manifest else 0,
            restarts=int(info.get(INFO_RESTARTS) or 0),
            nodes=len({p.get("node") for p in placement}) if placement else 1,
            learner_restarts=len(in_place),
            learner_restarted_at=in_place[-1].get("at") if in_place else None,
            triage_rules=rules_for(manifest.triage if manifest else (), self.limits.triage),
            image=str(info.get("image") or ""),
            learner_activity=activity,
            layer_bytes=layer,
            stall_marked_for=stall.get("since") if isinstance(stall, dict) else None,
            poll_s=self.limits.poll_s,
            history=record.history if record is not None else (),
            **lim,
        )
        return Seen(
            view, containers, where, helper, RunInfo(self.store, job_id, run, info), helpers
        )

    def helper_events(self, job_id: str, state, helper: Container, node: str) -> list[dict]:
        """The events `helper` printed so far (followed while it runs, read once exited)."""
        with self._lock:
            self._helpers.setdefault(job_id, set()).add(helper.id)
        if helper.exited:
            return self.all_events(helper, node)
        with self._lock:
            events = list(self._events.get(helper.id, ()))
        if helper.running and not state.final and state.status != Status.QUEUED:
            self.follow(job_id, helper, node)
        return events

    # ---- the engines -------------------------------------------------------------------

    def reachable(self) -> list[tuple[str, JobContainers]]:
        down = self.reach.down()
        return [(n, e) for n, e in sorted(self.engines.items()) if n not in down]

    def gather(
        self, job_id: str, nodes: list[str]
    ) -> tuple[list[Container], dict[str, str], list[str]]:
        """The job's containers on `nodes`, the node of each, and the nodes not asked."""
        found: list[Container] = []
        where: dict[str, str] = {}
        unreachable: list[str] = []
        down = self.reach.down()
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
                here = self.reach.call(node, engine.job_containers, job_id)
            except EngineUnreachable:
                unreachable.append(node)
                continue
            found += here
            where.update((c.id, node) for c in here)
        return found, where, unreachable

    def engine_lost_at(self, placement: list[dict] | None) -> float | None:
        """When the engine of one of the job's nodes (every node if unknown) was last lost."""
        nodes = {p["node"] for p in placement} if placement else set(self.engines)
        return self.reach.lost_at(nodes)

    def tail(self, c: Container, node: str, n: int) -> list[str]:
        raw = self.reach.call(node, self.engines[node].logs, c, tail=n)
        return [] if raw is None else raw.decode("utf-8", "replace").splitlines()

    def all_events(self, helper: Container, node: str) -> list[dict]:
        """Every event an exited helper printed (its logs are complete; read once)."""
        if helper.id not in self._exited_events:
            raw = self.reach.call(node, self.engines[node].logs, helper)
            if raw is None:
                return []
            self._exited_events[helper.id] = events_in(raw.decode("utf-8", "replace").splitlines())
        return self._exited_events[helper.id]

    def follow(self, job_id: str, helper: Container, node: str) -> None:
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
                target=self.follow_logs, args=(job_id, helper, node), name=f"logs-{job_id}",
                daemon=True,
            )  # fmt: skip
            self._followers[helper.id] = t
        t.start()

    def follow_logs(self, job_id: str, helper: Container, node: str) -> None:
        buf = b""
        try:
            for chunk in self.engines[node].follow_logs(helper):
                if self.stopping():
                    break
                buf += chunk
                *lines, buf = buf.split(b"\n")
                events = events_in(x.decode("utf-8", "replace") for x in lines)
                if events:
                    with self._lock:
                        self._events.setdefault(helper.id, []).extend(events)
                    self.mark(job_id)
        except EngineUnreachable as exc:
            log.warning("helper log stream of job %s broke: %s", job_id, exc)
        # Broad: this is a thread of its own, so whatever the adapter raises would be lost
        # unless logged here; the job is looked at again below either way.
        except Exception:  # broad: a thread of its own; logged here or lost
            log.exception("following the helper logs of job %s", job_id)
        # The stream ends when the helper exits; its die event brings the job back anyway.
        self.mark(job_id)

    # ---- the job's facts ---------------------------------------------------------------

    def placement(self, job_id: str) -> list[dict] | None:
        """The LCM's placement of the job's learners on nodes; None when there is none."""
        try:
            placement = self.keeper.placement(job_id)
        except ValueError as exc:  # not JSON: written by something else than the LCM
            log.warning("job %s: unreadable placement (%s)", job_id, exc)
            return None
        ok = isinstance(placement, list) and all(
            isinstance(p, dict) and isinstance(p.get("node"), str) for p in placement
        )
        if not ok:
            log.warning("job %s: unreadable placement %r", job_id, str(placement)[:200])
        return placement if ok and placement else None

    def record(self, job_id: str) -> JobRecord | None:
        try:
            return self.store.get(job_id)
        except JobNotFound:
            log.warning("job %s has a status but no record in the store", job_id)
            return None

    def num_learners(self, job_id: str, record: JobRecord | None) -> int | None:
        """How many learners the job runs: as the LCM placed them, else as the manifest asks."""
        if record is None:
            return None
        placed = record.info.get("learners")
        if isinstance(placed, list) and placed:
            return len(placed)
        # An unreadable manifest (older rules): trust the containers that exist.
        manifest = self.manifest(job_id, record)
        return manifest.learners if manifest else None

    def manifest(self, job_id: str, record: JobRecord | None) -> Manifest | None:
        """The job's manifest, parsed once per job; None when unreadable (older rules)."""
        if record is None:
            return None
        if job_id not in self._manifests:
            self._manifests[job_id] = stored_manifest_or_none(record)
        return self._manifests[job_id]

    def record_learners(self, job_id: str, info: dict, containers: list[Container]) -> None:
        """Mirror learner states into the job info (only when they changed)."""
        learners = sorted(
            (c for c in containers if c.role == jobspec.ROLE_LEARNER), key=lambda c: c.learner or 0
        )
        if not learners:
            return
        previous = {e.get("id"): e for e in info.get("learners", []) if isinstance(e, dict)}
        entries = []
        for c in learners:
            entry = dict(previous.get(c.learner, {}))  # keeps what the LCM wrote (node, ...)
            entry.update(id=c.learner, container=c.name, state=c.state, exit_code=c.exit_code)
            if c.oom_killed:
                entry["oom_killed"] = True
            entries.append(entry)
        if entries != self._learner_info.get(job_id) and entries != info.get("learners"):
            update_info(self.store, job_id, {"learners": entries})
        self._learner_info[job_id] = entries
        info["learners"] = entries  # what this pass acts on (the cleanup) sees them too

    def forget(self, job_id: str) -> None:
        """Drop what was learned about the job (it is cleaned up)."""
        with self._lock:
            for helper_id in self._helpers.pop(job_id, set()):
                self._events.pop(helper_id, None)
                self._followers.pop(helper_id, None)
                self._exited_events.pop(helper_id, None)
            self._learner_info.pop(job_id, None)
            self._manifests.pop(job_id, None)
            self._activity.forget(job_id)
            self._disk.forget(job_id)
            self._waiting.discard(job_id)
