"""What the platform costs a data-parallel PyTorch job: seconds per epoch on the platform
against the same processes run bare, and the time from submit to the job's first line.

    python benchmarks/training_overhead.py [--learners 1,2,4] [--swarm] [--epochs 60]
        [--runs 4] [--checkpoint-interval S] [--bare-cgroups] [--plain-containers] [--json]

The job is examples/pytorch-ddp (torch.distributed DDP over gloo, one process per learner,
OMP_NUM_THREADS=1 on both sides so that CPU limits are not what is measured), submitted over
REST to a platform this script brings up (`dlaas.local.platform.up`, the machine's Docker
engine; with --swarm also a 2-node local swarm whose nodes declare 1.1 CPUs, so a gang of
two 1-CPU learners spans both and all-reduces over the overlay: a CPU per process, as the
bare processes have on this 2-core machine).

Bare: the very same python and torch binaries (the PyTorch learner image's file system,
exported once and entered with chroot), the same command and env, N processes with
RANK/WORLD_SIZE set by hand: no container, no job network, no wrapper. For the Docker
shapes they talk over the host's loopback. For the swarm shape the fair baseline is two
processes on the two nodes talking over the network between them: each rank is started in
its node's network namespace (`nsenter --net`, the namespaces and addresses from the lab's
state file) and they all-reduce over the lab's underlay (veths and the lab bridge, no
container, no overlay); the loopback run is reported beside it (`bare_loopback_epoch_s`,
`ratio_vs_loopback`), so nothing is hidden. `--bare-cgroups` adds a third side to the
Docker shapes: the bare processes, each in a CPU cgroup of its own with no limit
(`bare_own_cgroups_epoch_s`, `ratio_vs_own_cgroups`): how much of the ratio is the CPU
scheduler serving N groups instead of N processes, which any container pays.
`--plain-containers` adds another: the same processes as plain containers of the image
(`docker run`, each held to the learners' CPUs as the platform holds them, on one bridge
network; no wrapper, helper, job volume or control plane: `bare_plain_containers_epoch_s`,
`ratio_vs_plain_containers`): what containers cost before the platform adds anything.

A run must last long enough that the machine's noise (2 cores shared with other work)
cannot decide the ratio: a shape of N learners trains max(20, --epochs / N) epochs (60 for
1 learner: about 6 s), and `--runs` runs of each side are alternated in ABBA order
(platform-bare, then bare-platform, ...), so that a drift in the machine's load falls on both
sides alike. Per run, the seconds per epoch are rank 0's training loop (its `steps=...
seconds=...` summary: the steps, each epoch's evaluation and checkpoint) divided by the
epochs. Per shape: `platform_epoch_s` and `bare_epoch_s` are the medians over the runs,
`ratio` = platform / bare (targets: <= 1.05 for 1 learner, <= 1.15 for 2-4), `pair_ratios`
each platform run over the bare run next to it (their spread is how far one ratio can be
trusted), `spread` the (max - min) / median of each side's runs, `first_line_s` (the
median) the time from just before the POST to the example's first log line (printed once
the process group is up and the data loaded, just before the first step), `throttled` the
CFS quota's count over every learner container of every run (`nr_periods`,
`nr_throttled`, `throttled_s`, read from the container's cgroup cpu.stat by the job's
command once training ended), `cpu_s` the CPU seconds of a run (median) of the job's
learner containers, of its helper containers (data staging, checkpoint and log shipping)
and of the bare processes, `cpu_by_process` the CPU seconds of every process of the machine
by kind (learners, helpers, each engine's dockerd/containerd/shims, the platform's services,
etcd, S3, the rest: benchmarks.cpu_watch) while the learners train ("training": from the
first line to the learners' end) and over the whole run ("run"), for the platform runs and
the bare ones (the platform is up then too, idle), `load` the 1-minute load average before and after the shape,
and `wall_s` the shape's seconds (its runs; not the platform's start). While a job trains
the script looks at it once a second (its requests cost the machine CPU too). The bare
processes get the image's env (PYTHONPATH=/opt/dlaas: the example then saves its
checkpoints with dlaas.learner.checkpoint, as on the platform). With --json the last line
is {"epochs", "runs", "shapes": [...]}, one object per shape with the keys above and
"shape", "learners", "nodes", "epochs", "platform_runs", "bare_runs" (swarm: also
"bare_loopback_runs"). `--checkpoint-interval S` sets the jobs' checkpoint.interval_s (0: the
helper ships checkpoints only when the job ends), to tell the helper's shipping from the rest;
the last line then also has "checkpoint_interval_s".
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker
import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bare_side import OwnCgroups, export_image, plain_containers, release_image
from benchmarks.cpu_watch import CpuWatch
from dlaas.clients.client import pack_code
from dlaas.domain.jobspec import LABEL_JOB, LABEL_ROLE, ROLE_HELPER, ROLE_LEARNER
from dlaas.local import platform

EXAMPLE = REPO / "examples" / "pytorch-ddp"
IMAGE = "dlaas/learner-pytorch:2.13"
CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"
NSENTER = shutil.which("nsenter") or "/usr/bin/nsenter"
# Where the host's cgroup v1 keeps each container's CPU time (the engine's cgroupfs driver;
# the swarm lab's nodes put theirs there too). Missing elsewhere: then no CPU seconds.
CPUACCT = Path("/sys/fs/cgroup/cpuacct/docker")
# rank 0's summary: the whole training loop (steps, each epoch's evaluation and checkpoint).
LOOP = re.compile(r"^steps=(\d+) seconds=([0-9.]+) steps_per_s=")
# The CFS quota's counters of the learner's container (cgroup v1; v2 counts microseconds).
CPU_STAT = re.compile(r"^(nr_periods|nr_throttled|throttled_time|throttled_usec) (\d+)$")
# Printed by the job's command once training ended (platform runs only: bare ones have no
# quota): the learner container's own cgroup, v1 or v2.
CPU_STAT_CMD = (
    "{ cat /sys/fs/cgroup/cpu/cpu.stat 2>/dev/null || cat /sys/fs/cgroup/cpu.stat 2>/dev/null"
    " || true; }"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# A heavier step than the example's default (64 hidden units: a step is all latency, no
# training): 2,048 hidden units, so a step is compute and an all-reduce of 600 KB, as in
# real training; batches of 16, so an epoch has 90 steps on one learner.
TRAIN_ARGS = "--hidden 2048 --batch-size 16"


def epochs_for(learners: int, epochs: int) -> int:
    """A shape's epochs: about the same seconds per run whatever the gang (an epoch's steps
    are split between the learners, but each step all-reduces), never fewer than 20."""
    return max(20, epochs // learners)


def manifest(learners: int, epochs: int, cpus: float, interval: int | None = None) -> str:
    """The job; `interval`: its checkpoint.interval_s (None: the platform's default)."""
    checkpoint = f"checkpoint: {{interval_s: {interval}}}\n" if interval is not None else ""
    return checkpoint + (
        f"name: overhead-{learners}\nlearners: {learners}\ncpus: {cpus}\nmemory: 1GiB\n"
        "data_stores:\n  - id: digits\n    type: s3\n"
        "    training_data: {container: digits-data}\n"
        "    training_results: {container: digits-results}\n"
        "framework:\n  name: pytorch\n  version: latest\n"
        f"  command: python train.py --epochs {epochs} {TRAIN_ARGS} && {CPU_STAT_CMD}\n"
        "env: {OMP_NUM_THREADS: '1'}\n"
    )


def epoch_seconds(lines: list[str], epochs: int) -> float:
    """Seconds per epoch of the whole training loop, from rank 0's summary line."""
    found = [float(m.group(2)) for line in lines if (m := LOOP.match(line))]
    if not found:
        raise RuntimeError(f"no steps= line in:\n{chr(10).join(lines[-20:])}")
    return found[-1] / epochs


def cpu_stat(lines: list[str]) -> dict[str, float]:
    """The quota's counters from a learner's log: periods, throttled periods, seconds."""
    found = {m.group(1): int(m.group(2)) for line in lines if (m := CPU_STAT.match(line))}
    seconds = found.get("throttled_time", 0) / 1e9 + found.get("throttled_usec", 0) / 1e6
    return {"nr_periods": found.get("nr_periods", 0), "nr_throttled": found.get("nr_throttled", 0),
            "throttled_s": seconds}  # fmt: skip


def client(home: Path) -> httpx.Client:
    cfg = json.loads((home / "client.json").read_text())
    return httpx.Client(base_url=cfg["url"], timeout=60,
                        headers={"Authorization": f"Bearer {cfg['token']}"})  # fmt: skip


def upload_digits(http: httpx.Client) -> bytes:
    import importlib.util

    spec = importlib.util.spec_from_file_location("prepare", REPO / "examples/digits/prepare.py")
    prepare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prepare)
    data = prepare.digits_npz()
    reply = http.put("/v1/data/digits-data/digits.npz", content=data)
    reply.raise_for_status()
    return data


