"""Deploy latency and container overhead, measured on a real platform.

1. submit -> learner running: submits `--jobs` one-learner jobs over REST, one after the
   other, and takes the time from just before the POST to the Docker `start` event of the
   job's learner container (the engine's own timestamp). Prints p50/p99.
2. container overhead: the same CPU-bound numpy training loop run (a) as a bare process,
   chrooted into the learner image's own file system so that both runs use the very same
   python and numpy binaries, and (b) in a container of that image; each `--repeats`
   times; the loop times itself. Prints the fastest run of each and the overhead in percent.

Usage: python benchmarks/deploy_latency.py [--backend docker|swarm] [--jobs 20] [--json]
    [--home DIR]
It brings the platform up in DIR (a temporary one by default) and down again if it
started it. With --json the last line is {"p50_s", "p99_s", "overhead_pct"}.

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

--ddp N (with --backend swarm, instead of the latency shapes): the cross-node cost of
data-parallel training. The numpy all-reduce job (tests/fixtures/jobs/numpy-allreduce, 2 learners all-reducing over
TCP, `--ddp-epochs` epochs, 0.5 CPUs each) N times across two nodes and N times on one
node, alternated, on a fresh 2-node swarm whose nodes declare the machine's CPUs but
DDP_NODE_MEMORY_MB each: the gang asking 512 MiB per learner cannot fit one node and
spans both (its all-reduce crosses the overlay), the same gang asking 256 MiB is packed
on one node; the CPU limits, code and data are the same. Run time: from the job's
PROCESSING to its COMPLETED (its history: training, then the helpers store the results).
With --json the last line is {"backend", "ddp": {"epochs", "runs", "two_nodes": {"p50_s",
"min_s", "max_s"}, "one_node": {...}, "ratio"}}, ratio = two_nodes p50 / one_node p50.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import docker
import httpx

from dlaas.domain import jobspec
from dlaas.local import components, platform

MANIFEST = """
name: latency-probe
learners: 1
cpus: 0.5
memory: 256MiB
framework: {name: python, version: "3", command: "true"}
"""

WORKLOAD = """
import time, numpy as np
rng = np.random.default_rng(0)
x = rng.standard_normal((512, 256)); w1 = rng.standard_normal((256, 256)) * 0.05
w2 = rng.standard_normal((256, 10)) * 0.05; y = np.eye(10)[rng.integers(0, 10, 512)]
t = time.perf_counter()
for step in range({steps}):
    h = np.maximum(x @ w1, 0); p = h @ w2; g = (p - y) / len(x)
    w2 -= 0.01 * h.T @ g; w1 -= 0.01 * x.T @ ((g @ w2.T) * (h > 0))
print(time.perf_counter() - t)
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def measure_latency(url: str, token: str, client: docker.DockerClient, jobs: int) -> list[float]:
    started: dict[str, float] = {}
    ready = threading.Event()
    events = client.events(
        decode=True,
        filters={"type": "container", "event": "start", "label": f"{jobspec.LABEL_ROLE}=learner"},
    )

    def watch():
        ready.set()
        for ev in events:
            job = ev.get("Actor", {}).get("Attributes", {}).get(jobspec.LABEL_JOB)
            if job:
                started.setdefault(job, ev["timeNano"] / 1e9)

    threading.Thread(target=watch, daemon=True).start()
    ready.wait()
    latencies = []
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
        for i in range(jobs):
            t0 = time.time()
            reply = http.post(
                "/v1/jobs", content=MANIFEST, headers={"Content-Type": "application/yaml"}
            )
            reply.raise_for_status()
            job_id = reply.json()["job_id"]
            deadline = time.time() + 30
            while job_id not in started and time.time() < deadline:
                time.sleep(0.005)
            if job_id not in started:
                raise SystemExit(f"job {job_id}: no learner started within 30 s")
            latencies.append(started[job_id] - t0)
            print(
                f"  job {i + 1:2d}/{jobs}: submit -> learner running {latencies[-1]:.3f} s",
                flush=True,
            )
            # Let it end, so every job is measured on an idle node.
            while time.time() < deadline:
                status = http.get(f"/v1/jobs/{job_id}").json()["status"]
                if status in ("COMPLETED", "FAILED", "HALTED"):
                    break
                time.sleep(0.1)
    events.close()
    return latencies


