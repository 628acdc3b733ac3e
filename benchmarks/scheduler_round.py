"""Time one scheduling round on big synthetic clusters.

    python benchmarks/scheduler_round.py [--json] [--policy default] [--repeat 3] [--teams 8]

Clusters of 100 / 1,000 / 10,000 nodes x 8 GPUs, half the GPUs held by running jobs, and
1,000 / 10,000 / 100,000 queued jobs (mostly 1-8 GPU single-node gangs, some multi-node gangs),
paired as (100, 1,000), (1,000, 10,000), (10,000, 100,000). Prints ms per round (best of
--repeat; the median of the same rounds beside it) and the growth factor between sizes; with
--json the last line maps "<nodes>x<queued>" to the best ms. The synthetic workload is seeded:
the same run gives the same rounds.
Team quotas are on by default ([tenancy]): every job belongs to one of `--teams` teams (by its
user) with equal guarantees that together make the cluster; `--teams 0` times rounds without.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from services.scheduler.policy import (
    POLICIES,
    Allocation,
    Node,
    QueuedJob,
    RunningJob,
    Snapshot,
    schedule,
)
from services.scheduler.trace import equal_quotas

SIZES = ((100, 1_000), (1_000, 10_000), (10_000, 100_000))


def build(n_nodes: int, n_queued: int, seed: int = 7, teams: int = 0) -> Snapshot:
    rnd = random.Random(seed)
    nodes = [
        Node(f"n{i:05d}", 8, 64.0, 512_000, labels={"rack": f"r{i // 16}", "area": f"a{i // 256}"})
        for i in range(n_nodes)
    ]
    running = []
    for i, n in enumerate(nodes):  # half the GPUs busy, in 1..4-GPU pieces
        used = 0
        k = 0
        while used < 4:
            g = min(rnd.choice((1, 2, 4)), 4 - used)
            alloc = Allocation(0, n.name, tuple(range(used, used + g)), 2.0, 8_000)
            user = rnd.randrange(50)
            running.append(
                RunningJob(
                    f"r{i}-{k}",
                    f"u{user}",
                    (alloc,),
                    rnd.randrange(3),
                    float(rnd.randrange(10_000)),
                    float(rnd.randrange(200_000)),
                    None,
                    team=f"team{user % teams}" if teams else "",
                )
            )
            used += g
            k += 1
    queue = []
    for i in range(n_queued):
        g = rnd.choice((1, 1, 1, 1, 2, 4, 8))
        learners = 1 if rnd.random() < 0.9 else rnd.choice((2, 4))
        user = rnd.randrange(50)
        queue.append(
            QueuedJob(
                f"q{i}",
                f"u{user}",
                learners,
                g,
                2.0,
                8_000,
                rnd.randrange(3),
                float(10_000 + i),
                team=f"team{user % teams}" if teams else "",
            )
        )
    quotas = equal_quotas(teams, tuple(nodes)) if teams else {}
    return Snapshot(nodes, running, queue, quotas)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--policy", default="default", choices=POLICIES)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--max-nodes", type=int, default=10_000)
    p.add_argument("--teams", type=int, default=8, help="teams with quotas (0: none)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.teams < 0:
        p.error("--teams: must not be negative")
    out: dict[str, float] = {}
    prev = None
    print(f"policy {a.policy}, {a.teams} teams with quotas: one round, best of {a.repeat}")
    for n_nodes, n_queued in SIZES:
        if n_nodes > a.max_nodes:
            continue
        snap = build(n_nodes, n_queued, teams=a.teams)
        times = []
        started = 0
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            ds = schedule(snap, 20_000.0, a.policy, include_waits=False)
            times.append(time.perf_counter() - t0)
            started = sum(d.action == "start" for d in ds)
        ms = min(times) * 1000
        growth = f"x{ms / prev:.1f} for x10 size" if prev else ""
        print(
            f"  {n_nodes:>6} nodes x8 GPUs, {n_queued:>7} queued: {ms:9.1f} ms/round "
            f"(median {statistics.median(times) * 1000:.1f}; {started} starts, "
            f"{len(ds) - started} other decisions) {growth}"
        )
        out[f"{n_nodes}x{n_queued}"] = round(ms, 2)
        prev = ms
    if a.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
