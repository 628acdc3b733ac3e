"""Deploy latency and container overhead on the single engine (`--backend docker`).

1. submit -> learner running: submits `--jobs` one-learner jobs over REST, one after the
   other, and takes the time from just before the POST to the Docker `start` event of the
   job's learner container (the engine's own timestamp). Prints p50/p99.
2. container overhead: the same CPU-bound numpy training loop run (a) as a bare process,
   chrooted into the learner image's own file system so that both runs use the very same
   python and numpy binaries, and (b) in a container of that image; each `--repeats`
   times; the loop times itself. Prints the fastest run of each and the overhead in percent.

benchmarks/deploy_latency.py runs them; `percentile` and the probe job are shared
with its other backends.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import docker
import httpx

from dlaas.domain import jobspec
from dlaas.domain.status import FINAL

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
                if status in FINAL:
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