def job_cgroups(engines: list, job_id: str) -> dict[str, tuple[str, Path]]:
    """Container id -> (role, its cpuacct.usage file) of each of the job's containers."""
    found = {}
    for api in engines:
        for c in api.containers.list(filters={"label": f"{LABEL_JOB}={job_id}"}):
            found[c.id] = (c.labels.get(LABEL_ROLE, "?"), CPUACCT / c.id / "cpuacct.usage")
    return found


def read_cpu(cgroups: dict[str, tuple[str, Path]], seen: dict[str, float]) -> None:
    """Each container's CPU seconds so far, kept once the container is gone."""
    for cid, (_, usage) in cgroups.items():
        with contextlib.suppress(OSError, ValueError):
            seen[cid] = int(usage.read_text()) / 1e9


def on_platform(http: httpx.Client, engines: list, learners: int, epochs: int,
                cpus: float, interval: int | None, nodes: list[dict] = ()) -> dict:  # fmt: skip
    """One job: rank 0's seconds per epoch, submit -> first line, the learners' throttling,
    and the CPU seconds of its helpers and learners (`engines`: the Docker engines that run
    its containers, whose cgroups the host's cgroup v1 cpuacct hierarchy holds), and where
    the machine's CPU went meanwhile (`nodes`: the swarm lab's, to name their engines)."""
    code, name = pack_code(EXAMPLE)
    files = {
        "manifest": (
            "m.yaml",
            manifest(learners, epochs, cpus, interval).encode(),
            "application/yaml",
        ),
        "code": (name, code, "application/gzip"),
    }
    watch = CpuWatch(nodes)
    watch.start()
    started = time.monotonic()
    reply = http.post("/v1/jobs", files=files)
    reply.raise_for_status()
    job_id = reply.json()["job_id"]
    first_line, cgroups, cpu, training_from = None, {}, {}, None
    while True:
        job = http.get(f"/v1/jobs/{job_id}").json()
        if first_line is None:
            lines = http.get(f"/v1/jobs/{job_id}/logs", params={"learner": 0}).text.splitlines()
            if any(line.startswith("torch ") for line in lines):
                training_from = time.monotonic()
                first_line = training_from - started
                cgroups = job_cgroups(engines, job_id)
        read_cpu(cgroups, cpu)
        if job["status"] in ("COMPLETED", "FAILED", "HALTED"):
            break
        if time.monotonic() - started > 900:
            raise RuntimeError(f"{job_id} still {job['status']} after 900 s")
        # Once training runs, a look a second: the benchmark's own requests (the API, the
        # log tails it reads from the engine) take the CPU the job's learners measure on.
        time.sleep(0.2 if first_line is None else 1.0)
    by_process = watch.stop({cid: role for cid, (role, _) in cgroups.items()}, training_from)
    logs = [
        http.get(f"/v1/jobs/{job_id}/logs", params={"learner": k}).text.splitlines()
        for k in range(learners)
    ]
    if job["status"] != "COMPLETED":
        raise RuntimeError(f"{job_id} {job['status']}: {job['history'][-1]}\n{logs[0][-20:]}")
    stats = [cpu_stat(lines) for lines in logs]
    by_role = {
        role: round(sum(v for cid, v in cpu.items() if cgroups[cid][0] == role), 2)
        for role in (ROLE_HELPER, ROLE_LEARNER)
    }
    return {"epoch_s": epoch_seconds(logs[0], epochs), "first_line_s": round(first_line or 0.0, 2),
            "nodes": sorted({e.get("node", "") for e in job.get("learners") or []}),
            "throttled": {k: sum(s[k] for s in stats) for k in stats[0]},
            "cpu_s": by_role, "cpu_by_process": by_process}  # fmt: skip


