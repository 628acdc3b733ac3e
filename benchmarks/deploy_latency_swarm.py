"""Deploy latency on a local swarm (`--backend swarm`): the platform against bare services.

--backend swarm: the platform on a fresh 2-node local swarm (`up(nodes=2)`, each node
declaring 0.6 CPUs so that a gang of two 0.5-CPU learners must span both nodes), always
taken down at the end, swarm included. Two job shapes, one learner and two learners on two
nodes; for each, `--jobs` platform jobs alternate with as many bare runs of the same
learners: their services, as the platform made them (same image, command, env, limits,
mounts, node constraint, dnsrr, restart none), created with `docker service create`
through the manager's API on an attachable overlay made for the run, as the LCM makes one
per job. Both are timed to the start of their last learner container, read from the node
engines' own events: platform from just before the POST, bare from just before the
network is created. No overhead measurement (it does not depend on the backend). With
--json the last line is {"backend", "nodes", "ratio" (the worse shape's), "one_learner",
"two_learners_two_nodes"}, each shape {"jobs", "platform": {"p50_s", "p99_s"}, "bare":
{"p50_s", "p99_s"}, "ratio"}, ratio = platform p50 / bare p50 (target <= 1.5); both sides
also give "services_made_p50_s", the part of that time spent before the last learner service
existed in the manager (the rest is the swarm's: schedule, dispatch, prepare, start).
"""

from __future__ import annotations

import copy
import secrets
import threading
import time
from datetime import UTC, datetime

import docker
import httpx

from benchmarks.deploy_latency_docker import MANIFEST, percentile
from dlaas.domain import jobspec
from dlaas.domain.status import FINAL

SWARM_NODES = 2
# Each node declares 0.6 CPUs (as tests/e2e/test_swarm_e2e.py does): a 0.5-CPU learner fits
# one node, a gang of two cannot, so the scheduler must span it over both.
SWARM_NODE_CPUS = "0.6"
SHAPES = {"one_learner": 1, "two_learners_two_nodes": 2}
BARE_RUN = "dlaas-bench.bare"  # container/service/network label of the bare baseline
BARE_LEARNER = "dlaas-bench.learner"
SWARM_RATIO_TARGET = 1.5
START_TIMEOUT_S = 60
END_TIMEOUT_S = 120


def manifest(learners: int) -> str:
    return MANIFEST.replace("learners: 1", f"learners: {learners}")


class StartWatch:
    """The first `start` of every learner container, on every node's own engine.

    The time is the engine's event stamp (as the docker backend takes it), keyed by
    (job id, learner index) for the platform's learners and (run tag, index) for the bare
    ones. The node engines are read only to measure: what is measured acts through the
    manager alone.
    """

    def __init__(self, node_sockets: dict[str, str]):
        self.seen: dict[tuple[str, int], tuple[float, str]] = {}
        self._lock = threading.Lock()
        self._clients = []
        self._streams = []
        for node, url in node_sockets.items():
            client = docker.DockerClient(base_url=url)
            stream = client.events(decode=True, filters={"type": "container", "event": "start"})
            self._clients.append(client)
            self._streams.append(stream)
            threading.Thread(target=self._watch, args=(node, stream), daemon=True).start()

    def _watch(self, node: str, stream) -> None:
        try:
            for ev in stream:
                attrs = ev.get("Actor", {}).get("Attributes", {})
                if attrs.get(jobspec.LABEL_ROLE) == jobspec.ROLE_LEARNER:
                    key = (attrs.get(jobspec.LABEL_JOB, ""), attrs.get(jobspec.LABEL_LEARNER))
                elif BARE_RUN in attrs:
                    key = (attrs[BARE_RUN], attrs.get(BARE_LEARNER))
                else:
                    continue
                if key[0] and key[1] is not None:
                    with self._lock:
                        self.seen.setdefault((key[0], int(key[1])), (ev["timeNano"] / 1e9, node))
        except Exception:  # noqa: BLE001 - the stream closes when the benchmark ends
            return

    def wait(self, run: str, learners: int, timeout_s: float) -> list[tuple[float, str]]:
        """(start time, node) of learners 0..learners-1 of `run`; SystemExit on timeout."""
        keys = [(run, i) for i in range(learners)]
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            with self._lock:
                if all(k in self.seen for k in keys):
                    return [self.seen[k] for k in keys]
            time.sleep(0.005)
        raise SystemExit(f"{run}: not every learner started within {timeout_s:.0f} s")

    def close(self) -> None:
        for stream in self._streams:
            stream.close()
        for client in self._clients:
            client.close()


