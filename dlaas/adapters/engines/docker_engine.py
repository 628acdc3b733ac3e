"""The Docker adapter of the LCM: make a job's containers match its DeploymentPlan.

Every step is idempotent and looks before it acts: the network, the volume and each
container are found by name first and created only if missing, so deploying twice, or
again after a crash between steps, leaves exactly one set. Learners start together: if
any container cannot be created, the ones created in this attempt are removed again and
nothing is started (all or none).

Containers run the job's code, treated as hostile: every one drops all capabilities (the
plan adds back only what it names: nothing today, so no NET_RAW), may not gain privileges
(no-new-privileges), is never privileged, mounts nothing of the host (the job volume is
its only mount, /tmp a size-bounded tmpfs), and has a process limit. The job's network is
a bridge named with the platform's prefix, which the host firewall (dlaas.local.firewall)
fences in.

It is also the Docker adapter of `dlaas.domain.ports.JobContainers`, the view of a node's job
containers that the job monitor and the API's log reader use: containers as plain
`Container`s (converted from Docker's list and inspect data by reports.docker_container), their
logs, an event stream, and the few calls that act on one. Those calls raise
EngineUnreachable when the engine does not answer (refused, broken, timed out).

Errors: an engine that refuses a container for the job's own reason (a 4xx; the OCI
runtime failing to create or start it) raises DeployRefused, with the engine's reason
with env values hidden: deploying again would be refused again. A name conflict is a
TemporaryError; a missing image ImageUnavailable; the engine not answering, or failing
on its own account (a 5xx), a TemporaryError too (`ENGINE_OUTAGES`): the LCM's calls raise
no Docker or requests error, so that no caller imports either to classify it.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import docker
import docker.errors
import requests.exceptions
from docker.types import DeviceRequest

from dlaas.adapters.docker_calls import ENGINE_UNREACHABLE, quiet, remove_container
from dlaas.adapters.engines.reports import docker_container, redact
from dlaas.adapters.engines.secret_files import secret_files_tar
from dlaas.domain import jobspec
from dlaas.domain.errors import DeployRefused, ImageUnavailable, TemporaryError, temporary_on
from dlaas.domain.plan import ContainerSpec, DeploymentPlan, cfs_limit
from dlaas.domain.ports import (
    EXITED_STATES,
    Container,
    ContainerEngine,
    EngineUnreachable,
    EventStream,
)

log = logging.getLogger(__name__)

BRIDGE_NAME_OPTION = "com.docker.network.bridge.name"
# A 500 from the engine that is the job's doing: the OCI runtime could not create or start
# the container (a NUL in an env value, a command missing from the image, ...).
_RUNTIME_REFUSED = re.compile(r"OCI runtime (create|start|exec) failed|runc (create|run|start)")
# ... unless the runtime failed for the node's reasons: then the job is deployed again.
_NODE_TROUBLE = re.compile(
    r"context canceled|deadline exceeded|connection refused|ttrpc: closed|no space left"
    r"|cannot allocate memory|resource temporarily unavailable|too many open files",
    re.IGNORECASE,
)

# What a call raises when the engine itself does not answer (as opposed to an API error
# about one object): the connection was refused, broke or timed out. (An event stream
# that breaks mid-read raises urllib3's own errors: the monitor reconnects on any error.)
NO_ANSWER = (
    requests.exceptions.ConnectionError,
    requests.exceptions.Timeout,
    requests.exceptions.ChunkedEncodingError,
    ConnectionError,
)

# What the LCM's calls (ContainerEngine) raise as TemporaryError: the engine not answering,
# or an API error not mapped to the job's own fault (docker's APIError is a requests error).
ENGINE_OUTAGES = (requests.exceptions.RequestException, OSError)
engine_outage = temporary_on(ENGINE_OUTAGES, "the container engine")


def refusal(exc: docker.errors.APIError) -> bool:
    """Whether the engine refused for the job's own reason (never for its own state)."""
    status = exc.status_code or 0
    explanation = str(exc.explanation or "")
    if 400 <= status < 500:
        # 404: something the deploy made vanished (a concurrent teardown); 409: a
        # concurrent deploy. Neither is the job's fault.
        return status not in (404, 409)
    return (
        status == 500
        and bool(_RUNTIME_REFUSED.search(explanation))
        and not _NODE_TROUBLE.search(explanation)
    )


