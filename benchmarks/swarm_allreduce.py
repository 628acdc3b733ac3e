"""Where the swarm shape of training_overhead.py loses its time: one gloo all-reduce of the
DDP example's gradient (150,000 float32, ~600 KB) between two processes, over each path.

    python benchmarks/swarm_allreduce.py [--rounds 2] [--iters 200] [--jumbo] [--json]

Brings up a 2-node swarm lab (dlaas.local.swarm, the learner PyTorch image copied to the
nodes) and times, alternated in `--rounds` rounds, ms per all-reduce (after 20 warm-up ones)
for the two ranks:
- `loopback`: both in one container on the node's host network (what the bare runs of
  training_overhead.py use);
- `bridge`: two containers on one node, on a job overlay network (the node's own bridge,
  no VXLAN), 1 CPU each;
- `overlay`: one container on each node, 1 CPU each (training_overhead.py's swarm shape:
  VXLAN between the nodes' namespaces);
- `overlay-nolimit`: the same without the CPU limit;
- `underlay`: one container on each node in the node's own network namespace (host network
  of the node's dockerd), 1 CPU each, all-reducing over the lab's veths and bridge to the
  other node's address: the path of training_overhead.py's bare swarm baseline, with the
  container's cgroup and seccomp; what `overlay` costs beyond it is the VXLAN path;
- `underlay-nolimit`: the same without the CPU limit;
- `overlay-ifname`: with GLOO_SOCKET_IFNAME=eth0 (the job network's interface);
- with --jumbo, after the others: `overlay-jumbo`, underlay veths and bridge at MTU 9000 and
  a job network at 8950 (`com.docker.network.driver.mtu`), beside the 1450 network and
  loopback again (measured 2026-11-26: no gain).
With --json the last line is {"iters", "rounds", "paths": {path: [ms per round, ...]},
"median_ms": {path: ms}}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import docker

from dlaas.local.swarm import SwarmLab

IMAGE = "dlaas/learner-pytorch:2.13"
CODE = """\
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(150_000)
for _ in range(20):
    dist.all_reduce(t)
n = int(os.environ["ITERS"])
t0 = time.perf_counter()
for _ in range(n):
    dist.all_reduce(t)
if dist.get_rank() == 0:
    print(f"RESULT {(time.perf_counter() - t0) / n * 1000:.3f}", flush=True)
"""


def result(container) -> float:
    container.wait(timeout=600)
    out = container.logs().decode()
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise RuntimeError(out[-2000:])
    return float(lines[0].split()[1])


class Probe:
    def __init__(self, lab: SwarmLab, work: Path, iters: int) -> None:
        info = lab.info()
        self.nodes = [docker.DockerClient(base_url=info.node_sockets[n]) for n in info.nodes]
        self.addresses = [info.node_addresses[n] for n in info.nodes]
        self.manager = docker.DockerClient(base_url=info.manager_socket)
        self.work = work
        self.iters = iters
        self.n = 0

    def pair(self, network: str, nodes: tuple[int, int], cpus: float = 1.0, **env) -> float:
        names = [f"ar{self.n + 1}-{rank}" for rank in (0, 1)]
        clients = [self.nodes[node] for node in nodes]
        return self._ranks(clients, names[0], "29500", cpus, env, network=network)

    def underlay(self, cpus: float = 1.0) -> float:
        """One container per node on the node's network namespace, rank 0 at node 1's address."""
        env = {"GLOO_SOCKET_IFNAME": "eth0"}
        return self._ranks(self.nodes, self.addresses[0], "29512", cpus, env, network_mode="host")

    def _ranks(self, clients, master: str, port: str, cpus: float, env: dict, **net) -> float:
        """Rank r in a container of clients[r] (named ar<n>-<r>), on `net`; rank 0's figure."""
        self.n += 1
        made = []
        try:
            for rank, client in enumerate(clients):
                made.append(client.containers.run(
                    IMAGE, ["python", "/w/ar.py"], detach=True, name=f"ar{self.n}-{rank}",
                    environment={"MASTER_ADDR": master, "MASTER_PORT": port, "RANK": rank,
                                 "WORLD_SIZE": 2, "OMP_NUM_THREADS": 1, "ITERS": self.iters, **env},
                    volumes={str(self.work): {"bind": "/w", "mode": "ro"}},
                    nano_cpus=int(cpus * 1e9) if cpus else None,
                    **net,
                ))  # fmt: skip
            return result(made[0])
        finally:
            for c in made:
                c.remove(force=True)

    def loopback(self) -> float:
        self.n += 1
        c = self.nodes[0].containers.run(
            IMAGE, ["sh", "-c", "RANK=1 python /w/ar.py & RANK=0 python /w/ar.py; wait"],
            detach=True, network_mode="host", name=f"ar{self.n}",
            environment={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29511", "WORLD_SIZE": 2,
                         "OMP_NUM_THREADS": 1, "ITERS": self.iters},
            volumes={str(self.work): {"bind": "/w", "mode": "ro"}},
        )  # fmt: skip
        try:
            return result(c)
        finally:
            c.remove(force=True)


