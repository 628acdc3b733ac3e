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

Production-shaped windows P1..P6 (all on 14 x 8 GPUs), a STAND-IN for the issue's held-out
production trace, which is not public: 80-85 % 1-GPU jobs, 6-15 % 8-GPU, gangs of 16, 32 and
64 GPUs, months long. No single Philly VC has that mix, so these are sampled from the jobs of
ALL Philly VCs submitted in [start, end) (`mix()`: gangs over 64 GPUs dropped; 1- and 8-GPU
jobs kept in the ratio 82 : 10; offered load about 85 % of the 112 GPUs). They are Philly jobs,
not production ones; two seeds per range give two independent samples of the same months.
  P1, P2  2017-10-01..2017-12-01, seeds 1 and 2 (3,916 and 3,853 jobs)
  P3, P4  2017-09-04..2017-11-01, seeds 1 and 2 (2,206 and 2,082 jobs)
  P5, P6  2017-11-01..2017-12-22, seeds 1 and 2 (4,264 and 4,360 jobs)
`load_window(name)` serves both kinds of window (this script and oracle_jct.py use it).

`--gpu-count` replays with the placement model of Tiresias' simulator (a job takes any free
GPUs; see simulator.py) to compare with figures from that simulator.

Runs one simulation at a time (the development machine is shared) and prints one row per run;
`--json`: the last line is a list of {window, policy, metrics}.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import time
import zlib
from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from services.scheduler.replay import simulate
from services.scheduler.trace import TraceJob, load_trace

HERE = os.path.dirname(os.path.abspath(__file__))
TRACE = os.path.join(HERE, "..", "..", "shared", "traces", "philly.csv")
if not os.path.exists(TRACE):
    TRACE = "/work/shared/traces/philly.csv"

DAY = "%Y-%m-%d"
STAMP = "%Y-%m-%d %H:%M:%S"

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

# name: (start, end, seed, nodes, gpus per node); every VC's jobs, sampled by `mix()`
MIXED_WINDOWS = {
    "P1": ("2017-10-01", "2017-12-01", 1, 14, 8),
    "P2": ("2017-10-01", "2017-12-01", 2, 14, 8),
    "P3": ("2017-09-04", "2017-11-01", 1, 14, 8),
    "P4": ("2017-09-04", "2017-11-01", 2, 14, 8),
    "P5": ("2017-11-01", "2017-12-22", 1, 14, 8),
    "P6": ("2017-11-01", "2017-12-22", 2, 14, 8),
}

# The production trace's gangs stop at 64 GPUs (8 of its nodes); Philly's 128-GPU ones go.
MAX_GANG = 64


def window_names() -> list[str]:
    return [*WINDOWS, *MIXED_WINDOWS]


def unknown_window(name: str) -> str:
    return f"unknown window {name!r}; expected some of {', '.join(window_names())}"


@dataclass(frozen=True, slots=True)
class Row:
    """One trace job: its 0-based data row (the `j{index}` of its id), submit in seconds since
    the window's start, run time in seconds, gang size."""

    index: int
    submit: float
    duration: float
    gpus: int


@dataclass(frozen=True, slots=True)
class Mix:
    jobs: list[TraceJob]
    p1: float  # keep probability of a 1-GPU job
    p8: float  # ... of an 8-GPU job or a 16-64-GPU gang (2- and 4-GPU jobs: p8 / 3)
    expected_load: float  # kept GPU-seconds expected / (window seconds x cluster GPUs)


def read_rows(trace: str, start: datetime, end: datetime) -> list[Row]:
    """Every job (all VCs) of the csv submitted in [start, end); a clear one-line error when the
    file cannot be read or lacks a column."""
    lo, hi = start.strftime(STAMP), end.strftime(STAMP)
    try:
        fh = open(trace, newline="")  # noqa: SIM115 - opened here so the error names the flag
    except OSError as e:
        raise SystemExit(f"error: --trace: cannot read {trace}: {e.strerror}") from None
    out = []
    with fh:
        reader = csv.DictReader(fh)
        missing = {"timestamp", "duration", "num_gpus"} - set(reader.fieldnames or [])
        if missing:
            raise SystemExit(f"error: --trace: missing column(s) {', '.join(sorted(missing))}")
        for i, row in enumerate(reader):
            ts = row["timestamp"]
            if not (lo <= ts < hi):  # ISO strings sort as times
                continue
            try:
                t = (datetime.strptime(ts, STAMP) - start).total_seconds()
                out.append(Row(i, t, float(row["duration"]), int(float(row["num_gpus"]))))
            except ValueError as e:
                raise SystemExit(f"error: --trace: data row {i + 1}: {e}") from None
    return out


