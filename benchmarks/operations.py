"""How well the platform watches its jobs, on a platform brought up by `dlaas up` (issue 26's
Measure), with the digits example (examples/digits: numpy, `--epoch-sleep` makes its epochs
last a known time):

  (a) stall detection: a job that prints two epochs and hangs, `stall_after: 15`,
      `on_stall: fail`; the time from its last line to FAILED `stalled` (target <=
      stall_after + 10 s);
  (b) finish-estimate error: two runners (digits, `--runner-epochs` epochs of
      `--runner-sleep` s and 1.5x that) polled through `GET /v1/jobs/{id}`; at the first look
      at >= 25/50/75 % progress, |estimated finish - actual| / (actual - then), where the
      actual finish is the job's leaving PROCESSING (target median <= 20 %);
  (c) queue ETAs: `--short` short jobs (digits, 4 epochs of 1 s) submitted while the two
      runners fill the node's CPUs (every job asks for half of them), once the runners'
      progress gives their time left (two moves seen by each API replica): each job's range
      as first seen in `GET /v1/queue` right after its submit, against when it left QUEUED:
      the share inside (target >= 80 %), and the median width against the median wait
      (target <= 1x). Before (c), `--warmup` short jobs (the same job, of the same name) run
      so the scheduler has seen their run times (its model of a queued job's time starts
      from the jobs of its user and name that ended, else from every job that ended);
  (d) usage accounting totals against the jobs' histories, exactly, through a resize, a
      preemption and a halt/resume and again after down/up: benchmarks/operations_usage.py,
      on a platform of its own (one node of 4 CPUs, two teams), after the others
      (`--no-usage` skips it).

Usage: python benchmarks/operations.py [--home DIR] [--short 20] [--json]
It brings the platform up in DIR (a temporary one by default) and down again if it started
it. Run the platform from this checkout: PYTHONPATH=. (the services are spawned with the
environment's interpreter). With --json the last line is {"stall": {...},
"finish_estimate": {...}, "queue_eta": {...}, "usage": {...}}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import textwrap
import time
from pathlib import Path

import httpx

from benchmarks import operations_usage
from dlaas.clients.client import pack_code
from dlaas.local import components, platform

REPO = Path(__file__).resolve().parents[1]
DIGITS = REPO / "examples" / "digits"
FINAL = {"COMPLETED", "FAILED", "HALTED"}
STALL_AFTER_S = 15

DIGITS_JOB = """
name: {name}
learners: 1
cpus: {cpus}
memory: 512MiB
data_stores:
  - id: digits
    type: s3
    training_data:
      container: digits-data
    training_results:
      container: digits-results
framework:
  name: python
  version: "3"
  command: python3 train.py --epochs {epochs} --epoch-sleep {sleep}
"""

HANG_JOB = """
name: hangs-after-epoch-2
learners: 1
cpus: {cpus}
memory: 256MiB
stall_after: {stall}
on_stall: fail
framework:
  name: python
  version: "3"
  command: python3 hang.py
"""

HANG_PY = textwrap.dedent("""
    import time
    for epoch in (1, 2):
        time.sleep(1)
        print(f"epoch {epoch}/10 loss=0.5 printed_at={time.time():.3f}", flush=True)
    time.sleep(3600)  # a deadlock, as far as anybody watching can tell
""")


def submit(http: httpx.Client, manifest: str, code_dir: Path) -> str:
    data, name = pack_code(code_dir)
    files = {
        "manifest": ("manifest.yaml", manifest.encode(), "application/yaml"),
        "code": (name, data, "application/gzip"),
    }
    reply = http.post("/v1/jobs", files=files)
    reply.raise_for_status()
    return reply.json()["job_id"]


def job(http: httpx.Client, job_id: str) -> dict:
    reply = http.get(f"/v1/jobs/{job_id}")
    reply.raise_for_status()
    return reply.json()


def wait_final(http: httpx.Client, ids: list[str], timeout: float) -> dict[str, dict]:
    deadline = time.time() + timeout
    out: dict[str, dict] = {}
    while time.time() < deadline and len(out) < len(ids):
        for j in ids:
            if j not in out and (view := job(http, j))["status"] in FINAL:
                out[j] = view
        time.sleep(0.5)
    if len(out) < len(ids):
        raise SystemExit(f"jobs not final after {timeout} s: {sorted(set(ids) - set(out))}")
    return out


def left_at(view: dict, status: str) -> float | None:
    """When the job first left `status` (its next transition's time)."""
    history = view["history"]
    for i, h in enumerate(history[:-1]):
        if h["status"] == status:
            return history[i + 1]["at"]
    return None


def upload_digits(http: httpx.Client) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("prepare", DIGITS / "prepare.py")
    prepare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prepare)
    http.put("/v1/data/digits-data/digits.npz", content=prepare.digits_npz()).raise_for_status()


