"""The failure-triage catalog: what a failed learner's last log lines say went wrong. Pure.

One table of rows, each a regular expression over one log line -> a label and an action.
The label becomes the failed job's error code (and is named in its reason); the action says
whose fault it is: `fail` (the job's own: the same gang would fail the same way, so no
restart) or `restart` (the platform's: the gang restarts from its last checkpoint, counted
against the manifest's max_restarts like every infrastructure restart of the job monitor).

The job monitor's detector (services/jobmonitor/decide.py) reads the last log lines of the
learner that failed first against, in this order: the manifest's own rows (`triage:`), the
operator's (DLAAS_TRIAGE_FILE, read once when the monitor starts), then `CATALOG`. The first
row that matches any of the lines wins; no match leaves the generic `exit_code`.

Patterns are Python regular expressions searched in each line (the last
`MAX_LINES` lines, each cut to `MAX_LINE` characters). A manifest's patterns are a user's
input run inside the monitor, so they are bounded to shapes that match in time linear-ish
in the line (`pattern_problem`): no repetition inside a repetition, no repeated
alternation, no back-reference, at most `MAX_OPEN_REPEATS` unbounded repeats.
"""

from __future__ import annotations

import re
import re._parser as sre  # the stdlib's own parse tree: the shape check needs it
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

from dlaas.domain.jobspec import JobErrorCode

ACTION_FAIL = "fail"  # the job's own fault: no restart
ACTION_RESTART = "restart"  # the platform's: restart from the last checkpoint
ACTIONS = (ACTION_FAIL, ACTION_RESTART)

MAX_PATTERN = 256
MAX_MANIFEST_ROWS = 32
MAX_OPERATOR_ROWS = 256
MAX_LINES = 10  # the detector's LOG_TAIL_LINES: what the failure reason shows too
MAX_LINE = 256  # characters of a line a pattern is searched in
MAX_OPEN_REPEATS = 2
_OPEN = 32  # a repeat of more than this many counts as unbounded
_LABEL_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


@dataclass(frozen=True)
class Rule:
    """One row: `pattern` -> `label`, `action`. `explain` (built-in rows) is what the reason
    says, formatted with the match's named groups and the job's image."""

    pattern: str
    label: str
    action: str
    explain: str = ""
    regex: re.Pattern | None = field(compare=False, repr=False, default=None)


@dataclass(frozen=True)
class Verdict:
    label: str
    action: str
    what: str  # words for the reason
    line: str  # the line that matched

    @property
    def restart(self) -> bool:
        return self.action == ACTION_RESTART


def pattern_problem(pattern: str, *, untrusted: bool = True) -> str:
    """What is wrong with `pattern` as a triage pattern, or ""."""
    if not isinstance(pattern, str) or not pattern:
        return "must be a non-empty regular expression"
    if len(pattern) > MAX_PATTERN:
        return f"at most {MAX_PATTERN} characters, got {len(pattern)}"
    try:
        re.compile(pattern)
    except re.error as exc:
        return f"not a valid regular expression: {exc}"
    return _shape_problem(pattern) if untrusted else ""


def _shape_problem(pattern: str) -> str:
    """The backtracking-prone shapes (`(a+)+`, `(a|b)*`, `(x)\\1`, `x*x*x*y`), or ""."""
    opened = 0

    def walk(items: Any, repeated: bool) -> str:
        nonlocal opened
        for op, av in items:
            if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
                _lo, hi, sub = av
                many = hi is sre.MAXREPEAT or hi > 1
                if repeated:  # even `?`: (a?){20}a{20} backtracks 2**20 ways
                    return "a repetition inside a repetition matches too slowly; simplify it"
                if many and any(o == sre.BRANCH for o, _ in _flat(sub)):
                    return "a repeated alternation matches too slowly; simplify it"
                if hi is sre.MAXREPEAT or hi > _OPEN:
                    opened += 1
                problem = walk(sub, repeated or many)
            elif op == sre.SUBPATTERN:
                problem = walk(av[3], repeated)
            elif op == sre.BRANCH:
                problem = next((p for s in av[1] if (p := walk(s, repeated))), "")
            elif op in (sre.ASSERT, sre.ASSERT_NOT):
                problem = walk(av[1], repeated)
            elif op == sre.ATOMIC_GROUP:
                problem = walk(av, repeated)
            elif op in (sre.GROUPREF, sre.GROUPREF_EXISTS):
                problem = "back-references are not allowed"
            else:
                problem = ""
            if problem:
                return problem
        return ""

    problem = walk(sre.parse(pattern), False)
    if not problem and opened > MAX_OPEN_REPEATS:
        problem = f"at most {MAX_OPEN_REPEATS} unbounded repeats (*, +, {{n,}}), got {opened}"
    return problem


