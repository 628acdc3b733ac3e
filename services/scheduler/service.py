"""The scheduler service: the queue and the allocations, kept in etcd, decided by the policy.

The adapter around the pure policy (services.scheduler.policy.schedule). Every round reads
the queue and the running allocations from etcd, asks the policy, and records each start
as one etcd transaction (queue entry out, allocation in, guarded on both), so a restart
loses nothing and a GPU is never given twice. The caller (the LCM) carries out the
decisions it gets back. Team quotas live in etcd too (one key per team) and go into every
round's snapshot, so the policy reclaims borrowed capacity the same way after a restart.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import TYPE_CHECKING

from dlaas.adapters.grpc_errors import translate_errors
from dlaas.adapters.nodes import NodeSpec
from dlaas.domain.errors import InvalidRequest
from dlaas.domain.keys import EtcdKeys
from dlaas.domain.manifest import elastic_range_problem
from dlaas.v1 import scheduler_pb2, scheduler_pb2_grpc
from services.scheduler.policy import (
    DEFAULT_CONFIG,
    DEFAULT_POLICY,
    LEVEL_HISTORY,
    Allocation,
    DurationModel,
    Node,
    PolicyConfig,
    QueuedJob,
    RunningJob,
    Snapshot,
    TeamQuota,
    can_ever_fit,
    learned_config,
    policy_problem,
    queue_report,
    run_key,
    schedule,
    team_usage,
)
from services.scheduler.policy.elastic import IdleForecast
from services.scheduler.restarts import RestartWatch

if TYPE_CHECKING:  # the etcd client's type, for the annotations only
    import pyetcd

log = logging.getLogger(__name__)

# A team name is an etcd key segment and a word in pending reasons: no slashes, no spaces.
_TEAM_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def team_problem(team: str) -> str:
    """Why `team` is not a valid team name ("" if it is, or if it is empty: no team)."""
    if not team or _TEAM_RE.match(team):
        return ""
    return (
        f"team: {team[:80]!r} is not a team name (1-63 letters, digits, '.', '_' or '-', "
        "starting with a letter or digit)"
    )


def quota_from(request) -> tuple[str, TeamQuota]:
    """The team and quota a SetTeamQuota request asks for; InvalidRequest naming the field."""
    if not request.team:
        raise InvalidRequest("team: must not be empty")
    problem = team_problem(request.team)
    if problem:
        raise InvalidRequest(problem)
    if request.gpus < 0:
        raise InvalidRequest(f"gpus: must not be negative, got {request.gpus}")
    if not math.isfinite(request.cpus) or request.cpus < 0:
        raise InvalidRequest(f"cpus: must be a number of cores >= 0, got {request.cpus}")
    if request.memory_mb < 0:
        raise InvalidRequest(f"memory_mb: must not be negative, got {request.memory_mb}")
    return request.team, TeamQuota(request.gpus, request.cpus, request.memory_mb)


def _running_from(data: dict) -> RunningJob:
    data = dict(data)
    data["allocations"] = tuple(
        Allocation(**{**a, "gpu_indices": tuple(a["gpu_indices"])}) for a in data["allocations"]
    )
    return RunningJob(**data)


def _ran(r: RunningJob, now: float) -> float:
    """Seconds the job has run since it (re)started."""
    return max(0.0, now - r.start_time)


def _served(r: RunningJob, now: float) -> float:
    """GPU-seconds the job has attained since it (re)started."""
    return _ran(r, now) * max(1, r.gpus)


def _renumbered(allocations: list[Allocation]) -> tuple[Allocation, ...]:
    """Learners are numbered 0..n-1 again: a resized gang restarts as a whole."""
    return tuple(replace(a, learner=i) for i, a in enumerate(allocations))


class SchedulerState:
    """Queue and allocations in etcd under `<prefix>/sched/`.

    A running entry keeps the job's original request beside its allocation, so a
    preempted job goes back to the queue as it was asked for, at its original position.
    """

    def __init__(self, etcd: pyetcd.Etcd3Client, prefix: str = "/dlaas"):
        self.etcd = etcd
        self.keys = keys = EtcdKeys(prefix)
        self.queue_prefix = keys.sched_queue
        self.running_prefix = keys.sched_running
        self.nodes_prefix = keys.nodes
        self.quota_prefix = keys.sched_quota

    def _all(self, prefix: str) -> dict[str, dict]:
        return {
            meta.key.decode()[len(prefix) :]: json.loads(value)
            for value, meta in self.etcd.get_prefix(prefix)
        }

    def queue(self) -> list[QueuedJob]:
        return [QueuedJob(**d) for d in self._all(self.queue_prefix).values()]

    def running_entries(self) -> dict[str, tuple[RunningJob, QueuedJob]]:
        return {
            job_id: (_running_from(d["running"]), QueuedJob(**d["request"]))
            for job_id, d in self._all(self.running_prefix).items()
        }

    def running(self) -> list[RunningJob]:
        return [r for r, _ in self.running_entries().values()]

    def quotas(self) -> dict[str, TeamQuota]:
        return {team: TeamQuota(**d) for team, d in self._all(self.quota_prefix).items()}

    def set_quota(self, team: str, quota: TeamQuota) -> None:
        """Store the team's quota; an all-zero quota is removed (it guarantees nothing)."""
        if quota == TeamQuota():
            self.etcd.delete(self.quota_prefix + team)
        else:
            self.etcd.put(self.quota_prefix + team, json.dumps(asdict(quota)))

    def unhealthy_nodes(self) -> set[str]:
        """Nodes the LCM marked unhealthy (their engine stopped answering)."""
        return {n for n, d in self._all(self.nodes_prefix).items() if not d.get("healthy", True)}

    def enqueue(self, job: QueuedJob) -> bool:
        """Queue the job unless it is queued or running already (idempotent)."""
        tx = self.etcd.transactions
        qk, rk = self.queue_prefix + job.job_id, self.running_prefix + job.job_id
        ok, _ = self.etcd.transaction(
            compare=[tx.version(qk) == 0, tx.version(rk) == 0],
            success=[tx.put(qk, json.dumps(asdict(job)))],
            failure=[],
        )
        return ok

    def start(self, job: QueuedJob, allocations: list[Allocation], now: float) -> bool:
        """Move a queued job to running with its allocations; False if it is no longer queued."""
        tx = self.etcd.transactions
        qk, rk = self.queue_prefix + job.job_id, self.running_prefix + job.job_id
        running = RunningJob(
            job_id=job.job_id,
            user=job.user,
            allocations=_renumbered(allocations),
            priority=job.priority,
            start_time=now,
            attained_service=job.attained_service,
            min_learners=job.min_learners,
            max_learners=job.max_learners,
            submit_time=job.submit_time,
            gpu_type=job.gpu_type,
            gpus_per_learner=job.gpus_per_learner,
            cpus_per_learner=job.cpus_per_learner,
            memory_mb_per_learner=job.memory_mb_per_learner,
            placement=job.placement,
            team=job.team,
            target_learners=job.learners,
            auto_grow=job.auto_grow,
            name=job.name,
        )
        entry = {"running": asdict(running), "request": asdict(job)}
        ok, _ = self.etcd.transaction(
            compare=[tx.version(qk) > 0, tx.version(rk) == 0],
            success=[tx.delete(qk), tx.put(rk, json.dumps(entry))],
            failure=[],
        )
        return ok

    def retarget(self, job: QueuedJob) -> bool:
        """Record a RUNNING job's new target (and elastic range) without resizing it: a user's
        `scale N` to the size it runs at. False if it is not running (or changed meanwhile)."""
        rk = self.running_prefix + job.job_id
        value, meta = self.etcd.get(rk)
        if not value:
            return False
        entry = json.loads(value)
        sizes = {
            "min_learners": job.min_learners,
            "max_learners": job.max_learners,
            "auto_grow": job.auto_grow,
        }
        entry["request"].update(sizes, learners=job.learners)
        entry["running"].update(sizes, target_learners=job.learners)
        tx = self.etcd.transactions
        ok, _ = self.etcd.transaction(
            compare=[tx.mod(rk) == meta.mod_revision],
            success=[tx.put(rk, json.dumps(entry))],
            failure=[],
        )
        return ok

    def preempt(self, job_id: str, now: float) -> QueuedJob | None:
        """Running -> queued again, at its original position, with its history; the queued
        entry, or None if the job was not running."""
        entry = self.running_entries().get(job_id)
        if entry is None:
            return None
        running, request = entry
        served = running.attained_service + _served(running, now)
        queued = replace(
            request,
            attained_service=served,
            preemptions=request.preemptions + 1,
            last_preempted_time=now,
        )
        tx = self.etcd.transactions
        qk, rk = self.queue_prefix + job_id, self.running_prefix + job_id
        ok, _ = self.etcd.transaction(
            compare=[tx.version(rk) > 0],
            success=[tx.delete(rk), tx.put(qk, json.dumps(asdict(queued)))],
            failure=[],
        )
        return queued if ok else None

    def resize(self, job_id: str, allocations: tuple[Allocation, ...], now: float) -> bool:
        """Give a running job a new allocation (shrink or grow); it restarts with it.

        False if the job is no longer running as read: the write is guarded on the entry's
        mod revision, so a release landing in between is not undone by a resurrected entry.
        """
        rk = self.running_prefix + job_id
        value, meta = self.etcd.get(rk)
        if value is None:
            return False
        data = json.loads(value)
        running = _running_from(data["running"])
        resized = replace(running, allocations=_renumbered(list(allocations)), last_resize_time=now)
        tx = self.etcd.transactions
        ok, _ = self.etcd.transaction(
            compare=[tx.mod(rk) == meta.mod_revision],
            success=[
                tx.put(rk, json.dumps({"running": asdict(resized), "request": data["request"]}))
            ],
            failure=[],
        )
        return ok

    def release(self, job_id: str) -> RunningJob | None:
        """Forget the job; the running entry it had, if any (its run time feeds the ETAs)."""
        entry = self.running_job(job_id)
        self.etcd.delete(self.queue_prefix + job_id)
        self.etcd.delete(self.running_prefix + job_id)
        return entry

    def running_job(self, job_id: str) -> RunningJob | None:
        value, _ = self.etcd.get(self.running_prefix + job_id)
        return _running_from(json.loads(value)["running"]) if value else None


