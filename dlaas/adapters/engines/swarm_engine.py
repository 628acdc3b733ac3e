"""The Docker Swarm adapter: a job's containers as Swarm services, through the manager only.

The platform reaches the cluster only through the swarm manager's API, as it would reach
Kubernetes through its API server: never through a worker's own Docker socket. Each
container of a DeploymentPlan becomes a one-replica service pinned to its node
(`node.id==`), with restart condition `none` (restarts are the monitor's and the LCM's
call, not the swarm's), on a per-job attachable overlay network where the learners find
each other by alias (`learner-0` is MASTER_ADDR) through DNS round robin (no virtual IP
in between). The job volume is a local volume of the same name on each node the gang
uses, shared by that node's learners and its helper (plan.py puts a helper on each).

Credentials are engine secrets: the env entries of a helper that hold keys or secrets
leave its env and go into one Swarm secret per job, mounted as a file
(`/run/secrets/dlaas-env`, mode 0400) that the helper reads (jobspec.ENV_SECRET_FILE). They
never appear in the service spec the manager stores and shows.

Acting on a running container goes through its service: a helper is told to store and
finish by scaling its service to 0 (its StopSignal is the finish signal and its grace
period the helper's timeout); learners stop the same way with SIGTERM; a helper is started
again by a forced update (a new task on the same node and volume). The state of a
container is the state of its service's latest task, mapped onto Docker's vocabulary.

`SwarmEngine` is the cluster; `SwarmEngine.node(name)` is one node's view, the
ContainerEngine the LCM and the monitor hold per node. A node view deploys a whole gang
(its plan names every container's node), and reports its own node's containers, or
EngineUnreachable while the swarm sees that node down.

Known limits (README, cluster section): a job's local volumes stay on the worker nodes
(the manager's API cannot remove them; the helper empties its volume when it stores);
`no-new-privileges` is not part of a service spec in API 1.41; an encrypted overlay
passes no traffic on these machines (no IPsec) and is not used.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Iterator, Sequence

import docker
import docker.errors
import requests.exceptions

from dlaas.adapters.engines.docker_engine import (
    MAX_REASON_CHARS,
    SECRET_ENV_NAME,
    engine_outage,
    epoch,
    redact,
)
from dlaas.adapters.nodes import LABEL_NODE, SwarmNode, node_of
from dlaas.domain import jobspec
from dlaas.domain.errors import DeployRefused, ImageUnavailable, TemporaryError
from dlaas.domain.plan import ContainerSpec, DeploymentPlan
from dlaas.domain.ports import Container, ContainerEngine, EngineUnreachable, EventStream

log = logging.getLogger(__name__)

SECRET_FILE = "dlaas-env"
SECRET_PATH = f"/run/secrets/{SECRET_FILE}"
LEARNER_STOP_GRACE_S = 10
STOPPED_EXIT_CODE = 143  # 128 + SIGTERM: what a stopped learner reports
EXIT_ENGINE_LOST = 255  # as Docker reports a container that died with its engine
# How often the monitor's event streams poll the manager's tasks (one listing per period for
# every node's stream together: SwarmEngine.shared_fingerprint).
POLL_S = 0.25
HELPER_STOP_GRACE_S = 30  # as long as the LCM waits for a helper to store
# How long a teardown lets the learners of a broken gang end by themselves before it stops
# them (see SwarmNodeView.stop_learners).
LEARNERS_SELF_END_S = 1.0
# How long a teardown lets the helpers finish by themselves before it signals them (see
# SwarmNodeView.signal_helper): a helper notices its learners' end within 0.5 s and stores
# in a second or two; a signal costs the engine's 2 s delay on top.
HELPER_SELF_FINISH_S = 5.0
# How often a teardown asks the manager whether the job's learners or helpers have ended
# (two calls about one job's services): a gang's restart waits for both, twice.
STOPPED_POLL_S = 0.1
_UNREACHABLE = (requests.exceptions.ConnectionError, requests.exceptions.Timeout, ConnectionError)
# A task's state (swarm) as a container state (Docker's words, dlaas.domain.ports).
_STATES = {
    **dict.fromkeys(
        ("new", "allocated", "pending", "assigned", "accepted", "preparing", "ready", "starting"),
        "created",
    ),
    "running": "running",
    "complete": "exited",
    "failed": "exited",
    "shutdown": "exited",
    "rejected": "dead",
    # The swarm lost track of the task's node (a manager restart, a node away): its container
    # may still run there. Nothing about it is known, and nothing may be judged.
    "orphaned": "unknown",
    "remove": "removing",
}


def _lost_exit_code(status: dict) -> int:
    """The exit code of a task that ended without one of its container's: 0 if it completed,
    125 if the engine refused what the job asked for (its image, its spec), else 255: the
    task went with its node's engine (a restart of it, the node lost), which the monitor
    reads as the node's failure, not the job's, as it does a Docker engine's 255."""
    if status.get("State") == "complete":
        return 0
    err = str(status.get("Err", "")).lower()
    if any(word in err for word in ("no such image", "invalid", "not found", "refused")):
        return 125
    return EXIT_ENGINE_LOST


