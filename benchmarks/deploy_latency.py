"""Deploy latency and container overhead, measured on a real platform.

Usage: python benchmarks/deploy_latency.py [--backend docker|swarm] [--jobs 20] [--json]
    [--home DIR]
It brings the platform up in DIR (a temporary one by default) and down again if it
started it. With --json the last line is {"p50_s", "p99_s", "overhead_pct"}.

--backend docker (the default): submit -> learner running (p50/p99) and the container
overhead of a CPU-bound training loop; see deploy_latency_docker.py.
--backend swarm: the platform on a fresh 2-node local swarm against bare services of the
same learners, per job shape; see deploy_latency_swarm.py (and its --json).
--ddp N (with --backend swarm): the cross-node cost of data-parallel training, two nodes
against one; see deploy_latency_ddp.py (and its --json).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import docker
import httpx

from dlaas.local import components, platform

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script: benchmarks/ is sys.path[0], not the repo

from benchmarks.deploy_latency_ddp import DDP_NODE_MEMORY_MB, DDP_SHAPES, measure_ddp
from benchmarks.deploy_latency_docker import measure_latency, measure_overhead, percentile
from benchmarks.deploy_latency_swarm import (
    SWARM_NODE_CPUS,
    SWARM_NODES,
    SWARM_RATIO_TARGET,
    StartWatch,
    measure_swarm,
)


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
