"""Deploying and tearing down a job's gang on the nodes of its placement.

Turns a placement into a DeploymentPlan (plan.py, pure) with the job's own S3 identity
and hands it to the container engine of each node (dlaas/adapters/engines); a deploy the engine
refuses for the job's own reason fails the job, one cut short by the platform's own
trouble leaves it PENDING for the reconciler to deploy again. Also the job's S3
identity: issued at deploy, revoked at teardown, swept by the leader when missed.
"""

from __future__ import annotations

import logging
import threading

from dlaas.adapters.s3 import ensure_bucket, platform_client
from dlaas.adapters.store.base import JobRecord
from dlaas.config import PlatformSettings
from dlaas.domain import errors, jobspec
from dlaas.domain.frameworks import resolve_image
from dlaas.domain.job_keys import ssh_private_key
from dlaas.domain.launch import LAUNCHER_MPI
from dlaas.domain.locations import S3Location, job_locations
from dlaas.domain.manifest import Manifest
from dlaas.domain.namespace import job_policy
from dlaas.domain.plan import deployment_plan
from dlaas.domain.ports import ContainerEngine
from dlaas.domain.status import Status
from dlaas.domain.steps import run_step
from dlaas.domain.stored import stored_manifest
from dlaas.domain.usage import ALLOCATIONS_INFO

log = logging.getLogger(__name__)

# How long a requeue waits for the helper to store checkpoints and logs before removing it.
HELPER_FINISH_TIMEOUT_S = 30.0
# How often the leader revokes the S3 identities of jobs whose containers are gone.
IDENTITY_SWEEP_S = 5.0


