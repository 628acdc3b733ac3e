"""The Docker adapter of the LCM: make a job's containers match its DeploymentPlan.

Every step is idempotent and looks before it acts: the network, the volume and each
container are found by name first and created only if missing, so deploying twice, or
again after a crash between steps, leaves exactly one set. Learners start together: if
any container cannot be created, the ones created in this attempt are removed again and
nothing is started (all or none).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import docker
import docker.errors
from docker.types import DeviceRequest

from dlaas import jobspec
from dlaas.docker_calls import quiet
from dlaas.errors import ImageUnavailable, TemporaryError
from services.lcm.plan import ContainerSpec, DeploymentPlan

log = logging.getLogger(__name__)


class Deployer:
    def __init__(self, client: docker.DockerClient):
        self.client = client
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="deploy")

    def ping(self) -> bool:
        """Whether the engine answers now."""
        try:
            return bool(self.client.ping())
        except Exception:  # noqa: BLE001 - any failure to answer means not healthy
            return False

    def managed_jobs(self, platform_id: str) -> set[str]:
        """Ids of the jobs that have containers of this platform on this engine."""
        found = self.client.containers.list(
            all=True, filters={"label": f"{jobspec.LABEL_MANAGED}={platform_id}"}, sparse=True
        )
        return {(c.attrs.get("Labels") or {}).get(jobspec.LABEL_JOB, "") for c in found} - {""}

    def image_present(self, image: str) -> bool:
        try:
            self.client.images.get(image)
            return True
        except docker.errors.ImageNotFound:
            return False

    def _network(self, plan: DeploymentPlan):
        found = self.client.networks.list(names=[plan.network])
        exact = [n for n in found if n.name == plan.network]
        if exact:
            return exact[0]
        return self.client.networks.create(
            plan.network, driver="bridge", labels=plan.labels, check_duplicate=True
        )

    def _volume(self, plan: DeploymentPlan) -> None:
        try:
            self.client.volumes.get(plan.volume)
        except docker.errors.NotFound:
            self.client.volumes.create(plan.volume, labels=plan.labels)

    def _existing(self, plan: DeploymentPlan) -> dict[str, object]:
        return {c.attrs["Names"][0].lstrip("/"): c for c in self.containers(plan.job_id)}

    def _create(self, spec: ContainerSpec, plan: DeploymentPlan):
        api = self.client.api
        host_config = api.create_host_config(
            binds={plan.volume: {"bind": jobspec.JOB_MOUNT, "mode": "rw"}},
            network_mode=plan.network,
            init=True,
            nano_cpus=spec.nano_cpus or None,
            cpu_shares=spec.cpu_shares or None,
            mem_limit=f"{spec.mem_limit_mb}m" if spec.mem_limit_mb else None,
            device_requests=self._gpus(spec),
        )
        networking = api.create_networking_config(
            {plan.network: api.create_endpoint_config(aliases=list(spec.aliases))}
        )
        return api.create_container(
            image=spec.image,
            command=spec.command,
            name=spec.name,
            environment=spec.env,
            labels=spec.labels,
            host_config=host_config,
            networking_config=networking,
            hostname=spec.aliases[0] if spec.aliases else None,
        )["Id"]

    def _try_create(self, spec: ContainerSpec, plan: DeploymentPlan) -> str | Exception:
        """The new container's id, or what stopped its creation."""
        try:
            return self._create(spec, plan)
        except Exception as exc:  # noqa: BLE001 - deploy() sorts the failures out
            return exc

    @staticmethod
    def _gpus(spec: ContainerSpec) -> list[DeviceRequest] | None:
        if not spec.gpus:
            return None
        if spec.gpu_indices:
            return [
                DeviceRequest(device_ids=[str(i) for i in spec.gpu_indices], capabilities=[["gpu"]])
            ]
        return [DeviceRequest(count=spec.gpus, capabilities=[["gpu"]])]

    def deploy(self, plan: DeploymentPlan) -> list[str]:
        """Create what is missing and start what is not running; return the container names."""
        self._network(plan)
        self._volume(plan)
        existing = self._existing(plan)
        missing = [spec for spec in plan.containers if spec.name not in existing]
        # The gang's containers are created together; on any failure none of them stays.
        outcomes = list(self._pool.map(lambda spec: self._try_create(spec, plan), missing))
        failures = [out for out in outcomes if isinstance(out, Exception)]
        if failures:
            self._remove_ids([out for out in outcomes if isinstance(out, str)])
            exc = failures[0]
            if isinstance(exc, docker.errors.ImageNotFound):
                raise ImageUnavailable(f"image not found on the node: {exc.explanation}") from None
            if isinstance(exc, docker.errors.APIError) and exc.status_code == 409:
                # A concurrent deploy created it first: converge next time.
                raise TemporaryError(f"container name conflict: {exc.explanation}") from None
            raise exc
        existing = self._existing(plan)
        to_start = [c for c in existing.values() if c.status == "created"]
        # Start the gang together; one slow start must not hold the others back.
        list(self._pool.map(lambda c: c.start(), to_start))
        return [spec.name for spec in plan.containers]

    def _remove_ids(self, ids: list[str]) -> None:
        for cid in ids:
            try:
                self.client.api.remove_container(cid, force=True)
            except docker.errors.NotFound:
                pass

    def containers(self, job_id: str, role: str | None = None) -> list:
        label = [f"{jobspec.LABEL_JOB}={job_id}"]
        if role:
            label.append(f"{jobspec.LABEL_ROLE}={role}")
        # Sparse: one call, no inspect per container; what callers use (status, the
        # container's id for stop/kill/wait/remove/start, its name in "Names") is in it.
        return self.client.containers.list(all=True, filters={"label": label}, sparse=True)

    def stop_learners(self, job_id: str, timeout: int = 10) -> None:
        running = [
            c for c in self.containers(job_id, jobspec.ROLE_LEARNER) if c.status == "running"
        ]
        list(self._pool.map(lambda c: quiet(c.stop, timeout=timeout), running))

    def signal_helper(self, job_id: str) -> None:
        for c in self.containers(job_id, jobspec.ROLE_HELPER):
            if c.status == "running":
                quiet(c.kill, signal=jobspec.HELPER_FINISH_SIGNAL)

    def wait_helper(self, job_id: str, timeout_s: float) -> bool:
        """Wait until the job's helper has exited (stored what it must); False on timeout."""
        for c in self.containers(job_id, jobspec.ROLE_HELPER):
            try:
                c.wait(timeout=timeout_s)
            except docker.errors.NotFound:
                pass
            except Exception:  # noqa: BLE001 - the engine's read timeout: give up waiting
                log.warning("helper of %s did not exit within %.0f s", job_id, timeout_s)
                return False
        return True

    def remove_job(self, job_id: str) -> None:
        """Remove every container, the network and the volume of a job (missing ones are fine)."""
        list(self._pool.map(lambda c: quiet(c.remove, force=True), self.containers(job_id)))
        for n in self.client.networks.list(names=[jobspec.network_name(job_id)]):
            quiet(n.remove)
        try:
            quiet(self.client.volumes.get(jobspec.volume_name(job_id)).remove, force=True)
        except docker.errors.NotFound:
            pass