def jumbo(lab: SwarmLab, mtu: int = 9000) -> None:
    """The lab's underlay at `mtu`: the host bridge, the veths, the nodes' eth0."""
    record = json.loads((lab.state_dir / "lab.json").read_text())
    for node in record["nodes"]:
        subprocess.run(["ip", "link", "set", node["veth"], "mtu", str(mtu)], check=True)
        subprocess.run(["ip", "-n", node["netns"], "link", "set", "eth0", "mtu", str(mtu)],
                       check=True)  # fmt: skip
    subprocess.run(["ip", "link", "set", record["bridge"], "mtu", str(mtu)], check=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--jumbo", action="store_true", help="also the MTU 9000 rounds")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    paths: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="dlaas-allreduce-") as tmp:
        work = Path(tmp) / "code"
        work.mkdir()
        (work / "ar.py").write_text(CODE)
        lab = SwarmLab(Path(tmp) / "lab", nodes=2, images=[IMAGE], progress=print)
        lab.up()
        try:
            probe = Probe(lab, work, args.iters)
            probe.manager.networks.create("ar-net", driver="overlay", attachable=True)
            runs = {
                "loopback": probe.loopback,
                "bridge": lambda: probe.pair("ar-net", (0, 0)),
                "overlay": lambda: probe.pair("ar-net", (0, 1)),
                "overlay-nolimit": lambda: probe.pair("ar-net", (0, 1), cpus=0),
                "underlay": probe.underlay,
                "underlay-nolimit": lambda: probe.underlay(cpus=0),
                "overlay-ifname": lambda: probe.pair("ar-net", (0, 1), GLOO_SOCKET_IFNAME="eth0"),
            }
            for _ in range(args.rounds):
                for name, run in runs.items():
                    paths.setdefault(name, []).append(run())
                    print(name, paths[name][-1], flush=True)
            if args.jumbo:
                jumbo(lab)
                opts = {"com.docker.network.driver.mtu": "8950"}
                probe.manager.networks.create("ar-jumbo", driver="overlay", attachable=True,
                                              options=opts)  # fmt: skip
                for _ in range(args.rounds):
                    for name, run in {
                        "overlay-jumbo": lambda: probe.pair("ar-jumbo", (0, 1)),
                        "overlay-after-jumbo": lambda: probe.pair("ar-net", (0, 1)),
                        "loopback-after-jumbo": probe.loopback,
                    }.items():
                        paths.setdefault(name, []).append(run())
                        print(name, paths[name][-1], flush=True)
        finally:
            lab.down()
    medians = {k: round(statistics.median(v), 3) for k, v in paths.items()}
    for name, ms in medians.items():
        print(f"{name:22s} {ms:7.3f} ms  runs {paths[name]}")
    if args.json:
        print(json.dumps({"iters": args.iters, "rounds": args.rounds, "paths": paths,
                          "median_ms": medians}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
