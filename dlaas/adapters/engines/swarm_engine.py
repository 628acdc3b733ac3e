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

`SwarmEngine` is the cluster; `SwarmEngine.node(name)` is one node's view (swarm_node.py),
the ContainerEngine the LCM and the monitor hold per node. The service specs and the task
states are pure code apart (swarm_spec.py); this module is the manager's I/O.

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
from collections.abc import Sequence

import docker
import docker.errors

from dlaas.adapters.engines.reports import MAX_REASON_CHARS, redact
from dlaas.adapters.engines.swarm_node import SwarmNodeView
from dlaas.adapters.engines.swarm_spec import (
    container_of,
    file_secret_name,
    secret_env,
    service_spec,
)
from dlaas.adapters.nodes import SwarmNode, node_of
from dlaas.domain import jobspec
from dlaas.domain.errors import DeployRefused, ImageUnavailable, TemporaryError
from dlaas.domain.plan import DeploymentPlan
from dlaas.domain.ports import Container

log = logging.getLogger(__name__)

# How often the monitor's event streams poll the manager's tasks (one listing per period for
# every node's stream together: SwarmEngine.shared_fingerprint).
POLL_S = 0.25
# How often a teardown asks the manager whether the job's learners or helpers have ended
# (two calls about one job's services): a gang's restart waits for both, twice.
STOPPED_POLL_S = 0.1


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
        """Every node of the swarm by name (cached for `max_age_s`). Raise MANAGER_UNREACHABLE."""
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

    # ---- services and tasks ---------------------------------------------------------

    def _label(self, *extra: str) -> dict:
        return {"label": [f"{jobspec.LABEL_MANAGED}={self.platform_id}", *extra]}

    def services(self, job_id: str | None = None, node: str | None = None) -> list[dict]:
        extra = []
        if job_id:
            extra.append(f"{jobspec.LABEL_JOB}={job_id}")
        if node:
            extra.append(f"{jobspec.LABEL_NODE}={node}")
        return self.api.services(filters=self._label(*extra))

    def latest_tasks(self, services: Sequence[dict]) -> dict[str, dict]:
        """Service id -> its newest task."""
        if not services:
            return {}
        return _newest(self.api.tasks(filters={"service": [s["ID"] for s in services]}))

    def job_containers(self, job_id: str, node: str | None = None) -> list[Container]:
        services = self.services(job_id, node)
        tasks = self.latest_tasks(services)
        return [
            container_of(
                s, tasks.get(s["ID"]), (s["Spec"].get("Labels") or {}).get(jobspec.LABEL_NODE, "")
            )
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

    def _file_secrets(self, plan: DeploymentPlan) -> dict[str, dict]:
        """A Swarm secret for each distinct secret file of the plan, by name."""
        made: dict[str, dict] = {}
        for spec in plan.containers:
            for _path, content in spec.files:
                name = file_secret_name(plan, content)
                if name in made:
                    continue
                found = [s for s in self.api.secrets(filters={"name": name})
                         if s["Spec"]["Name"] == name]  # fmt: skip
                if not found:
                    created = self.api.create_secret(name, content, labels=plan.labels)
                    found = [self.api.inspect_secret(created["ID"])]
                made[name] = found[0]
        return made

    def deploy(self, plan: DeploymentPlan) -> list[str]:
        ids = {n.name: n.id for n in self.nodes(max_age_s=0).values()}
        unknown = sorted({c.node for c in plan.containers} - set(ids))
        if unknown:
            raise TemporaryError(f"node(s) {', '.join(unknown)} are not in the swarm")
        try:
            self._network(plan)
            secret = self._secret(plan)
            files = self._file_secrets(plan)
            existing = {s["Spec"]["Name"] for s in self.services(plan.job_id)}
            created: list[str] = []
            try:
                # Learners first: they wait for their helper's data mark anyway, and their
                # tasks then need not queue behind the helpers' (secret, volume) on a node.
                for spec in [*plan.learners, *plan.helpers]:
                    if spec.name in existing:
                        continue
                    body = service_spec(spec, plan, ids[spec.node], secret, files)
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

    def remove_job(self, job_id: str, keep_network: bool = False) -> None:
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
        for net in [] if keep_network else self.api.networks(filters=label):
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

    def task_logs(
        self,
        task_id: str,
        *,
        follow: bool = False,
        tail: int | None = None,
        timestamps: bool = False,
    ):
        params = {"stdout": 1, "stderr": 1, "follow": int(follow), "timestamps": int(timestamps),
                  "tail": "all" if tail is None else str(tail)}  # fmt: skip
        url = self.api._url("/tasks/{0}/logs", task_id)
        res = self.api._get(url, params=params, stream=follow)
        return self.api._get_result_tty(follow, res, False)

    def shared_fingerprint(self) -> dict[str, tuple]:
        """`fingerprint()`, read at most once per half poll period whatever the number of
        node views polling it (each node's event stream does): the manager is asked for
        its tasks once, not once per node."""
        with self._fingerprint_lock:
            if time.monotonic() - self._fingerprint_at >= self.poll_s / 2:
                self._fingerprint = self.fingerprint()
                self._fingerprint_at = time.monotonic()
            return self._fingerprint

    def fingerprint(self) -> dict[str, tuple]:
        """Job id -> the states of its services' latest tasks (what a change looks like).

        One call: the platform's tasks, found by their services' label, each naming its job
        in its container labels. Listing the services as well cost the manager 4x the CPU
        (15.3 against 3.8 ms a poll with 60 services, measured on a 2-node lab), and the
        monitor polls several times a second."""
        out: dict[str, list] = {}
        for sid, t in _newest(self.api.tasks(filters=self._label())).items():
            labels = ((t.get("Spec") or {}).get("ContainerSpec") or {}).get("Labels") or {}
            out.setdefault(labels.get(jobspec.LABEL_JOB, ""), []).append(
                (sid, t.get("ID"), (t.get("Status") or {}).get("State"))
            )
        return {job: tuple(sorted(v)) for job, v in out.items()}


def _newest(tasks: Sequence[dict]) -> dict[str, dict]:
    """Service id -> its newest task among `tasks`."""
    latest: dict[str, dict] = {}
    for t in tasks:
        sid = t.get("ServiceID", "")
        if sid not in latest or t.get("CreatedAt", "") > latest[sid].get("CreatedAt", ""):
            latest[sid] = t
    return latest