def bench_folder(rootfs: Path, data: bytes) -> Path:
    """A fresh /bench in the image's file system: the data and the example's code."""
    work = rootfs / "bench"
    shutil.rmtree(work, ignore_errors=True)
    (work / "data").mkdir(parents=True)
    (work / "data" / "digits.npz").write_bytes(data)
    shutil.copy(EXAMPLE / "train.py", work / "train.py")
    return work


def in_plain_containers(image: tuple[Path, dict[str, str]], data: bytes, learners: int,
                        epochs: int, cpus: float) -> dict:  # fmt: skip
    """The bare processes as plain containers of the image (bare_side.plain_containers):
    rank 0's seconds per epoch."""
    rootfs, image_env = image
    outputs = plain_containers(IMAGE, bench_folder(rootfs, data), image_env, learners, cpus,
                               f"python train.py --epochs {epochs} {TRAIN_ARGS}")  # fmt: skip
    return {"epoch_s": epoch_seconds(outputs[0].splitlines(), epochs)}


def bare(image: tuple[Path, dict[str, str]], data: bytes, learners: int, epochs: int,
         nodes: list[dict] | None = None, cgroups: bool = False) -> dict:  # fmt: skip
    """The example's processes in the image's file system: on the host's loopback, or with
    `nodes` (the swarm lab's node records: "netns", "address") rank k in node k's network
    namespace, all reaching rank 0 at its node's address over the lab's underlay; with
    `cgroups`, each in a CPU cgroup of its own (OwnCgroups). Rank 0's seconds per epoch, and
    the CPU seconds of all the processes."""
    own = OwnCgroups(learners) if cgroups else None
    rootfs, image_env = image
    bench_folder(rootfs, data)
    port = str(free_port())
    procs = []
    watch = CpuWatch(nodes or ())
    watch.start()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_before = before.ru_utime + before.ru_stime
    for rank in range(learners):
        env = {
            **image_env, "OMP_NUM_THREADS": "1", "RANK": str(rank), "WORLD_SIZE": str(learners),
            "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
            "DATA_DIR": "/bench/data", "RESULT_DIR": f"/bench/results-{rank}",
            "CHECKPOINT_DIR": f"/bench/checkpoints-{rank}",
        }  # fmt: skip
        enter: list[str] = []
        if nodes:
            node = nodes[rank % len(nodes)]
            enter = [NSENTER, f"--net=/var/run/netns/{node['netns']}"]
            # The chroot has no name for the host's hostname, from which gloo would pick its
            # address (it falls back to loopback): the node's interface, named.
            env.update(MASTER_ADDR=nodes[0]["address"], GLOO_SOCKET_IFNAME="eth0")
        cmd = [*enter, CHROOT, str(rootfs), "sh", "-c",
               f"cd /bench && python train.py --epochs {epochs} {TRAIN_ARGS}"]  # fmt: skip
        if own:
            cmd = own.enter(rank, cmd)
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))  # fmt: skip
    try:
        outputs = [p.communicate(timeout=900)[0] for p in procs]
    finally:
        if own:
            own.remove()
    by_process = watch.stop()
    if any(p.returncode for p in procs):
        raise RuntimeError(f"bare run failed:\n{outputs[0][-2000:]}")
    cpu_s = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = cpu_s.ru_utime + cpu_s.ru_stime - cpu_before
    return {"epoch_s": epoch_seconds(outputs[0].splitlines(), epochs), "cpu_s": round(cpu_s, 2),
            "cpu_by_process": by_process}  # fmt: skip


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def spread(values: list[float]) -> float:
    """(max - min) / median: how far apart one side's runs were."""
    return round((max(values) - min(values)) / statistics.median(values), 3)