def _learner_services(api, label: str) -> list[dict]:
    """The learner services of a run (`label` = "key=value"), by learner index."""
    found = api.services(filters={"label": label})
    if BARE_RUN in label:
        index = {int(s["Spec"]["TaskTemplate"]["ContainerSpec"]["Labels"][BARE_LEARNER]): s
                 for s in found}  # fmt: skip
    else:
        index = {int(s["Spec"]["Labels"][jobspec.LABEL_LEARNER]): s for s in found
                 if s["Spec"]["Labels"].get(jobspec.LABEL_ROLE) == jobspec.ROLE_LEARNER}  # fmt: skip
    if not index or sorted(index) != list(range(len(index))):
        raise SystemExit(f"{label}: its learner services were gone before they were read")
    return [index[i] for i in sorted(index)]


def _created(services: list[dict]) -> float:
    """When the last of `services` was created, by the manager's stamp (RFC 3339, ns)."""
    return max(_stamp(s["CreatedAt"]) for s in services)


def _stamp(text: str) -> float:
    """The manager's time stamps ("2026-11-23T10:00:00.123456789Z") as epoch seconds. Pure."""
    head, _, frac = text.rstrip("Z").partition(".")
    whole = datetime.fromisoformat(head).replace(tzinfo=UTC).timestamp()
    return whole + (float("0." + frac) if frac.isdigit() else 0.0)


def bare_template(template: dict, network: str, run: str, index: int) -> dict:
    """A platform learner's TaskTemplate for the bare baseline: the same image, command,
    env, limits, mounts and node constraint, on `network`, with the benchmark's labels
    only (the platform's reconciler must not take it for one of its jobs). Pure."""
    tt = copy.deepcopy(template)
    spec = tt["ContainerSpec"]
    spec["Labels"] = {BARE_RUN: run, BARE_LEARNER: str(index)}
    for mount in spec.get("Mounts") or []:
        if mount.get("Type") == "volume":
            mount["Source"] = f"{network}-volume"
            mount["VolumeOptions"] = {"Labels": {BARE_RUN: run}}
    aliases = [a for n in tt.get("Networks") or [] for a in n.get("Aliases") or []]
    tt["Networks"] = [{"Target": network, "Aliases": aliases}]
    return tt


def _wait_job_gone(http: httpx.Client, api, job_id: str) -> None:
    """Until the job is final and its services have left the swarm: the next job is
    measured on idle nodes."""
    deadline = time.time() + END_TIMEOUT_S
    while time.time() < deadline:
        if http.get(f"/v1/jobs/{job_id}").json()["status"] in FINAL:
            break
        time.sleep(0.2)
    label = {"label": f"{jobspec.LABEL_JOB}={job_id}"}
    while api.services(filters=label) and time.time() < deadline:
        time.sleep(0.2)


def _remove_bare(api, run: str, network: str) -> None:
    label = {"label": f"{BARE_RUN}={run}"}
    for s in api.services(filters=label):
        api.remove_service(s["ID"])
    deadline = time.time() + END_TIMEOUT_S
    while time.time() < deadline:  # the network goes once its tasks have detached
        try:
            api.remove_network(network)
            return
        except docker.errors.NotFound:
            return
        except docker.errors.APIError:
            time.sleep(0.2)


