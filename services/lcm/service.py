"""The lifecycle manager: accepts jobs, asks the scheduler to place them, deploys them.

Use cases behind the LifecycleManager gRPC service, plus the placement loop that carries
out the scheduler's start decisions. Status changes go through StatusKeeper (CAS in etcd,
mirrored to the job store) BEFORE the side effect, so a crash in between is repaired by
`reconcile()`, which redeploys idempotently whatever is PENDING.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable

from dlaas import errors
from dlaas.config import PlatformSettings
from dlaas.etcd_status import StatusKeeper
from dlaas.grpc_errors import translate_errors
from dlaas.locations import S3Location, job_locations
from dlaas.manifest import Manifest, parse_manifest, resolve_image
from dlaas.nodes import NodeSpec
from dlaas.sdk import SchedulerClient
from dlaas.status import Status
from dlaas.store.base import JobRecord, JobStore
from dlaas.v1 import lcm_pb2, lcm_pb2_grpc, scheduler_pb2
from services.lcm.deployer import Deployer
from services.lcm.plan import deployment_plan

log = logging.getLogger(__name__)

ADMIN = "admin"


class Lcm:
    def __init__(
        self,
        settings: PlatformSettings,
        keeper: StatusKeeper,
        store: JobStore,
        deployer: Deployer,
        scheduler: SchedulerClient,
        nodes: list[NodeSpec],
        clock: Callable[[], float] = time.time,
    ):
        self.settings = settings
        self.keeper = keeper
        self.store = store
        self.deployer = deployer
        self.scheduler = scheduler
        self.nodes = nodes
        self.clock = clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- use cases -------------------------------------------------------------------

    def submit(
        self, job_id: str, user: str, manifest_yaml: str, code_key: str
    ) -> tuple[str, list[str]]:
        """Record the job as QUEUED and queue it; refuse what can never run. Idempotent by id."""
        if not job_id or not user:
            raise errors.InvalidRequest("job_id and user are required")
        manifest = parse_manifest(manifest_yaml)
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
            manifest_yaml=manifest_yaml,
            created_at=now,
            updated_at=now,
            code_key=code_key,
            info={"image": image, "learners_requested": manifest.learners},
        )
        if not self.store.create(record):
            existing = self.store.get(job_id)
            if existing.user != user:
                raise errors.JobExists(f"job id {job_id} is taken")
            return existing.status.value, []
        self.keeper.create(job_id, "submitted")
        accepted, reason = self.scheduler.enqueue(self._gang(job_id, user, manifest, now))
        if not accepted:
            # Nothing half-created: the refused job leaves no record behind.
            self.keeper.delete(job_id)
            self.store.delete(job_id)
            raise errors.CapacityExceeded(reason)
        self._wake.set()
        return Status.QUEUED.value, []

    @staticmethod
    def _gang(job_id: str, user: str, m: Manifest, now: float) -> scheduler_pb2.GangRequest:
        return scheduler_pb2.GangRequest(
            job_id=job_id,
            user=user,
            learners=m.learners,
            cpus=m.cpus,
            memory_mb=m.memory_mb,
            gpus=m.gpus,
            gpu_type=m.gpu_type or "",
            priority=m.priority,
            min_learners=m.min_learners or m.learners,
            max_learners=m.max_learners or m.learners,
            submit_time=now,
        )

    def _owned(self, job_id: str, user: str) -> JobRecord:
        record = self.store.get(job_id)
        if user and user != ADMIN and record.user != user:
            raise errors.JobNotFound(job_id)  # the same answer as for a missing job
        return record

    def halt(self, job_id: str, user: str, reason: str) -> str:
        self._owned(job_id, user)
        state = self.keeper.get(job_id)
        if state is None:
            raise errors.JobNotFound(job_id)
        if state.final:
            raise errors.InvalidTransition(f"job {job_id} has already ended ({state.status})")
        self.keeper.transition(job_id, Status.HALTED, reason or "halted by the user")
        if state.status == Status.QUEUED:
            self.scheduler.release(job_id)
        # The learners stop in the background; the monitor cleans up once the helper stored the logs.
        threading.Thread(target=self._stop_job, args=(job_id,), daemon=True).start()
        return Status.HALTED.value

    def _stop_job(self, job_id: str) -> None:
        try:
            self.deployer.stop_learners(job_id)
            self.deployer.signal_helper(job_id)
        except Exception:
            log.exception("stopping job %s", job_id)

    def delete(self, job_id: str, user: str) -> None:
        self._owned(job_id, user)
        state = self.keeper.get(job_id)
        if state is not None and not state.final:
            self.keeper.transition(job_id, Status.HALTED, "deleted by the user")
        self.deployer.remove_job(job_id)
        self.scheduler.release(job_id)
        self.keeper.delete(job_id)
        self.store.delete(job_id)

    # ---- placement loop --------------------------------------------------------------

    def start(self) -> None:
        self.reconcile()
        self._thread = threading.Thread(target=self._loop, name="placement", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            # A released allocation (a job ended) may let a queued job start: poll briefly.
            self._wake.wait(0.5)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.place_round()
            except errors.TemporaryError as exc:
                log.warning("placement round: %s", exc.message)
            except Exception:
                log.exception("placement round failed")

    def place_round(self) -> None:
        for decision in self.scheduler.schedule():
            if decision.action == "start":
                self.start_job(decision.job_id, decision.cause, list(decision.allocations))
            else:
                log.info("decision %s for %s not carried out yet", decision.action, decision.job_id)

    def _placement_key(self, job_id: str) -> str:
        return f"{self.keeper.prefix}/jobs/{job_id}/placement"

    def start_job(self, job_id: str, cause: str, allocations: list) -> None:
        placement = [
            {"learner": a.learner, "node": a.node, "gpu_indices": list(a.gpu_indices)}
            for a in allocations
        ]
        self.keeper.etcd.put(self._placement_key(job_id), json.dumps(placement))
        nodes = sorted({p["node"] for p in placement})
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
        try:
            record = self.store.get(job_id)
            manifest = parse_manifest(record.manifest_yaml)
            data, results = job_locations(manifest, self.settings, for_containers=True)
            code = None
            if record.code_key:
                endpoint = self.settings.s3_endpoint_for_containers or self.settings.s3_endpoint
                code = S3Location(
                    endpoint,
                    self.settings.s3_access_key,
                    self.settings.s3_secret_key.get_secret_value(),
                    self.settings.s3_bucket,
                    record.code_key,
                )
            image = resolve_image(manifest, self.settings.learner_image)
            plan = deployment_plan(
                platform_id=self.settings.platform_id,
                job_id=job_id,
                user=record.user,
                manifest=manifest,
                learners=len(placement),
                gpu_indices=[tuple(p["gpu_indices"]) for p in placement],
                image=image,
                helper_image=self.settings.learner_image,
                data=data,
                results=results,
                code=code,
            )
            names = self.deployer.deploy(plan)
        except errors.ImageUnavailable as exc:
            self._fail(job_id, exc.message, "image_missing")
            return
        except errors.TemporaryError as exc:
            log.warning("deploy %s: %s; will retry", job_id, exc.message)
            return
        except Exception as exc:
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
                "results": {"bucket": results.bucket, "prefix": f"{job_id}/"},
            },
        )
        self.keeper.try_transition(
            job_id, Status.DOWNLOADING, f"{len(placement)} learner(s) and the helper started"
        )

    def _fail(self, job_id: str, reason: str, code: str) -> None:
        self.keeper.try_transition(job_id, Status.FAILED, reason, error_code=code)
        self.deployer.remove_job(job_id)
        self.scheduler.release(job_id)

    def reconcile(self) -> None:
        """Redeploy every PENDING job (a crash between PENDING and DOWNLOADING)."""
        for job_id, state in self.keeper.active_jobs().items():
            if state.status != Status.PENDING:
                continue
            value, _ = self.keeper.etcd.get(self._placement_key(job_id))
            if value is None:
                continue
            log.info("resuming deployment of %s", job_id)
            self.deploy(job_id, json.loads(value))


class LcmServicer(lcm_pb2_grpc.LifecycleManagerServicer):
    def __init__(self, lcm: Lcm):
        self.lcm = lcm

    @translate_errors
    def SubmitJob(self, request, context):
        status, warnings = self.lcm.submit(
            request.job_id, request.user, request.manifest_yaml, request.code_key
        )
        return lcm_pb2.SubmitJobReply(job_id=request.job_id, status=status, warnings=warnings)

    @translate_errors
    def HaltJob(self, request, context):
        status = self.lcm.halt(request.job_id, request.user, request.reason)
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
                    healthy=True,
                )
                for n in self.lcm.nodes
            ]
        )
