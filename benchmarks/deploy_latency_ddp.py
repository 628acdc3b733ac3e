"""The cross-node cost of data-parallel training (`--backend swarm --ddp N`).

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

import time
from pathlib import Path

import httpx

from benchmarks.deploy_latency_docker import percentile
from benchmarks.deploy_latency_swarm import START_TIMEOUT_S, StartWatch
from dlaas.domain.status import FINAL

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
                    if job["status"] in FINAL:
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
