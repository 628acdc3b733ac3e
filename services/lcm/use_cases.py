"""The LCM's use cases: submit, halt, resume, requeue, scale and delete a job.

What the LifecycleManager gRPC service (grpc_api.py) calls. Each is a compare-and-swap
status write (through the status keeper) before its side effect; the side effects
(tearing a gang down, deploying) are deployment.py's, the requeue's later steps the
reconciler's. Every replica serves these; only the leader places (reconciler.py).
"""

from __future__ import annotations

import logging
import threading
import time

from dlaas.adapters.admission import admit
from dlaas.adapters.store.base import JobRecord
from dlaas.domain import errors
from dlaas.domain.authz import on_behalf_of
from dlaas.domain.frameworks import resolve_image
from dlaas.domain.jobspec import JobErrorCode
from dlaas.domain.locations import check_buckets
from dlaas.domain.manifest import Manifest, parse_manifest, scale_problem
from dlaas.domain.status import REQUEUEABLE, RESTARTABLE, Status
from dlaas.domain.stored import stored_manifest
from dlaas.v1 import scheduler_pb2
from services.lcm.restart_policy import backoff_s

log = logging.getLogger(__name__)

# A submit checks that its image is on the node; an image seen there is taken as present
# this long (removing one under a platform that runs it is rare, and its deploy then fails
# with the engine's message). Bounded: at most MAX_IMAGES_SEEN images remembered.
IMAGE_SEEN_S = 30.0
MAX_IMAGES_SEEN = 64