class Deployment:
    """Deploy and teardown of `Lcm`, with the jobs' S3 identities."""

    @property
    def deployer(self) -> ContainerEngine:
        """The first node's deployer (single-node platforms have only this one)."""
        return next(iter(self.deployers.values()))

    def _placement(self, job_id: str) -> list[dict]:
        return self.keeper.placement(job_id)

    def start_job(self, job_id: str, cause: str, allocations: list) -> None:
        placement = [
            {"learner": a.learner, "node": a.node, "gpu_indices": list(a.gpu_indices)}
            for a in allocations
        ]
        self._start_placed(job_id, cause, placement)

    def _start_placed(self, job_id: str, cause: str, placement: list[dict]) -> None:
        nodes = sorted({p["node"] for p in placement})
        self.keeper.set_placement(job_id, placement)
        placed = self.keeper.try_transition(
            job_id, Status.PENDING, f"placed on {', '.join(nodes)}: {cause}"
        )
        if placed is None:
            # Halted or deleted while queued: give the allocation back.
            self.scheduler.release(job_id)
            return
        self._record_allocation(job_id, placed.seq, len(placement))
        self.deploy(job_id, placement)

    def _record_allocation(self, job_id: str, seq: int, learners: int) -> None:
        """Record how many learners this placement holds, by its PENDING entry's seq: usage
        accounting (dlaas.domain.usage) charges each allocation interval with it. A store
        that does not answer leaves it unrecorded (the manifest's learners count instead)."""

        def record() -> None:
            held = self.store.get(job_id).info.get(ALLOCATIONS_INFO)
            held = held if isinstance(held, dict) else {}
            self.store.update_info(job_id, {ALLOCATIONS_INFO: {**held, str(seq): learners}})

        run_step(f"recording the allocation of {job_id}", record, log=log,
                 then="its usage counts the manifest's learners")  # fmt: skip

    def deploy(self, job_id: str, placement: list[dict]) -> None:
        """Deploy (or redeploy, idempotently) a PENDING job and move it to DOWNLOADING.

        While a teardown of the job's previous run is under way (a preempted job started
        again at once, smaller, by a reclaim), the deploy waits for it: that teardown removes
        the job's containers and revokes its S3 identity, the new run's too if it came
        first. The teardown's end deploys the job (`_teardown`)."""
        with self._teardowns_lock:
            if self._teardowns.get(job_id):
                self._deploy_after.add(job_id)
                log.info("deploy of %s waits for the teardown of its previous run", job_id)
                return
        node = placement[0]["node"] if placement else ""
        try:
            deployer = self.deployers[node]
            record = self.store.get(job_id)
            manifest = stored_manifest(record, self.box)
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
                nodes=[p["node"] for p in placement],
                learner_disk_mb=self.settings.learner_disk_mb,
                ssh_key=ssh_private_key(
                    self.settings.s3_secret_key.get_secret_value().encode(), job_id
                )
                if manifest.framework.launcher == LAUNCHER_MPI
                else b"",
            )
            names = deployer.deploy(plan)
        except errors.ImageUnavailable as exc:
            self._fail(job_id, exc.message, jobspec.JobErrorCode.IMAGE_MISSING)
            return
        except errors.DeployRefused as exc:
            # The engine refused the job's own containers (a 4xx, the OCI runtime failing
            # them): every redeploy would be refused again, holding the allocation forever.
            self._fail(job_id, exc.message, jobspec.JobErrorCode.DEPLOY_REFUSED)
            return
        except errors.TemporaryError as exc:
            # The platform's own trouble, not the job's (the engine stopped answering, the
            # store is locked, etcd or S3 is away: each adapter says so): the job stays
            # PENDING, deployed again by `redeploy_stale`, or requeued if its node is lost.
            cause = f" ({exc.__cause__!r})" if exc.__cause__ is not None else ""
            log.warning("deploy %s on %s: %s%s; will retry", job_id, node, exc.message, cause)
            return
        except Exception as exc:  # broad: a bug here would fail every redeploy too
            # Neither the job's known faults nor known infrastructure trouble: a bug here
            # would fail every redeploy too, so the job ends instead of holding its GPUs.
            log.exception("deploy %s failed", job_id)
            self._fail(
                job_id,
                f"deployment failed: {type(exc).__name__}",
                jobspec.JobErrorCode.DEPLOY_FAILED,
            )
            return
        self.store.update_info(
            job_id,
            {
                "learners": [
                    {"id": p["learner"], "node": p["node"], "container": n, "state": "created"}
                    for p, n in zip(placement, names[-len(placement) :], strict=True)
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

        def scoped(loc: S3Location) -> S3Location:
            return loc.with_keys(key, secret) if loc.platform else loc

        return (
            None if data is None else scoped(data),
            scoped(results),
            None if code is None else scoped(code),
        )

    def _ensure_bucket(self, bucket: str) -> None:
        if self._s3 is None:
            self._s3 = platform_client(self.settings)
        ensure_bucket(self._s3, bucket)

    def _revoke(self, job_id: str) -> None:
        """Revoke the job's S3 identity; a failure is left to the leader's sweep."""
        run_step(
            f"revoking the S3 identity of {job_id}",
            lambda: self.identities.revoke(job_id),
            log=log,
            then="the leader's sweep revokes it later",
        )

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

    def _deployers_of(self, job_id: str) -> list[ContainerEngine]:
        """The engines holding the job's containers (every healthy one if unknown)."""
        healthy = {n: d for n, d in self.deployers.items() if n not in self._unhealthy}
        nodes = {p["node"] for p in self._placement(job_id)}
        found = [healthy[n] for n in sorted(nodes) if n in healthy]
        if found or nodes & set(self.deployers):
            return list(dict.fromkeys(found))
        return list(dict.fromkeys(healthy.values()))

    def _teardown(self, job_id: str, deleted: bool = False) -> None:
        """Stop the gang, let the helper store checkpoints and logs, remove the run (the
        engine may keep what the job's next run reuses: its swarm network). A `deleted`
        job's helper is not waited for, and everything of the job goes."""
        self._hold_deploys(job_id)
        self._teardown_held(job_id, deleted)

    def _teardown_later(self, job_id: str) -> None:
        """`_teardown` on a thread of its own; deploys of the job wait for it from now on."""
        self._hold_deploys(job_id)
        threading.Thread(target=self._teardown_held, args=(job_id,), daemon=True).start()

    def _hold_deploys(self, job_id: str) -> None:
        with self._teardowns_lock:
            self._teardowns[job_id] = self._teardowns.get(job_id, 0) + 1

    def _teardown_held(self, job_id: str, deleted: bool = False) -> None:
        try:
            for d in self._deployers_of(job_id):
                if deleted:
                    d.remove_job(job_id)
                    continue
                if d.containers(job_id):
                    d.stop_learners(job_id)
                    d.signal_helper(job_id)
                    d.wait_helper(job_id, HELPER_FINISH_TIMEOUT_S)
                d.remove_run(job_id)
            self._revoke(job_id)
        finally:
            with self._teardowns_lock:
                left = self._teardowns.pop(job_id, 1) - 1
                if left:
                    self._teardowns[job_id] = left
                waiting = not left and job_id in self._deploy_after
                if waiting:
                    self._deploy_after.discard(job_id)
            if waiting:
                self._deploy_waiting(job_id)

    def _deploy_waiting(self, job_id: str) -> None:
        """Deploy a job placed while its previous run was torn down, if it is still PENDING
        (else it moved on meanwhile: halted, deleted, requeued)."""
        state = self.keeper.get(job_id)
        if state is not None and state.status == Status.PENDING:
            self.deploy(job_id, self._placement(job_id))
