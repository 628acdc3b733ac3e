"""Two (or N) teams with equal guarantees on a Philly window: each team's avg JCT and GPU share.

    python benchmarks/team_share.py [--window B] [--teams 2] [--policy default] [--json]

Replays window A (VC 6c71a0 on 16x4 GPUs) and B (VC 6214e9 on 24x4 GPUs), submits in
[2017-10-09, 2017-10-23), through the simulator and the same `schedule()` the live scheduler
calls. The jobs are split into teams by a CRC-32 hash of the job id (services/scheduler/trace.py, team_of), and each
window is replayed twice: once with equal guarantees that together make the whole cluster
(reclaim on), once with the same teams and no quotas (the baseline: exactly the policy's
decisions without teams). Prints, per team, jobs, avg JCT, share of the GPU time used (over a
whole replay that is the team's share of the trace's work, whatever the policy), share while
every team had jobs waiting (what quotas change), and the GPU-hours it had jobs waiting while
holding less than min(guarantee, what it asked for). With --json the last line maps
window -> {"quotas"|"no_quotas" -> metrics}.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import datetime

from services.scheduler.policy import POLICIES
from services.scheduler.replay import simulate
from services.scheduler.trace import load_trace

WINDOWS = {"A": ("6c71a0", 16), "B": ("6214e9", 24)}
HERE = os.path.dirname(os.path.abspath(__file__))
TRACE = os.path.join(HERE, "..", "..", "shared", "traces", "philly.csv")


def run(trace: str, window: str, teams: int, policy: str) -> dict[str, dict]:
    vc, nodes = WINDOWS[window]
    jobs = load_trace(trace, vc, datetime(2017, 10, 9), datetime(2017, 10, 23))
    out = {}
    for label, guarantees in (("no_quotas", False), ("quotas", True)):
        t0 = time.perf_counter()
        m = simulate(jobs, nodes, 4, policy, teams=teams, guarantees=guarantees)
        wall = time.perf_counter() - t0
        out[label] = {
            "avg_jct": round(m["avg_jct"]),
            "p99_jct": round(m["p99_jct"]),
            "preemptions": m["preemptions"],
            "reclaims": m["reclaims"],
            "contended_hours": round(next(iter(m["teams"].values()))["contended_hours"]),
            "teams": {
                name: {
                    "jobs": t["jobs"],
                    "avg_jct": round(t["avg_jct"]),
                    "gpu_share": round(t["gpu_share"], 4),
                    "contended_gpu_share": round(t["contended_gpu_share"], 4),
                    "short_gpu_hours": round(t["short_gpu_hours"]),
                }
                for name, t in m["teams"].items()
            },
        }
        print(
            f"window {window} (VC {vc}, {nodes}x4 GPUs), {teams} teams, "
            f"{'equal guarantees' if guarantees else 'no quotas'}: avg JCT "
            f"{m['avg_jct']:,.0f} s, p99 {m['p99_jct']:,.0f} s, {m['preemptions']:,} preemptions "
            f"({m['reclaims']:,} reclaims), replayed in {wall:.1f} s; every team had jobs "
            f"waiting for {next(iter(m['teams'].values()))['contended_hours']:,.0f} h"
        )
        for name, t in m["teams"].items():
            print(
                f"  {name} (guarantee {t['quota_gpus']} GPUs): {t['jobs']:>5,} jobs, avg JCT "
                f"{t['avg_jct']:>8,.0f} s, {t['gpu_share']:6.1%} of the GPU time used, "
                f"{t['contended_gpu_share']:6.1%} of it while every team had jobs waiting; "
                f"short of its guarantee while waiting {t['short_gpu_hours']:>7,.0f} GPU-h"
            )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trace", default=TRACE)
    p.add_argument("--window", choices=sorted(WINDOWS), action="append")
    p.add_argument("--teams", type=int, default=2)
    p.add_argument("--policy", default="default", choices=POLICIES)
    p.add_argument("--json", action="store_true", help="last line: window -> metrics")
    a = p.parse_args(argv)
    if a.teams < 1:
        p.error("--teams: must be at least 1")
    out = {w: run(a.trace, w, a.teams, a.policy) for w in a.window or ["B", "A"]}
    if a.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