def by_process(runs: list[dict]) -> dict[str, dict[str, float]]:
    """CPU seconds by process kind (benchmarks.cpu_watch) of each window ("training", "run"),
    the median over runs (a kind missing from a run counts 0 there), largest first."""
    out = {}
    for window in ("training", "run"):
        used = [r["cpu_by_process"][window] for r in runs]
        labels = {label for u in used for label in u}
        medians = {k: statistics.median(u.get(k, 0.0) for u in used) for k in labels}
        out[window] = {
            k: round(v, 2) for k, v in sorted(medians.items(), key=lambda kv: -kv[1]) if v
        }
    return out


def shape(name: str, learners: int, epochs: int, runs: int, platform_run, bares: dict) -> dict:
    """`runs` platform runs and as many of each bare kind (`bares`: name -> run, the first
    is the baseline), in ABBA order: the platform first in even rounds, last in odd ones."""
    load, began = [load_average()], time.monotonic()
    ons: list[dict] = []
    got: dict[str, list[dict]] = {kind: [] for kind in bares}
    for k in range(runs):
        if k % 2 == 0:
            ons.append(platform_run())
        for kind, run in bares.items():
            got[kind].append(run())
        if k % 2 == 1:
            ons.append(platform_run())
    load.append(load_average())
    on_runs = [o["epoch_s"] for o in ons]
    base = next(iter(bares))
    base_runs = [b["epoch_s"] for b in got[base]]
    on_s, bare_s = statistics.median(on_runs), statistics.median(base_runs)
    throttled = {
        key: round(sum(o["throttled"][key] for o in ons), 3) for key in ons[0]["throttled"]
    }
    result = {
        "shape": name,
        "learners": learners,
        "nodes": ons[-1]["nodes"],
        "epochs": epochs,
        "platform_epoch_s": round(on_s, 4),
        "bare_epoch_s": round(bare_s, 4),
        "ratio": round(on_s / bare_s, 3),
        "pair_ratios": [round(o / b, 3) for o, b in zip(on_runs, base_runs, strict=True)],
        "spread": {"platform": spread(on_runs), "bare": spread(base_runs)},
        "first_line_s": round(statistics.median(o["first_line_s"] for o in ons), 2),
        "throttled": throttled,
        # CPU seconds of a run (median): the job's learner and helper containers, and the
        # bare processes.
        "cpu_s": {
            "learners": round(statistics.median(o["cpu_s"][ROLE_LEARNER] for o in ons), 2),
            "helpers": round(statistics.median(o["cpu_s"][ROLE_HELPER] for o in ons), 2),
            "bare": round(statistics.median(b["cpu_s"] for b in got[base]), 2),
        },
        # The same by process, the whole machine's (benchmarks.cpu_watch), while the learners
        # train and over the whole run: what the platform's processes spend beside the
        # learners, against the same processes in the bare runs (whose window is the run).
        "cpu_by_process": {"platform": by_process(ons), "bare": by_process(got[base])},
        "load": load,
        "wall_s": round(time.monotonic() - began, 1),
        "platform_runs": [round(v, 4) for v in on_runs],
        "bare_runs": [round(b, 4) for b in base_runs],
    }
    for kind in list(bares)[1:]:
        runs_s = [b["epoch_s"] for b in got[kind]]
        other = statistics.median(runs_s)
        result[f"bare_{kind}_epoch_s"] = round(other, 4)
        result[f"ratio_vs_{kind}"] = round(on_s / other, 3)
        result[f"bare_{kind}_runs"] = [round(b, 4) for b in runs_s]
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--learners", default="1,2,4", help="docker-backend gang sizes ('': none)")
    ap.add_argument("--swarm", action="store_true", help="also 2 learners on 2 swarm nodes")
    ap.add_argument(
        "--epochs",
        type=int,
        default=60,
        help="epochs of a 1-learner run; N learners run max(20, this / N)",
    )
    ap.add_argument("--runs", type=int, default=4, help="runs of each side per shape")
    ap.add_argument("--checkpoint-interval", type=int, default=None,
                    help="the jobs' checkpoint.interval_s (0: the helper ships checkpoints "
                    "only at the end); default: the platform's")  # fmt: skip
    ap.add_argument("--bare-cgroups", action="store_true",
                    help="docker shapes: also the bare processes each in a CPU cgroup of its "
                    "own, reported beside the baseline (ratio_vs_own_cgroups)")  # fmt: skip
    ap.add_argument("--plain-containers", action="store_true",
                    help="docker shapes: also the bare processes as plain containers of the "
                    "image, each held to the learners' CPUs, on one bridge network, nothing of "
                    "the platform (ratio_vs_plain_containers)")  # fmt: skip
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    interval = args.checkpoint_interval
    sizes = [int(n) for n in args.learners.split(",") if n]
    cpus = os.cpu_count() or 2
    shapes: list[dict] = []
    tmp = Path(tempfile.mkdtemp(prefix="dlaas-overhead-"))
    home = tmp / "home"
    try:
        image = export_image(tmp / "rootfs", IMAGE)
        if sizes:
            platform.up(home, progress=lambda line: None)
        try:
            http = client(home) if sizes else None
            engines = [docker.from_env()]
            data = upload_digits(http) if sizes else b""
            for n in sizes:
                # A learner's share of the machine, as the bare processes get it.
                share, epochs = round(min(1.0, cpus / n), 2), epochs_for(n, args.epochs)
                shapes.append(shape(
                    "docker", n, epochs, args.runs,
                    lambda n=n, s=share, e=epochs: on_platform(http, engines, n, e, s, interval),
                    {"loopback": lambda n=n, e=epochs: bare(image, data, n, e),
                     **({"own_cgroups": lambda n=n, e=epochs: bare(image, data, n, e,
                                                                   cgroups=True)}
                        if args.bare_cgroups else {}),
                     **({"plain_containers": lambda n=n, s=share, e=epochs: in_plain_containers(
                            image, data, n, e, s)}
                        if args.plain_containers else {})},
                ))  # fmt: skip
                print(json.dumps(shapes[-1]), flush=True)
        finally:
            if sizes:
                platform.down(home, progress=lambda line: None)
        if args.swarm:
            os.environ.update(DLAAS_NODE_CPUS="1.1", DLAAS_NODE_IMAGES=IMAGE)
            swarm_home = tmp / "swarm-home"
            platform.up(swarm_home, progress=lambda line: None, nodes=2)
            try:
                http = client(swarm_home)
                data = upload_digits(http)
                # The lab's record (dlaas.local.swarm's state file): each node's namespace
                # and its address on the underlay.
                lab = json.loads((swarm_home / "swarm" / "lab.json").read_text())
                nodes, epochs = lab["nodes"], epochs_for(2, args.epochs)
                engines = [docker.DockerClient(base_url=f"unix://{n['socket']}") for n in nodes]
                shapes.append(shape(
                    "swarm-2-nodes", 2, epochs, args.runs,
                    lambda: on_platform(http, engines, 2, epochs, 1.0, interval, nodes),
                    {"underlay": lambda: bare(image, data, 2, epochs, nodes),
                     "loopback": lambda: bare(image, data, 2, epochs)},
                ))  # fmt: skip
                print(json.dumps(shapes[-1]), flush=True)
            finally:
                platform.down(swarm_home, progress=lambda line: None)
    finally:
        if release_image(tmp / "rootfs"):
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"left {tmp} in place: its /dev or /proc is still mounted", file=sys.stderr)
    result = {"epochs": args.epochs, "runs": args.runs, "shapes": shapes}
    if args.checkpoint_interval is not None:
        result["checkpoint_interval_s"] = args.checkpoint_interval
    if args.json:
        print(json.dumps(result))
    else:
        for s in shapes:
            print(f"{s['shape']:>14} x{s['learners']}: "
                  f"platform {s['platform_epoch_s']:.3f} s/epoch, bare {s['bare_epoch_s']:.3f}, "
                  f"ratio {s['ratio']:.3f} "
                  f"(pairs {min(s['pair_ratios']):.3f}-{max(s['pair_ratios']):.3f}), "
                  f"first line {s['first_line_s']:.1f} s, throttled {s['throttled']}, "
                  f"load {s['load']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
