"""Log and metric latency, measured on a real platform: a learner prints a metric line;
how long until it is seen through the REST log follow stream and the metrics follow stream.

Each job's learner sleeps a few seconds (so both followers are attached), then prints
`--lines` lines `step=I stamp=T`, T its own wall clock at printing, one every `--gap`
seconds. Two followers per job read `GET /v1/jobs/{id}/logs?follow=true` and
`GET /v1/jobs/{id}/metrics?follow=true`; each line's latency is the follower's clock at
receipt minus T (one machine, one clock). Two runs: one job alone, then `--concurrent`
jobs at once. Prints p50/p99 of each stream (targets: p99 <= 0.5 s for both).

Usage: python benchmarks/log_metrics_latency.py [--lines 200] [--concurrent 20] [--json]
    [--home DIR]
It brings the platform up in DIR (a temporary one by default) and down again if it
started it. With --json the last line is {"single": {...}, "concurrent": {...}}, each
{"jobs", "lines", "logs": {"p50_s", "p99_s"}, "metrics": {"p50_s", "p99_s"}}.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import threading
import time
from pathlib import Path

import httpx

from dlaas.local import components, platform

MANIFEST = """
name: log-metrics-latency
learners: 1
cpus: {cpus}
memory: 128MiB
framework:
  name: python
  version: "3"
  command: >-
    python3 -c "import time; time.sleep({delay});
    [print(f'step={{i}} stamp={{time.time():.6f}}', flush=True) or time.sleep({gap})
    for i in range({lines})]"
"""
STAMP = re.compile(r"stamp=([0-9.]+)")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def follow_logs(http: httpx.Client, job_id: str, out: list[float]) -> None:
    with http.stream("GET", f"/v1/jobs/{job_id}/logs", params={"follow": "true"}) as r:
        for line in r.iter_lines():
            now = time.time()
            m = STAMP.search(line)
            if m:
                out.append(now - float(m.group(1)))


def follow_metrics(http: httpx.Client, job_id: str, out: list[float]) -> None:
    with http.stream("GET", f"/v1/jobs/{job_id}/metrics", params={"follow": "true"}) as r:
        for line in r.iter_lines():
            now = time.time()
            if not line.strip():
                continue
            point = json.loads(line)
            if point.get("name") == "stamp":
                out.append(now - float(point["value"]))


def run(url: str, token: str, jobs: int, lines: int, gap: float, cpus: float) -> dict:
    headers = {"Authorization": f"Bearer {token}"}
    timeout = httpx.Timeout(30, read=None)
    with httpx.Client(base_url=url, headers=headers, timeout=timeout) as http:
        body = MANIFEST.format(cpus=cpus, delay=8 + jobs * 0.3, gap=gap, lines=lines)
        ids = []
        for _ in range(jobs):
            reply = http.post(
                "/v1/jobs", content=body, headers={"Content-Type": "application/yaml"}
            )
            reply.raise_for_status()
            ids.append(reply.json()["job_id"])
        logs: dict[str, list[float]] = {j: [] for j in ids}
        points: dict[str, list[float]] = {j: [] for j in ids}
        threads = []
        for j in ids:
            for target, out in ((follow_logs, logs[j]), (follow_metrics, points[j])):
                t = threading.Thread(target=target, args=(http, j, out), daemon=True)
                t.start()
                threads.append(t)
        for t in threads:
            t.join(600)
        statuses = {http.get(f"/v1/jobs/{j}").json()["status"] for j in ids}
    log_all = [v for j in ids for v in logs[j]]
    met_all = [v for j in ids for v in points[j]]
    print(
        f"  {jobs} job(s) ({', '.join(sorted(statuses))}): {len(log_all)} log lines, "
        f"{len(met_all)} metric points seen (of {jobs * lines})",
        flush=True,
    )

    def stats(values: list[float]) -> dict:
        return {
            "p50_s": round(percentile(values, 0.5), 4),
            "p99_s": round(percentile(values, 0.99), 4),
        }

    return {"jobs": jobs, "lines": lines, "logs": stats(log_all), "metrics": stats(met_all)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=200)
    ap.add_argument("--gap", type=float, default=0.05, help="seconds between metric lines")
    ap.add_argument("--concurrent", type=int, default=20)
    ap.add_argument("--cpus", type=float, default=0.05, help="CPUs of each learner")
    ap.add_argument("--home", type=Path, default=None, help="platform state dir")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    home = args.home or Path(tempfile.mkdtemp(prefix="dlaas-bench-"))
    was_up = (home / "client.json").exists() and all(c.running for c in components.status(home))
    print(f"platform in {home}", flush=True)
    platform.up(home, progress=lambda line: print("  " + line, flush=True))
    try:
        cfg = json.loads((home / "client.json").read_text())
        print("one job:", flush=True)
        single = run(cfg["url"], cfg["token"], 1, args.lines, args.gap, args.cpus)
        print(f"{args.concurrent} jobs at once:", flush=True)
        many = run(cfg["url"], cfg["token"], args.concurrent, args.lines, args.gap, args.cpus)
    finally:
        if not was_up:
            platform.down(home)
    for name, r in (("one job", single), (f"{args.concurrent} jobs", many)):
        print(
            f"{name}: logs p50 {r['logs']['p50_s']:.3f} s p99 {r['logs']['p99_s']:.3f} s; "
            f"metrics p50 {r['metrics']['p50_s']:.3f} s p99 {r['metrics']['p99_s']:.3f} s "
            "(target p99 <= 0.5 s)"
        )
    if args.json:
        print(json.dumps({"single": single, "concurrent": many}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
