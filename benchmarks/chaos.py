"""Chaos suite: example jobs run to completion while the platform's parts are SIGKILLed.

Brings a platform up (`dlaas.local.platform.up`, a temporary home by default; `--nodes N` > 1:
on an N-node Docker Swarm on this machine, dlaas.local.swarm), runs the process supervisor
(`python -m dlaas.local.supervisor`, unless `up` already started one), uploads the digits data,
submits `--jobs` example jobs and, while they run, kills one component at a time at a
random moment, waiting for it to recover before the next kill. Then it waits for every job
to end and checks what was lost.

Jobs (a seeded mix): digits, 1 learner, `--epoch-sleep` so a run takes ~20-60 s; ddp,
2 learners; elastic ddp (min 1, max 2 learners); priorities low / normal / high; every
job checkpoints every epoch, syncs every 5 s (checkpoint.interval_s) and may restart 3
times (max_restarts).

The kills and how each recovery is timed: benchmarks/chaos_kills.py; what is measured
after the run (lost jobs, duplicate learners, lost log lines, lost work):
benchmarks/chaos_checks.py; watching the platform meanwhile: benchmarks/chaos_watch.py.

Usage: python benchmarks/chaos.py [--jobs 20] [--kills LIST] [--seed N] [--nodes 3]
       [--timeout S] [--json] [--home DIR]
With --json the last line is one JSON object: completed, lost, duplicate_learners,
lost_log_lines, max_lost_work_s, recovery_s (component -> seconds; null: not recovered
within the wait), plus jobs, skipped, details.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script: benchmarks/ is sys.path[0], not the repo

from benchmarks.chaos_checks import (
    CHECKPOINT_INTERVAL_S,
    JobPlan,
    check_log,
    job_mix,
    lost_work,
    summary,
)
from benchmarks.chaos_kills import ALL_KILLS, NODE_KILLS, RECOVERY_WAIT_S, Chaos
from benchmarks.chaos_watch import Platform, Tracker, Watcher, log
from dlaas.local.state import StateDir, record_alive

# Targets of the issue (seconds), for the table.
TARGETS = {"api": 1.0, "lcm-leader": 2.0, "helper": 2.0, "learner": 5.0}


def upload_digits(home: Path) -> None:

    spec = importlib.util.spec_from_file_location("prepare", REPO / "examples/digits/prepare.py")
    prepare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prepare)
    import httpx

    # Through the API, as a user would (`dlaas data upload`): into the user's team namespace.
    cfg = json.loads((home / "client.json").read_text())
    r = httpx.put(
        f"{cfg['url']}/v1/data/digits-data/digits.npz",
        content=prepare.digits_npz(),
        headers={"Authorization": f"Bearer {cfg['token']}"},
        timeout=60,
    )
    r.raise_for_status()


def start_supervisor(home: Path) -> subprocess.Popen | None:
    """Our own supervisor, unless `up` runs one (pid record "supervisor")."""
    rec = StateDir(home).read_pid("supervisor")
    if record_alive(rec):
        log(f"supervisor: started by up (pid {rec['pid']})")
        return None
    out = open(home / "logs" / "supervisor-chaos.log", "ab")  # noqa: SIM115 - the child owns it
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlaas.local.supervisor", str(home)],
        stdout=out,
        stderr=subprocess.STDOUT,
        cwd=REPO,
        start_new_session=True,
    )
    log(f"supervisor: started (pid {proc.pid}), log {home / 'logs' / 'supervisor-chaos.log'}")
    return proc


@dataclass
class Options:
    jobs: int = 20
    kills: Sequence[str] = ALL_KILLS
    seed: int = 1
    nodes: int = 3
    timeout: float = 1200.0
    home: Path | None = None
    first_gap: tuple[float, float] = (2.0, 6.0)  # seconds before each kill, at random
    plans: Sequence[JobPlan] | None = None  # instead of job_mix(jobs)
    recovery_wait_s: float = RECOVERY_WAIT_S  # per kill; then it counts as not recovered
    pace_s: float = 20.0  # the next kill comes after a recovery, or after this long


def run(opts: Options) -> dict:
    """The whole suite; returns the summary dict (plus jobs, skipped, details)."""
    from dlaas.local import platform

    rng = random.Random(opts.seed)
    own_home = opts.home is None
    home = Path(tempfile.mkdtemp(prefix="dlaas-chaos-")) if own_home else Path(opts.home)
    started_at = time.time()
    supervisor = None
    watcher = None
    result: dict | None = None
    try:
        log(f"platform up in {home} with {opts.nodes} node(s)")
        kwargs: dict = {"nodes": opts.nodes} if opts.nodes else {}
        if "etcd" in opts.kills:  # a member can die only where etcd runs as a cluster
            kwargs["etcd_members"] = 3
        platform.up(home, progress=lambda line: None, **kwargs)
        supervisor = start_supervisor(home)
        upload_digits(home)
        p = Platform(home)
        watcher = Watcher(p)
        watcher.start()
        plans = list(opts.plans) if opts.plans is not None else job_mix(opts.jobs, rng)
        ids: dict[str, JobPlan] = {}
        for plan in plans:
            ids[p.submit(plan)] = plan
        log(f"submitted {len(ids)} jobs: " + ", ".join(pl.name for pl in ids.values()))
        tracker = Tracker(p, ids)
        chaos = Chaos(p, watcher, tracker, rng, opts.recovery_wait_s)
        deadline = started_at + opts.timeout

        order = list(opts.kills)
        rng.shuffle(order)
        # Containers and nodes are killed while they have work left: they go first.
        order.sort(key=lambda k: k not in ("learner", "helper", *NODE_KILLS))
        _wait_until(
            lambda: tracker.poll() is not None and len(tracker.processing()) >= min(2, len(ids)),
            180,
        )
        for what in order:
            if time.time() > deadline:
                chaos._skip(what, "the run's time limit was reached")
                continue
            time.sleep(rng.uniform(*opts.first_gap))
            chaos.kill(what, opts.pace_s)

        log("kills done; waiting for every job to end")
        while time.time() < deadline:
            tracker.poll()
            if not tracker.active():
                break
            time.sleep(1)
        chaos.finish()
        watcher.stop()
        result = _report(p, ids, tracker, watcher, chaos, started_at)
        return result
    finally:
        if watcher is not None:
            watcher.stop()
        if supervisor is not None:
            supervisor.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                supervisor.wait(10)
            if supervisor.poll() is None:
                supervisor.kill()
        if own_home:
            platform.down(home, progress=lambda line: None)
            if result is not None and not _troubled(result):
                shutil.rmtree(home, ignore_errors=True)
            else:  # the services' logs are what tells why
                log(f"kept {home} for inspection: the services' logs are in {home}/logs")


def _troubled(result: dict) -> bool:
    """Whether a run missed anything worth reading the platform's logs for (a recovery
    slower than its target too: the logs say where the time went)."""
    recovery = result["recovery_s"]
    return bool(
        result["lost"]
        or result["duplicate_learners"]
        or result["lost_log_lines"]
        or any(v is None for v in recovery.values())
        or any(v > TARGETS[k] for k, v in recovery.items() if k in TARGETS and v is not None)
    )


def _wait_until(check: Callable[[], bool], timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and not check():
        time.sleep(0.5)


def _report(p, ids, tracker, watcher, chaos, started_at) -> dict:
    jobs, checks, work, details = {}, {}, {}, {}
    for job_id, plan in ids.items():
        job = p.get(f"/v1/jobs/{job_id}").json()
        jobs[job_id] = job
        done = job.get("status") == "COMPLETED"
        checks[job_id] = {}
        for learner in plan.checked_learners:
            text = p.get(f"/v1/jobs/{job_id}/logs", learner=learner, offset=0).text
            checks[job_id][learner] = check_log(text.splitlines(), plan.epochs, done)
        with watcher._lock:
            runs = sorted(watcher.timelines.get((job_id, 0), []), key=lambda r: r.start)
        work[job_id] = lost_work(runs)
        restarts = [h for h in job.get("history", []) if h["status"] == "QUEUED"][1:]
        details[job_id] = {
            "name": plan.name,
            "status": job.get("status"),
            "reason": job.get("reason", ""),
            "requeues": len(restarts),
            "requeue_reasons": [h.get("reason", "") for h in restarts],
            "lost_work_s": [round(w, 2) for w in work[job_id]],
            "log_problems": [pr for c in checks[job_id].values() for pr in c.problems],
        }
    out = summary(jobs, checks, watcher.dups, work, chaos.recovery)
    out["jobs"] = len(ids)
    out["skipped"] = chaos.skipped
    out["duration_s"] = round(time.time() - started_at, 1)
    out["details"] = details
    return out


def print_table(out: dict) -> None:
    print()
    print(f"{'job':<22} {'status':<10} {'requeues':>8} {'lost work s':>14}  log problems")
    for d in out["details"].values():
        work = ",".join(f"{w:.1f}" for w in d["lost_work_s"]) or "-"
        problems = "; ".join(d["log_problems"]) or "-"
        print(f"{d['name']:<22} {d['status']:<10} {d['requeues']:>8} {work:>14}  {problems}")
        if d["status"] != "COMPLETED":
            print(f"{'':<22} reason: {d['reason']}")
    print()
    print(f"{'component':<14} {'recovery s':>10} {'target s':>9}")
    for what, secs in out["recovery_s"].items():
        shown = f"{secs:.2f}" if secs is not None else "none"
        target = TARGETS.get(what)
        mark = "" if target is None or secs is None or secs <= target else "  MISSED"
        print(f"{what:<14} {shown:>10} {target if target else '-':>9}{mark}")
    for what, why in out["skipped"].items():
        print(f"{what:<14} skipped: {why}")
    print()
    jobs = out["jobs"]
    print(
        f"completed {out['completed']}/{jobs}, lost {out['lost']}, duplicate learners "
        f"{out['duplicate_learners']}, lost log lines {out['lost_log_lines']}, max lost work "
        f"{out['max_lost_work_s']} s (checkpoint interval {CHECKPOINT_INTERVAL_S} s), "
        f"in {out['duration_s']} s"
    )


def _exit_on_signal(signum, _frame) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument(
        "--kills", default=",".join(ALL_KILLS), help=f"comma-separated, of: {','.join(ALL_KILLS)}"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--nodes", type=int, default=3, help="swarm nodes on this machine (1: the machine's engine)"
    )
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds for the whole run")
    parser.add_argument("--json", action="store_true", help="a JSON summary as the last line")
    parser.add_argument("--home", type=Path, help="state dir of a platform to use (kept up)")
    args = parser.parse_args(argv)
    # The platform's services run this tree's code: `python -m services...` from the state
    # directory would import the editable install's tree (another checkout's, in a worktree).
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
    )
    # Stopped from outside (or Ctrl-C in a background job, where SIGINT is ignored): still
    # take the platform down and stop the supervisor, in `run`'s finally.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGINT, _exit_on_signal)
    kills = [k.strip() for k in args.kills.split(",") if k.strip()]
    unknown = sorted(set(kills) - set(ALL_KILLS))
    if unknown:
        parser.error(f"--kills: unknown {', '.join(unknown)}; use {', '.join(ALL_KILLS)}")
    out = run(
        Options(
            jobs=args.jobs,
            kills=kills,
            seed=args.seed,
            nodes=args.nodes,
            timeout=args.timeout,
            home=args.home,
        )
    )
    print_table(out)
    if args.json:
        print(json.dumps({k: v for k, v in out.items() if k != "details"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