def measure_overhead(client: docker.DockerClient, image: str, repeats: int, steps: int):
    workdir = Path(tempfile.mkdtemp(prefix="dlaas-overhead-"))
    rootfs = workdir / "rootfs"
    try:
        holder = client.containers.create(image, command=["true"])
        try:
            rootfs.mkdir()
            export = subprocess.Popen(["tar", "-x", "-C", str(rootfs)], stdin=subprocess.PIPE)
            for chunk in holder.export():
                export.stdin.write(chunk)
            export.stdin.close()
            export.wait()
        finally:
            holder.remove(force=True)
        (rootfs / "workload.py").write_text(WORKLOAD.format(steps=steps))
        env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
        chroot = shutil.which("chroot") or "/usr/sbin/chroot"
        bare, boxed = [], []
        for r in range(repeats):
            out = subprocess.run(
                [chroot, str(rootfs), "python3", "/workload.py"],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            bare.append(float(out.stdout.strip()))
            logs = client.containers.run(
                image,
                ["python3", "/w/workload.py"],
                environment=env,
                volumes={str(rootfs / "workload.py"): {"bind": "/w/workload.py", "mode": "ro"}},
                remove=True,
                init=True,
            )
            boxed.append(float(logs.decode().strip()))
            print(
                f"  run {r + 1}/{repeats}: bare {bare[-1]:.3f} s, container {boxed[-1]:.3f} s",
                flush=True,
            )
        # The fastest run of each: on a shared machine noise only ever adds time.
        return min(bare), min(boxed)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# --------------------------------------------------------------------------- swarm backend

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
        if http.get(f"/v1/jobs/{job_id}").json()["status"] in ("COMPLETED", "FAILED", "HALTED"):
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


DDP_NODE_MEMORY_MB = "800"  # a 2 x 512 MiB gang spans two nodes, a 2 x 256 MiB one fits one
DDP_SHAPES = {"two_nodes": "512MiB", "one_node": "256MiB"}
DDP_TIMEOUT_S = 600


def ddp_manifest(memory: str, epochs: int) -> str:
    return (
        f"name: ddp-span-{memory}\nlearners: 2\ncpus: 0.5\nmemory: {memory}\n"
        "data_stores:\n  - id: digits\n    type: s3\n"
        "    training_data: {container: digits-data}\n"
        "    training_results: {container: digits-ddp-results}\n"
        f'framework: {{name: python, version: "3", command: "python3 train.py --epochs {epochs}"}}\n'
    )


def run_time(history: list[dict]) -> float:
    """Seconds from the job's last PROCESSING to its COMPLETED entry (its history). Pure."""
    processing = [h["at"] for h in history if h["status"] == "PROCESSING"]
    completed = [h["at"] for h in history if h["status"] == "COMPLETED"]
    if not processing or not completed:
        raise ValueError("the job did not run to COMPLETED")
    return completed[-1] - processing[-1]


def measure_ddp(url: str, token: str, watch: StartWatch, runs: int, epochs: int) -> dict:
    """The ddp example `runs` times per shape (DDP_SHAPES), alternated, one job at a time."""
    from dlaas.clients.client import pack_code

    repo = Path(__file__).resolve().parents[1]
    data, name = pack_code(repo / "tests/fixtures/jobs/numpy-allreduce")
    times: dict[str, list[float]] = {shape: [] for shape in DDP_SHAPES}
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
        for i in range(runs):
            for shape, memory in DDP_SHAPES.items():
                files = {
                    "manifest": ("manifest.yaml", ddp_manifest(memory, epochs).encode(),
                                 "application/yaml"),
                    "code": (name, data, "application/gzip"),
                }  # fmt: skip
                reply = http.post("/v1/jobs", files=files)
                reply.raise_for_status()
                job_id = reply.json()["job_id"]
                nodes = sorted({n for _, n in watch.wait(job_id, 2, START_TIMEOUT_S)})
                if len(nodes) != (2 if shape == "two_nodes" else 1):
                    raise SystemExit(f"ddp {shape} ({job_id}): learners on {nodes}")
                deadline = time.time() + DDP_TIMEOUT_S
                while time.time() < deadline:
                    job = http.get(f"/v1/jobs/{job_id}").json()
                    if job["status"] in ("COMPLETED", "FAILED", "HALTED"):
                        break
                    time.sleep(0.5)
                if job["status"] != "COMPLETED":
                    raise SystemExit(f"ddp {shape} ({job_id}): {job['status']} {job.get('reason')}")
                times[shape].append(run_time(job["history"]))
                print(f"  {i + 1}/{runs} {shape:<9} on {', '.join(nodes)}: "
                      f"{times[shape][-1]:.2f} s", flush=True)  # fmt: skip
    out: dict = {"epochs": epochs, "runs": runs}
    for shape, values in times.items():
        out[shape] = {"p50_s": round(percentile(values, 0.5), 3),
                      "min_s": round(min(values), 3), "max_s": round(max(values), 3)}  # fmt: skip
    out["ratio"] = round(out["two_nodes"]["p50_s"] / out["one_node"]["p50_s"], 3)
    return out


def _upload_digits(url: str, token: str) -> None:
    """The digits data into the user's bucket, through the API (as `dlaas data upload`)."""
    import importlib.util

    repo = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("prepare", repo / "examples/digits/prepare.py")
    prepare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prepare)
    reply = httpx.put(f"{url}/v1/data/digits-data/digits.npz", content=prepare.digits_npz(),
                      headers={"Authorization": f"Bearer {token}"}, timeout=60)  # fmt: skip
    reply.raise_for_status()