def _flat(items: Any) -> Iterable[tuple[Any, Any]]:
    for op, av in items:
        yield op, av
        if op == sre.SUBPATTERN:
            yield from _flat(av[3])


def label_problem(label: Any) -> str:
    if not isinstance(label, str) or not _LABEL_RE.match(label):
        return "must be 1-40 lower-case letters, digits or '_', starting with a letter"
    return ""


def action_problem(action: Any) -> str:
    return "" if action in ACTIONS else f"must be one of {', '.join(ACTIONS)}"


def rule(
    pattern: str, label: str, action: str, explain: str = "", *, untrusted: bool = True
) -> Rule:
    """A checked row; ValueError naming the part that is wrong."""
    for name, problem in (
        ("pattern", pattern_problem(pattern, untrusted=untrusted)),
        ("label", label_problem(label)),
        ("action", action_problem(action)),
    ):
        if problem:
            raise ValueError(f"{name}: {problem}")
    return Rule(pattern, label, action, explain, re.compile(pattern))


class TriageRow(BaseModel):
    """A manifest's `triage:` row (bounded: it is run inside the job monitor)."""

    model_config = ConfigDict(extra="forbid")

    pattern: str
    label: str
    action: str = ACTION_FAIL

    @field_validator("pattern", "label", "action")
    @classmethod
    def _checked(cls, v: str, info: ValidationInfo) -> str:
        problem = _FIELD_PROBLEMS[str(info.field_name)](v)
        if problem:
            raise ValueError(problem)
        return v

    def to_rule(self) -> Rule:
        return rule(self.pattern, self.label, self.action)


# What each field of a row may be: one check per field, for manifests and operators alike.
_FIELD_PROBLEMS: dict[str, Callable[[Any], str]] = {
    "pattern": pattern_problem,
    "label": label_problem,
    "action": action_problem,
}


def operator_rules(rows: Any, source: str) -> tuple[Rule, ...]:
    """The operator's rows (a YAML list of {pattern, label, action[, explain]}); ValueError
    naming `source` and the row (1-based) that is wrong. Operator patterns are trusted
    (no shape check), but bounded in number and length like a manifest's."""
    if rows is None:
        return ()
    if not isinstance(rows, list):
        # ValueError, not TypeError: main.py reports ValueErrors as the operator's mistake.
        raise ValueError(f"{source}: must be a list of {{pattern, label, action}} rows")  # noqa: TRY004
    if len(rows) > MAX_OPERATOR_ROWS:
        raise ValueError(f"{source}: at most {MAX_OPERATOR_ROWS} rows, got {len(rows)}")
    out = []
    for i, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise ValueError(f"{source}: row {i}: must be a mapping of pattern, label, action")  # noqa: TRY004
        unknown = sorted(set(map(str, row)) - {"pattern", "label", "action", "explain"})
        if unknown:
            raise ValueError(f"{source}: row {i}: unknown field {', '.join(unknown)}")
        explain = row.get("explain", "")
        try:
            if not isinstance(explain, str) or len(explain) > 1024:
                raise ValueError("explain: must be text of at most 1024 characters")
            out.append(
                rule(
                    row.get("pattern"),  # type: ignore[arg-type]
                    row.get("label"),  # type: ignore[arg-type]
                    row.get("action", ACTION_FAIL),
                    explain,
                    untrusted=False,
                )
            )
        except ValueError as exc:
            raise ValueError(f"{source}: row {i}: {exc}") from None
    return tuple(out)


