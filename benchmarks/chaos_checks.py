"""The chaos suite's job mix and its checks of the outcome, as pure functions of plain data.

benchmarks/chaos.py submits `job_mix(n)` and, after the run, judges the logs and
containers it saw with `check_log`, `lost_work`, `duplicates` and `summary`.

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
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHECKPOINT_INTERVAL_S = 5
MAX_RESTARTS = 3

EPOCH_RE = re.compile(r"^epoch (\d+)/(\d+)\b")
RESUME_RE = re.compile(r"resuming from the checkpoint of epoch (\d+)( and \d+)?")
RUN_START_RE = re.compile(r"^(data: \d+ training|learner \d+/\d+: shard of)")


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