def summary(platform_s: list[float], bare_s: list[float]) -> dict:
    """p50/p99 of both and ratio = platform p50 / bare p50. Pure."""
    p = {"p50_s": round(percentile(platform_s, 0.5), 4),
         "p99_s": round(percentile(platform_s, 0.99), 4)}  # fmt: skip
    b = {"p50_s": round(percentile(bare_s, 0.5), 4),
         "p99_s": round(percentile(bare_s, 0.99), 4)}  # fmt: skip
    return {"jobs": len(platform_s), "platform": p, "bare": b,
            "ratio": round(p["p50_s"] / b["p50_s"], 3)}  # fmt: skip


def _progress(line: str) -> None:
    print("  " + line, flush=True)


def run_swarm(args) -> dict:
    """A platform on a fresh 2-node local swarm, measured, then taken down (swarm too)."""
    from dlaas.local.swarm import SwarmLab

    made_home = args.home is None
    home = args.home or Path(tempfile.mkdtemp(prefix="dlaas-bench-"))
    # Latency: small nodes, so a gang of two must span; ddp: the machine's CPUs, less memory.
    env = {"DLAAS_NODE_MEMORY_MB": DDP_NODE_MEMORY_MB} if args.ddp else {
        "DLAAS_NODE_CPUS": SWARM_NODE_CPUS}  # fmt: skip
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    print(f"platform in {home}, on a {SWARM_NODES}-node swarm", flush=True)
    try:
        platform.up(home, progress=_progress, nodes=SWARM_NODES)
        watch = manager = None
        try:
            cfg = json.loads((home / "client.json").read_text())
            info = SwarmLab(home / "swarm").info()
            manager = docker.DockerClient(base_url=info.manager_socket, timeout=60)
            watch = StartWatch(info.node_sockets)
            if args.ddp:
                _upload_digits(cfg["url"], cfg["token"])
                return measure_ddp(cfg["url"], cfg["token"], watch, args.ddp, args.ddp_epochs)
            return measure_swarm(cfg["url"], cfg["token"], manager, watch, args.jobs)
        finally:
            if watch is not None:
                watch.close()
            if manager is not None:
                manager.close()
            platform.down(home, progress=_progress)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if made_home:
            shutil.rmtree(home, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument(
        "--steps", type=int, default=400, help="training steps of the overhead workload"
    )
    ap.add_argument(
        "--home", type=Path, default=None, help="platform state dir (default: temporary)"
    )
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--backend",
        choices=("docker", "swarm"),
        default="docker",
        help="docker: the embedded single engine; swarm: a fresh 2-node local swarm",
    )
    ap.add_argument(
        "--ddp", type=int, default=0, metavar="N",
        help="swarm: the ddp example N times across two nodes and N times on one node",
    )  # fmt: skip
    ap.add_argument("--ddp-epochs", type=int, default=10)
    args = ap.parse_args(argv)
    if args.ddp and args.backend != "swarm":
        ap.error("--ddp: compares two nodes with one; use it with --backend swarm")
    if args.ddp:
        return main_ddp(args)
    if args.backend == "swarm":
        return main_swarm(args)

    home = args.home or Path(tempfile.mkdtemp(prefix="dlaas-bench-"))
    was_up = (home / "client.json").exists() and all(c.running for c in components.status(home))
    print(f"platform in {home}", flush=True)
    info = platform.up(home, progress=lambda line: print("  " + line, flush=True))
    try:
        cfg = json.loads((home / "client.json").read_text())
        client = docker.DockerClient(base_url=info.docker_host)
        print(f"submit -> learner running, {args.jobs} jobs:", flush=True)
        lat = measure_latency(cfg["url"], cfg["token"], client, args.jobs)
        print("bare process vs container, same binaries:", flush=True)
        bare, boxed = measure_overhead(client, "dlaas/learner:latest", args.repeats, args.steps)
    finally:
        if not was_up:
            platform.down(home)
    p50, p99 = percentile(lat, 0.5), percentile(lat, 0.99)
    overhead = (boxed - bare) / bare * 100
    print(
        f"deploy latency: p50 {p50:.3f} s, p99 {p99:.3f} s over {len(lat)} jobs (targets 1.0 / 2.5 s)"
    )
    print(
        f"training loop: bare {bare:.3f} s, container {boxed:.3f} s, overhead {overhead:+.2f} % (target <= 1 %)"
    )
    if args.json:
        print(
            json.dumps(
                {"p50_s": round(p50, 4), "p99_s": round(p99, 4), "overhead_pct": round(overhead, 3)}
            )
        )
    return 0