class JobUseCases:
    """The use cases of `Lcm` (service.py composes them with the other concerns)."""

    def submit(
        self, job_id: str, user: str, manifest_yaml: str, code_key: str, team: str = ""
    ) -> tuple[str, list[str]]:
        """Record the job as QUEUED and queue it; refuse what can never run. Idempotent by id."""
        if not job_id or not user:
            raise errors.InvalidRequest("job_id and user are required")
        manifest = parse_manifest(manifest_yaml)
        check_buckets(manifest, team)
        # The platform's admission checks, here for every transport (REST comes through this
        # call too): store endpoints at inside addresses, a priority above the team's ceiling.
        admit(
            manifest,
            user=user,
            team=team,
            accounts=self.store,
            allow_networks=self.settings.egress_allow_networks,
            max_disk_mb=self.settings.max_learner_disk_mb,
        )
        image = resolve_image(manifest, self.settings.learner_image)
        if not self._image_present(image):
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
        except BaseException:  # broad: whatever failed, nothing half-made stays; re-raised
            for what, remove in (("status key", self.keeper.delete), ("record", self.store.delete)):
                try:
                    remove(job_id)
                except Exception:  # broad on purpose: the real cause is re-raised below
                    log.exception("refused job %s: could not remove its %s", job_id, what)
            raise
        self._wake.set()
        return Status.QUEUED.value, []

    def _image_present(self, image: str) -> bool:
        """Whether the image is on the node: an engine call, unless it was there within
        IMAGE_SEEN_S (a burst of submits of one framework asks the engine once, not once
        each). Only a present image is remembered: a missing one is asked again at once,
        so an image built after a refusal is found by the next submit."""
        now = time.monotonic()
        with self._images_lock:
            seen = self._images_seen.get(image)
            if seen is not None and now - seen < IMAGE_SEEN_S:
                return True
        if not self.deployer.image_present(image):
            return False
        with self._images_lock:
            self._images_seen[image] = now
            while len(self._images_seen) > MAX_IMAGES_SEEN:
                self._images_seen.pop(next(iter(self._images_seen)))
        return True

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
            name=m.name,
        )

    def owned(self, job_id: str, user: str) -> JobRecord:
        """The job's record if the call's user may see it (the platform's one rule,
        dlaas.domain.authz); else JobNotFound, the answer for a missing job."""
        record = self.store.get(job_id)
        on_behalf_of(user).check_owner(job_id, record.user)
        return record

    def _state(self, job_id: str):
        state = self.keeper.get(job_id)
        if state is None:
            raise errors.JobNotFound(job_id)
        return state

    def halt(self, job_id: str, user: str, reason: str) -> str:
        self.owned(job_id, user)
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
        # Broad: a thread of its own, so whatever an engine raises would be lost unless
        # logged here; the monitor stops the learners of a HALTED job all the same.
        except Exception:  # broad: a thread of its own; logged here or lost
            log.exception("stopping job %s", job_id)

    def resume(self, job_id: str, user: str, reason: str) -> str:
        """Queue a HALTED job again; it continues from its last checkpoint."""
        record = self.owned(job_id, user)
        state = self._state(job_id)
        if state.status != Status.HALTED:
            raise errors.InvalidTransition(
                f"only a HALTED job can be resumed; job {job_id} is {state.status}"
            )
        self.keeper.transition(job_id, Status.QUEUED, reason or "resumed by the user")
        self._teardown(job_id)
        self._enqueue(record)
        return Status.QUEUED.value

    def requeue(
        self, job_id: str, reason: str, is_restart: bool, *, node_lost: bool = False
    ) -> str:
        """Stop a placed job's gang and queue it again; restarts count against max_restarts.

        A failure (`is_restart`: its containers killed or gone) or the loss of its node also
        requeues a STORING job: the results only its node had are gone, its checkpoints are
        not. A controller's choice (drain, rescale) moves only REQUEUEABLE jobs."""
        record = self.store.get(job_id)
        state = self._state(job_id)
        if state.status not in (RESTARTABLE if is_restart or node_lost else REQUEUEABLE):
            raise errors.InvalidTransition(
                f"job {job_id} is {state.status}: only a failure or a lost node requeues it"
                if state.status in RESTARTABLE
                else f"job {job_id} is {state.status}, not running"
            )
        manifest = stored_manifest(record)
        not_before = 0.0
        if is_restart:
            done = int(record.info.get("restarts", 0))
            if done >= manifest.max_restarts:
                self.keeper.transition(
                    job_id,
                    Status.FAILED,
                    f"{reason}; no restarts left (max_restarts={manifest.max_restarts})",
                    error_code=JobErrorCode.RESTARTS_EXHAUSTED,
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

    def scale(self, job_id: str, user: str, learners: int) -> str:
        """Set an elastic job's target learner count. A running gang of another size restarts
        from its checkpoint with it; one already at that size keeps running (the target is
        recorded, its learners become its own); a job whose target it is already is left as
        it is (the scheduler grows a shrunk job back to its target by itself)."""
        record = self.owned(job_id, user)
        manifest = stored_manifest(record)
        problem = scale_problem(manifest, learners, job_id)
        if problem:
            raise errors.InvalidRequest(problem)
        state = self._state(job_id)
        if state.final:
            raise errors.InvalidTransition(f"job {job_id} has already ended ({state.status})")
        target = int(record.info.get("learners_target") or manifest.learners)
        if learners == target:
            return state.status.value
        running = state.status in REQUEUEABLE
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
        self.owned(job_id, user)
        state = self.keeper.get(job_id)
        if state is not None and not state.final:
            self.keeper.transition(job_id, Status.HALTED, "deleted by the user")
        self._teardown(job_id, deleted=True)
        self.scheduler.release(job_id)
        self.keeper.delete(job_id)
        self.store.delete(job_id)

    def _enqueue(self, record: JobRecord) -> None:
        manifest = stored_manifest(record)
        accepted, reason = self.scheduler.enqueue(self._gang(record, manifest))
        if not accepted:
            self.keeper.try_transition(
                record.job_id, Status.FAILED, reason, error_code=JobErrorCode.CAPACITY_EXCEEDED
            )
        self._wake.set()

    def _held_allocation(self, job_id: str) -> list[dict]:
        """The allocation the scheduler still holds for the job (its running entry), or []."""
        return self.keeper.held_allocation(job_id)