# Docker's exit code for a container whose start failed with no code of the program's own
# (126 and 127 are a command its image cannot run: the job's).
EXIT_START_FAILED = 128


def _start_failed(status: dict, code: int | None) -> bool:
    """Whether the task's container never ran: the engine failed to start it (a network it
    could not join, the engine going away meanwhile), not the job's program exiting 128."""
    return code == EXIT_START_FAILED and "starting container failed" in str(status.get("Err", ""))


def container_of(service: dict, task: dict | None, node: str) -> Container:
    """A service's latest task as a container (no task yet: created)."""
    labels = (service.get("Spec") or {}).get("Labels") or {}
    learner = labels.get(jobspec.LABEL_LEARNER)
    status = (task or {}).get("Status") or {}
    state = _STATES.get(status.get("State", "new"), "created")
    replicas = ((service.get("Spec") or {}).get("Mode") or {}).get("Replicated") or {}
    if replicas.get("Replicas", 1) == 0 and state in ("created", "removing"):
        # Scaled to 0 (stopped by the platform) and its task shut down: swarm deletes the
        # task, and its exit code with it. A stopped container's code stands in.
        state = "exited"
        status = {"State": "shutdown", "ContainerStatus": {"ExitCode": STOPPED_EXIT_CODE},
                  "Timestamp": status.get("Timestamp") or service.get("UpdatedAt", "")}  # fmt: skip
    exited = state in ("exited", "dead")
    code = (status.get("ContainerStatus") or {}).get("ExitCode")
    if exited and (code is None or status.get("State") == "rejected"):
        code = _lost_exit_code(status)
    elif exited and _start_failed(status, code):
        # Its node's engine's failure (the manager's dockerd killed while it started the
        # task, in the chaos run): restarted, as a container that died with its engine.
        code = EXIT_ENGINE_LOST
    return Container(
        # No task yet: the service stands in (an id that is never a task's).
        id=(task or {}).get("ID") or f"service:{service.get('ID', '')}",
        name=(service.get("Spec") or {}).get("Name", ""),
        job_id=labels.get(jobspec.LABEL_JOB, ""),
        role=labels.get(jobspec.LABEL_ROLE, jobspec.ROLE_LEARNER),
        learner=int(learner) if learner not in (None, "") else None,
        state=state,
        node=node,
        exit_code=code if exited else None,
        # Docker reports 137 for a kill by the OOM killer as for any SIGKILL; a task says no more.
        oom_killed="OOM" in str(status.get("Err", "")).upper(),
        finished_at=epoch(status.get("Timestamp", "")) if exited else None,
    )