def measure_swarm(url: str, token: str, manager, watch: StartWatch, jobs: int) -> dict:
    """Per shape: `jobs` platform jobs and `jobs` bare runs, alternated, one at a time.

    platform: from just before the POST to the start of its last learner.
    bare: from just before creating the run's overlay network (the platform makes one per
    job too) to the start of its last learner; the services are created one after the
    other through the manager, as the LCM does.
    """
    api = manager.api
    out: dict[str, dict] = {}
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
        for shape, learners in SHAPES.items():
            plat: list[float] = []
            bare: list[float] = []
            # Submit (or network create) -> the last learner service exists in the manager:
            # what happens before the swarm has anything to schedule.
            plat_created: list[float] = []
            bare_created: list[float] = []
            templates: list[dict] | None = None
            print(f"{shape}: {jobs} platform jobs and {jobs} bare runs, alternated", flush=True)
            for i in range(jobs):
                t0 = time.time()
                reply = http.post(
                    "/v1/jobs",
                    content=manifest(learners),
                    headers={"Content-Type": "application/yaml"},
                )
                reply.raise_for_status()
                job_id = reply.json()["job_id"]
                starts = watch.wait(job_id, learners, START_TIMEOUT_S)
                plat.append(max(t for t, _ in starts) - t0)
                nodes = [n for _, n in starts]
                if len(set(nodes)) != learners:
                    raise SystemExit(f"job {job_id}: learners on {nodes}, wanted one per node")
                found = _learner_services(api, f"{jobspec.LABEL_JOB}={job_id}")
                plat_created.append(_created(found) - t0)
                if templates is None:
                    templates = [svc["Spec"]["TaskTemplate"] for svc in found]
                _wait_job_gone(http, api, job_id)

                run = f"{shape}-{i}"
                network = f"dlaas-bench-{secrets.token_hex(4)}"
                t0 = time.time()
                api.create_network(
                    network, driver="overlay", attachable=True, scope="swarm",
                    labels={BARE_RUN: run}, check_duplicate=True,
                )  # fmt: skip
                for k, template in enumerate(templates):
                    api.create_service(
                        bare_template(template, network, run, k),
                        name=f"{network}-learner-{k}",
                        labels={BARE_RUN: run},
                        mode={"Replicated": {"Replicas": 1}},
                        endpoint_spec={"Mode": "dnsrr"},
                    )
                bare_starts = watch.wait(run, learners, START_TIMEOUT_S)
                bare.append(max(t for t, _ in bare_starts) - t0)
                bare_created.append(_created(_learner_services(api, f"{BARE_RUN}={run}")) - t0)
                _remove_bare(api, run, network)
                print(
                    f"  {i + 1:2d}/{jobs}: platform {plat[-1]:.3f} s "
                    f"(services made at {plat_created[-1]:.3f} s; {', '.join(nodes)}), "
                    f"bare {bare[-1]:.3f} s (at {bare_created[-1]:.3f} s)",
                    flush=True,
                )
            out[shape] = summary(plat, bare)
            out[shape]["platform"]["services_made_p50_s"] = round(percentile(plat_created, 0.5), 4)
            out[shape]["bare"]["services_made_p50_s"] = round(percentile(bare_created, 0.5), 4)
    return out


def summary(platform_s: list[float], bare_s: list[float]) -> dict:
    """p50/p99 of both and ratio = platform p50 / bare p50. Pure."""
    p = {"p50_s": round(percentile(platform_s, 0.5), 4),
         "p99_s": round(percentile(platform_s, 0.99), 4)}  # fmt: skip
    b = {"p50_s": round(percentile(bare_s, 0.5), 4),
         "p99_s": round(percentile(bare_s, 0.99), 4)}  # fmt: skip
    return {"jobs": len(platform_s), "platform": p, "bare": b,
            "ratio": round(p["p50_s"] / b["p50_s"], 3)}  # fmt: skip