def stall_phase(http: httpx.Client, cpus: float, work: Path) -> dict:
    code = work / "hang"
    code.mkdir()
    (code / "hang.py").write_text(HANG_PY)
    job_id = submit(http, HANG_JOB.format(cpus=cpus, stall=STALL_AFTER_S), code)
    return {"job_id": job_id}


def stall_result(http: httpx.Client, job_id: str, view: dict) -> dict:
    lines = http.get(f"/v1/jobs/{job_id}/logs").text.splitlines()
    printed = [float(x.split("printed_at=")[1]) for x in lines if "printed_at=" in x]
    failed = next((h for h in view["history"] if h["status"] == "FAILED"), None)
    detected = failed["at"] - printed[-1] if failed and printed else None
    return {
        "status": view["status"],
        "error_code": view.get("error_code", ""),
        "stall_after_s": STALL_AFTER_S,
        "detection_s": None if detected is None else round(detected, 1),
        "target_s": STALL_AFTER_S + 10,
        "met": detected is not None and detected <= STALL_AFTER_S + 10,
    }


def queue_phase(http: httpx.Client, args: argparse.Namespace, cpus: float) -> tuple[dict, dict]:
    """(b) and (c): two runners, then the short jobs behind them."""
    runners = [
        submit(
            http,
            DIGITS_JOB.format(name=f"runner-{i}", cpus=cpus, epochs=args.runner_epochs, sleep=s),
            DIGITS,
        )
        for i, s in enumerate((args.runner_sleep, args.runner_sleep * 1.5))
    ]
    deadline = time.time() + 300
    while not all(job(http, r)["status"] == "PROCESSING" for r in runners):
        if time.time() > deadline:
            raise SystemExit("the runners did not both reach PROCESSING in 300 s")
        time.sleep(0.5)
    looks: dict[str, list[tuple[float, dict]]] = {r: [] for r in runners}
    # The short jobs queue behind runners whose progress gives their time left: until two
    # looks saw a runner move, the ETA falls back to the model's guess (run 2026-11-26 with
    # the jobs submitted at once: every range too early). Each API replica keeps its own
    # looks, so several estimates in a row (the replicas answer in turn) are waited for.
    estimated = {r: 0 for r in runners}
    while min(estimated.values()) < 4:
        if time.time() > deadline:
            raise SystemExit("the runners had no finish estimate in 300 s")
        for r in runners:
            p = job(http, r).get("progress") or {}
            estimated[r] = estimated[r] + 1 if p.get("finish_at") else 0
            if p:
                looks[r].append((time.time(), p))
        time.sleep(0.5)
    shorts: dict[str, dict] = {}
    short_job = DIGITS_JOB.format(name="short", cpus=cpus, epochs=4, sleep=1)
    for _ in range(args.short):
        j = submit(http, short_job, DIGITS)
        submitted = time.time()
        entry = next((e for e in http.get("/v1/queue").json()["entries"] if e["job_id"] == j), None)
        at = time.time()
        shorts[j] = {"submitted": submitted, "eta": None}
        if entry is not None and entry["eta_high_s"] is not None:
            shorts[j]["eta"] = (at + entry["eta_low_s"], at + entry["eta_high_s"])
    pending = set(runners)
    while pending:
        for r in list(pending):
            view = job(http, r)
            if view["status"] != "PROCESSING":
                pending.discard(r)
            elif view.get("progress"):
                looks[r].append((time.time(), view["progress"]))
        time.sleep(0.5)
    final = wait_final(http, [*runners, *shorts], timeout=900)
    errors: dict[str, list[float]] = {"25": [], "50": [], "75": []}
    for r in runners:
        finished = left_at(final[r], "PROCESSING")
        for target, found in errors.items():
            first = next(
                (
                    (t, p)
                    for t, p in looks[r]
                    if (p.get("percent") or 0) >= float(target) and p.get("finish_at")
                ),
                None,
            )
            if first is not None and finished is not None and finished > first[0]:
                t, p = first
                found.append(abs(p["finish_at"] - finished) / (finished - t))
    every = [e for v in errors.values() for e in v]
    finish = {
        "runners": len(runners),
        "error_by_progress": {k: [round(e, 3) for e in v] for k, v in errors.items()},
        "median_error": round(statistics.median(every), 3) if every else None,
        "target": 0.2,
    }
    finish["met"] = finish["median_error"] is not None and finish["median_error"] <= 0.2
    inside, widths, waits, judged, rows = 0, [], [], 0, []
    for j, s in shorts.items():
        started = left_at(final[j], "QUEUED")
        if started is None or s["eta"] is None:
            continue
        judged += 1
        lo, hi = s["eta"]
        inside += lo <= started <= hi
        widths.append(hi - lo)
        waits.append(started - s["submitted"])
        rows.append([round(x - s["submitted"], 1) for x in (started, lo, hi)])
    share = inside / judged if judged else 0.0
    ratio = statistics.median(widths) / statistics.median(waits) if waits else None
    queue = {
        "short_jobs": len(shorts),
        "judged": judged,
        "in_range": round(share, 3),
        "median_width_s": round(statistics.median(widths), 1) if widths else None,
        "median_wait_s": round(statistics.median(waits), 1) if waits else None,
        "width_vs_wait": None if ratio is None else round(ratio, 2),
        "met": share >= 0.8 and ratio is not None and ratio <= 1.0,
        "jobs_wait_low_high_s": rows,  # per short job, from its submit
    }
    return finish, queue


