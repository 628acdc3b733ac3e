"""The scheduler's results table: policies x Philly windows x cluster shapes, through the simulator.

    python benchmarks/policy_table.py [--windows A,B,A8,B8,C8] [--policies default,fifo,...] [--json]

Windows (submits in [start, end) of one Philly virtual cluster, replayed on a cluster shape):
  A   VC 6c71a0, 2017-10-09..23, 16 x 4 GPUs (mostly 1-GPU jobs, 4- and 8-GPU gangs)
  B   VC 6214e9, 2017-10-09..23, 24 x 4 GPUs (almost all 1-GPU jobs, a long queue)
  A8  window A's jobs on 14 x 8 GPUs (8-GPU gangs on one node, 16-GPU ones over two)
  B8  window B's jobs on 14 x 8 GPUs
  A8x8 window A's jobs on 8 x 8 GPUs (A's 64 GPUs, and its load, on 8-GPU nodes)
  C8  VC ee9e8c, 2017-11-13..2017-12-11, 14 x 8 GPUs: Philly's gang-heavy VC (53-20 % 1-GPU,
      26-32 % 8-GPU, gangs of 16, 24, 32 and 64 GPUs spanning 2-8 nodes; 128-GPU jobs refused)
The 14 x 8 windows are the shape of the [scheduler] issue's production clusters (14 nodes x 8
GPUs, multi-node gangs); C8 is the Philly VC closest to that trace's gang mix.
`--gpu-count` replays with the placement model of Tiresias' simulator (a job takes any free
GPUs; see simulator.py) to compare with figures from that simulator.

Runs one simulation at a time (the development machine is shared) and prints one row per run;
`--json`: the last line is a list of {window, policy, metrics}.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import datetime

from services.scheduler.simulator import load_trace, simulate

HERE = os.path.dirname(os.path.abspath(__file__))
TRACE = os.path.join(HERE, "..", "..", "shared", "traces", "philly.csv")
if not os.path.exists(TRACE):
    TRACE = "/work/shared/traces/philly.csv"

# name: (vc, start, end, nodes, gpus per node)
WINDOWS = {
    "A": ("6c71a0", "2017-10-09", "2017-10-23", 16, 4),
    "B": ("6214e9", "2017-10-09", "2017-10-23", 24, 4),
    "A8": ("6c71a0", "2017-10-09", "2017-10-23", 14, 8),
    "B8": ("6214e9", "2017-10-09", "2017-10-23", 14, 8),
    "C8": ("ee9e8c", "2017-11-13", "2017-12-11", 14, 8),
    "A8x8": ("6c71a0", "2017-10-09", "2017-10-23", 8, 8),
    "H1": ("ee9e8c", "2017-10-02", "2017-10-30", 14, 8),
    "H2": ("b436b2", "2017-10-09", "2017-11-06", 14, 8),
    "H3": ("2869ce", "2017-09-04", "2017-12-22", 14, 8),
    "H4": ("7f04ca", "2017-09-04", "2017-12-22", 14, 8),
    "H5": ("11cb48", "2017-10-09", "2017-10-23", 14, 8),
}


def run(window: str, policy: str, trace: str = TRACE, gpu_count: bool = False) -> dict:
    vc, start, end, nodes, gpn = WINDOWS[window]
    jobs = load_trace(
        trace, vc, datetime.strptime(start, "%Y-%m-%d"), datetime.strptime(end, "%Y-%m-%d")
    )
    return simulate(jobs, nodes, gpn, policy, gpu_count=gpu_count)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--windows", default="A,B,A8,B8,C8")
    p.add_argument("--policies", default="default,tiresias-las,las,fifo")
    p.add_argument("--trace", default=TRACE)
    p.add_argument("--gpu-count", action="store_true", help="Tiresias' placement model")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    rows = []
    for w in a.windows.split(","):
        if w not in WINDOWS:
            p.error(f"--windows: unknown window {w!r}; expected some of {', '.join(WINDOWS)}")
        for pol in a.policies.split(","):
            t0 = time.perf_counter()
            m = run(w, pol, a.trace, a.gpu_count)
            wall = time.perf_counter() - t0
            rows.append({"window": w, "policy": pol, "gpu_count": a.gpu_count, **m})
            print(
                f"{w:<4} {pol:<13} jobs {m['jobs']:>6} refused {m['refused']:>3} "
                f"avg {m['avg_jct']:>8,.0f} p99 {m['p99_jct']:>9,.0f} "
                f"pre {m['preemptions']:>6} | eta waited {m['waited']:>5} "
                f"in {m['eta_in_range_waited']:.1%} width {m['eta_median_width_waited']:>7,.0f} "
                f"wait {m['median_wait_waited']:>7,.0f}  ({wall:.0f} s)",
                flush=True,
            )
    if a.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