def secret_env(spec: ContainerSpec) -> tuple[dict[str, str], dict[str, str]]:
    """(plain env, secret env) of a helper: what holds keys or secrets goes to a file."""
    if spec.role != jobspec.ROLE_HELPER:
        return dict(spec.env), {}
    secret = {k: v for k, v in spec.env.items() if v and SECRET_ENV_NAME.search(k)}
    plain = {k: v for k, v in spec.env.items() if k not in secret}
    if secret:
        plain[jobspec.ENV_SECRET_FILE] = SECRET_PATH
    # A service's container cannot be signalled: the helper finishes once its learners
    # (stopped by scaling their services to 0) have exited.
    plain[jobspec.ENV_HELPER_FINISH_ON_EXIT] = "1"
    return plain, secret


def service_spec(
    spec: ContainerSpec, plan: DeploymentPlan, node_id: str, secret: dict | None
) -> dict:
    """The Swarm service of one container (the API's ServiceSpec as a dict). Pure."""
    env, _ = secret_env(spec)
    helper = spec.role == jobspec.ROLE_HELPER
    container = {
        "Image": spec.image,
        "Args": list(spec.command),
        "Env": [f"{k}={v}" for k, v in env.items()],
        "Labels": dict(spec.labels),
        "Hostname": spec.aliases[0] if spec.aliases else "",
        "Init": True,
        "CapabilityDrop": ["ALL"],
        "CapabilityAdd": list(spec.cap_add) or None,
        "Mounts": [
            {
                "Type": "volume",
                "Source": plan.volume,
                "Target": jobspec.JOB_MOUNT,
                "VolumeOptions": {"Labels": dict(plan.labels)},
            },
            {
                "Type": "tmpfs",
                "Target": "/tmp",
                "TmpfsOptions": {"SizeBytes": spec.tmp_mb * 2**20, "Mode": 0o1777},
            },
        ],
        "StopSignal": jobspec.HELPER_FINISH_SIGNAL if helper else "SIGTERM",
        "StopGracePeriod": int((HELPER_STOP_GRACE_S if helper else LEARNER_STOP_GRACE_S) * 1e9),
    }
    if secret is not None and helper:
        container["Secrets"] = [
            {
                "SecretID": secret["ID"],
                "SecretName": secret["Spec"]["Name"],
                "File": {"Name": SECRET_FILE, "UID": "0", "GID": "0", "Mode": 0o400},
            }
        ]
    limits: dict = {"Pids": spec.pids_limit}
    if spec.nano_cpus:
        limits["NanoCPUs"] = spec.nano_cpus
    if spec.mem_limit_mb:
        limits["MemoryBytes"] = spec.mem_limit_mb * 2**20
    resources: dict = {"Limits": limits}
    if spec.gpus:
        # Nodes advertise their GPUs as generic resources (dockerd --node-generic-resource).
        resources["Reservations"] = {
            "GenericResources": [{"DiscreteResourceSpec": {"Kind": "gpu", "Value": spec.gpus}}]
        }
    labels = {**spec.labels, LABEL_NODE: spec.node}
    return {
        "Name": spec.name,
        "Labels": labels,
        "TaskTemplate": {
            "ContainerSpec": container,
            "Resources": resources,
            "RestartPolicy": {"Condition": "none", "MaxAttempts": 0},
            "Placement": {"Constraints": [f"node.id=={node_id}"]},
            "Networks": [{"Target": plan.network, "Aliases": list(spec.aliases)}],
        },
        "Mode": {"Replicated": {"Replicas": 1}},
        "EndpointSpec": {"Mode": "dnsrr"},
    }