def run(url: str, token: str, args: argparse.Namespace) -> dict:
    http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
    upload_digits(http)
    admin = json.loads((args.home / "admin.json").read_text())
    nodes = httpx.get(
        f"{url}/v1/nodes", headers={"Authorization": f"Bearer {admin['admin_token']}"}
    ).json()
    node_cpus = min(n["capacity"]["cpus"] for n in nodes["nodes"])
    cpus = node_cpus / 2  # two jobs at a time, the rest queue
    print(f"node CPUs {node_cpus:g}: every job asks for {cpus:g}", flush=True)
    # the short jobs of (c), run before it: a user's repeated job, the ETA's run-time model
    # knows it by name
    warm_job = DIGITS_JOB.format(name="short", cpus=cpus, epochs=4, sleep=1)
    with tempfile.TemporaryDirectory() as tmp:
        if not args.stall_last:
            print("(a) stall detection, and the warm-up jobs beside it ...", flush=True)
            hang = stall_phase(http, cpus, Path(tmp))["job_id"]
            warm = [submit(http, warm_job, DIGITS) for _ in range(args.warmup)]
            done = wait_final(http, [hang, *warm], timeout=600)
            stall = stall_result(http, hang, done[hang])
            print(f"    {stall}", flush=True)
        else:
            wait_final(http, [submit(http, warm_job, DIGITS) for _ in range(args.warmup)], 600)
        print(f"(b, c) two runners, {args.short} short jobs behind them ...", flush=True)
        finish, queue = queue_phase(http, args, cpus)
        print(f"    (b) {finish}\n    (c) {queue}", flush=True)
        if args.stall_last:
            print("(a) stall detection ...", flush=True)
            hang = stall_phase(http, cpus, Path(tmp))["job_id"]
            stall = stall_result(http, hang, wait_final(http, [hang], timeout=600)[hang])
            print(f"    {stall}", flush=True)
    return {"stall": stall, "finish_estimate": finish, "queue_eta": queue}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, default=None, help="platform state dir")
    ap.add_argument("--short", type=int, default=20, help="short jobs queued in (c)")
    ap.add_argument("--warmup", type=int, default=6, help="short jobs run before (c)")
    ap.add_argument("--runner-epochs", type=int, default=20)
    ap.add_argument("--runner-sleep", type=float, default=2.0, help="s per epoch, runner 0")
    ap.add_argument(
        "--stall-last",
        action="store_true",
        help="run (a) after (c): the scheduler's model of run times then holds only the "
        "short jobs' when (c) asks for ETAs (a diagnostic: the stalled job's 30 s widen them)",
    )
    ap.add_argument("--no-usage", action="store_true", help="skip (d), usage accounting")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    args.home = args.home or Path(tempfile.mkdtemp(prefix="dlaas-bench-"))
    was_up = (args.home / "client.json").exists() and all(
        c.running for c in components.status(args.home)
    )
    print(f"platform in {args.home}", flush=True)
    platform.up(args.home, progress=lambda line: print("  " + line, flush=True))
    try:
        cfg = json.loads((args.home / "client.json").read_text())
        result = run(cfg["url"], cfg["token"], args)
    finally:
        if not was_up:
            platform.down(args.home)
    if not args.no_usage:
        print("(d) usage accounting, on a platform of its own ...", flush=True)
        result["usage"] = operations_usage.measure(None, sleep=30.0)
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
