"""Mutation check of the LCM's restart and node-return rules: does a fast test fail when the
rule is broken?

    python benchmarks/mutants.py [--json] [--only NAME,...] [--tests PATH ...] [--list]

Each mutant is one textual change to product code (file, old text, new text) that breaks one
rule the README or the code's docstrings state: the restart backoff (`backoff_s`: at once,
then 1 s, 2 s, 4 s ... up to 60 s), the `max_restarts` boundary and count (`requeue`), and
what a node that answers again keeps (`_node_back`: every deployed job placed on it, the
rest removed, the node schedulable again). A mutant is applied to a temporary copy of the
tree (the files git knows, tracked or not ignored), never in place; the fast tests run
against that copy: first the test files that pin the rule (`focus`), then, if those pass,
the whole fast layer (`--tests`, default tests/unit and tests/scheduler), with `-x` so the
first failure names the test that killed it. A mutant whose old text is not found (the code
moved on) is reported as such, not silently passed.

Prints a table (mutant, file, killed/survived, by which test) and the totals; `--json`: the
last line is a list of {name, file, rule, result, killed_by, seconds}. Exit status 1 if a
mutant survived or could not be applied, or if the tests fail on the unmutated copy.
Runs one pytest at a time (the development machine is shared); a mutant takes seconds when
its focus tests kill it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FAST_TESTS = ("tests/unit", "tests/scheduler")
# A mutant that makes a test hang (a backoff of hours) is caught by pytest-timeout well
# before this; this is the last resort, and a run killed by it counts as killed.
RUN_TIMEOUT_S = 900

RESTART_POLICY = "services/lcm/restart_policy.py"
USE_CASES = "services/lcm/use_cases.py"
NODE_HEALTH = "services/lcm/node_health.py"
LCM_TESTS = ("tests/unit/test_lcm_use_cases.py", "tests/unit/test_node_drain.py")

BACKOFF = "return 0.0 if restart <= 1 else min(MAX_BACKOFF_S, 2.0 ** (restart - 2))"
LIMIT = "if done >= manifest.max_restarts:"
SKIP = "if state is None or state.status not in DEPLOYED or not placed_here:"


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str
    old: str  # must occur exactly once in `file`
    new: str
    rule: str  # what breaks, in the README's or the docstring's terms
    focus: tuple[str, ...] = LCM_TESTS


MUTANTS: tuple[Mutant, ...] = (
    # ---- backoff_s: the first restart at once, then 1 s, 2 s, 4 s ... up to 60 s
    Mutant(
        "backoff-base-3",
        RESTART_POLICY,
        BACKOFF,
        BACKOFF.replace("2.0 **", "3.0 **"),
        "the backoff doubles (1 s, 2 s, 4 s ...)",
    ),
    Mutant(
        "backoff-no-cap",
        RESTART_POLICY,
        BACKOFF,
        "return 0.0 if restart <= 1 else 2.0 ** (restart - 2)",
        "the backoff is capped at MAX_BACKOFF_S",
    ),
    Mutant(
        "backoff-cap-120",
        RESTART_POLICY,
        "MAX_BACKOFF_S = 60.0",
        "MAX_BACKOFF_S = 120.0",
        "the cap is 60 s (README)",
    ),
    Mutant(
        "backoff-exponent-off-by-one",
        RESTART_POLICY,
        BACKOFF,
        BACKOFF.replace("(restart - 2)", "(restart - 1)"),
        "the second restart waits 1 s",
    ),
    Mutant(
        "backoff-first-restart-waits",
        RESTART_POLICY,
        BACKOFF,
        BACKOFF.replace("restart <= 1", "restart < 1"),
        "the first restart is at once",
    ),
    Mutant(
        "backoff-returns-0",
        RESTART_POLICY,
        BACKOFF,
        "return 0.0",
        "restarts after the first wait (exponential backoff)",
    ),
    # ---- requeue: max_restarts restarts, each counted, the next one fails the job
    Mutant(
        "restart-number-off-by-one",
        USE_CASES,
        "delay = backoff_s(done + 1)",
        "delay = backoff_s(done)",
        "restart n waits backoff_s(n)",
    ),
    Mutant(
        "max-restarts-gt",
        USE_CASES,
        LIMIT,
        LIMIT.replace(">=", ">"),
        "a job restarts at most max_restarts times",
    ),
    Mutant(
        "max-restarts-one-fewer",
        USE_CASES,
        LIMIT,
        LIMIT.replace("done >=", "done + 1 >="),
        "a job restarts max_restarts times, not one fewer",
    ),
    Mutant(
        "restart-not-counted",
        USE_CASES,
        '{"restarts": done + 1, "not_before": not_before}',
        '{"restarts": done, "not_before": not_before}',
        "every restart is counted against max_restarts",
    ),
    Mutant(
        "every-requeue-counted",
        USE_CASES,
        "        not_before = 0.0\n        if is_restart:",
        "        not_before = 0.0\n        if True:",
        "a requeue that is not the job's failure (drain, lost node) is no restart",
    ),
    # ---- _node_back: a node answering again keeps every deployed job placed on it
    Mutant(
        "node-back-running-set",
        NODE_HEALTH,
        SKIP,
        SKIP.replace("not in DEPLOYED", 'not in {"DOWNLOADING", "PROCESSING"}'),
        "kept: every DEPLOYED status (a hand-typed 'running' set drops PENDING, STORING)",
    ),
    Mutant(
        "node-back-storing-not-kept",
        NODE_HEALTH,
        SKIP,
        SKIP.replace("not in DEPLOYED", "not in REQUEUEABLE"),
        "a STORING job's helper is kept (it uploads the results)",
    ),
    Mutant(
        "node-back-processing-not-kept",
        NODE_HEALTH,
        SKIP,
        SKIP.replace("not in DEPLOYED", 'not in DEPLOYED - {"PROCESSING"}'),
        "a PROCESSING job placed on the node is kept (it was only unreachable)",
    ),
    Mutant(
        "node-back-placement-ignored",
        NODE_HEALTH,
        SKIP,
        SKIP.replace(" or not placed_here", ""),
        "a job placed elsewhere meanwhile loses what it left on the node",
    ),
    Mutant(
        "node-back-skip-inverted",
        NODE_HEALTH,
        SKIP,
        "if not (state is None or state.status not in DEPLOYED or not placed_here):",
        "what is removed is what moved on, not what runs there",
    ),
    # ---- _node_lost / _node_back: a STORING job on a lost node restarts; its new run stays
    Mutant(
        "node-lost-storing-not-requeued",
        NODE_HEALTH,
        "if state.status in RESTARTABLE and name in",
        "if state.status in REQUEUEABLE and name in",
        "a node lost under a STORING job requeues it from its checkpoint (not FAILED later)",
    ),
    Mutant(
        "node-back-removes-the-new-run",
        NODE_HEALTH,
        "                    deployer.remove_job_here(job_id)\n",
        "                    deployer.remove_job(job_id)\n",
        "a node that comes back removes only its own part of a job that moved on",
        LCM_TESTS + ("tests/unit/test_swarm_manager_away.py",),
    ),
    Mutant(
        "node-back-stays-lost",
        NODE_HEALTH,
        "        self._unhealthy.discard(name)\n",
        "",
        "a node that answers again is not lost any more",
    ),
    Mutant(
        "node-back-not-published",
        NODE_HEALTH,
        "        self._unhealthy.discard(name)\n"
        "        self._publish_health(name, f\"availability {self._availability.get(name, 'active')}\")\n",
        "        self._unhealthy.discard(name)\n",
        "the scheduler places on a node again once it answers (recorded in etcd)",
    ),
)


@dataclass
class Outcome:
    name: str
    file: str
    rule: str
    result: str  # killed, survived, not applicable, error
    killed_by: str
    seconds: float


def tree_files(repo: Path) -> list[str]:
    """The files of the working tree that git knows: tracked, or untracked and not ignored."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout
    return [f for f in out.decode().split("\0") if f and (repo / f).is_file()]