def mix_probabilities(
    rows: list[Row], span_s: float, cap: int, share1: float, share8: float, load: float
) -> tuple[float, float, float]:
    """(p1, p8, expected load): p8 on the grid 0.01..1.00 whose expected offered load is nearest
    `load` (the first on a tie), p1 the one that keeps 1- and 8-GPU jobs in the ratio
    share1 : share8 (capped at 1, every 1-GPU job). Pure."""
    count = Counter(r.gpus for r in rows)
    area = Counter()  # GPU-seconds by gang size, in first-seen order (the sum's order)
    for r in rows:
        area[r.gpus] += r.duration * r.gpus
    n1, n8 = count[1], count[8]
    if not n1 or not n8:
        raise ValueError(f"no {'1' if not n1 else '8'}-GPU job in the range to set the mix from")
    gang_area = sum(area[k] for k in area if 16 <= k <= MAX_GANG)
    best = None
    for p8 in [x / 100 for x in range(1, 101)]:
        k1 = share1 / share8 * (p8 * n8)
        p1 = min(1, k1 / n1)
        kept = p1 * area[1] + p8 * area[8] + p8 / 3 * (area[2] + area[4]) + p8 * gang_area
        offered = kept / (span_s * cap)
        if best is None or abs(offered - load) < abs(best[2] - load):
            best = (p1, p8, offered)
    return best


def keep_probability(gpus: int, p1: float, p8: float) -> float:
    if gpus > MAX_GANG:
        return 0.0
    if gpus == 1:
        return p1
    # 2- and 4-GPU jobs are rarer in the production mix than in Philly's; any other size
    # (8, 16-64, Philly's few 12-GPU jobs) goes with the 8-GPU jobs
    return p8 / 3 if gpus in (2, 4) else p8


def kept(seed: int, index: int, p: float) -> bool:
    """A seeded, per-row coin: the same row gets the same draw on every run and machine."""
    return zlib.crc32(f"{seed}:{index}".encode()) % 10_000 / 10_000 < p


def sample(rows: list[Row], seed: int, p1: float, p8: float) -> list[TraceJob]:
    """The kept rows as simulator jobs, sorted by (submit, job id) as `load_trace` sorts. Pure."""
    out = [
        TraceJob(f"j{r.index}", r.submit, r.duration, r.gpus)
        for r in rows
        if kept(seed, r.index, keep_probability(r.gpus, p1, p8))
    ]
    out.sort(key=lambda j: (j.submit, j.job_id))
    return out


def mix(
    trace: str,
    start: str,
    end: str,
    seed: int,
    share1: float = 0.82,
    share8: float = 0.10,
    load: float = 0.85,
    cap: int = 112,
) -> Mix:
    """A production-shaped sample of every VC's jobs submitted in [start, end) (dates
    YYYY-MM-DD): see the module docstring. `cap`: the cluster's GPUs the load is relative to."""
    s0, s1 = datetime.strptime(start, DAY), datetime.strptime(end, DAY)
    rows = read_rows(trace, s0, s1)
    p1, p8, offered = mix_probabilities(rows, (s1 - s0).total_seconds(), cap, share1, share8, load)
    return Mix(sample(rows, seed, p1, p8), p1, p8, offered)


def load_window(name: str, trace: str = TRACE) -> tuple[list[TraceJob], int, int]:
    """(jobs, nodes, GPUs per node) of a named window, per-VC or mixed; ValueError if unknown."""
    if name in WINDOWS:
        vc, start, end, nodes, gpn = WINDOWS[name]
        s0, s1 = datetime.strptime(start, DAY), datetime.strptime(end, DAY)
        return load_trace(trace, vc, s0, s1), nodes, gpn
    if name in MIXED_WINDOWS:
        start, end, seed, nodes, gpn = MIXED_WINDOWS[name]
        return mix(trace, start, end, seed, cap=nodes * gpn).jobs, nodes, gpn
    raise ValueError(unknown_window(name))


def run(window: str, policy: str, trace: str = TRACE, gpu_count: bool = False) -> dict:
    jobs, nodes, gpn = load_window(window, trace)
    return simulate(jobs, nodes, gpn, policy, gpu_count=gpu_count)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--windows", default="A,B,A8,B8,C8")
    p.add_argument("--policies", default="default,tiresias-las,las,fifo")
    p.add_argument("--trace", default=TRACE)
    p.add_argument("--gpu-count", action="store_true", help="Tiresias' placement model")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    windows = a.windows.split(",")
    for w in windows:  # all checked before the first (minutes-long) run
        if w not in WINDOWS and w not in MIXED_WINDOWS:
            p.error(f"--windows: {unknown_window(w)}")
    rows = []
    for w in windows:
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