class SwarmEngine:
    """The swarm, through its manager's API."""

    def __init__(self, client: docker.DockerClient, platform_id: str, poll_s: float = POLL_S):
        self.client = client
        self.api = client.api
        self.platform_id = platform_id
        self.poll_s = poll_s
        self._nodes: dict[str, SwarmNode] = {}
        self._nodes_at = 0.0
        self._lock = threading.Lock()
        self._fingerprint: dict[str, tuple] = {}
        self._fingerprint_at = float("-inf")
        self._fingerprint_lock = threading.Lock()

    # ---- nodes ----------------------------------------------------------------------

    def nodes(self, max_age_s: float = 0.5) -> dict[str, SwarmNode]:
        """Every node of the swarm by name (cached for `max_age_s`). Raise _UNREACHABLE."""
        with self._lock:
            if time.monotonic() - self._nodes_at > max_age_s:
                found = [node_of(n) for n in self.api.nodes()]
                self._nodes = {n.name: n for n in found}
                self._nodes_at = time.monotonic()
            return dict(self._nodes)

    def set_availability(self, name: str, availability: str) -> None:
        """Set a node's availability (active, pause, drain) in its spec, through the manager."""
        node = self.nodes(max_age_s=0).get(name)
        if node is None:
            raise TemporaryError(f"node {name} is not in the swarm")
        for _ in range(3):  # the spec update is guarded by the node object's version
            attrs = self.api.inspect_node(node.id)
            spec = dict(attrs.get("Spec") or {})
            if spec.get("Availability") == availability:
                break
            spec["Availability"] = availability
            try:
                self.api.update_node(node.id, attrs["Version"]["Index"], spec)
                break
            except docker.errors.APIError as exc:
                if exc.status_code != 500 or "out of sequence" not in str(exc):
                    raise TemporaryError(f"node {name}: the swarm refused {availability}: "
                                         f"{str(exc.explanation or exc)[:MAX_REASON_CHARS]}") from None  # fmt: skip
        with self._lock:
            self._nodes_at = 0.0  # the next read sees the new availability

    def node(self, name: str) -> SwarmNodeView:
        return SwarmNodeView(self, name)

    def views(self) -> dict[str, SwarmNodeView]:
        return {name: self.node(name) for name in sorted(self.nodes())}

    def _node_names(self) -> dict[str, str]:
        return {n.id: n.name for n in self.nodes().values()}

    # ---- services and tasks ---------------------------------------------------------

    def _label(self, *extra: str) -> dict:
        return {"label": [f"{jobspec.LABEL_MANAGED}={self.platform_id}", *extra]}

    def services(self, job_id: str | None = None, node: str | None = None) -> list[dict]:
        extra = []
        if job_id:
            extra.append(f"{jobspec.LABEL_JOB}={job_id}")
        if node:
            extra.append(f"{LABEL_NODE}={node}")
        return self.api.services(filters=self._label(*extra))

    def latest_tasks(self, services: Sequence[dict]) -> dict[str, dict]:
        """Service id -> its newest task."""
        if not services:
            return {}
        tasks = self.api.tasks(filters={"service": [s["ID"] for s in services]})
        latest: dict[str, dict] = {}
        for t in tasks:
            sid = t.get("ServiceID", "")
            if sid not in latest or t.get("CreatedAt", "") > latest[sid].get("CreatedAt", ""):
                latest[sid] = t
        return latest

    def job_containers(self, job_id: str, node: str | None = None) -> list[Container]:
        services = self.services(job_id, node)
        tasks = self.latest_tasks(services)
        return [
            container_of(s, tasks.get(s["ID"]), (s["Spec"].get("Labels") or {}).get(LABEL_NODE, ""))
            for s in services
        ]

    # ---- deploy ---------------------------------------------------------------------

    def _network(self, plan: DeploymentPlan) -> None:
        found = [n for n in self.api.networks(names=[plan.network]) if n["Name"] == plan.network]
        if found:
            return
        self.api.create_network(
            plan.network, driver="overlay", attachable=True, labels=plan.labels,
            check_duplicate=True, scope="swarm",
        )  # fmt: skip

    def _secret(self, plan: DeploymentPlan) -> dict | None:
        """The job's secret env as one Swarm secret; named by a hash of its content, since a
        secret cannot change (a redeploy with a new key gets a new secret)."""
        entries: dict[str, str] = {}
        for spec in plan.helpers:
            entries.update(secret_env(spec)[1])
        if not entries:
            return None
        data = "".join(f"{k}={v}\n" for k, v in sorted(entries.items()))
        digest = hashlib.sha256(data.encode()).hexdigest()[:12]
        name = f"{plan.network}-env-{digest}"
        for s in self.api.secrets(filters={"name": name}):
            if s["Spec"]["Name"] == name:
                return s
        created = self.api.create_secret(name, data.encode(), labels=plan.labels)
        return self.api.inspect_secret(created["ID"])

    def deploy(self, plan: DeploymentPlan) -> list[str]:
        ids = {n.name: n.id for n in self.nodes(max_age_s=0).values()}
        unknown = sorted({c.node for c in plan.containers} - set(ids))
        if unknown:
            raise TemporaryError(f"node(s) {', '.join(unknown)} are not in the swarm")
        try:
            self._network(plan)
            secret = self._secret(plan)
            existing = {s["Spec"]["Name"] for s in self.services(plan.job_id)}
            created: list[str] = []
            try:
                # Learners first: they wait for their helper's data mark anyway, and their
                # tasks then need not queue behind the helpers' (secret, volume) on a node.
                for spec in [*plan.learners, *plan.helpers]:
                    if spec.name in existing:
                        continue
                    body = service_spec(spec, plan, ids[spec.node], secret)
                    created.append(self._create(body)["ID"])
            except BaseException:  # broad: all or none, Ctrl-C too; re-raised
                # All or none: the gang's services made in this attempt go again.
                for sid in created:
                    self._quiet(self.api.remove_service, sid)
                raise
        except docker.errors.ImageNotFound as exc:
            raise ImageUnavailable(f"image not found: {exc.explanation}") from None
        except docker.errors.APIError as exc:
            if exc.status_code == 409:
                raise TemporaryError(f"name conflict: {exc.explanation}") from None
            if exc.status_code and 400 <= exc.status_code < 500 and exc.status_code != 404:
                reason = redact(str(exc.explanation or exc), plan)
                raise DeployRefused(f"the swarm refused the job: {reason}") from None
            raise
        return [spec.name for spec in plan.containers]

    def _create(self, body: dict) -> dict:
        """POST /services/create with the spec as it is (docker-py's helpers know no Pids
        limit nor capabilities)."""
        url = self.api._url("/services/create")
        return self.api._result(self.api._post_json(url, data=body), True)

    # ---- acting on services ---------------------------------------------------------

    @staticmethod
    def _quiet(call, *args, **kwargs):
        try:
            return call(*args, **kwargs)
        except docker.errors.NotFound:
            return None

    def _service(self, name: str):
        try:
            return self.client.services.get(name)
        except docker.errors.NotFound:
            return None

    def scale(self, name: str, replicas: int) -> None:
        svc = self._service(name)
        if svc is not None:
            mode = (svc.attrs.get("Spec") or {}).get("Mode") or {}
            if (mode.get("Replicated") or {}).get("Replicas") != replicas:
                self._quiet(svc.scale, replicas)

    def restart(self, name: str) -> None:
        svc = self._service(name)
        if svc is not None:
            self.scale(name, 1)
            self._quiet(svc.force_update)

    def remove_service(self, name: str) -> None:
        self._quiet(self.api.remove_service, name)

    def wait_stopped(self, job_id: str, role: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            running = [
                c for c in self.job_containers(job_id) if c.role == role and not c.exited
                and c.state != "removing"
            ]  # fmt: skip
            if not running:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(STOPPED_POLL_S)

    def remove_job(self, job_id: str) -> None:
        t0 = time.monotonic()
        for s in self.services(job_id):
            self._quiet(self.api.remove_service, s["ID"])
        label = {"label": [f"{jobspec.LABEL_JOB}={job_id}",
                           f"{jobspec.LABEL_MANAGED}={self.platform_id}"]}  # fmt: skip
        for sec in self.api.secrets(filters=label):
            try:
                self.api.remove_secret(sec["ID"])
            except docker.errors.APIError as exc:  # still in use by a task being removed
                log.info("secret of %s stays until its tasks are gone: %s", job_id, exc)
        for net in self.api.networks(filters=label):
            try:
                self.api.remove_network(net["Id"])
            except docker.errors.APIError as exc:  # tasks still detaching: the next resync
                log.info("network of %s stays until its tasks are gone: %s", job_id, exc)
        log.info("%s: services removed after %.2f s", job_id, time.monotonic() - t0)

    def remove_job_on(self, job_id: str, node: str) -> None:
        """Remove the job's services on one node only; its network and secret stay (its run
        on other nodes uses them; `remove_job` takes them with the job)."""
        for s in self.services(job_id, node):
            self._quiet(self.api.remove_service, s["ID"])

    def jobs(self, node: str | None = None) -> set[str]:
        found = {
            (s["Spec"].get("Labels") or {}).get(jobspec.LABEL_JOB, "")
            for s in self.services(node=node)
        }
        if node is None:
            label = self._label()
            found |= {(n.get("Labels") or {}).get(jobspec.LABEL_JOB, "")
                      for n in self.api.networks(filters=label)}  # fmt: skip
        return found - {""}

    # ---- logs and events ------------------------------------------------------------

    def task_logs(self, task_id: str, *, follow: bool = False, tail: int | None = None):
        params = {"stdout": 1, "stderr": 1, "follow": int(follow),
                  "tail": "all" if tail is None else str(tail)}  # fmt: skip
        url = self.api._url("/tasks/{0}/logs", task_id)
        res = self.api._get(url, params=params, stream=follow)
        return self.api._get_result_tty(follow, res, False)

    def shared_fingerprint(self) -> dict[str, tuple]:
        """`fingerprint()`, read at most once per half poll period whatever the number of
        node views polling it (each node's event stream does): the manager is asked for
        every service and task once, not once per node."""
        with self._fingerprint_lock:
            if time.monotonic() - self._fingerprint_at >= self.poll_s / 2:
                self._fingerprint = self.fingerprint()
                self._fingerprint_at = time.monotonic()
            return self._fingerprint

    def fingerprint(self) -> dict[str, tuple]:
        """Job id -> the states of its services' latest tasks (what a change looks like)."""
        services = self.services()
        tasks = self.latest_tasks(services)
        out: dict[str, list] = {}
        for s in services:
            job = (s["Spec"].get("Labels") or {}).get(jobspec.LABEL_JOB, "")
            t = tasks.get(s["ID"]) or {}
            out.setdefault(job, []).append(
                (s["Spec"]["Name"], t.get("ID"), (t.get("Status") or {}).get("State"))
            )
        return {job: tuple(sorted(v)) for job, v in out.items()}


class _PollStream(EventStream):
    """Swarm reports no task changes as events: the manager's tasks are polled instead,
    every POLL_S (how late the monitor learns of a container's end, on average half of it)."""

    def __init__(self, engine: SwarmEngine, node: str):
        self.engine = engine
        self.node = node
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[str]:
        before: dict[str, tuple] = {}
        first = True
        while not self._closed.is_set():
            try:
                now = self.engine.shared_fingerprint()
                node = self.engine.nodes().get(self.node)
            except _UNREACHABLE as exc:
                raise EngineUnreachable(self.node, str(exc)) from None
            if node is None or not node.ready:
                raise EngineUnreachable(self.node, "the swarm sees the node down")
            if not first:
                for job in sorted(set(now) | set(before)):
                    if now.get(job) != before.get(job):
                        yield job
            before, first = now, False
            self._closed.wait(self.engine.poll_s)

    def close(self) -> None:
        self._closed.set()


class SwarmNodeView(ContainerEngine):
    """One node of the swarm, as the LCM and the monitor hold a node's engine."""

    answers_for_down_node = True  # everything goes through the manager

    def __init__(self, engine: SwarmEngine, name: str):
        self.engine = engine
        self.name = name

    def _check(self) -> None:
        try:
            node = self.engine.nodes().get(self.name)
        # A manager that answers with an error (no leader yet after its restart) cannot say
        # what runs on the node either.
        except (*_UNREACHABLE, docker.errors.APIError) as exc:
            raise EngineUnreachable(self.name, str(exc)) from None
        if node is None or not node.ready:
            raise EngineUnreachable(self.name, "the swarm sees the node down")

    # ---- ContainerEngine (the LCM) --------------------------------------------------

    def ping(self) -> bool:
        return self.probe() == "up"

    def probe(self) -> str:
        """The swarm's view of the node: up (ready), down (down, disconnected, gone from the
        swarm), or unknown when the swarm cannot say: its manager does not answer (or answers
        with an error of its own: no leader yet after a restart), or it lists the node
        "unknown" (a restarted manager has not heard from it yet; swarmkit marks it down if
        no heartbeat comes within its grace period). The platform sees the cluster only
        through the manager: a manager away is not every node lost, and the tasks on the
        workers run on meanwhile."""
        try:
            node = self.engine.nodes().get(self.name)
        except (*_UNREACHABLE, docker.errors.APIError) as exc:
            log.debug("node %s: the swarm manager cannot say: %s", self.name, exc)
            return "unknown"
        if node is None:
            return "down"
        if node.state == "unknown":
            return "unknown"
        return "up" if node.ready else "down"

    def _node(self) -> SwarmNode:
        try:
            node = self.engine.nodes().get(self.name)
        except _UNREACHABLE as exc:
            raise EngineUnreachable(self.name, str(exc)) from None
        if node is None:
            raise EngineUnreachable(self.name, "the node is not in the swarm")
        return node

    def node_state(self) -> str | None:
        """The swarm's word for the node (ready, down, unknown, disconnected)."""
        try:
            return self._node().state
        except EngineUnreachable:
            return "unknown"  # the manager cannot be asked, or the node left the swarm

    def availability(self) -> str:
        return self._node().availability

    def set_availability(self, availability: str) -> None:
        try:
            self.engine.set_availability(self.name, availability)
        except _UNREACHABLE as exc:
            raise TemporaryError(f"the swarm manager is not answering: {exc}") from None

    def managed_jobs(self, platform_id: str) -> set[str]:
        return self.engine.jobs(self.name)

    @engine_outage
    def image_present(self, image: str) -> bool:
        # Only the manager's own images are visible here; a node without the image rejects
        # its task, which the monitor reports.
        try:
            self.engine.client.images.get(image)
            return True
        except docker.errors.ImageNotFound:
            return False

    @engine_outage
    def deploy(self, plan: DeploymentPlan) -> list[str]:
        return self.engine.deploy(plan)

    @engine_outage
    def containers(self, job_id: str, role: str | None = None) -> list[Container]:
        found = self.engine.job_containers(job_id)
        return [c for c in found if role is None or c.role == role]

    @engine_outage
    def stop_learners(self, job_id: str, timeout: int = 10) -> None:
        """Scale the learners' services to 0 (SIGTERM, after the engine's 2 s delay for a
        task on an overlay network) and wait until they have stopped.

        A gang one of whose learners failed is broken: its other learners lose their peer
        and end by themselves within moments (the ddp example's PeerLost). They are given
        LEARNERS_SELF_END_S first: a task told to stop while it was ending anyway reports its
        end only after that 2 s delay."""
        t0 = time.monotonic()
        learners = self.containers(job_id, jobspec.ROLE_LEARNER)
        if any(c.exited and c.exit_code for c in learners) and not all(c.exited for c in learners):
            self.engine.wait_stopped(job_id, jobspec.ROLE_LEARNER, LEARNERS_SELF_END_S)
            learners = self.containers(job_id, jobspec.ROLE_LEARNER)
        running = [c.learner for c in learners if not c.exited]
        for c in learners:
            self.engine.scale(c.name, 0)
        stopped = self.engine.wait_stopped(job_id, jobspec.ROLE_LEARNER, timeout + 5)
        # Where a restart's time goes (a teardown is stop, signal, wait for the helper).
        log.info("%s: learners %s after %.2f s (still running when stopped: %s)", job_id,
                 "stopped" if stopped else "NOT stopped", time.monotonic() - t0,
                 running or "none")  # fmt: skip

    @engine_outage
    def signal_helper(self, job_id: str) -> None:
        """Let the helpers store and finish (called once the learners are stopped).

        A helper on a swarm finishes by itself once every learner of its node has ended:
        its exit code written, or (killed, SIGKILL included) the lock its wrapper held for
        its life dropped (services.learner_helper.main.LearnerPresence). That is waited for
        first, up to HELPER_SELF_FINISH_S: the finish signal (the service scaled to 0: the
        swarm sends its StopSignal) reaches a task on an overlay network only after the
        engine's fixed 2 s delay, and its end is reported only after that delay, even when
        the helper was done before. A helper still running then (one still downloading, an
        image from before the alive lock) is scaled to 0; a teardown needs no exit code,
        which the swarm drops with the task."""
        if self.engine.wait_stopped(job_id, jobspec.ROLE_HELPER, HELPER_SELF_FINISH_S):
            return
        for c in self.containers(job_id, jobspec.ROLE_HELPER):
            if not c.exited:
                self.engine.scale(c.name, 0)

    @engine_outage
    def wait_helper(self, job_id: str, timeout_s: float) -> bool:
        t0 = time.monotonic()
        done = self.engine.wait_stopped(job_id, jobspec.ROLE_HELPER, timeout_s)
        log.info("%s: helper %s after %.2f s", job_id, "finished" if done else "NOT finished",
                 time.monotonic() - t0)  # fmt: skip
        return done

    @engine_outage
    def remove_job(self, job_id: str) -> None:
        self.engine.remove_job(job_id)

    @engine_outage
    def remove_job_here(self, job_id: str) -> None:
        # The manager removes swarm-wide: only this node's services, or a requeued job's
        # new run on other nodes would go with its leftovers here.
        self.engine.remove_job_on(job_id, self.name)

    # ---- JobContainers (the monitor, the log reader) ---------------------------------

    def job_containers(self, job_id: str) -> list[Container]:
        self._check()
        try:
            found = self.engine.job_containers(job_id, self.name)
        except _UNREACHABLE as exc:
            raise EngineUnreachable(self.name, str(exc)) from None
        if any(c.state == "unknown" for c in found):
            # As good as the node not answering: a job must not be judged on these.
            raise EngineUnreachable(self.name, f"the swarm lost track of {job_id}'s tasks here")
        return found

    def jobs_with_resources(self) -> set[str]:
        return self.engine.jobs(self.name)

    def events(self, since: float | None = None) -> EventStream:
        self._check()
        return _PollStream(self.engine, self.name)

    def logs(self, c: Container, *, tail: int | None = None) -> bytes | None:
        if c.id.startswith("service:"):
            return b""  # no task has run yet
        try:
            return self.engine.task_logs(c.id, tail=tail)
        except docker.errors.NotFound:
            return None

    def follow_logs(self, c: Container) -> Iterator[bytes]:
        if c.id.startswith("service:"):
            return iter(())
        try:
            return self.engine.task_logs(c.id, follow=True)
        except docker.errors.NotFound:
            return iter(())

    def start(self, c: Container) -> None:
        self.engine.restart(c.name)

    def kill(self, c: Container, signal: str | None = None) -> None:
        if signal == jobspec.HELPER_FINISH_SIGNAL and c.role == jobspec.ROLE_HELPER:
            return  # it finishes by itself once its learners have exited (signal_helper)
        self.engine.remove_service(c.name)

    def stop(self, c: Container, timeout: int) -> None:
        self.engine.scale(c.name, 0)

    def remove_resources(self, job_id: str) -> None:
        self.engine.remove_job(job_id)
