"""The lifecycle manager: accepts jobs, asks the scheduler to place them, deploys them.

Use cases behind the LifecycleManager gRPC service, plus the placement loop that carries
out the scheduler's decisions. Status changes go through StatusKeeper (CAS in etcd,
mirrored to the job store) BEFORE the side effect, so a crash in between is repaired by
`reconcile()`: it redeploys whatever is PENDING, finishes the teardown of whatever was
requeued, and queues at the scheduler whatever etcd says is QUEUED.

Replicas: every replica serves the gRPC use cases (they are single CAS writes plus
idempotent container calls); only the leader (dlaas.leader, an etcd lease) runs the
placement loop and the reconcile, so there is one writer of deployments at a time.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable

import botocore.exceptions
import pyetcd.exceptions
import pymongo.errors
import requests

from dlaas import errors, jobspec
from dlaas.config import PlatformSettings
from dlaas.etcd_status import StatusKeeper
from dlaas.grpc_errors import translate_errors
from dlaas.job_identities import JobIdentities
from dlaas.locations import S3Location, check_buckets, job_locations
from dlaas.manifest import Manifest, parse_manifest, resolve_image
from dlaas.namespace import job_policy
from dlaas.nodes import NodeSpec
from dlaas.sdk import SchedulerClient
from dlaas.secretbox import SecretBox
from dlaas.status import Status
from dlaas.store.base import JobRecord, JobStore
from dlaas.v1 import lcm_pb2, lcm_pb2_grpc, scheduler_pb2
from services.lcm.deployer import Deployer
from services.lcm.plan import deployment_plan

log = logging.getLogger(__name__)

ADMIN = "admin"
RUNNING = (Status.PENDING, Status.DOWNLOADING, Status.PROCESSING)
# Restart backoff: the first restart at once (a one-off infrastructure failure costs no
# waiting), then 1 s, 2 s, 4 s ... capped.
MAX_BACKOFF_S = 60.0
# How long a requeue waits for the helper to store checkpoints and logs before removing it.
HELPER_FINISH_TIMEOUT_S = 30.0
# Node health: an engine is probed this often; this many failed probes in a row mark it lost.
NODE_PROBE_S = 0.5
NODE_LOST_AFTER = 2
# A job PENDING this long had its deploy cut short (a crash, an engine or etcd error after
# PENDING was written): the leader deploys it again (idempotent). Checked this often.
PENDING_STALE_S = 20.0
PENDING_CHECK_S = 5.0
# How often the leader revokes the S3 identities of jobs whose containers are gone.
IDENTITY_SWEEP_S = 5.0
# How often the leader mirrors into the job store transitions it missed (see repair_mirrors).
MIRROR_CHECK_S = 30.0
# A requeue whose teardown failed is tried again after this long, doubling up to MAX_BACKOFF_S.
TEARDOWN_RETRY_S = 1.0


# Failures of the platform's own services while deploying, which pass: the engine not
# answering (docker's APIError is a requests error; its 4xx refusals are DeployRefused by
# then), the job store (a locked SQLite, MongoDB away), etcd, S3 and the network.
INFRASTRUCTURE_ERRORS: tuple[type[Exception], ...] = (
    requests.exceptions.RequestException,
    sqlite3.OperationalError,
    pymongo.errors.PyMongoError,
    pyetcd.exceptions.Etcd3Exception,
    botocore.exceptions.BotoCoreError,
    OSError,
)


def backoff_s(restart: int) -> float:
    """Seconds before restart number `restart` (1, 2, ...)."""
    return 0.0 if restart <= 1 else min(MAX_BACKOFF_S, 2.0 ** (restart - 2))


class Lcm:
    def __init__(
        self,
        settings: PlatformSettings,
        keeper: StatusKeeper,
        store: JobStore,
        deployers: dict[str, Deployer] | Deployer,
        scheduler: SchedulerClient,
        nodes: list[NodeSpec],
        clock: Callable[[], float] = time.time,
        identities: JobIdentities | None = None,
        s3: object = None,
    ):
        self.settings = settings
        # Per-job S3 identities and the platform's own S3 client (results buckets are made
        # by the platform: a job's identity may not create buckets).
        self.identities = identities or JobIdentities(
            settings.s3_endpoint, settings.s3_access_key, settings.s3_secret_key.get_secret_value()
        )
        self._s3 = s3
        self._last_sweep = 0.0
        self.box = SecretBox(settings.secrets_key.get_secret_value())
        self.keeper = keeper
        self.store = store
        if isinstance(deployers, Deployer):
            deployers = {n.name: deployers for n in nodes}
        self.deployers = deployers
        self.scheduler = scheduler
        self.nodes = nodes
        self.clock = clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._leading = threading.Event()
        self._thread: threading.Thread | None = None
        # Requeued jobs waiting out their restart backoff: job_id -> not_before.
        self._due: dict[str, float] = {}
        # Node health as the leader sees it: name -> consecutive failed probes.
        self._probe_failures: dict[str, int] = {}
        self._unhealthy: set[str] = set()
        self._last_probe = 0.0
        self._last_pending_check = 0.0
        self._last_mirror_check = 0.0
        self._lock = threading.Lock()

    @property
    def deployer(self) -> Deployer:
        """The first node's deployer (single-node platforms have only this one)."""
        return next(iter(self.deployers.values()))

    # ---- use cases -------------------------------------------------------------------

    def submit(
        self, job_id: str, user: str, manifest_yaml: str, code_key: str, team: str = ""
    ) -> tuple[str, list[str]]:
        """Record the job as QUEUED and queue it; refuse what can never run. Idempotent by id."""
        if not job_id or not user:
            raise errors.InvalidRequest("job_id and user are required")
        manifest = parse_manifest(manifest_yaml)
        check_buckets(manifest, team)
        image = resolve_image(manifest, self.settings.learner_image)
        if not self.deployer.image_present(image):
            raise errors.ImageUnavailable(
                f"framework: image {image} is not present on the node and no registry is "
                f"reachable; build it locally (dlaas images build) or name another image"
            )
        now = self.clock()
        record = JobRecord(
            job_id=job_id,
            user=user,
            name=manifest.name,
            # A user's store password is kept encrypted (or the job refused): never in clear.
            manifest_yaml=self.box.seal(manifest_yaml),
            created_at=now,
            updated_at=now,
            code_key=code_key,
            info={"image": image, "learners_requested": manifest.learners},
            team=team,
        )
        if not self.store.create(record):
            existing = self.store.get(job_id)
            if existing.user != user:
                raise errors.JobExists(f"job id {job_id} is taken")
            return existing.status.value, []
        # Stored only once accepted: whatever fails from here on (the status key, the
        # scheduler refusing or not answering, a gang the proto cannot carry) removes the
        # status key and the record again, so no job sits QUEUED that nobody was told of.
        try:
            self.keeper.create(job_id, "submitted")
            accepted, reason = self.scheduler.enqueue(self._gang(record, manifest))
            if not accepted:
                raise errors.CapacityExceeded(reason)
        except BaseException:
            for what, remove in (("status key", self.keeper.delete), ("record", self.store.delete)):
                try:
                    remove(job_id)
                except Exception:  # broad on purpose: the real cause is re-raised below
                    log.exception("refused job %s: could not remove its %s", job_id, what)
            raise
        self._wake.set()
        return Status.QUEUED.value, []

    @staticmethod
    def _gang(record: JobRecord, m: Manifest) -> scheduler_pb2.GangRequest:
        # A requeued job keeps its original submit time: it gets its old queue position back.
        # `learners` is the job's target (the manifest's, or the user's last scale). The
        # scheduler grows a job past it only up to max_learners, so max is the target unless
        # the manifest allows growth (`elastic: {auto_grow: true}`).
        learners = int(record.info.get("learners_target") or m.learners)
        grow_to = (m.max_learners or learners) if m.elastic.auto_grow else learners
        return scheduler_pb2.GangRequest(
            job_id=record.job_id,
            user=record.user,
            learners=learners,
            cpus=m.cpus,
            memory_mb=m.memory_mb,
            gpus=m.gpus,
            gpu_type=m.gpu_type or "",
            priority=m.priority,
            min_learners=min(m.min_learners or learners, learners),
            max_learners=max(grow_to, learners),
            submit_time=record.created_at,
            team=record.team,
        )

    def _owned(self, job_id: str, user: str) -> JobRecord:
        record = self.store.get(job_id)
        if user and user != ADMIN and record.user != user:
            raise errors.JobNotFound(job_id)  # the same answer as for a missing job
        return record

    def _state(self, job_id: str):
        state = self.keeper.get(job_id)
        if state is None:
            raise errors.JobNotFound(job_id)
        return state

    def halt(self, job_id: str, user: str, reason: str) -> str:
        self._owned(job_id, user)
        state = self._state(job_id)
        if state.final:
            raise errors.InvalidTransition(f"job {job_id} has already ended ({state.status})")
        self.keeper.transition(job_id, Status.HALTED, reason or "halted by the user")
        self._due.pop(job_id, None)
        self.scheduler.release(job_id)
        # Learners get SIGTERM (they may checkpoint), then the helper syncs checkpoints and
        # logs to S3; the monitor cleans up once it has exited.
        threading.Thread(target=self._stop_job, args=(job_id,), daemon=True).start()
        return Status.HALTED.value

    def _stop_job(self, job_id: str) -> None:
        try:
            for d in self._deployers_of(job_id):
                d.stop_learners(job_id)
                d.signal_helper(job_id)
        except Exception:
            log.exception("stopping job %s", job_id)

    def resume(self, job_id: str, user: str, reason: str) -> str:
        """Queue a HALTED job again; it continues from its last checkpoint."""
        record = self._owned(job_id, user)
        state = self._state(job_id)
        if state.status != Status.HALTED:
            raise errors.InvalidTransition(
                f"only a HALTED job can be resumed; job {job_id} is {state.status}"
            )
        self.keeper.transition(job_id, Status.QUEUED, reason or "resumed by the user")
        self._teardown(job_id)
        self._enqueue(record)
        return Status.QUEUED.value

    def requeue(self, job_id: str, reason: str, is_restart: bool) -> str:
        """Stop a placed job's gang and queue it again; restarts count against max_restarts."""
        record = self.store.get(job_id)
        state = self._state(job_id)
        if state.status not in RUNNING:
            raise errors.InvalidTransition(f"job {job_id} is {state.status}, not running")
        manifest = parse_manifest(record.manifest_yaml)
        not_before = 0.0
        if is_restart:
            done = int(record.info.get("restarts", 0))
            if done >= manifest.max_restarts:
                self.keeper.transition(
                    job_id,
                    Status.FAILED,
                    f"{reason}; no restarts left (max_restarts={manifest.max_restarts})",
                    error_code="restarts_exhausted",
                )
                self.scheduler.release(job_id)
                return Status.FAILED.value
            delay = backoff_s(done + 1)
            not_before = self.clock() + delay
            self.store.update_info(job_id, {"restarts": done + 1, "not_before": not_before})
            when = f"in {delay:.0f} s" if delay else "at once"
            reason = (
                f"restart {done + 1}/{manifest.max_restarts} from the last checkpoint {when}: "
                f"{reason}"
            )
        self.keeper.transition(job_id, Status.QUEUED, reason)
        threading.Thread(
            target=self._requeue_finish, args=(job_id, not_before, is_restart), daemon=True
        ).start()
        return Status.QUEUED.value

    def _requeue_finish(self, job_id: str, not_before: float, keep: bool) -> None:
        """Tear the gang down; after `not_before` it restarts (see `_requeue_due`).

        `keep`: a restart keeps the scheduler's allocation through its backoff, so the gang
        comes back on its own GPUs at once instead of queueing behind jobs that took them.

        A failure (the engine, etcd or the scheduler not answering) is retried with backoff
        until it succeeds, the job moves on (halted, deleted, placed) or the LCM stops: the
        leader's reconcile runs once per term, so it cannot be what finishes the requeue
        while this replica lives. Every step is idempotent; a crash leaves it to the next
        leader's reconcile.
        """
        delay, torn_down = TEARDOWN_RETRY_S, False
        while True:
            try:
                if not torn_down:  # once: a later release could free a new allocation
                    self._teardown(job_id)
                    if not keep:
                        self.scheduler.release(job_id)
                    torn_down = True
                if self._leading.is_set():
                    self._due[job_id] = not_before
                    self._wake.set()
                    return
                # A standby replica took the request: only the leader's loop reads `_due`, so
                # this replica waits out the backoff and finishes the requeue itself.
                if self._stop.wait(max(0.0, not_before - self.clock())):
                    return
                self._requeue_due(job_id)
                return
            except Exception:  # broad on purpose: whatever failed is logged and tried again
                log.exception("requeue of %s failed; trying again in %.0f s", job_id, delay)
            if self._stop.wait(delay) or not self._still_queued(job_id):
                return
            delay = min(MAX_BACKOFF_S, delay * 2)

    def _still_queued(self, job_id: str) -> bool:
        """Whether the job is QUEUED (True too if etcd cannot say: the caller tries again)."""
        try:
            state = self.keeper.get(job_id)
        except Exception:  # broad on purpose: etcd's client raises several kinds; logged
            log.warning("requeue of %s: its status cannot be read now", job_id, exc_info=True)
            return True
        return state is not None and state.status == Status.QUEUED

    def _held_allocation(self, job_id: str) -> list[dict]:
        """The allocation the scheduler still holds for the job (its running entry), or []."""
        value, _ = self.keeper.etcd.get(f"{self.keeper.prefix}/sched/running/{job_id}")
        if not value:
            return []
        return [
            {"learner": a["learner"], "node": a["node"], "gpu_indices": list(a["gpu_indices"])}
            for a in json.loads(value)["running"]["allocations"]
        ]

    def _unhealthy_nodes(self) -> set[str]:
        """Nodes the leader marked lost, as recorded in etcd (any replica may ask)."""
        prefix = self._node_key("")
        return {
            meta.key.decode()[len(prefix) :]
            for value, meta in self.keeper.etcd.get_prefix(prefix)
            if not json.loads(value).get("healthy", True)
        }

    def _requeue_due(self, job_id: str) -> None:
        """A requeued job's backoff is over: restart it on the GPUs the scheduler still holds
        for it (a restart on healthy nodes), or queue it for the scheduler to place."""
        state = self.keeper.get(job_id)
        if state is None or state.status != Status.QUEUED:
            return
        held = self._held_allocation(job_id)
        if held and not {a["node"] for a in held} & self._unhealthy_nodes():
            self._start_placed(job_id, "restarted on the GPUs it held", held)
            return
        if held:  # its node was lost meanwhile: give the GPUs back and queue it
            self.scheduler.release(job_id)
        self._enqueue(self.store.get(job_id))

    def scale(self, job_id: str, user: str, learners: int) -> str:
        """Set an elastic job's target learner count. A running gang of another size restarts
        from its checkpoint with it; one already at that size keeps running (the target is
        recorded, its learners become its own); a job whose target it is already is left as
        it is (the scheduler grows a shrunk job back to its target by itself)."""
        record = self._owned(job_id, user)
        manifest = parse_manifest(record.manifest_yaml)
        lo, hi = (
            manifest.min_learners or manifest.learners,
            manifest.max_learners or manifest.learners,
        )
        if lo == hi:
            raise errors.InvalidRequest(
                f"learners: job {job_id} is not elastic (min_learners = max_learners = {lo})"
            )
        if not lo <= learners <= hi:
            raise errors.InvalidRequest(f"learners: must be between {lo} and {hi}, got {learners}")
        state = self._state(job_id)
        if state.final:
            raise errors.InvalidTransition(f"job {job_id} has already ended ({state.status})")
        target = int(record.info.get("learners_target") or manifest.learners)
        if learners == target:
            return state.status.value
        running = state.status in RUNNING
        if running and len(self._held_allocation(job_id)) == learners:
            self.store.update_info(job_id, {"learners_target": learners})
            # The scheduler takes an Enqueue of a running job as its new target: no restart.
            self.scheduler.enqueue(self._gang(self.store.get(job_id), manifest))
            return state.status.value
        self.store.update_info(job_id, {"learners_target": learners})
        if state.status == Status.QUEUED:
            self.scheduler.release(job_id)
            self._enqueue(self.store.get(job_id))
            return Status.QUEUED.value
        return self.requeue(job_id, f"rescaled to {learners} learner(s) by the user", False)

    def delete(self, job_id: str, user: str) -> None:
        self._owned(job_id, user)
        state = self.keeper.get(job_id)
        if state is not None and not state.final:
            self.keeper.transition(job_id, Status.HALTED, "deleted by the user")
        self._teardown(job_id, wait_helper=False)
        self.scheduler.release(job_id)
        self.keeper.delete(job_id)
        self.store.delete(job_id)

    def _enqueue(self, record: JobRecord) -> None:
        manifest = parse_manifest(record.manifest_yaml)
        accepted, reason = self.scheduler.enqueue(self._gang(record, manifest))
        if not accepted:
            self.keeper.try_transition(
                record.job_id, Status.FAILED, reason, error_code="capacity_exceeded"
            )
        self._wake.set()

    def _deployers_of(self, job_id: str) -> list[Deployer]:
        """The engines holding the job's containers (every healthy one if unknown)."""
        healthy = {n: d for n, d in self.deployers.items() if n not in self._unhealthy}
        nodes = {p["node"] for p in self._placement(job_id)}
        found = [healthy[n] for n in sorted(nodes) if n in healthy]
        if found or nodes & set(self.deployers):
            return list(dict.fromkeys(found))
        return list(dict.fromkeys(healthy.values()))

    def _teardown(self, job_id: str, wait_helper: bool = True) -> None:
        """Stop the gang, let the helper store checkpoints and logs, remove everything."""
        for d in self._deployers_of(job_id):
            if wait_helper and d.containers(job_id):
                d.stop_learners(job_id)
                d.signal_helper(job_id)
                d.wait_helper(job_id, HELPER_FINISH_TIMEOUT_S)
            d.remove_job(job_id)
        self._revoke(job_id)

    # ---- placement loop (leader only) -----------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="placement", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def on_elected(self) -> None:
        """Leadership won: repair what a previous leader left half done, then place."""
        self._leading.set()
        # Any replica may accept a submit or see a job end; the leader learns of it from
        # the scheduler's keys in etcd at once instead of waiting for its next poll.
        try:
            self._watch = self.keeper.etcd.add_watch_prefix_callback(
                f"{self.keeper.prefix}/sched/", lambda _event: self._wake.set()
            )
        except Exception:  # noqa: BLE001 - the poll still places, only slower
            log.warning("could not watch the scheduler's keys; placing on the poll only")
        self._wake.set()

    def on_lost(self) -> None:
        self._leading.clear()
        watch, self._watch = getattr(self, "_watch", None), None
        if watch is not None:
            try:
                self.keeper.etcd.cancel_watch(watch)
            except Exception:  # noqa: BLE001 - the watch dies with the connection anyway
                log.info("could not cancel the scheduler watch")

    def _loop(self) -> None:
        reconciled = False
        while not self._stop.is_set():
            # A released allocation (a job ended) may let a queued job start: poll briefly.
            self._wake.wait(0.5)
            self._wake.clear()
            if self._stop.is_set():
                return
            if not self._leading.is_set():
                reconciled = False
                continue
            try:
                self.check_nodes()
                if not reconciled:
                    self.reconcile()
                    reconciled = True
                self._enqueue_due()
                self.redeploy_stale()
                self.repair_mirrors()
                self.place_round()
                self.sweep_identities()
            except errors.TemporaryError as exc:
                log.warning("placement round: %s", exc.message)
            except Exception:
                log.exception("placement round failed")

    # ---- node health (leader only) -------------------------------------------------

    def _node_key(self, name: str) -> str:
        return f"{self.keeper.prefix}/nodes/{name}"

    def check_nodes(self) -> None:
        """Probe every engine; a lost one gets no new gangs and its jobs are requeued."""
        now = self.clock()
        if now - self._last_probe < NODE_PROBE_S:
            return
        self._last_probe = now
        for name, deployer in self.deployers.items():
            if deployer.ping():
                self._probe_failures[name] = 0
                if name in self._unhealthy:
                    self._node_back(name, deployer)
                continue
            self._probe_failures[name] = self._probe_failures.get(name, 0) + 1
            if self._probe_failures[name] >= NODE_LOST_AFTER and name not in self._unhealthy:
                self._node_lost(name)

    def _node_lost(self, name: str) -> None:
        log.warning("node %s lost: its engine is not answering", name)
        self._unhealthy.add(name)
        self.keeper.etcd.put(
            self._node_key(name),
            json.dumps({"healthy": False, "since": self.clock(), "reason": "engine not answering"}),
        )
        for job_id, state in self.keeper.active_jobs().items():
            if state.status in RUNNING and name in {p["node"] for p in self._placement(job_id)}:
                try:
                    self.requeue(job_id, f"node {name} lost: its engine is not answering", False)
                except errors.DlaasError as exc:
                    log.warning("requeue %s after losing %s: %s", job_id, name, exc.message)

    def _node_back(self, name: str, deployer: Deployer) -> None:
        """A node rejoins: remove what is left of jobs that have moved on, then use it again."""
        log.info("node %s is answering again", name)
        for job_id in deployer.managed_jobs(self.settings.platform_id):
            state = self.keeper.get(job_id)
            placed_here = name in {p["node"] for p in self._placement(job_id)}
            if state is None or state.status not in RUNNING or not placed_here:
                deployer.remove_job(job_id)
        self._unhealthy.discard(name)
        self.keeper.etcd.put(
            self._node_key(name), json.dumps({"healthy": True, "since": self.clock()})
        )

    def _enqueue_due(self) -> None:
        now = self.clock()
        for job_id, not_before in list(self._due.items()):
            if now >= not_before:
                self._due.pop(job_id, None)
                self._requeue_due(job_id)

    def place_round(self) -> None:
        for decision in self.scheduler.schedule():
            try:
                self._carry_out(decision)
            except errors.DlaasError as exc:
                log.warning("decision %s for %s: %s", decision.action, decision.job_id, exc.message)

    def _carry_out(self, decision) -> None:
        job_id, cause = decision.job_id, decision.cause
        allocations = list(decision.allocations)
        if decision.action == "start":
            self.start_job(job_id, cause, allocations)
        elif decision.action == "preempt":
            # The scheduler has queued the job again itself (with its original position).
            if self.keeper.try_transition(job_id, Status.QUEUED, f"preempted: {cause}"):
                threading.Thread(target=self._teardown, args=(job_id,), daemon=True).start()
        elif decision.action in ("shrink", "grow") and self.keeper.try_transition(
            job_id, Status.QUEUED, f"{decision.action}: {cause}"
        ):
            # `allocations` is the gang's whole new allocation: restart it with that size.
            self._teardown(job_id)
            self.start_job(job_id, cause, allocations)

    def _placement_key(self, job_id: str) -> str:
        return f"{self.keeper.prefix}/jobs/{job_id}/placement"

    def _placement(self, job_id: str) -> list[dict]:
        value, _ = self.keeper.etcd.get(self._placement_key(job_id))
        return json.loads(value) if value else []

    def start_job(self, job_id: str, cause: str, allocations: list) -> None:
        placement = [
            {"learner": a.learner, "node": a.node, "gpu_indices": list(a.gpu_indices)}
            for a in allocations
        ]
        self._start_placed(job_id, cause, placement)

    def _start_placed(self, job_id: str, cause: str, placement: list[dict]) -> None:
        nodes = sorted({p["node"] for p in placement})
        self.keeper.etcd.put(self._placement_key(job_id), json.dumps(placement))
        if (
            self.keeper.try_transition(
                job_id, Status.PENDING, f"placed on {', '.join(nodes)}: {cause}"
            )
            is None
        ):
            # Halted or deleted while queued: give the allocation back.
            self.scheduler.release(job_id)
            return
        self.deploy(job_id, placement)

    def deploy(self, job_id: str, placement: list[dict]) -> None:
        """Deploy (or redeploy, idempotently) a PENDING job and move it to DOWNLOADING."""
        node = placement[0]["node"] if placement else ""
        try:
            deployer = self.deployers[node]
            record = self.store.get(job_id)
            manifest = parse_manifest(self.box.open(record.manifest_yaml))
            # Containers reach the platform's S3 through their own engine's bridge.
            s = self.settings
            spec = {n.name: n for n in self.nodes}.get(node)
            if spec is not None and spec.s3_endpoint_for_containers:
                s = s.model_copy(
                    update={"s3_endpoint_for_containers": spec.s3_endpoint_for_containers}
                )
            data, results, code = self._job_access(job_id, record, manifest, s)
            plan = deployment_plan(
                platform_id=self.settings.platform_id,
                job_id=job_id,
                user=record.user,
                manifest=manifest,
                learners=len(placement),
                gpu_indices=[tuple(p["gpu_indices"]) for p in placement],
                image=resolve_image(manifest, self.settings.learner_image),
                helper_image=self.settings.learner_image,
                data=data,
                results=results,
                code=code,
            )
            names = deployer.deploy(plan)
        except errors.ImageUnavailable as exc:
            self._fail(job_id, exc.message, "image_missing")
            return
        except errors.DeployRefused as exc:
            # The engine refused the job's own containers (a 4xx, the OCI runtime failing
            # them): every redeploy would be refused again, holding the allocation forever.
            self._fail(job_id, exc.message, exc.code)
            return
        except errors.TemporaryError as exc:
            log.warning("deploy %s: %s; will retry", job_id, exc.message)
            return
        except INFRASTRUCTURE_ERRORS as exc:
            # The platform's own trouble, not the job's (the engine stopped answering, the
            # store is locked, etcd or S3 is away): the job stays PENDING, deployed again
            # by `redeploy_stale`, or requeued if its node is lost.
            log.warning(
                "deploy %s on %s: %s: %s; will retry", job_id, node, type(exc).__name__, exc
            )
            return
        except Exception as exc:
            # Neither the job's known faults nor known infrastructure trouble: a bug here
            # would fail every redeploy too, so the job ends instead of holding its GPUs.
            log.exception("deploy %s failed", job_id)
            self._fail(job_id, f"deployment failed: {type(exc).__name__}", "deploy_failed")
            return
        self.store.update_info(
            job_id,
            {
                "learners": [
                    {"id": p["learner"], "node": p["node"], "container": n, "state": "created"}
                    for p, n in zip(placement, names[1:], strict=True)
                ],
                "results": {"bucket": results.bucket, "prefix": jobspec.results_prefix(job_id)},
            },
        )
        self.keeper.try_transition(
            job_id, Status.DOWNLOADING, f"{len(placement)} learner(s) and the helper started"
        )

    def _job_access(
        self, job_id: str, record: JobRecord, manifest: Manifest, s: PlatformSettings
    ) -> tuple[S3Location | None, S3Location, S3Location | None]:
        """(data, results, code) as the job's containers reach them, with the job's own keys.

        Locations in the platform's S3 get the job's scoped identity instead of the
        platform's key (which never enters a container); a user's own store keeps the
        user's credentials. The results bucket is made here: the job may not make buckets.
        """
        data, results = job_locations(manifest, s, record.team, for_containers=True)
        endpoint = s.s3_endpoint_for_containers or s.s3_endpoint
        code = None
        if record.code_key:
            code = S3Location(endpoint, "", "", self.settings.s3_bucket, record.code_key,
                              platform=True)  # fmt: skip
        if results.platform:
            self._ensure_bucket(results.bucket)
        policy = job_policy(
            job_id,
            data=(data.bucket, data.prefix) if data is not None and data.platform else None,
            results=(results.bucket, jobspec.results_prefix(job_id)) if results.platform else None,
            code=(code.bucket, code.prefix) if code is not None else None,
        )
        if not policy["Statement"]:
            # Nothing of the job is in the platform's S3 (its own store, no code): it needs no
            # identity here (and the store refuses an empty policy).
            return data, results, code
        key, secret = self.identities.issue(job_id, policy)

        def scoped(loc: S3Location | None) -> S3Location | None:
            return loc.with_keys(key, secret) if loc is not None and loc.platform else loc

        scoped_results = scoped(results)
        assert scoped_results is not None
        return scoped(data), scoped_results, scoped(code)

    def _ensure_bucket(self, bucket: str) -> None:
        if self._s3 is None:
            from dlaas.s3 import platform_client

            self._s3 = platform_client(self.settings)
        try:
            self._s3.head_bucket(Bucket=bucket)  # type: ignore[attr-defined]
        except botocore.exceptions.ClientError:
            try:
                self._s3.create_bucket(Bucket=bucket)  # type: ignore[attr-defined]
            except botocore.exceptions.ClientError as exc:
                if exc.response.get("Error", {}).get("Code") not in (
                    "BucketAlreadyOwnedByYou",
                    "BucketAlreadyExists",
                ):
                    raise errors.TemporaryError(f"results bucket {bucket}: {exc}") from None
        except botocore.exceptions.BotoCoreError as exc:
            raise errors.TemporaryError(f"the platform's S3 is not answering: {exc}") from None

    def _revoke(self, job_id: str) -> None:
        """Revoke the job's S3 identity; a failure is left to the leader's sweep."""
        try:
            self.identities.revoke(job_id)
        except errors.TemporaryError as exc:
            log.warning("%s; the leader's sweep revokes it later", exc.message)

    def sweep_identities(self) -> None:
        """Revoke the S3 identity of every ended job that has no containers left (leader only).

        A job's identity lives while its containers do: the helper of a halted or finished
        job still uploads checkpoints and logs until the monitor removes it. Only ended (or
        deleted) jobs are swept: a queued job's teardown revokes its own identity, and one
        being deployed right now must keep the key it was just given.
        """
        now = self.clock()
        if now - self._last_sweep < IDENTITY_SWEEP_S:
            return
        self._last_sweep = now
        for job_id in self.identities.job_users():
            state = self.keeper.get(job_id)
            if state is not None and not state.final:
                continue
            if any(d.containers(job_id) for d in self._deployers_of(job_id)):
                continue
            # Read again: a resume may have moved it on while its containers were listed.
            again = self.keeper.get(job_id)
            if again is not None and not again.final:
                continue
            log.info("revoking the S3 identity of %s: it ended and has no containers", job_id)
            self._revoke(job_id)

    def _fail(self, job_id: str, reason: str, code: str) -> None:
        self.keeper.try_transition(job_id, Status.FAILED, reason, error_code=code)
        for d in self._deployers_of(job_id):
            d.remove_job(job_id)
        self._revoke(job_id)
        self.scheduler.release(job_id)

    def reconcile(self) -> None:
        """Finish what a crashed leader left half done; every step is idempotent.

        First the job store gets every transition etcd has and it missed, for every job.
        PENDING: redeploy. QUEUED: remove containers left from a requeue; after its backoff
        it restarts on the allocation the scheduler still holds for it (a restart, or a start
        granted just before a crash), or is queued again (enqueue keeps its position).
        """
        self._last_mirror_check = self.clock()
        try:
            for job_id in self.keeper.repair_mirrors():  # every job, ended ones included
                log.warning("job %s: the store missed its last transition; mirrored again", job_id)
        except Exception:  # broad on purpose: logged; the periodic check does it all again
            log.exception("reconcile: repairing the job store's mirror")
            self._last_mirror_check = 0.0  # the next periodic check looks at every job
        for job_id, state in self.keeper.active_jobs().items():
            try:
                if state.status == Status.PENDING:
                    self._redeploy(job_id, "resuming deployment of %s")
                elif state.status == Status.QUEUED:
                    record = self.store.get(job_id)
                    self._teardown(job_id)
                    self._due[job_id] = float(record.info.get("not_before", 0.0))
            except Exception:
                log.exception("reconcile %s", job_id)

    def repair_mirrors(self) -> None:
        """Mirror into the job store what etcd has and it lacks (leader only, periodically):
        active jobs, and jobs that changed since the last check (a period of slack for the
        writers' clocks). The reconcile checked every job when this leader was elected."""
        now = self.clock()
        if now - self._last_mirror_check < MIRROR_CHECK_S:
            return
        since = self._last_mirror_check - MIRROR_CHECK_S
        self._last_mirror_check = now
        for job_id in self.keeper.repair_mirrors(since=since):
            log.warning("job %s: the store missed its last transition; mirrored again", job_id)

    def redeploy_stale(self) -> None:
        """Deploy again every job PENDING for longer than PENDING_STALE_S (leader only)."""
        now = self.clock()
        if now - self._last_pending_check < PENDING_CHECK_S:
            return
        self._last_pending_check = now
        for job_id, state in self.keeper.active_jobs().items():
            if state.status == Status.PENDING and now - state.at >= PENDING_STALE_S:
                self._redeploy(job_id, "deploying %s again: it stayed PENDING")

    def _redeploy(self, job_id: str, message: str) -> None:
        placement = self._placement(job_id)
        # A job on a lost node is requeued by `_node_lost`, not deployed there again.
        if placement and not {p["node"] for p in placement} & self._unhealthy:
            log.info(message, job_id)
            self.deploy(job_id, placement)


