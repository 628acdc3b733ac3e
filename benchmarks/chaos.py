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

Kills (`--kills`, in a seeded random order, SIGKILL always):
  lcm-leader   the LCM replica holding the leadership key   -> another replica holds it
  lcm-replica  an LCM replica that does not lead             -> it answers gRPC health again
  api          the REST API                                  -> GET /health answers
  jobmonitor   the job monitor (it serves nothing)           -> a new monitor process runs
  scheduler    the scheduler                                 -> it answers gRPC health again
  etcd         one etcd member (only with an etcd cluster)   -> the member answers /health
  learner      learner 0 of a running job (`docker kill`)    -> its job's new run prints
               its first "resuming from ..." / "epoch" line
  helper       the helper of a running job (`docker kill`)   -> a helper of the job runs
               again (started after the kill; measured to its start by its engine's
               clock, the poll's own sighting as seen_s) and the job is PROCESSING, or
               the job is COMPLETED (its learners finished meanwhile: only a new helper
               can have stored the results)
  engine       a swarm worker node dies (SwarmLab.kill_node(machine=True): its dockerd,
               containerd and containers; only with --nodes > 1); once its jobs
               progress elsewhere (or after the wait) the node is restarted
                                                             -> "engine_jobs": every job with
               a learner there prints an epoch from a new run (or ended), from the kill;
               "engine": the platform lists the node schedulable again, from the restart
  manager      the swarm manager's engine crashes (SwarmLab.kill_node("node-1"): dockerd
               only; every node's containers run on), restarted after MANAGER_DOWN_S
                                                             -> "manager": the platform lists
               every node schedulable again, from the restart; "manager_jobs": every job
               PROCESSING at the kill printed an epoch after the restart (or ended)
Recovery times are measured from the kill unless said otherwise; service restarts are the
supervisor's work, a node's restart the suite's own (it is the attacker). A node kill ends
only once its node is back: `up` (which the supervisor runs after a service kill) rebuilds
a swarm lab that has a node down. The learner and helper kills prefer a worker node's
containers on a swarm, and reach them through that node's own socket: the attacker, unlike
the platform, may use it.

What is measured:
- completed / lost: a job is lost unless it ends COMPLETED (every job here is valid,
  so any FAILED or HALTED is the platform's fault; reasons are printed).
- duplicate learners: every 0.2 s every node's engine is listed through its own socket
  (running containers with this platform's label; the swarm's nodes, or the machine's one
  engine); two running containers for the same job and learner index at the
  same moment count once per (job, learner).
- lost log lines: each learner's log stream read over REST from offset 0 after the end
  (learner 0 for elastic jobs, whose learner count changes). The stream is cut into runs
  at each run's first line ("data: ..." / "learner i/n: shard ...") and at "resuming from
  the checkpoint of epoch N" (the next epoch line must then be N+1). Within a run the
  epoch lines must count up by one: a number not above the previous one is a
  DUPLICATED line, a jump over k numbers is k LOST lines. Across runs, repeating the
  epochs after the resumed checkpoint is allowed (that work is redone), but resuming
  from epoch N when the stream so far shows fewer than N epochs means the lines in
  between were LOST. A COMPLETED job's stream must end with "epoch E/E". lost_log_lines
  is the sum of lost and duplicated lines.
- lost work per restart: the learner-0 containers of every job are followed
  (`docker logs --follow --timestamps`, the engine's own clock); when a run resumes
  from the checkpoint of epoch N (a whole epoch), the work lost is the end of the
  previous run (its log stream ends when the container dies) minus the time the line
  "epoch N/E" was printed; a resume mid-epoch (a SIGTERM checkpoint: preemption, halt,
  rescale) loses nothing; a run that restarts from scratch loses the previous run.
  max_lost_work_s is the largest.

Usage: python benchmarks/chaos.py [--jobs 20] [--kills LIST] [--seed N] [--nodes 3]
       [--timeout S] [--json] [--home DIR]
With --json the last line is one JSON object: completed, lost, duplicate_learners,
lost_log_lines, max_lost_work_s, recovery_s (component -> seconds; null: not recovered
within the wait), plus jobs, skipped, details.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import importlib.util
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dlaas.local.probes import grpc_answers, http_ok
from dlaas.local.state import StateDir, record_alive

REPO = Path(__file__).resolve().parents[1]
FINAL = {"COMPLETED", "FAILED", "HALTED"}
ALL_KILLS = (
    "lcm-leader",
    "lcm-replica",
    "api",
    "jobmonitor",
    "scheduler",
    "etcd",
    "learner",
    "helper",
    "engine",
    "manager",
)
# Kills that take a swarm node down: the suite restarts the node before the next kill.
NODE_KILLS = ("engine", "manager")
CHECKPOINT_INTERVAL_S = 5
MAX_RESTARTS = 3
POLL_DOCKER_S = 0.2
RECOVERY_WAIT_S = 90.0
# How long the manager's engine stays down (a crash its init system restarts).
MANAGER_DOWN_S = 10.0
# Longest a watcher follows a container's engine that stopped answering (it may come back).
REFOLLOW_S = 120.0
# Targets of the issue (seconds), for the table.
TARGETS = {"api": 1.0, "lcm-leader": 2.0, "helper": 2.0, "learner": 5.0}

EPOCH_RE = re.compile(r"^epoch (\d+)/(\d+)\b")
RESUME_RE = re.compile(r"resuming from the checkpoint of epoch (\d+)( and \d+)?")
RUN_START_RE = re.compile(r"^(data: \d+ training|learner \d+/\d+: shard of)")


# =========================================================================== pure logic


@dataclass(frozen=True)
class JobPlan:
    name: str
    kind: str  # "digits" | "ddp" | "elastic"
    epochs: int
    manifest: str
    code_dir: Path

    @property
    def checked_learners(self) -> tuple[int, ...]:
        """Learners whose log stream must be complete (an elastic job's count changes)."""
        return (0, 1) if self.kind == "ddp" else (0,)


def _manifest(name: str, learners: str, cpus: float, priority: str, command: str, results: str):
    return (
        f"name: {name}\n{learners}cpus: {cpus}\nmemory: 512MiB\npriority: {priority}\n"
        f"checkpoint: {{interval_s: {CHECKPOINT_INTERVAL_S}}}\nmax_restarts: {MAX_RESTARTS}\n"
        "data_stores:\n  - id: digits\n    type: s3\n"
        "    training_data: {container: digits-data}\n"
        f"    training_results: {{container: {results}}}\n"
        f'framework: {{name: python, version: "3", command: "{command}"}}\n'
    )


def job_mix(n: int, rng: random.Random) -> list[JobPlan]:
    """n jobs: half digits (1 learner, slow epochs), a quarter ddp, a quarter elastic ddp."""
    kinds = ["digits", "ddp", "digits", "elastic"]
    plans = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        priority = rng.choice(["low", "normal", "high"])
        name = f"chaos-{i:02d}-{kind}"
        if kind == "digits":
            epochs, sleep = rng.randint(20, 30), rng.choice([1.0, 1.5, 2.0])
            command = f"python3 train.py --epochs {epochs} --epoch-sleep {sleep}"
            text = _manifest(name, "learners: 1\n", 1, priority, command, "digits-results")
            code = REPO / "examples/digits"
        else:
            epochs = rng.randint(20, 40)
            learners = (
                "learners: 2\n"
                if kind == "ddp"
                else "learners: 2\nmin_learners: 1\nmax_learners: 2\n"
            )
            command = f"python3 train.py --epochs {epochs}"
            text = _manifest(name, learners, 0.5, priority, command, "digits-ddp-results")
            code = REPO / "tests/fixtures/jobs/numpy-allreduce"
        plans.append(JobPlan(name, kind, epochs, text, code))
    return plans


@dataclass
class LogCheck:
    lost: int = 0
    duplicated: int = 0
    runs: int = 0
    last_epoch: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def bad_lines(self) -> int:
        return self.lost + self.duplicated


def check_log(lines: Sequence[str], epochs: int, completed: bool = True) -> LogCheck:
    """Lost and duplicated "epoch k/E" lines in one learner's whole stream (see the docstring)."""
    out = LogCheck()
    prev: int | None = None  # last epoch of this run; None: a run just started
    seen = 0  # highest epoch the stream has shown so far
    for i, line in enumerate(lines):
        if RUN_START_RE.search(line):
            out.runs += 1
            prev = None
            continue
        resume = RESUME_RE.search(line)
        if resume:
            n = int(resume.group(1))
            if n > seen:
                out.lost += n - seen
                out.problems.append(f"line {i}: resumes from epoch {n}, stream showed {seen}")
            prev = n
            continue
        m = EPOCH_RE.match(line)
        if not m:
            continue
        k = int(m.group(1))
        expected = (prev or 0) + 1
        if k < expected:
            out.duplicated += 1
            out.problems.append(f"line {i}: epoch {k} again (expected {expected})")
            continue
        if k > expected:
            out.lost += k - expected
            out.problems.append(f"line {i}: epoch {k}, epochs {expected}..{k - 1} missing")
        prev = k
        seen = max(seen, k)
    out.last_epoch = prev or 0
    if completed and out.last_epoch < epochs:
        out.lost += epochs - out.last_epoch
        out.problems.append(f"ends at epoch {out.last_epoch} of {epochs}")
    return out


@dataclass
class RunTimeline:
    """One learner container's lines with the engine's timestamps; `end`: its stream ended."""

    container_id: str
    start: float
    lines: list[tuple[float, str]] = field(default_factory=list)
    end: float | None = None


def lost_work(runs: Sequence[RunTimeline]) -> list[float]:
    """Seconds of training lost at each restart of one learner (runs in start order)."""
    out = []
    for i in range(1, len(runs)):
        prev, run = runs[i - 1], runs[i]
        if not any(RUN_START_RE.search(t) for _, t in run.lines):
            continue  # never got to its first line: nothing to judge
        prev_end = prev.end if prev.end is not None else run.start
        resume = next((RESUME_RE.search(t) for _, t in run.lines if RESUME_RE.search(t)), None)
        if resume is None:
            # From scratch: the previous run's work (if it trained at all) is lost.
            trained = [ts for ts, t in prev.lines if EPOCH_RE.match(t)]
            out.append(max(0.0, prev_end - prev.start) if trained else 0.0)
            continue
        if resume.group(2):  # a mid-epoch SIGTERM checkpoint: taken at the stop itself
            out.append(0.0)
            continue
        n = int(resume.group(1))
        printed = [
            ts
            for r in runs[:i]
            for ts, t in r.lines
            if (m := EPOCH_RE.match(t)) and int(m.group(1)) == n
        ]
        if printed:
            out.append(max(0.0, prev_end - max(printed)))
    return out


def duplicates(rows: Iterable[tuple[str, int]]) -> set[tuple[str, int]]:
    """The (job, learner) pairs that occur more than once among running learner containers."""
    seen: set[tuple[str, int]] = set()
    dup: set[tuple[str, int]] = set()
    for key in rows:
        (dup if key in seen else seen).add(key)
    return dup


def summary(
    jobs: dict[str, dict],
    checks: dict[str, dict[int, LogCheck]],
    dups: set,
    work: dict[str, list[float]],
    recovery: dict[str, float | None],
) -> dict:
    completed = sum(1 for j in jobs.values() if j.get("status") == "COMPLETED")
    all_work = [w for ws in work.values() for w in ws]
    return {
        "completed": completed,
        "lost": len(jobs) - completed,
        "duplicate_learners": len(dups),
        "lost_log_lines": sum(c.bad_lines for per in checks.values() for c in per.values()),
        "max_lost_work_s": round(max(all_work), 2) if all_work else 0.0,
        "recovery_s": {k: (round(v, 2) if v is not None else None) for k, v in recovery.items()},
    }


# =========================================================================== adapters


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def _docker_ts(stamp: str) -> float:
    """'2026-11-22T03:04:41.123456789Z' -> seconds since the epoch (engine clock = host clock)."""
    head, _, frac = stamp.rstrip("Z").partition(".")
    base = dt.datetime.fromisoformat(head).replace(tzinfo=dt.UTC).timestamp()
    return base + float(f"0.{frac or 0}")


class Platform:
    """The platform under test: its state dir, REST client, nodes' engines and pid records.

    On a swarm (`home`/swarm holds the lab) the nodes are the lab's, each engine reached
    through its own socket (the attacker's view, never the platform's); else the one node
    "local" is the machine's engine.
    """

    def __init__(self, home: Path):
        import docker
        import httpx

        from dlaas.local.swarm import STATE_FILE, SwarmLab

        self.home = home
        cfg = json.loads((home / "client.json").read_text())
        self.token = cfg["token"]
        self.http = httpx.Client(
            base_url=cfg["url"], headers={"Authorization": f"Bearer {self.token}"}, timeout=30
        )
        conf = json.loads((home / "platform.json").read_text())
        self.platform_id = conf["platform_id"]
        self.engines: dict[str, str] = {}  # node -> its engine's docker host
        self.lab: SwarmLab | None = None
        self.manager_node = ""
        if (home / "swarm" / STATE_FILE).exists():
            info = SwarmLab(home / "swarm").info()
            self.lab = SwarmLab(home / "swarm", nodes=len(info.nodes))
            self.engines = dict(info.node_sockets)
            self.manager_node = info.nodes[0]  # the lab's only manager
        else:
            self.engines["local"] = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        self._docker = docker
        self.clients = {n: self.client(h) for n, h in self.engines.items()}

    @property
    def workers(self) -> list[str]:
        """The swarm's worker nodes (none on the machine's one engine)."""
        return [n for n in self.engines if self.lab is not None and n != self.manager_node]

    def renew_client(self, node: str) -> None:
        """A fresh client for a restarted engine: the old one's connections went with it."""
        self.clients[node] = self.client(self.engines[node])

    def nodes_schedulable(self, names: Iterable[str]) -> bool:
        """Whether the platform lists every node in `names` ready and schedulable."""
        rows = {n["name"]: n for n in self.get("/v1/nodes").json().get("nodes", [])}
        return all(
            rows.get(n, {}).get("healthy") and rows[n].get("state") == "ready" for n in names
        )

    def client(self, host: str):
        # A short timeout: a dead engine must not stall the watcher.
        return self._docker.DockerClient(base_url=host, version="1.41", timeout=5, max_pool_size=64)

    def record(self, name: str) -> dict:
        return StateDir(self.home).read_pid(name)

    def records(self) -> dict[str, dict]:
        out = {}
        for p in (self.home / "pids").glob("*.json"):
            with contextlib.suppress(OSError, ValueError):
                out[p.stem] = json.loads(p.read_text())
        return out

    def etcd_members(self) -> list[str]:
        return sorted(n for n in self.records() if n == "etcd" or n.startswith("etcd-"))

    def etcd_endpoints(self) -> list[str]:
        return [self.record(n).get("address", "") for n in self.etcd_members()]

    def api_url(self) -> str:
        return self.record("api-0").get("address") or str(self.http.base_url)

    def get(self, path: str, **params):
        """GET over REST, retried while the API is down (it is one of the things killed)."""
        import httpx

        deadline = time.monotonic() + 60
        while True:
            try:
                self.http.base_url = self.api_url()
                reply = self.http.get(path, params=params)
                if reply.status_code < 500:
                    return reply
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"GET {path}: the API did not answer for 60 s")
            time.sleep(0.2)

    def submit(self, plan: JobPlan) -> str:
        from dlaas.clients.client import pack_code

        data, name = pack_code(plan.code_dir)
        files = {
            "manifest": ("manifest.yaml", plan.manifest.encode(), "application/yaml"),
            "code": (name, data, "application/gzip"),
        }
        reply = self.http.post("/v1/jobs", files=files)
        if reply.status_code != 201:
            raise RuntimeError(f"submit {plan.name}: {reply.status_code} {reply.text}")
        return reply.json()["job_id"]

    def leader(self) -> str:
        """The LCM leadership key's value ("host:pid@addr"), read over etcd's HTTP gateway."""
        import httpx

        from dlaas.domain.keys import EtcdKeys

        key = base64.b64encode(EtcdKeys().lcm_leader.encode()).decode()
        for endpoint in self.etcd_endpoints():
            with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
                reply = httpx.post(f"http://{endpoint}/v3/kv/range", json={"key": key}, timeout=1)
                kvs = reply.json().get("kvs") or []
                return base64.b64decode(kvs[0]["value"]).decode() if kvs else ""
        return ""

    def running(self, role: str, **labels: str) -> list[tuple[str, dict]]:
        """(node, container summary) of this platform's running containers with `role`."""
        from dlaas.domain import jobspec

        want = [f"{jobspec.LABEL_MANAGED}={self.platform_id}", f"{jobspec.LABEL_ROLE}={role}"]
        want += [f"{k}={v}" for k, v in labels.items()]
        out = []
        for node, client in list(self.clients.items()):
            try:
                rows = client.api.containers(filters={"label": want, "status": "running"})
            except Exception:  # noqa: BLE001, S112 - a dead engine (killed on purpose) lists nothing
                continue
            out.extend((node, row) for row in rows)
        return out


class Watcher:
    """Background: duplicate learners (all engines every 0.2 s) and learner log timelines."""

    def __init__(self, platform: Platform):
        self.p = platform
        self.dups: set[tuple[str, int]] = set()
        self.timelines: dict[tuple[str, int], list[RunTimeline]] = {}
        self.learners_on: dict[str, set[str]] = {}  # node -> jobs with a learner there now
        self._followed: set[str] = set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        from dlaas.domain import jobspec

        while not self._stop.is_set():
            rows = self.p.running(jobspec.ROLE_LEARNER)
            keys, on = [], {}
            for node, row in rows:
                labels = row.get("Labels") or {}
                job = labels.get(jobspec.LABEL_JOB, "")
                index = int(labels.get(jobspec.LABEL_LEARNER, "0"))
                keys.append((job, index))
                on.setdefault(node, set()).add(job)
                if row["Id"] not in self._followed:
                    self._followed.add(row["Id"])
                    threading.Thread(
                        target=self._follow, args=(node, row["Id"], job, index), daemon=True
                    ).start()
            found = duplicates(keys)
            with self._lock:
                for key in found - self.dups:
                    log(f"DUPLICATE learner: job {key[0]} learner {key[1]}")
                self.dups |= found
                self.learners_on = on
            self._stop.wait(POLL_DOCKER_S)

    def _follow(self, node: str, container_id: str, job: str, index: int) -> None:
        """Collect one learner container's timestamped lines until it stops running.

        A stream that breaks because the node's engine went away (the manager's engine
        crash leaves its containers running) is picked up again once the engine answers,
        from the last line's time; the run ends when the container is found stopped.
        """
        run = RunTimeline(container_id, time.time())
        with self._lock:
            runs = self.timelines.setdefault((job, index), [])
            runs.append(run)
        broke_at, since = None, 0.0
        give_up = time.time() + REFOLLOW_S
        while not self._stop.is_set() and time.time() < give_up:
            client = self.p.clients.get(node)
            try:
                state = client.api.inspect_container(container_id)["State"]
            except self.p._docker.errors.NotFound:
                break  # removed: its stream ended for good
            except Exception:  # noqa: BLE001 - the engine is down (killed on purpose): retry
                broke_at = broke_at or time.time()
                self._stop.wait(1.0)
                continue
            if broke_at is None:  # the first look
                run.start = _docker_ts(state["StartedAt"])
                with self._lock:
                    runs.sort(key=lambda r: r.start)
            elif not state.get("Running"):
                break  # it died with its engine (or after): its stream ended at the break
            else:
                self._stop.wait(0.5)  # its engine is back and it runs on: read on
            broke_at = None
            try:
                self._read_logs(client, container_id, run, since)
            except Exception:  # noqa: BLE001, S110 - the engine died, or the container went
                pass
            broke_at = time.time()
            since = run.lines[-1][0] if run.lines else 0.0
            give_up = time.time() + REFOLLOW_S
        run.end = broke_at or time.time()

    @staticmethod
    def _read_logs(client, container_id: str, run: RunTimeline, since: float) -> None:
        """Append the container's lines (after `since`) to `run` until its stream ends."""
        buf = b""
        stream = client.api.logs(
            container_id, stream=True, follow=True, timestamps=True, since=since or None
        )
        for chunk in stream:
            buf += chunk
            *whole, buf = buf.split(b"\n")
            for raw in whole:
                stamp, _, text = raw.decode("utf-8", "replace").partition(" ")
                with contextlib.suppress(ValueError):
                    ts = _docker_ts(stamp)
                    if ts > since:  # `since` has whole-second precision on some engines
                        run.lines.append((ts, text))

    def first_line_after(self, job: str, index: int, after: float, pattern) -> float | None:
        with self._lock:
            runs = list(self.timelines.get((job, index), []))
        for run in runs:
            if run.start <= after:
                continue
            for ts, text in run.lines:
                if pattern.search(text):
                    return ts
        return None

    def progressed_since(self, job: str, after: float) -> bool:
        """Whether learner 0 of `job` printed an epoch line after `after`, in any run."""
        with self._lock:
            runs = list(self.timelines.get((job, 0), []))
        return any(ts > after and EPOCH_RE.match(t) for r in runs for ts, t in r.lines)

    def epochs_printed(self, job: str) -> int:
        with self._lock:
            runs = list(self.timelines.get((job, 0), []))
        return sum(1 for r in runs for _, t in r.lines if EPOCH_RE.match(t))


@dataclass
class Tracker:
    """Job statuses, polled over REST every 0.5 s."""

    platform: Platform
    ids: dict[str, JobPlan]
    status: dict[str, str] = field(default_factory=dict)

    def poll(self) -> dict[str, str]:
        try:
            reply = self.platform.get("/v1/jobs", limit=500)
            for job in reply.json().get("jobs", []):
                if job["job_id"] in self.ids:
                    self.status[job["job_id"]] = job["status"]
        except (RuntimeError, ValueError):
            pass
        return self.status

    def active(self) -> list[str]:
        return [j for j in self.ids if self.status.get(j) not in FINAL]

    def processing(self) -> list[str]:
        return [j for j in self.ids if self.status.get(j) == "PROCESSING"]


# --------------------------------------------------------------------------- kills


def _sigkill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _wait(check: Callable[[], bool], timeout: float = RECOVERY_WAIT_S, every: float = 0.02):
    """Poll until `check` holds; the time that took, or None after `timeout`."""
    start = time.time()
    while time.time() - start < timeout:
        with contextlib.suppress(Exception):
            if check():
                return time.time() - start
        time.sleep(every)
    return None


def _new_pid_alive(p: Platform, name: str, old: int) -> bool:
    rec = p.record(name)
    return int(rec.get("pid") or 0) != old and record_alive(rec)


class Chaos:
    """Performs one kill and measures the recovery; results in `recovery` and `events`."""

    def __init__(
        self,
        p: Platform,
        watcher: Watcher,
        tracker: Tracker,
        rng: random.Random,
        wait_s: float = RECOVERY_WAIT_S,
    ):
        self.p, self.watcher, self.tracker, self.rng = p, watcher, tracker, rng
        self.wait_s = wait_s
        self._threads: list[threading.Thread] = []
        self.recovery: dict[str, float | None] = {}
        self.skipped: dict[str, str] = {}
        self.events: list[dict] = []
        # Jobs a container or node kill already hit: the next one picks another job, so
        # each recovery is measured on its own (a learner and a helper kill waiting for a
        # target at the same time once both took the same job, with the same restart).
        self._hit: set[str] = set()
        self._hit_lock = threading.Lock()

    def kill(self, what: str, pace_s: float | None = None) -> None:
        """Kill `what` and measure its recovery; return after it recovered or `pace_s`.

        A recovery slower than `pace_s` goes on being measured in the background (up to
        the wait) while the next kill happens: one slow recovery must not push the
        remaining kills past the end of the jobs.
        """
        fn = getattr(self, "_kill_" + what.replace("-", "_"), None)
        if fn is None:
            raise SystemExit(f"--kills: unknown component {what!r}; use {', '.join(ALL_KILLS)}")
        thread = threading.Thread(target=self._guarded, args=(what, fn), name=f"kill-{what}")
        thread.start()
        self._threads.append(thread)
        # A node kill returns with its node back (see the module docstring): no pace.
        thread.join(None if what in NODE_KILLS else pace_s)
        if thread.is_alive():
            log(f"  {what}: not recovered after {pace_s:.0f} s; measuring on, next kill")

    def _guarded(self, what: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - one failed kill must not end the suite
            self._skip(what, f"the kill failed: {exc!r}")

    def finish(self) -> None:
        """Wait for the recoveries still being measured (each is bounded by its wait)."""
        for thread in self._threads:
            thread.join()

    def _done(self, what: str, seconds: float | None, **detail) -> None:
        self.recovery[what] = seconds
        shown = f"{seconds:.2f} s" if seconds is not None else f"NOT within {self.wait_s:.0f} s"
        extra = "".join(f", {k}={v}" for k, v in detail.items())
        log(f"  {what}: recovered in {shown}{extra}")
        self.events.append({"kill": what, "recovery_s": seconds, **detail})

    def _skip(self, what: str, reason: str) -> None:
        self.skipped[what] = reason
        log(f"  {what}: skipped: {reason}")

    # -- services
    def _service(self, what: str, name: str, answers: Callable[[dict], bool]) -> None:
        rec = self.p.record(name)
        old = int(rec.get("pid") or 0)
        if not old:
            return self._skip(what, f"no {name} pid record")
        log(f"kill -9 {name} (pid {old})")
        _sigkill(old)
        took = _wait(
            lambda: _new_pid_alive(self.p, name, old) and answers(self.p.record(name)), self.wait_s
        )
        self._done(what, took, pid=old)

    def _kill_api(self) -> None:
        # Two replicas share the port: the API answers again as soon as a live one takes
        # the next connection. The killed one must come back too (the supervisor).
        name = self.rng.choice(sorted(n for n in self.p.records() if n.startswith("api-")))
        rec = self.p.record(name)
        old, health = int(rec.get("pid") or 0), f"{rec.get('address')}/health"
        if not old:
            return self._skip("api", f"no {name} pid record")
        log(f"kill -9 {name} (pid {old}), one of the API replicas")
        _sigkill(old)
        took = _wait(lambda: http_ok(health), self.wait_s)
        back = _wait(lambda: _new_pid_alive(self.p, name, old) and http_ok(health), self.wait_s)
        replica_s = round(took + back, 2) if took is not None and back is not None else None
        self._done("api", took, pid=old, replica=name, replica_restarted_s=replica_s)

    def _kill_scheduler(self) -> None:
        self._service("scheduler", "scheduler", lambda rec: grpc_answers(rec["address"]))

    def _kill_jobmonitor(self) -> None:
        # The monitor serves nothing to ask: its replacement process running is the answer.
        self._service("jobmonitor", "jobmonitor", lambda rec: True)

    def _kill_lcm_replica(self) -> None:
        leader = self.p.leader()
        names = [n for n in self.p.records() if n.startswith("lcm-")]
        standby = [n for n in sorted(names) if f":{self.p.record(n).get('pid')}@" not in leader]
        if not standby:
            return self._skip("lcm-replica", "no LCM replica besides the leader")
        name = self.rng.choice(standby)
        self._service("lcm-replica", name, lambda rec: grpc_answers(rec["address"]))

    def _kill_lcm_leader(self) -> None:
        leader = self.p.leader()
        m = re.match(r"^.*:(\d+)@", leader)
        mine = {
            int(r.get("pid") or 0): n for n, r in self.p.records().items() if n.startswith("lcm-")
        }
        if not m or int(m.group(1)) not in mine:
            return self._skip("lcm-leader", f"leader key {leader!r} names none of our replicas")
        pid = int(m.group(1))
        log(f"kill -9 {mine[pid]} (pid {pid}), the LCM leader")
        _sigkill(pid)
        took = _wait(lambda: (now := self.p.leader()) != "" and now != leader, self.wait_s)
        self._done("lcm-leader", took, pid=pid, new_leader=self.p.leader())

    def _kill_etcd(self) -> None:
        members = self.p.etcd_members()
        if len(members) < 2:
            return self._skip("etcd", "the platform runs a single etcd member, not a cluster")
        name = self.rng.choice(members)
        self._service("etcd", name, lambda rec: http_ok(f"http://{rec['address']}/health"))

    # -- containers
    def _job_with_progress(self, role: str) -> tuple[str, str, dict] | None:
        """A PROCESSING job that has printed an epoch, with a running `role` container (on
        a swarm, one on a worker node: a node other than the one the manager runs on)."""
        from dlaas.domain import jobspec

        deadline = time.time() + 120
        while time.time() < deadline:
            self.tracker.poll()
            with self._hit_lock:
                ready = [j for j in self.tracker.processing()
                         if self.watcher.epochs_printed(j) >= 2 and j not in self._hit]  # fmt: skip
            self.rng.shuffle(ready)
            for job in ready:
                labels = {jobspec.LABEL_JOB: job}
                if role == jobspec.ROLE_LEARNER:
                    labels[jobspec.LABEL_LEARNER] = "0"
                found = self.p.running(role, **labels)
                if self.p.workers:
                    found = [(n, row) for n, row in found if n in self.p.workers]
                if found:
                    with self._hit_lock:
                        if job in self._hit:
                            continue
                        self._hit.add(job)
                    node, row = found[0]
                    return job, node, row
            time.sleep(0.5)
        return None

    def _kill_learner(self) -> None:
        from dlaas.domain import jobspec

        found = self._job_with_progress(jobspec.ROLE_LEARNER)
        if found is None:
            return self._skip("learner", "no running job with a learner to kill for 120 s")
        job, node, row = found
        log(f"docker kill learner 0 of {self.tracker.ids[job].name} ({job}) on {node}")
        t0 = time.time()
        self.p.clients[node].api.kill(row["Id"], signal="SIGKILL")
        progress = re.compile(f"{RESUME_RE.pattern}|{EPOCH_RE.pattern}")

        def resumed() -> bool:
            ts = self.watcher.first_line_after(job, 0, t0, progress)
            if ts is not None:
                resumed.at = ts
                return True
            return self.tracker.poll().get(job) in FINAL

        resumed.at = None
        took = _wait(resumed, self.wait_s, every=0.1)
        if took is not None and resumed.at is not None:
            took = resumed.at - t0
        self._done("learner", took, job=job, steps=self._steps_since(job, t0),
                   engine=self._engine_steps(job, t0))  # fmt: skip

    def _steps_since(self, job: str, t0: float) -> str:
        """The job's status changes after `t0`, as seconds after it (where recovery went)."""
        history = self.p.get(f"/v1/jobs/{job}").json().get("history", [])
        return " ".join(f"{h['status']}+{h['at'] - t0:.2f}" for h in history if h["at"] > t0)

    def _engine_steps(self, job: str, t0: float) -> str:
        """The job's new run as its engines saw it, as seconds after `t0`: each service's
        creation and its task's (the manager's clock), each container's creation and start
        and the helper's lines (its node's engine). Where a restart's time goes."""
        from dlaas.domain import jobspec

        out: list[tuple[float, str]] = []
        manager = self.p.clients.get(self.p.manager_node) if self.p.lab is not None else None
        label = {"label": [f"{jobspec.LABEL_JOB}={job}"]}
        with contextlib.suppress(Exception):
            for s in manager.api.services(filters=label) if manager else ():
                name = s["Spec"]["Name"].rsplit("-", 2)[-1]
                out.append((_docker_ts(s["CreatedAt"]), f"svc:{name}"))
                for t in manager.api.tasks(filters={"service": [s["ID"]]}):
                    out.append((_docker_ts(t["CreatedAt"]), f"task:{name}"))
        for node, client in list(self.p.clients.items()):
            try:
                rows = client.api.containers(all=True, filters=label)
            except Exception:  # noqa: BLE001, S112 - a dead engine lists nothing
                continue
            for row in rows:
                labels = row.get("Labels") or {}
                who = labels.get(jobspec.LABEL_ROLE, "?")
                if labels.get(jobspec.LABEL_LEARNER) not in (None, ""):
                    who += labels[jobspec.LABEL_LEARNER]
                with contextlib.suppress(Exception):
                    info = client.api.inspect_container(row["Id"])
                    created = _docker_ts(info["Created"])
                    if created < t0:
                        continue
                    out.append((created, f"created:{who}@{node}"))
                    out.append((_docker_ts(info["State"]["StartedAt"]), f"started:{who}"))
                    if who == jobspec.ROLE_HELPER:
                        raw = client.api.logs(row["Id"], timestamps=True, tail=30)
                        for line in raw.decode("utf-8", "replace").splitlines():
                            stamp, _, text = line.partition(" ")
                            # The helper's own account of its start in full, the rest cut.
                            keep = 200 if "data ready" in text else 48
                            out.append((_docker_ts(stamp), text[:keep]))
        return " | ".join(f"{text}+{ts - t0:.2f}" for ts, text in sorted(out) if ts > t0)

    def _kill_helper(self) -> None:
        from dlaas.domain import jobspec

        found = self._job_with_progress(jobspec.ROLE_HELPER)
        if found is None:
            return self._skip("helper", "no running job with a helper to kill for 120 s")
        job, node, row = found
        log(f"docker kill helper of {self.tracker.ids[job].name} ({job}) on {node}")
        t0 = time.time()
        self.p.clients[node].api.kill(row["Id"], signal="SIGKILL")

        def back() -> bool:
            for n, r in self.p.running(jobspec.ROLE_HELPER, **{jobspec.LABEL_JOB: job}):
                started = self.p.clients[n].api.inspect_container(r["Id"])["State"]["StartedAt"]
                if _docker_ts(started) > t0:
                    self.tracker.poll()
                    back.at = _docker_ts(started)
                    return self.tracker.status.get(job) == "PROCESSING"
            # A job that ended in the meantime counts once COMPLETED: only a helper started
            # after the kill can have stored its results (the killed one never came back).
            return self.tracker.poll().get(job) == "COMPLETED"

        back.at = None
        seen = _wait(back, self.wait_s, every=0.05)
        # Its start, by its engine's clock, as the learner's recovery is its first line's:
        # this poll's own round (every engine, the job list over REST) takes a while under load.
        took = back.at - t0 if seen is not None and back.at is not None else seen
        self._done("helper", took, job=job, seen_s=None if seen is None else round(seen, 2))

    # -- swarm nodes
    def _jobs_back(self, jobs: Iterable[str], since: float, new_run: bool) -> bool | None:
        """Every job in `jobs` ended COMPLETED or prints epochs again after `since` (from a
        run started after it, with `new_run`); None once one of them was lost."""
        status = self.tracker.poll()
        if any(status.get(j) in ("FAILED", "HALTED") for j in jobs):
            return None
        return all(
            status.get(j) == "COMPLETED"
            or (
                status.get(j) == "PROCESSING"
                and (
                    self.watcher.first_line_after(j, 0, since, EPOCH_RE) is not None
                    if new_run
                    else self.watcher.progressed_since(j, since)
                )
            )
            for j in jobs
        )

    def _wait_jobs_back(self, jobs: set[str], since: float, new_run: bool, t0: float):
        """Seconds from `t0` until `_jobs_back`; None if a job was lost or after the wait."""
        deadline = time.time() + 2 * self.wait_s
        while time.time() < deadline:
            back = self._jobs_back(jobs, since, new_run)
            if back is None:
                return None
            if back:
                return time.time() - t0
            time.sleep(0.2)
        return None

    def _restart_node(self, node: str) -> float | None:
        """Start `node`'s engine again; seconds until the platform schedules on it again."""
        t1 = time.time()
        self.p.lab.restart_node(node, wait_ready=False)
        self.p.renew_client(node)
        took = _wait(lambda: self.p.nodes_schedulable([node]), self.wait_s, every=0.2)
        return None if took is None else time.time() - t1

    def _busy_worker(self, timeout_s: float = 120.0) -> tuple[str, set[str]]:
        """The worker node running learners of the most jobs that have printed an epoch
        and no other kill hit (waiting up to `timeout_s` for one); else the busiest."""
        deadline = time.time() + timeout_s
        while True:
            with self.watcher._lock:
                on = {n: set(self.watcher.learners_on.get(n, ())) for n in self.p.workers}
            with self._hit_lock:
                fresh = {n: {j for j in jobs if j not in self._hit
                             and self.watcher.epochs_printed(j) >= 1} for n, jobs in on.items()}  # fmt: skip
            node = max(self.p.workers, key=lambda n: (len(fresh[n]), len(on[n]), self.rng.random()))
            if fresh[node] or time.time() > deadline:
                with self._hit_lock:
                    self._hit |= on[node]
                return node, on[node]
            time.sleep(0.5)

    def _kill_engine(self) -> None:
        if not self.p.workers:
            return self._skip("engine", "no swarm worker node (the platform runs --nodes 1)")
        node, jobs = self._busy_worker()
        log(f"kill node {node} (dockerd, containerd, containers), jobs there: {sorted(jobs)}")
        t0 = time.time()
        # The machine goes: an engine crash alone would leave its learners running on,
        # unseen, beside their replacements.
        self.p.lab.kill_node(node, machine=True)
        try:
            jobs_s = self._wait_jobs_back(jobs, t0, new_run=True, t0=t0)
            log(f"  engine_jobs: its {len(jobs)} job(s) progressing again after {jobs_s} s")
        finally:
            back_s = self._restart_node(node)
        self.recovery["engine_jobs"] = jobs_s
        self._done("engine", back_s, node=node, jobs=len(jobs))

    def _kill_manager(self) -> None:
        if self.p.lab is None:
            return self._skip("manager", "no swarm (the platform runs --nodes 1)")
        node = self.p.manager_node
        jobs = set(self.tracker.processing())
        log(f"kill -9 the swarm manager's dockerd ({node}) for {MANAGER_DOWN_S:.0f} s; "
            f"{len(jobs)} job(s) processing")  # fmt: skip
        t0 = time.time()
        self.p.lab.kill_node(node)
        try:
            time.sleep(MANAGER_DOWN_S)
        finally:
            t1 = time.time()
            back_s = self._restart_node(node)
        # Every node schedulable again is the platform's view of the manager being back.
        if back_s is not None:
            took = _wait(lambda: self.p.nodes_schedulable(self.p.engines), self.wait_s, every=0.2)
            back_s = None if took is None else time.time() - t1
        jobs_s = self._wait_jobs_back(jobs, t1, new_run=False, t0=t0)
        self.recovery["manager_jobs"] = jobs_s
        log(f"  manager_jobs: the {len(jobs)} job(s) progressing again {jobs_s} s after the kill")
        self._done("manager", back_s, node=node, down_s=MANAGER_DOWN_S)


# --------------------------------------------------------------------------- the run


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