def main_swarm(args) -> int:
    shapes = run_swarm(args)
    print(f"{'shape':<24} {'platform p50/p99 s':>20} {'bare p50/p99 s':>18} {'ratio':>6}")
    for shape, r in shapes.items():
        p, b = r["platform"], r["bare"]
        print(
            f"{shape:<24} {p['p50_s']:>9.3f} / {p['p99_s']:<8.3f} "
            f"{b['p50_s']:>8.3f} / {b['p99_s']:<7.3f} {r['ratio']:>6.2f}"
        )
    print("(services made: p50 of the time until the last learner service existed)")
    for shape, r in shapes.items():
        print(
            f"{shape:<24} services made: platform {r['platform']['services_made_p50_s']:.3f} s,"
            f" bare {r['bare']['services_made_p50_s']:.3f} s"
        )
    worst = max(r["ratio"] for r in shapes.values())
    print(f"ratio platform/bare p50, worst shape: {worst:.2f} (target <= {SWARM_RATIO_TARGET})")
    if args.json:
        print(json.dumps({"backend": "swarm", "nodes": SWARM_NODES, "ratio": worst, **shapes}))
    return 0


def main_ddp(args) -> int:
    ddp = run_swarm(args)
    print(f"ddp example, {ddp['epochs']} epochs, PROCESSING -> COMPLETED over {ddp['runs']} runs:")
    for shape in DDP_SHAPES:
        r = ddp[shape]
        print(f"  {shape:<9} p50 {r['p50_s']:.2f} s (min {r['min_s']:.2f}, max {r['max_s']:.2f})")
    print(f"  two nodes / one node, p50: {ddp['ratio']:.3f}")
    if args.json:
        print(json.dumps({"backend": "swarm", "ddp": ddp}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
