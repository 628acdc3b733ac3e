"""Usage accounting on a live platform: `dlaas usage`, REST and /metrics against the histories.

Measure (d) of issue 26: the accounted totals must equal, exactly, the allocation intervals
the jobs' status histories hold, through a resize, a preemption and a halt/resume, and
again after `dlaas down` and `up`.

The platform comes up with one node of 4 CPUs / 4096 MiB (DLAAS_NODE_CPUS/MEMORY_MB) and
two teams, alpha and beta, each guaranteed half of it. Beta runs an elastic job of 2
learners (1 CPU each) and two 1-CPU jobs: the whole node, 2 CPUs of it borrowed. Beta's
user resizes the elastic job to 1 learner (a requeue and a new placement); alpha then
submits a 2-CPU job inside its guarantee, so the scheduler reclaims, preempting one of
beta's jobs, which runs again later. Alpha halts its job and resumes it. The jobs are short
python commands (no data, no code); all end before the comparison, so nothing still grows.

The reference sums are computed here, independently of dlaas.domain.usage, from the job
store itself (its SQLite file): each interval from a placement (PENDING) to the next entry
outside PENDING..STORING, times the learner count the LCM recorded for that placement
(checked against the "N learner(s) ... started" reason of the DOWNLOADING that followed),
times the manifest's CPUs and memory, in integer milli-units and milliseconds. Compared
with exact equality: GET /v1/usage per job and day and per team, `dlaas usage --csv`'s
rows, the dlaas_team_*_hours_total counters; then down, up, and GET /v1/usage again.

Usage: python benchmarks/operations_usage.py [--home DIR] [--sleep 30] [--json]
It brings the platform up in DIR (a temporary one by default) and down at the end if it
started it. With --json the last line is {"jobs", "requeues", "intervals", "checks": {name:
bool}, "exact": bool, "teams": {team: hours}, "seconds"}.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from dlaas.adapters.store import open_store
from dlaas.domain.manifest import parse_manifest
from dlaas.local import platform

NODE_CPUS, NODE_MEMORY_MB = 4, 4096
SHARE = {"gpus": 0, "cpus": 2, "memory_mb": 2048}
HOLDING = {"PENDING", "DOWNLOADING", "PROCESSING", "STORING"}
FINAL = {"COMPLETED", "FAILED", "HALTED"}
REPO = Path(__file__).resolve().parents[1]
BOUND_S = 240  # liveness bound of each wait on a loaded 2-core machine, not a claim
STARTED = re.compile(r"^(\d+) learner\(s\) and the helper started")


def manifest(name: str, sleep: float, cpus: int = 1, learners: int = 1, elastic: bool = False):
    scale = f"min_learners: 1\nmax_learners: {learners}\n" if elastic else ""
    return (
        f"name: {name}\nlearners: {learners}\n{scale}cpus: {cpus}\nmemory: 256MiB\n"
        "framework:\n  name: python\n  version: '3'\n"
        f'  command: python3 -c "import time; time.sleep({sleep})"\n'
    )


class Api:
    def __init__(self, url: str, token: str):
        self.http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )

    def call(self, method: str, path: str, ok: int = 200, **kw):
        r = self.http.request(method, path, **kw)
        if r.status_code != ok:
            raise SystemExit(f"{method} {path}: {r.status_code} {r.text[:300]}")
        return r.json() if r.content else None

    def submit(self, text: str) -> str:
        headers = {"Content-Type": "application/yaml"}
        return self.call("POST", "/v1/jobs", 201, content=text, headers=headers)["job_id"]

    def status(self, job_id: str) -> str:
        return self.call("GET", f"/v1/jobs/{job_id}")["status"]


def wait(what: str, check, bound: float = BOUND_S):
    deadline = time.monotonic() + bound
    while not (value := check()):
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not within {bound} s")
        time.sleep(0.5)
    print(f"  {what}", flush=True)
    return value


def story(admin: Api, url: str, sleep: float) -> dict[str, str]:
    """Run the jobs through a resize, a preemption and a halt/resume; job id -> team."""
    users = {}
    for team, user in (("alpha", "alice"), ("beta", "bob")):
        admin.call("POST", "/v1/teams", 201, json={"name": team, **SHARE})
        made = admin.call("POST", "/v1/users", 201, json={"name": user, "team": team})
        users[team] = Api(url, made["token"])
    alpha, beta = users["alpha"], users["beta"]
    grow = beta.submit(manifest("elastic", sleep, learners=2, elastic=True))
    b1 = beta.submit(manifest("b1", sleep))
    b2 = beta.submit(manifest("b2", sleep))
    jobs = {grow: "beta", b1: "beta", b2: "beta"}
    running = {"PROCESSING", "STORING"} | FINAL
    wait("beta's 3 jobs running", lambda: all(beta.status(j) in running for j in jobs))
    beta.call("POST", f"/v1/jobs/{grow}/scale", json={"learners": 1})
    wait("the elastic job resized to 1 learner", lambda: beta.status(grow) == "PROCESSING")
    a1 = alpha.submit(manifest("a1", sleep / 2, cpus=2))
    jobs[a1] = "alpha"
    wait("alpha's job placed by reclaiming", lambda: alpha.status(a1) in running)
    alpha.call("POST", f"/v1/jobs/{a1}/halt")
    wait("alpha's job halted", lambda: alpha.status(a1) == "HALTED")
    alpha.call("POST", f"/v1/jobs/{a1}/resume")
    wait("every job ended", lambda: all(admin.status(j) in FINAL for j in jobs), 3 * BOUND_S)
    return jobs


def reference(store_url: str, jobs: dict[str, str]) -> tuple[dict, dict, list[str]]:
    """(per (day, job) and per team: [gpu_ms, millicpu_ms, memory_mib_ms]), problems."""
    store = open_store(store_url)
    per_job: dict[tuple[str, str], list[int]] = {}
    per_team: dict[str, list[int]] = {}
    problems = []
    try:
        for job_id, team in jobs.items():
            rec = store.get(job_id)
            m = parse_manifest(rec.manifest_yaml)
            recorded = rec.info.get("allocations", {})
            h = rec.history
            i = 0
            while i < len(h):
                if h[i].status.value != "PENDING":
                    i += 1
                    continue
                learners = recorded.get(str(i))
                k = i + 1
                while k < len(h) and h[k].status.value in HOLDING:
                    said = (
                        STARTED.match(h[k].reason) if h[k].status.value == "DOWNLOADING" else None
                    )
                    if said and int(said.group(1)) != learners:
                        problems.append(f"{job_id} seq {i}: recorded {learners}, reason {said[0]}")
                    k += 1
                if learners is None:
                    problems.append(f"{job_id} seq {i}: no learner count recorded")
                    learners = m.learners
                start, end = round(h[i].at * 1000), round(h[k].at * 1000)
                while start < end:  # split at midnight UTC
                    cut = min(end, (start // 86_400_000 + 1) * 86_400_000)
                    day = dt.datetime.fromtimestamp(start / 1000, dt.UTC).date().isoformat()
                    ms = (cut - start) * learners
                    held = [m.gpus * ms, round(m.cpus * 1000) * ms, m.memory_mb * ms]
                    for sums in (per_job.setdefault((day, job_id), [0, 0, 0]),
                                 per_team.setdefault(team, [0, 0, 0])):  # fmt: skip
                        for n in range(3):
                            sums[n] += held[n]
                    start = cut
                i = k
    finally:
        store.close()
    return per_job, per_team, problems


def hours(ms: list[int]) -> dict[str, float]:
    return {
        "gpu_hours": ms[0] / 3_600_000,
        "cpu_hours": ms[1] / (1000 * 3_600_000),
        "memory_gib_hours": ms[2] / (1024 * 3_600_000),
    }


def rest_view(admin: Api, since: str) -> tuple[dict, dict]:
    body = admin.call("GET", "/v1/usage", params={"by": "job", "since": since})
    rows = {
        (r["day"], r["job_id"]): {k: r[k] for k in ("gpu_hours", "cpu_hours", "memory_gib_hours")}
        for r in body["rows"]
    }
    teams = {t["team"]: {k: v for k, v in t.items() if k != "team"} for t in body["teams"]}
    return rows, teams


def cli_view(home: Path, since: str) -> dict:
    # The CLI as a user runs it, from this checkout (`-c` puts the working directory first).
    argv = ["--home", str(home), "--admin", "usage", "--by", "job", "--since", since, "--csv"]
    out = subprocess.run(
        [sys.executable, "-c", "from dlaas.clients.cli import app; app()", *argv],
        check=False, capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"dlaas usage failed ({out.returncode}): {out.stderr[-500:]}")
    return {
        (r["day"], r["job_id"]): {
            k: float(r[k]) for k in ("gpu_hours", "cpu_hours", "memory_gib_hours")
        }
        for r in csv.DictReader(io.StringIO(out.stdout))
    }


def metrics_view(url: str) -> dict:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    names = {
        "dlaas_team_gpu_hours": "gpu_hours",
        "dlaas_team_cpu_hours": "cpu_hours",
        "dlaas_team_memory_gib_hours": "memory_gib_hours",
    }
    out: dict[str, dict] = {}
    for family in text_string_to_metric_families(text):
        if family.name in names:
            for s in family.samples:
                out.setdefault(s.labels["team"], {})[names[family.name]] = s.value
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, default=None, help="platform state dir")
    ap.add_argument("--sleep", type=float, default=30.0, help="seconds each job runs")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    result = measure(args.home, args.sleep)
    if args.json:
        print(json.dumps(result))
    return 0 if result["exact"] else 1


def measure(given_home: Path | None, sleep: float) -> dict:
    """The whole measure on a platform of its own in `given_home` (a temporary one, brought
    down at the end, when None); benchmarks/operations.py runs it as its phase (d)."""
    t0 = time.monotonic()
    home = given_home or Path(tempfile.mkdtemp(prefix="dlaas-bench-"))
    os.environ["DLAAS_NODE_CPUS"] = str(NODE_CPUS)
    os.environ["DLAAS_NODE_MEMORY_MB"] = str(NODE_MEMORY_MB)
    print(f"platform in {home}", flush=True)
    platform.up(home, progress=lambda line: None)
    try:
        cfg = json.loads((home / "admin.json").read_text())
        url = cfg["url"]
        admin = Api(url, cfg["admin_token"])
        jobs = story(admin, url, sleep)
        store_url = f"sqlite:///{home / 'jobs.db'}"
        per_job, per_team, problems = reference(store_url, jobs)
        since = min(day for day, _ in per_job)
        want_rows = {key: hours(ms) for key, ms in per_job.items()}
        want_teams = {team: hours(ms) for team, ms in per_team.items()}
        rest_rows, rest_teams = rest_view(admin, since)
        checks = {
            "recorded_learners": not problems,
            "rest_rows": rest_rows == want_rows,
            "rest_teams": rest_teams == want_teams,
            "cli_csv": cli_view(home, since) == want_rows,
            "metrics": metrics_view(url) == want_teams,
        }
        print("  down and up again", flush=True)
        platform.down(home, progress=lambda line: None)
        platform.up(home, progress=lambda line: None)
        cfg = json.loads((home / "admin.json").read_text())
        after_rows, after_teams = rest_view(Api(cfg["url"], cfg["admin_token"]), since)
        checks["after_down_up"] = after_rows == want_rows and after_teams == want_teams
        store = open_store(store_url)
        try:
            histories = {j: store.get(j).history for j in jobs}
        finally:
            store.close()
    finally:
        if given_home is None:
            platform.down(home, progress=lambda line: None)
    reasons = [t.reason for h in histories.values() for t in h[1:] if t.status.value == "QUEUED"]
    result = {
        "jobs": len(jobs),
        "requeues": len(reasons),
        "preempted": sum("preempt" in r for r in reasons),
        "resized": sum("rescaled" in r or "resized" in r for r in reasons),
        "intervals": sum(1 for h in histories.values() for t in h if t.status.value == "PENDING"),
        "checks": checks,
        "exact": all(checks.values()),
        "problems": problems,
        "teams": want_teams,
        "seconds": round(time.monotonic() - t0, 1),
    }
    for name, ok in checks.items():
        print(f"{name}: {'equal' if ok else 'DIFFERENT'}")
    for team, h in sorted(want_teams.items()):
        print(f"team {team}: " + ", ".join(f"{v:.6f} {k}" for k, v in h.items()))
    return result


if __name__ == "__main__":
    raise SystemExit(main())