class LcmServicer(lcm_pb2_grpc.LifecycleManagerServicer):
    def __init__(self, lcm: Lcm):
        self.lcm = lcm

    @translate_errors
    def SubmitJob(self, request, context):
        status, warnings = self.lcm.submit(
            request.job_id, request.user, request.manifest_yaml, request.code_key, request.team
        )
        return lcm_pb2.SubmitJobReply(job_id=request.job_id, status=status, warnings=warnings)

    @translate_errors
    def HaltJob(self, request, context):
        status = self.lcm.halt(request.job_id, request.user, request.reason)
        return lcm_pb2.JobStatusReply(job_id=request.job_id, status=status)

    @translate_errors
    def ResumeJob(self, request, context):
        status = self.lcm.resume(request.job_id, request.user, request.reason)
        return lcm_pb2.JobStatusReply(job_id=request.job_id, status=status)

    @translate_errors
    def RequeueJob(self, request, context):
        status = self.lcm.requeue(request.job_id, request.reason, request.is_restart)
        return lcm_pb2.JobStatusReply(job_id=request.job_id, status=status)

    @translate_errors
    def ScaleJob(self, request, context):
        status = self.lcm.scale(request.job_id, request.user, request.learners)
        return lcm_pb2.JobStatusReply(job_id=request.job_id, status=status)

    @translate_errors
    def DeleteJob(self, request, context):
        self.lcm.delete(request.job_id, request.user)
        return lcm_pb2.Empty()

    @translate_errors
    def Cluster(self, request, context):
        return lcm_pb2.ClusterReply(
            nodes=[
                lcm_pb2.NodeInfo(
                    name=n.name,
                    cpus=int(n.cpus),
                    memory_mb=n.memory_mb,
                    gpus=n.gpus,
                    gpu_type=n.gpu_type,
                    healthy=n.name not in self.lcm._unhealthy,
                )
                for n in self.lcm.nodes
            ]
        )