class DockerEvents(EventStream):
    """The job ids of a Docker engine's container events (one HTTP stream)."""

    def __init__(self, stream, node: str):
        self._stream = stream
        self._node = node

    def __iter__(self) -> Iterator[str]:
        try:
            for event in self._stream:
                attrs = (event.get("Actor") or {}).get("Attributes") or {}
                job_id = attrs.get(jobspec.LABEL_JOB)
                if job_id:
                    yield job_id
        except NO_ANSWER as exc:
            raise EngineUnreachable(self._node, str(exc)) from None

    def close(self) -> None:
        # Closing a stream that already broke may raise anything its socket does; the
        # stream is being dropped either way.
        with contextlib.suppress(OSError, *NO_ANSWER):
            self._stream.close()


class Deployer(ContainerEngine):
    """The Docker adapter of ContainerEngine (dlaas/domain/ports.py) and of JobContainers
    (dlaas.domain.ports). `platform_id` scopes the label filters to this platform's objects (one
    engine may serve several platforms); `node` names the node in Containers and errors."""

    def __init__(self, client: docker.DockerClient, *, platform_id: str = "dlaas", node: str = ""):
        self.client = client
        self.platform_id = platform_id
        self.node = node
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="deploy")
        self._layer_limit_ok: bool | None = None  # found out at the first deploy

    def ping(self) -> bool:
        """Whether the engine answers now."""
        try:
            return bool(self.client.ping())
        except ENGINE_UNREACHABLE as exc:
            log.debug("engine ping failed: %s", exc)  # the LCM counts and reports lost nodes
            return False

    # ---- JobContainers (dlaas.domain.ports) --------------------------------------------------

    @property
    def _managed(self) -> str:
        return f"{jobspec.LABEL_MANAGED}={self.platform_id}"

    @contextlib.contextmanager
    def _answering(self) -> Iterator[None]:
        """Turn "the engine does not answer" into the port's EngineUnreachable."""
        try:
            yield
        except NO_ANSWER as exc:
            raise EngineUnreachable(self.node or "?", str(exc)) from None

    def job_containers(self, job_id: str) -> list[Container]:
        filters = {"label": [f"{jobspec.LABEL_JOB}={job_id}", self._managed]}
        with self._answering():
            # One list call; an inspect only for each exited container (its exit code, OOM
            # kill and finish time): the API's log reader and the monitor ask every second
            # or so while a job trains, and an inspect per learner cost the engine more
            # than all the rest of that look.
            found = []
            for listed in self.client.api.containers(all=True, filters=filters):
                state = None
                if listed.get("State") in EXITED_STATES:
                    try:
                        state = self.client.api.inspect_container(listed["Id"]).get("State")
                    except docker.errors.NotFound:  # removed meanwhile
                        continue
                found.append(docker_container(listed, state, self.node))
        return found

    def layer_bytes(self, job_id: str) -> dict[str, int] | None:
        # SizeRw: the engine adds up the container's upper directory (a walk of what the
        # container wrote, bounded by the disk limit it enforces). Running ones only.
        filters = {"label": [f"{jobspec.LABEL_JOB}={job_id}", self._managed]}
        with self._answering():
            found = self.client.api.containers(filters=filters, size=True)
        return {c["Id"]: int(c.get("SizeRw") or 0) for c in found}

    def jobs_with_resources(self) -> set[str]:
        managed = {"label": self._managed}
        with self._answering():
            objs: list = self.client.containers.list(all=True, filters=managed, sparse=True)
            objs += self.client.networks.list(filters=managed)
            objs += self.client.volumes.list(filters=managed)
        return {(o.attrs.get("Labels") or {}).get(jobspec.LABEL_JOB, "") for o in objs} - {""}

    def events(self, since: float | None = None) -> EventStream:
        filters = {"type": "container", "label": self._managed}
        with self._answering():
            return DockerEvents(
                self.client.events(decode=True, filters=filters, since=since), self.node or "?"
            )

    def logs(
        self, c: Container, *, tail: int | None = None, timestamps: bool = False
    ) -> bytes | None:
        with self._answering():
            raw = quiet(
                self.client.api.logs,
                c.id,
                stdout=True,
                stderr=True,
                tail=tail or "all",
                timestamps=timestamps,
            )
        if raw is None:
            # Docker answers 409 for a log asked of a container marked for removal: a race
            # with a cleanup, not a failure worth a traceback.
            log.info("container %s is gone or being removed; its log is not read", c.name)
        return raw

    def follow_logs(self, c: Container) -> Iterator[bytes]:
        with self._answering():
            chunks = quiet(
                self.client.api.logs, c.id, stdout=True, stderr=True, stream=True, follow=True
            )
            if chunks is None:
                log.info("container %s is gone or being removed; its log is not read", c.name)
                return
            try:
                yield from chunks
            except docker.errors.NotFound:
                return
            finally:
                with contextlib.suppress(OSError, *NO_ANSWER):
                    chunks.close()

    def restart(self, c: Container) -> None:
        with self._answering():
            # No stop grace: a broken gang's learners have nothing left to save.
            quiet(self.client.api.restart, c.id, timeout=0)

    def kill(self, c: Container, signal: str | None = None) -> None:
        with self._answering():
            quiet(self.client.api.kill, c.id, signal=signal)

    def stop(self, c: Container, timeout: int) -> None:
        with self._answering():
            quiet(self.client.api.stop, c.id, timeout=timeout)

    def remove_resources(self, job_id: str) -> None:
        label = {"label": [f"{jobspec.LABEL_JOB}={job_id}", self._managed]}
        with self._answering():
            self._remove(
                self.client.containers.list(all=True, filters=label, sparse=True),
                self.client.networks.list(filters=label),
                self.client.volumes.list(filters=label),
            )

    def _remove(self, containers: list, networks: list, volumes: list) -> None:
        """Remove containers, then the networks and volumes they used (missing is fine).
        Containers another caller removes at the same time are waited for first."""
        list(self._pool.map(lambda c: remove_container(self.client.api, c.id), containers))
        for n in networks:
            quiet(n.remove)
        for v in volumes:
            quiet(v.remove, force=True)

    # ---- the LCM's own (ContainerEngine) ----------------------------------------------

    @engine_outage
    def image_present(self, image: str) -> bool:
        try:
            self.client.images.get(image)
            return True
        except docker.errors.ImageNotFound:
            return False

    def _network(self, plan: DeploymentPlan):
        found = self.client.networks.list(names=[plan.network])
        exact = [n for n in found if n.name == plan.network]
        for net in exact:
            if (net.attrs.get("Options") or {}).get(BRIDGE_NAME_OPTION) == plan.bridge:
                return net
            # Made before job bridges were named (an upgrade): outside the firewall's reach.
            # Removed while no container holds it; else the deploy is tried again later.
            try:
                net.remove()
            except docker.errors.APIError as e:
                raise TemporaryError(f"network {plan.network} is unfenced and in use: "
                                     f"{e.explanation}") from None  # fmt: skip
        return self.client.networks.create(
            plan.network,
            driver="bridge",
            labels=plan.labels,
            check_duplicate=True,
            # The firewall matches a platform's job bridges by this name's prefix.
            options={BRIDGE_NAME_OPTION: plan.bridge},
        )

    def _volume(self, plan: DeploymentPlan) -> None:
        try:
            self.client.volumes.get(plan.volume)
        except docker.errors.NotFound:
            self.client.volumes.create(plan.volume, labels=plan.labels)

    def _existing(self, plan: DeploymentPlan) -> dict[str, object]:
        return {c.attrs["Names"][0].lstrip("/"): c for c in self.containers(plan.job_id)}

    def _layer_limit(self, image: str) -> bool:
        """Whether the engine bounds a container's writable layer (storage_opt size).

        overlay2 does only on xfs mounted with pquota, which `docker info` does not show:
        on xfs one container is created with a size to find out. Asked once per engine.
        """
        if self._layer_limit_ok is None:
            info = self.client.info()
            driver = info.get("Driver", "")
            backing = dict(info.get("DriverStatus") or []).get("Backing Filesystem", "")
            ok = driver in ("btrfs", "zfs", "devicemapper", "windowsfilter") or (
                driver == "overlay2" and backing == "xfs"
            )
            if ok:
                try:
                    probe = self.client.api.create_container(
                        image, command=["true"],
                        host_config=self.client.api.create_host_config(
                            storage_opt={"size": "64m"}
                        ),
                    )  # fmt: skip
                    self.client.api.remove_container(probe["Id"], force=True)
                except docker.errors.APIError as e:
                    log.info("writable layers stay unbounded on this engine: %s", e.explanation)
                    ok = False
            self._layer_limit_ok = ok
        return self._layer_limit_ok

    def _create(self, spec: ContainerSpec, plan: DeploymentPlan):
        api = self.client.api
        period, quota = cfs_limit(spec.nano_cpus) if spec.nano_cpus else (None, None)
        host_config = api.create_host_config(
            # The job volume is the only mount: nothing of the host (no bind of a host
            # path, no Docker socket).
            binds={plan.volume: {"bind": jobspec.JOB_MOUNT, "mode": "rw"}},
            network_mode=plan.network,
            init=True,
            cpu_period=period,
            cpu_quota=quota,
            cpu_shares=spec.cpu_shares or None,
            mem_limit=f"{spec.mem_limit_mb}m" if spec.mem_limit_mb else None,
            device_requests=self._gpus(spec),
            pids_limit=spec.pids_limit,
            privileged=False,
            cap_drop=["ALL"],
            cap_add=list(spec.cap_add) or None,
            # No setuid binary in the image lifts a process above what it started with.
            security_opt=["no-new-privileges"],
            # The container's own /tmp, a tmpfs nobody else shares.
            tmpfs={"/tmp": f"rw,nosuid,nodev,size={spec.tmp_mb}m"},  # noqa: S108
            storage_opt={"size": f"{spec.disk_mb}m"}
            if spec.disk_mb and self._layer_limit(spec.image)
            else None,
        )
        networking = api.create_networking_config(
            {plan.network: api.create_endpoint_config(aliases=list(spec.aliases))}
        )
        cid = api.create_container(
            image=spec.image,
            command=spec.command,
            name=spec.name,
            environment=spec.env,
            labels=spec.labels,
            host_config=host_config,
            networking_config=networking,
            hostname=spec.aliases[0] if spec.aliases else None,
        )["Id"]
        if spec.files:
            # Before the start, so the job never runs without them; a failure removes the
            # gang's containers like a failed create.
            api.put_archive(cid, "/", secret_files_tar(spec.files))
        return cid

    def _try_create(self, spec: ContainerSpec, plan: DeploymentPlan) -> str | Exception:
        """The new container's id, or what stopped its creation."""
        try:
            return self._create(spec, plan)
        # Broad, and not swallowed: carried back so that _deploy removes the gang's other
        # containers before it raises this, and deploy() maps what it can.
        except Exception as exc:  # noqa: BLE001 - broad: carried back to _deploy, which raises it
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

    @engine_outage
    def deploy(self, plan: DeploymentPlan) -> list[str]:
        """Create what is missing and start what is not running; return the container names.

        Raise DeployRefused when the engine refuses the job's containers for the job's own
        reason (see the module doc), ImageUnavailable, TemporaryError; an engine that does
        not answer raises what the client raised (requests' errors).
        """
        try:
            return self._deploy(plan)
        except docker.errors.ImageNotFound as exc:
            raise ImageUnavailable(f"image not found on the node: {exc.explanation}") from None
        except docker.errors.APIError as exc:
            if exc.status_code == 409:
                # A concurrent deploy created it first: converge next time.
                raise TemporaryError(f"name conflict: {exc.explanation}") from None
            if refusal(exc):
                reason = redact(str(exc.explanation or exc), plan)
                raise DeployRefused(f"the container engine refused the job: {reason}") from None
            raise

    def _deploy(self, plan: DeploymentPlan) -> list[str]:
        self._network(plan)
        self._volume(plan)
        self._layer_limit(plan.helper.image)  # found out once, before the parallel creates
        existing = self._existing(plan)
        missing = [spec for spec in plan.containers if spec.name not in existing]
        # The gang's containers are created together; on any failure none of them stays.
        outcomes = list(self._pool.map(lambda spec: self._try_create(spec, plan), missing))
        failures = [out for out in outcomes if isinstance(out, Exception)]
        if failures:
            self._remove_ids([out for out in outcomes if isinstance(out, str)])
            for other in failures[1:]:  # the first is raised; the others would be lost
                reason = redact(f"{type(other).__name__}: {other}", plan)
                log.info("%s: another container failed too: %s", plan.job_id, reason)
            raise failures[0]
        existing = self._existing(plan)
        to_start = [c for c in existing.values() if c.status == "created"]
        # Start the gang together; one slow start must not hold the others back.
        list(self._pool.map(lambda c: c.start(), to_start))
        return [spec.name for spec in plan.containers]

    def _remove_ids(self, ids: list[str]) -> None:
        for cid in ids:
            remove_container(self.client.api, cid)

    @engine_outage
    def containers(self, job_id: str, role: str | None = None) -> list:
        label = [f"{jobspec.LABEL_JOB}={job_id}"]
        if role:
            label.append(f"{jobspec.LABEL_ROLE}={role}")
        # Sparse: one call, no inspect per container; what callers use (status, the
        # container's id for stop/kill/wait/remove/start, its name in "Names") is in it.
        return self.client.containers.list(all=True, filters={"label": label}, sparse=True)

    @engine_outage
    def stop_learners(self, job_id: str, timeout: int = 10) -> None:
        running = [
            c for c in self.containers(job_id, jobspec.ROLE_LEARNER) if c.status == "running"
        ]
        list(self._pool.map(lambda c: quiet(c.stop, timeout=timeout), running))

    @engine_outage
    def signal_helper(self, job_id: str) -> None:
        for c in self.containers(job_id, jobspec.ROLE_HELPER):
            if c.status == "running":
                quiet(c.kill, signal=jobspec.HELPER_FINISH_SIGNAL)

    @engine_outage
    def wait_helper(self, job_id: str, timeout_s: float) -> bool:
        """Wait until the job's helper has exited (stored what it must); False on timeout."""
        for c in self.containers(job_id, jobspec.ROLE_HELPER):
            try:
                c.wait(timeout=timeout_s)
            except docker.errors.NotFound:
                pass
            except ENGINE_UNREACHABLE as exc:  # the engine's read timeout, or no engine
                log.warning("helper of %s: no exit seen within %.0f s (%s)", job_id, timeout_s, exc)
                return False
        return True

    @engine_outage
    def remove_job(self, job_id: str) -> None:
        """Remove every container, the network and the volume of a job (missing ones are fine)."""
        # The engine's name filters match parts of names: only the job's own go.
        network, volume = jobspec.network_name(job_id), jobspec.volume_name(job_id)
        self._remove(
            self.containers(job_id),
            [n for n in self.client.networks.list(names=[network]) if n.name == network],
            [v for v in self.client.volumes.list(filters={"name": volume}) if v.name == volume],
        )
