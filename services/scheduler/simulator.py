"""Trace-driven, event-driven simulator: replays a Philly-style trace through `schedule()`.

    python -m services.scheduler.simulator --trace PATH --vc VC --start DATE --end DATE \
        --nodes N --gpus-per-node G --policy NAME [--teams N] [--gpu-count] [--elastic SHARE]
        [--json]

It calls the SAME pure `schedule()` the live scheduler service calls, once per batch of events
(submits and finishes at the same instant, plus LAS level crossings and a coarse tick while jobs
wait so starvation promotion is noticed). Time only jumps between events; nothing ticks per second.

The replay and its modelling choices: replay.py; reading the trace: trace.py.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime

from services.scheduler.policy import DEFAULT_POLICY, POLICIES
from services.scheduler.replay import WAITED_S, simulate
from services.scheduler.trace import load_trace


def _parse_date(s: str, field: str) -> datetime:
    for fmt in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d"):
        try:
            return datetime.strptime(s, fmt)
        except ValueError:
            pass
    raise SystemExit(f"error: --{field}: expected YYYY-MM-DD[ HH:MM:SS], got {s!r}")


KEYS = (
    "jobs",
    "refused",
    "avg_jct",
    "p50_jct",
    "p95_jct",
    "p99_jct",
    "avg_queue",
    "p99_queue",
    "utilization",
    "preemptions",
    "eta_in_range",
    "eta_median_abs_error",
    "eta_median_width",
    "waited",
    "eta_in_range_waited",
    "eta_median_width_waited",
    "median_wait_waited",
)


ELASTIC_KEYS = (
    "elastic_jobs",
    "elastic_job_hours",
    "resizes",
    "resizes_per_job_hour",
    "resize_learner_s",
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="dlaas simulate", description=__doc__.split("\n")[0])
    p.add_argument(
        "--trace",
        required=True,
        help="CSV with columns timestamp (YYYY-MM-DD HH:MM:SS), duration (s), num_gpus and, "
        "for --vc, cluster",
    )
    p.add_argument("--vc", help="virtual cluster to replay, e.g. 6c71a0 (default: every job)")
    p.add_argument("--start", help="first submit day, YYYY-MM-DD (default: the trace's first)")
    p.add_argument("--end", help="end of submits (exclusive), YYYY-MM-DD (default: none)")
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--gpus-per-node", type=int, required=True)
    p.add_argument("--policy", default=DEFAULT_POLICY, choices=POLICIES)
    p.add_argument("--checkpoint-save-s", type=float, default=20.0)
    p.add_argument("--restore-s", type=float, default=30.0)
    p.add_argument(
        "--teams",
        type=int,
        default=0,
        help="split the jobs into N teams by a hash of the job id, equal guarantees summing to "
        "the cluster; print each team's avg JCT and share of GPU time (default 0: no teams)",
    )
    p.add_argument(
        "--gpu-count",
        action="store_true",
        help="Tiresias' simulator's placement model: a job takes any free GPUs, not whole "
        "learners on nodes (for comparison with that simulator only)",
    )
    p.add_argument(
        "--elastic",
        type=float,
        default=0.0,
        help="make this share (0..1) of the jobs elastic with auto_grow (min half, max twice "
        "their learners) and report their resizes and the learner-seconds those cost",
    )
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="the ETA guesses running jobs' time left from finished jobs' run times, as for "
        "jobs whose logs give no progress (default: known from the trace)",
    )
    p.add_argument("--json", action="store_true", help="last line: one JSON object of metrics")
    a = p.parse_args(argv)
    for name in ("nodes", "gpus_per_node"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')}: must be at least 1")
    if a.teams < 0:
        p.error("--teams: must not be negative")
    if not 0 <= a.elastic <= 1:
        p.error("--elastic: expected a share from 0 to 1")
    for name in ("checkpoint_save_s", "restore_s"):
        if getattr(a, name) < 0:
            p.error(f"--{name.replace('_', '-')}: must not be negative")
    start = _parse_date(a.start, "start") if a.start else None
    end = _parse_date(a.end, "end") if a.end else None
    if start and end and end <= start:
        p.error("--end: must be after --start")
    t0 = time.perf_counter()
    jobs = load_trace(a.trace, a.vc, start, end)
    if not jobs:
        chosen = [f"--{k} {v}" for k, v in (("vc", a.vc), ("start", a.start), ("end", a.end)) if v]
        raise SystemExit(
            f"error: --trace: no job in {a.trace}"
            + (f" matches {', '.join(chosen)}" if chosen else "")
        )
    m = simulate(
        jobs,
        a.nodes,
        a.gpus_per_node,
        a.policy,
        a.checkpoint_save_s,
        a.restore_s,
        teams=a.teams,
        gpu_count=a.gpu_count,
        elastic=a.elastic,
        progress=not a.no_progress,
    )
    wall = time.perf_counter() - t0
    span = f"[{a.start or 'first'}, " + (f"{a.end})" if a.end else "last]")
    print(
        f"policy {a.policy}  VC {a.vc or 'all'}  {a.nodes}x{a.gpus_per_node} GPUs  "
        f"submits {span}  replayed in {wall:.1f} s"
    )
    rows = [
        ("jobs (finished)", f"{m['jobs']:,}"),
        ("refused (larger than cluster)", f"{m['refused']:,}"),
        ("avg JCT", f"{m['avg_jct']:,.0f} s"),
        (
            "p50 / p95 / p99 JCT",
            f"{m['p50_jct']:,.0f} / {m['p95_jct']:,.0f} / {m['p99_jct']:,.0f} s",
        ),
        ("avg / p99 queueing delay", f"{m['avg_queue']:,.0f} / {m['p99_queue']:,.0f} s"),
        ("GPU utilization", f"{m['utilization']:.1%}"),
        ("preemptions", f"{m['preemptions']:,}"),
        ("ETA in range (all jobs)", f"{m['eta_in_range']:.1%}"),
        ("ETA median abs error", f"{m['eta_median_abs_error']:,.0f} s"),
        ("ETA median width (all jobs)", f"{m['eta_median_width']:,.0f} s"),
        (
            f"jobs that waited >= {WAITED_S / 60:.0f} min",
            (
                f"{m['waited']:,}: ETA in range {m['eta_in_range_waited']:.1%}, median width "
                f"{m['eta_median_width_waited']:,.0f} s, median wait "
                f"{m['median_wait_waited']:,.0f} s"
            ),
        ),
    ]
    if a.elastic:
        rows.append(
            (
                f"resizes of {m['elastic_jobs']:,} elastic jobs",
                (
                    f"{m['resizes']:,} ({m['resizes_per_job_hour']:.3f} per job-hour), "
                    f"{m['resize_learner_s']:,.0f} learner-s lost to their restarts"
                ),
            )
        )
    if a.teams:
        rows.append(("reclaims (preemptions for a guarantee)", f"{m['reclaims']:,}"))
        for name, t in m["teams"].items():
            what = (
                f"{t['jobs']:,} jobs, avg JCT {t['avg_jct']:,.0f} s, {t['gpu_share']:.1%} of the "
                f"GPU time used ({t['contended_gpu_share']:.1%} while every team had jobs waiting, "
                f"{t['contended_hours']:,.0f} h); short of its guarantee while waiting: "
                f"{t['short_gpu_hours']:,.0f} GPU-h"
            )
            rows.append((f"{name} (guarantee {t['quota_gpus']} GPUs)", what))
    for k, v in rows:
        print(f"  {k:<40} {v}")
    if a.json:
        extra = ("reclaims", "teams") if a.teams else ()
        if a.elastic:
            extra += ELASTIC_KEYS
        print(json.dumps({k: m[k] for k in (*KEYS, *extra)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