def _builtin(pattern: str, label: str, action: str, explain: str) -> Rule:
    return rule(pattern, label, action, explain, untrusted=False)


_COLLECTIVE = (
    "a collective operation between the learners timed out (the network or a peer that "
    "went away, not the job's code): restarted from the last checkpoint"
)
_PEER = (
    "a peer learner's connection was reset: restarted from the last checkpoint "
    "(a lost peer, not the job's code)"
)
# The built-in rows, first match wins. A GPU's out-of-memory before the host's (PyTorch
# prints "CUDA out of memory" inside a RuntimeError), the module line before anything a
# failed import may print after it.
CATALOG: tuple[Rule, ...] = (
    _builtin(
        r"ModuleNotFoundError: No module named '(?P<module>[^']{1,200})'",
        JobErrorCode.MISSING_MODULE,
        ACTION_FAIL,
        "Python module '{module}' is not installed in image {image}: add it to the code "
        "archive, or use an image that has it (framework.image)",
    ),
    _builtin(
        r"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError: CUDA|"
        r"CUBLAS_STATUS_ALLOC_FAILED|failed to allocate .* on device",
        JobErrorCode.GPU_OOM,
        ACTION_FAIL,
        "the GPU ran out of memory: use a smaller batch or model, or GPUs with more memory "
        "(not restarted: it would run out again)",
    ),
    _builtin(
        r"No space left on device|\bENOSPC\b",
        JobErrorCode.DISK_FULL,
        ACTION_FAIL,
        "a disk the job writes to is full (No space left on device): write less, or "
        "keep fewer checkpoints",
    ),
    _builtin(
        r"[Ww]atchdog caught collective operation timeout|NCCL.*(?:[Tt]imeout|timed out)|"
        r"gloo.*[Tt]imed out|Timed out waiting \d+ms for (?:recv|send) operation|"
        r"DistNetworkError|NCCL.*remote process exited",
        JobErrorCode.COLLECTIVE_TIMEOUT,
        ACTION_RESTART,
        _COLLECTIVE,
    ),
    _builtin(
        r"Connection reset by peer|ConnectionResetError|Connection closed by peer|"
        r"ORTE has lost communication with a remote daemon",
        JobErrorCode.PEER_RESET,
        ACTION_RESTART,
        _PEER,
    ),
    _builtin(
        r"^Killed$|\bMemoryError\b|Cannot allocate memory",
        JobErrorCode.OOM_KILLED,
        ACTION_FAIL,
        "the process ran out of memory (the kernel killed it): ask for more memory_mb",
    ),
)


def rules_for(manifest_rows: Sequence[TriageRow], operator: Sequence[Rule]) -> tuple[Rule, ...]:
    """The rows one job is triaged with: its manifest's, the operator's, the built-in."""
    return (*(r.to_rule() for r in manifest_rows), *operator, *CATALOG)


def triage(lines: Sequence[str], rules: Sequence[Rule], image: str = "") -> Verdict | None:
    """The first row (in `rules` order) that matches one of the last lines, or None."""
    cut = [line[:MAX_LINE] for line in lines[-MAX_LINES:] if line.strip()]
    for r in rules:
        regex = r.regex or re.compile(r.pattern)
        for line in cut:
            m = regex.search(line)
            if m is None:
                continue
            fields = {k: v or "" for k, v in m.groupdict().items()}
            try:
                what = r.explain.format(image=image or "(the job's image)", **fields)
            except (KeyError, IndexError, ValueError):  # an operator's text naming no group
                what = r.explain
            return Verdict(r.label, r.action, what or f"the log matched {r.pattern!r}", line)
    return None