def copy_tree(repo: Path, dest: Path) -> None:
    for rel in tree_files(repo):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / rel, dest / rel)


def apply(tree: Path, mutant: Mutant) -> bool:
    """Write the mutant into the copy; False if its old text is not there exactly once."""
    path = tree / mutant.file
    text = path.read_text()
    if text.count(mutant.old) != 1:
        return False
    path.write_text(text.replace(mutant.old, mutant.new))
    return True


_FIRST_FAILURE = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


def run_tests(tree: Path, paths: list[str]) -> tuple[str, str]:
    """(passed | failed | error, the first failing test or what went wrong)."""
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        # A mutant may keep a file's size and its second: no stale bytecode.
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-rfE", "-p", "no:cacheprovider", *paths]
    try:
        done = subprocess.run(
            cmd,
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "failed", f"(no answer within {RUN_TIMEOUT_S} s)"
    if done.returncode == 0:
        return "passed", ""
    if done.returncode == 1:
        first = _FIRST_FAILURE.search(done.stdout)
        return "failed", first.group(1) if first else "(a failure pytest did not name)"
    tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
    return "error", f"pytest exit {done.returncode}: {' / '.join(tail)}"


def check(mutant: Mutant, tree: Path, pristine: dict[str, str], tests: list[str]) -> Outcome:
    start = time.monotonic()
    for rel, text in pristine.items():  # the previous mutant undone
        (tree / rel).write_text(text)

    def outcome(result: str, by: str = "") -> Outcome:
        seconds = round(time.monotonic() - start, 1)
        return Outcome(mutant.name, mutant.file, mutant.rule, result, by, seconds)

    if not apply(tree, mutant):
        return outcome("not applicable", "old text not found once: update MUTANTS")
    verdict, by = "passed", ""
    for paths in ([p for p in mutant.focus if (tree / p).exists()], tests):
        if not paths:
            continue
        verdict, by = run_tests(tree, paths)
        if verdict != "passed":
            break
    return outcome({"passed": "survived", "failed": "killed"}.get(verdict, "error"), by)


def table(outcomes: list[Outcome]) -> str:
    rows = [("mutant", "file", "result", "killed by")]
    rows += [(o.name, o.file, o.result, o.killed_by) for o in outcomes]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r[:3], widths, strict=True)) + "  " + r[3]
        for r in rows
    ]
    counts = {k: sum(o.result == k for o in outcomes) for k in ("killed", "survived")}
    other = len(outcomes) - counts["killed"] - counts["survived"]
    lines.append(
        f"\n{counts['killed']}/{len(outcomes)} killed, {counts['survived']} survived"
        + (f", {other} not applicable or errors" if other else "")
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="last line: the outcomes as JSON")
    parser.add_argument("--only", default="", help="comma-separated mutant names")
    parser.add_argument(
        "--tests", nargs="+", default=list(FAST_TESTS), help="the fast layer (pytest paths)"
    )
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    args = parser.parse_args(argv)
    chosen = list(MUTANTS)
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {m.name for m in MUTANTS}
        if unknown:
            parser.error(f"--only: no mutant named {', '.join(sorted(unknown))}")
        chosen = [m for m in MUTANTS if m.name in wanted]
    if args.list:
        for m in chosen:
            print(f"{m.name:32} {m.file:32} {m.rule}")
        return 0

    with tempfile.TemporaryDirectory(prefix="dlaas-mutants-") as tmp:
        tree = Path(tmp)
        copy_tree(REPO, tree)
        pristine = {m.file: (tree / m.file).read_text() for m in chosen}
        focus = sorted({p for m in chosen for p in m.focus})
        print(f"baseline: the unmutated copy in {tree}", file=sys.stderr, flush=True)
        for paths in (focus, args.tests):
            verdict, by = run_tests(tree, paths)
            if verdict != "passed":
                print(f"the tests fail without any mutant ({by}); fix that first", file=sys.stderr)
                return 1
        outcomes = []
        for m in chosen:
            outcomes.append(check(m, tree, pristine, args.tests))
            o = outcomes[-1]
            print(
                f"{o.name}: {o.result} {o.killed_by} ({o.seconds} s)", file=sys.stderr, flush=True
            )
    print(table(outcomes))
    if args.json:
        print(json.dumps([asdict(o) for o in outcomes]))
    return 0 if all(o.result == "killed" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