def _alloc_pb(a: Allocation) -> scheduler_pb2.LearnerAllocation:
    return scheduler_pb2.LearnerAllocation(
        learner=a.learner, node=a.node, gpu_indices=list(a.gpu_indices)
    )


class SchedulerService(scheduler_pb2_grpc.SchedulerServicer):
    def __init__(
        self,
        state: SchedulerState,
        nodes: list[NodeSpec],
        policy: str = DEFAULT_POLICY,
        clock: Callable[[], float] = time.time,
        *,
        span_nodes: bool = False,
        config: PolicyConfig = DEFAULT_CONFIG,
    ):
        problem = policy_problem(policy)
        if problem:
            raise ValueError(problem)
        self.state = state
        self.nodes = [
            Node(n.name, n.gpus, n.cpus, n.memory_mb, n.gpu_type, dict(n.labels)) for n in nodes
        ]
        self.policy = policy
        self.clock = clock
        # Whether a gang may span nodes: on a swarm (one overlay network per job, a helper
        # per node) it may, and gangs are packed onto the fewest nodes; on engines of their
        # own (one job network and volume on one engine) it must fit one node.
        self.placement = "pack" if span_nodes else "node"
        # Run times of the jobs that ended here, for the queue's ETAs (empty after a restart:
        # the model's prior stands in until jobs end again).
        self.durations = DurationModel()
        # GPU-seconds of the jobs that ended here: the default policy's first level threshold
        # is learned from them (policy.learned_config; the prior until 50 ended)
        self.gpu_seconds = DurationModel(window=LEVEL_HISTORY)
        self.config = config  # the knobs (DLAAS_SCHEDULER_*); learned values go on top
        # The pace of arrivals and finishes, for the grow rule (policy.elastic): from what this
        # service saw since it started (unknown until then: growth as without the rule).
        self.forecast = IdleForecast()
        # What a resize's restart costs, measured from the resized jobs' statuses (restarts.py)
        self.restarts = RestartWatch(state.etcd, state.keys, config.restart_s)
        # One round at a time: rounds read, decide and write; etcd guards against other writers.
        self._lock = threading.Lock()

    @translate_errors
    def Enqueue(self, request, context):
        job = QueuedJob(
            job_id=request.job_id,
            user=request.user,
            learners=request.learners,
            gpus_per_learner=request.gpus,
            cpus_per_learner=request.cpus,
            memory_mb_per_learner=request.memory_mb,
            priority=request.priority,
            submit_time=request.submit_time or self.clock(),
            gpu_type=request.gpu_type,
            min_learners=request.min_learners or None,
            max_learners=request.max_learners or None,
            placement=self.placement,
            team=request.team,
            name=request.name,
            # The LCM sends max_learners above the target only for a manifest with
            # `elastic: {auto_grow: true}` (else max = target): growth past it is allowed.
            auto_grow=request.max_learners > request.learners,
        )
        # A gang outside its own range is a caller's bug (the LCM sends the manifest's).
        problem = elastic_range_problem(job.learners, job.min_gang, job.max_gang)
        if problem:
            raise InvalidRequest(problem)
        problem = team_problem(job.team)
        if problem:
            return scheduler_pb2.EnqueueReply(accepted=False, reason=problem)
        fits, reason = can_ever_fit(job, self.nodes)
        if not fits:
            return scheduler_pb2.EnqueueReply(accepted=False, reason=reason)
        # Queued, once; a job that runs already gets the request's size as its new target
        # instead (a user's scale to the size it runs at: no restart). The queueing first:
        # a new job, every submit, costs one etcd transaction and no read.
        if self.state.enqueue(job):
            self.forecast.arrived(self.clock())
        else:
            self.state.retarget(job)
        return scheduler_pb2.EnqueueReply(accepted=True)

    def _snapshot(self, now: float) -> Snapshot:
        """The cluster as etcd has it; running jobs' attained service counts up to `now`."""
        unhealthy = self.state.unhealthy_nodes()
        nodes = [replace(n, healthy=n.name not in unhealthy) for n in self.nodes]
        running = [
            replace(
                r,
                attained_service=r.attained_service + _served(r, now),
                # entries written before targets were kept: the request holds the target
                target_learners=r.target_learners or req.learners,
            )
            for r, req in self.state.running_entries().values()
        ]
        return Snapshot(
            nodes=nodes, running=running, queue=self.state.queue(), quotas=self.state.quotas()
        )

    def _apply(self, d, queue: dict[str, QueuedJob], now: float) -> list[Allocation] | None:
        """Record one decision in etcd; the allocations to report, or None if it lost a race."""
        if d.action == "start":
            ok = self.state.start(queue[d.job_id], d.allocations, now)
            return list(_renumbered(d.allocations)) if ok else None
        if d.action == "preempt":
            queued = self.state.preempt(d.job_id, now)
            if queued is None:
                return None
            queue[d.job_id] = queued  # a move preempts and starts the job in one round
            return list(d.allocations)
        if d.action in ("shrink", "grow"):
            current = self.state.running_entries().get(d.job_id)
            if current is None:
                return None
            changed = {(a.node, a.gpu_indices, a.learner) for a in d.allocations}
            if d.action == "shrink":
                kept = [
                    a
                    for a in current[0].allocations
                    if (a.node, a.gpu_indices, a.learner) not in changed
                ]
            else:
                kept = [*current[0].allocations, *d.allocations]
            new = _renumbered(kept)
            return list(new) if self.state.resize(d.job_id, new, now) else None
        return None

    @translate_errors
    def Schedule(self, request, context):
        with self._lock:
            now = self.clock()
            cfg = self.forecast.config(learned_config(self.gpu_seconds, self.config), now)
            snapshot, cfg = self.restarts.round(self._snapshot(now), cfg, now)
            queue = {j.job_id: j for j in snapshot.queue}
            out = []
            # no "wait" decisions: nothing here reports them (a queued job's reason is the Queue
            # report's), and they cost a Decision, some a cause, for every job left queued
            for d in schedule(snapshot, now, policy=self.policy, config=cfg, include_waits=False):
                # A decision that lost its etcd guard (released meanwhile) is not reported.
                allocations = self._apply(d, queue, now)
                if allocations is None:
                    continue
                out.append(
                    scheduler_pb2.Decision(
                        job_id=d.job_id,
                        action=d.action,
                        cause=d.cause,
                        allocations=[_alloc_pb(a) for a in allocations],
                    )
                )
            return scheduler_pb2.ScheduleReply(decisions=out)

    @translate_errors
    def Release(self, request, context):
        held = self.state.release(request.job_id)
        if held is not None and request.ended:
            ran = _ran(held, self.clock())
            self.durations.add(
                held.attained_service / max(1, held.gpus) + ran, run_key(held.user, held.name)
            )
            self.gpu_seconds.add(held.attained_service + _served(held, self.clock()))
            self.forecast.finished(self.clock())
        return scheduler_pb2.SchedEmpty()

    @translate_errors
    def Queue(self, request, context):
        now = self.clock()
        snapshot = self._snapshot(now)
        known = {k: v for k, v in request.remaining_s.items() if math.isfinite(v) and v >= 0}
        if known:  # the running jobs whose progress says when they end
            running = [
                replace(r, remaining_s=known[r.job_id]) if r.job_id in known else r
                for r in snapshot.running
            ]
            snapshot = replace(snapshot, running=running)
        entries = [
            scheduler_pb2.QueueEntry(
                job_id=job_id, position=pos, reason=reason, eta_low_s=lo, eta_high_s=hi
            )
            for job_id, pos, reason, lo, hi in queue_report(
                snapshot,
                now,
                self.policy,
                model=self.durations,
                config=learned_config(self.gpu_seconds, self.config),
            )
        ]
        return scheduler_pb2.QueueReply(entries=entries)

    @translate_errors
    def SetTeamQuota(self, request, context):
        team, quota = quota_from(request)
        self.state.set_quota(team, quota)
        log.info(
            "team %s quota: %d GPUs, %g CPUs, %d MiB", team, quota.gpus, quota.cpus, quota.memory_mb
        )
        return scheduler_pb2.SchedEmpty()

    @translate_errors
    def Teams(self, request, context):
        teams = [
            scheduler_pb2.TeamUsage(
                team=u.team,
                quota_gpus=u.quota.gpus,
                quota_cpus=u.quota.cpus,
                quota_memory_mb=u.quota.memory_mb,
                guaranteed_gpus=int(u.guaranteed[0]),
                guaranteed_cpus=u.guaranteed[1],
                guaranteed_memory_mb=int(u.guaranteed[2]),
                borrowed_gpus=int(u.borrowed[0]),
                borrowed_cpus=u.borrowed[1],
                borrowed_memory_mb=int(u.borrowed[2]),
                queued=u.queued,
            )
            for u in team_usage(self._snapshot(self.clock()))
        ]
        return scheduler_pb2.TeamsReply(teams=teams)
