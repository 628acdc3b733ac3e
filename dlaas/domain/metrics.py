"""Training metrics read from a learner's log lines, with no change to the training code.

Pure: lines in, points out; no I/O. The API feeds it a learner's log stream
(dlaas.adapters.logs.LogReader), which already is durable (the helper stores it in the job's
results location), continues across restarts and resumes without gaps or duplicates,
so the series derived from it are too; there is no second store to keep in step.

Three conventions are understood, all on the same stream:

- `key=value` pairs on a line (`epoch 3/20 loss=0.42 accuracy=0.91` gives `loss` and
  `accuracy` at step 3), and Keras' progress lines (`- loss: 0.42 - accuracy: 0.91`).
  The step is the line's `step=N` (or `iteration`/`iter`/`global_step`), else its
  `epoch N[/M]`; a line without one uses the last step an earlier line named (Keras
  prints `Epoch 3/20` on a line of its own), and a series that never saw a step counts
  its points 0, 1, 2, ...;
- JSON lines: FfDL's evaluation-metrics records (`{"grouplabel", "etimes", "values"}`,
  each value `{"value": v}`) and plain objects with a step key
  (`{"epoch": 3, "loss": 0.42}`);
- FfDL's regex extractor, from the manifest's `evaluation_metrics.groups`: each group
  a `regex` (FfDL's `%{FLOAT:name}` symbols allowed) matched against a window of the
  last `line_lookahead` lines, `scalars` (or `values`) naming the series and `etimes`
  the step, each as `{value: "$group_name"}`. Series are named `group/scalar`.

Metric files are a second source of points, beside the log: TensorBoard event files and
JSON-lines files (`*.jsonl`, FfDL's emetrics `evaluation-metrics.txt`) that learners
write below LOG_DIR. The helper stores them in the job's results location
(dlaas.domain.jobspec.metrics_prefix), dlaas.adapters.metric_files reads them there (TensorBoard's with
TensorBoard's own reader) and hands the records to the pure functions below. A point's
`source` says where it came from: "" for the log, else the file's path below LOG_DIR.

Values that are not finite numbers (nan, inf) are left out: they have no place on a
chart and no JSON form.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from dlaas.domain.errors import InvalidManifest

# Bounds: one learner cannot make a reply of a million series, nor one regex a
# pathological compile; lines longer than this are cut before matching.
MAX_SERIES = 256
MAX_NAME = 128
MAX_LINE = 4096
MAX_REGEX = 4096
MAX_LOOKAHEAD = 64
DEFAULT_LOOKAHEAD = 4  # FfDL's default

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_NAME = r"[A-Za-z_][\w.\-/]*"
# `name=value`, not inside a longer word, the value ending the token.
_KV_RE = re.compile(rf"(?<![\w.\-/])({_NAME})\s*=\s*({_NUMBER})(?=$|[\s,;|)\]}}])")
# Keras: `... - loss: 0.4200 - accuracy: 0.9100`.
_KERAS_RE = re.compile(rf"(?:^|\s)-\s+({_NAME}):\s*({_NUMBER})(?=$|\s)")
_EPOCH_RE = re.compile(r"(?<![\w])epoch\s*[=:]?\s*(\d+)(?:\s*/\s*\d+)?(?![\w.])", re.IGNORECASE)
# Keys that say where in training a line is, not what it measured.
STEP_KEYS = ("step", "global_step", "iteration", "iter", "epoch")

# FfDL's symbol library (its regex extractor's `patterns/common-patterns`).
SYMBOLS = {
    "FLOAT": r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?",
    "INT": r"[-+]?\d+",
    "INT_ANY": r"[-+]?(?:0[xX][\dA-Fa-f]+|0[0-7]*|\d+)",
    "HEX": r"[-+]?(?:0[xX])?[\dA-Fa-f]+",
    "GLOG_STAMP": r"[EFIW]\d\d\d\d\s+\d\d:\d\d:\d*\.\d+",
    "TIMESTAMP": r"(?:\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}[.]\d+?Z|[-+]\d{2}:\d{2}?)",
}
_SYMBOL_RE = re.compile(r"%\{(\w+)(?::(\w+))?\}")


@dataclass(frozen=True)
class Point:
    """One measurement: series `name` was `value` at `step`; `line` is the index of the line
    (of the log, or of the JSON-lines file) or record (of an event file) it came from."""

    name: str
    step: float
    value: float
    line: int
    source: str = ""  # "": the log; else the metric file's path below LOG_DIR

    def event(self) -> dict[str, Any]:
        """The point as the follow streams send it (`source` only for a metric file)."""
        out: dict[str, Any] = {
            "name": self.name,
            "step": self.step,
            "value": self.value,
            "line": self.line,
        }
        if self.source:
            out["source"] = self.source
        return out


@dataclass(frozen=True)
class Group:
    """One of FfDL's regex groups, compiled."""

    name: str
    regex: re.Pattern[str]
    scalars: dict[str, str]  # series -> "$capture" or a literal
    etimes: dict[str, str]


@dataclass(frozen=True)
class RegexSpec:
    lookahead: int
    groups: tuple[Group, ...]


def _number(text: Any) -> float | None:
    """A finite number from a JSON value or text, else None."""
    if isinstance(text, bool):
        return None
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _step_value(value: float) -> float:
    return int(value) if value.is_integer() else value


# --------------------------------------------------------------------------- FfDL spec


def _expand(regex: str, where: str) -> str:
    def symbol(m: re.Match[str]) -> str:
        name, capture = m.group(1), m.group(2)
        if name not in SYMBOLS:
            known = ", ".join(sorted(SYMBOLS))
            raise InvalidManifest([f"{where}: unknown symbol %{{{name}}}; known: {known}"])
        body = SYMBOLS[name]
        return f"(?P<{capture}>{body})" if capture else f"(?:{body})"

    return _SYMBOL_RE.sub(symbol, regex)


def _refs(section: Any, where: str, captures: set[str]) -> dict[str, str]:
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise InvalidManifest([f"{where}: must be a mapping of names to {{value: ...}}"])
    out = {}
    for key, item in section.items():
        value = item.get("value") if isinstance(item, dict) else item
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise InvalidManifest([f"{where}.{key}: needs a value: '$capture' or a number"])
        value = str(value)
        if value.startswith("$") and value[1:] not in captures:
            known = ", ".join(sorted(captures)) or "none"
            problem = f"{where}.{key}: the regex has no group {value[1:]!r} (it has {known})"
            raise InvalidManifest([problem])
        if len(str(key)) > MAX_NAME:
            raise InvalidManifest([f"{where}.{key}: names are at most {MAX_NAME} characters"])
        out[str(key)] = value
    return out


def compile_spec(evaluation_metrics: dict[str, Any] | None) -> RegexSpec | None:
    """The regex groups of a manifest's `evaluation_metrics`, or None when it has none
    (a `tensorboard` section, or none at all). Raise InvalidManifest naming the field."""
    if not evaluation_metrics or "groups" not in evaluation_metrics:
        return None
    base = "evaluation_metrics"
    # FfDL's own reader accepts both spellings ("it seems to lose the underscore").
    lookahead = evaluation_metrics.get(
        "line_lookahead", evaluation_metrics.get("linelookahead", DEFAULT_LOOKAHEAD)
    )
    if isinstance(lookahead, str) and lookahead.isdigit():
        lookahead = int(lookahead)
    if not isinstance(lookahead, int) or isinstance(lookahead, bool):
        raise InvalidManifest([f"{base}.line_lookahead: must be a whole number"])
    if not 1 <= lookahead <= MAX_LOOKAHEAD:
        raise InvalidManifest(
            [f"{base}.line_lookahead: must be 1 to {MAX_LOOKAHEAD}, not {lookahead}"]
        )
    groups = evaluation_metrics["groups"]
    if not isinstance(groups, dict) or not groups:
        raise InvalidManifest([f"{base}.groups: must be a mapping of group names to groups"])
    compiled = []
    for name, group in groups.items():
        where = f"{base}.groups.{name}"
        if not isinstance(group, dict):
            raise InvalidManifest([f"{where}: must be a mapping with regex, scalars and etimes"])
        regex = group.get("regex")
        if not isinstance(regex, str) or not regex:
            raise InvalidManifest([f"{where}.regex: missing; a regular expression is required"])
        if len(regex) > MAX_REGEX:
            raise InvalidManifest([f"{where}.regex: at most {MAX_REGEX} characters"])
        try:
            pattern = re.compile(_expand(regex, f"{where}.regex"), re.MULTILINE | re.DOTALL)
        except re.error as exc:
            raise InvalidManifest(
                [f"{where}.regex: not a valid regular expression: {exc}"]
            ) from None
        captures = set(pattern.groupindex)
        scalars = _refs(group.get("scalars", group.get("values")), f"{where}.scalars", captures)
        if not scalars:
            raise InvalidManifest([f"{where}.scalars: missing; name at least one series"])
        etimes = _refs(group.get("etimes"), f"{where}.etimes", captures)
        compiled.append(Group(str(name), pattern, scalars, etimes))
    return RegexSpec(lookahead, tuple(compiled))


# --------------------------------------------------------------------------- one line


def step_of(line: str) -> float | None:
    """The step a line names: `step=N` (or iteration/iter/global_step) first, then `epoch N`."""
    pairs = dict(_pairs(line))
    for key in STEP_KEYS[:-1]:
        if key in pairs:
            return pairs[key]
    m = _EPOCH_RE.search(line)
    return float(m.group(1)) if m else None


def _pairs(line: str) -> Iterator[tuple[str, float]]:
    for regex in (_KV_RE, _KERAS_RE):
        for m in regex.finditer(line):
            value = _number(m.group(2))
            if value is not None:
                yield m.group(1), value


def key_values(line: str) -> list[tuple[str, float]]:
    """The metrics of a `key=value` (or Keras) line, step keys left out."""
    return [(k, v) for k, v in _pairs(line) if k.lower() not in STEP_KEYS]


def json_record(line: str) -> tuple[float | None, list[tuple[str, float]]] | None:
    """(step, metrics) of an FfDL evaluation-metrics record or a JSON object with a step
    key; None for any other line."""
    text = line.strip()
    if not (text.startswith("{") and text.endswith("}")):
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("values"), dict):  # FfDL's record
        label = data.get("grouplabel")
        prefix = f"{label}/" if isinstance(label, str) and label else ""
        metrics = []
        for key, item in data["values"].items():
            value = _number(item.get("value") if isinstance(item, dict) else item)
            if value is not None:
                metrics.append((prefix + str(key), value))
        etimes = data.get("etimes")
        if not isinstance(etimes, dict):
            etimes = {}
        step = None
        for key in (*STEP_KEYS, *etimes):
            if key in etimes:
                item = etimes[key]
                step = _number(item.get("value") if isinstance(item, dict) else item)
                if step is not None:
                    break
        return step, metrics
    step_key = next((k for k in STEP_KEYS if k in data), None)
    if step_key is None:
        return None
    step = _number(data[step_key])
    metrics = [
        (str(k), v)
        for k, raw in data.items()
        if k not in STEP_KEYS and (v := _number(raw)) is not None
    ]
    return step, metrics


# --------------------------------------------------------------------------- the stream


@dataclass
class Extractor:
    """Feeds on a stream of lines, one at a time, and hands out the points each gives.

    State: the last step a line named, each series' count (for series with no step),
    and FfDL's window of recent lines.
    """

    spec: RegexSpec | None = None
    step: float | None = None
    counts: dict[str, int] = field(default_factory=dict)
    window: list[str] = field(default_factory=list)
    index: int = 0

    def _point(self, name: str, step: float | None, value: float) -> Point | None:
        name = name[:MAX_NAME]
        if name not in self.counts:
            if len(self.counts) >= MAX_SERIES:
                return None
            self.counts[name] = 0
        if step is None:
            step = self.counts[name]
        self.counts[name] += 1
        return Point(name, _step_value(float(step)), value, self.index)

    def feed(self, line: str) -> list[Point]:
        # A progress bar rewrites its line with carriage returns: its last state counts.
        line = line.rsplit("\r", 1)[-1][:MAX_LINE]
        found: list[tuple[str, float | None, float]] = []
        record = json_record(line)
        if record is not None:
            step, metrics = record
            found += [(name, step, value) for name, value in metrics]
        else:
            named = step_of(line)
            if named is not None:
                self.step = named
            found += [(name, self.step, value) for name, value in key_values(line)]
        if self.spec is not None:
            found += self._regex(line, self.spec)
        out = [p for name, step, value in found if (p := self._point(name, step, value))]
        self.index += 1
        return out

    def _regex(self, line: str, spec: RegexSpec) -> list[tuple[str, float | None, float]]:
        self.window = [*self.window, line][-spec.lookahead :]
        text = "\n".join(self.window) + "\n"
        for group in spec.groups:
            m = group.regex.match(text)
            if m is None:
                continue
            captured = m.groupdict()

            def resolve(ref: str, captured: dict[str, Any] = captured) -> float | None:
                return _number(captured.get(ref[1:]) if ref.startswith("$") else ref)

            step = next(
                (s for ref in group.etimes.values() if (s := resolve(ref)) is not None), None
            )
            out = []
            for name, ref in group.scalars.items():
                value = resolve(ref)
                if value is not None:
                    out.append((f"{group.name}/{name}", step, value))
            self.window = []  # as FfDL: a match consumes its lines
            return out
        return []


def points(lines: Iterable[str], spec: RegexSpec | None = None) -> Iterator[Point]:
    """Every point of a stream of lines, in order."""
    extractor = Extractor(spec)
    for line in lines:
        yield from extractor.feed(line)


def series(found: Iterable[Point]) -> dict[str, list[list[float]]]:
    """Points -> {name: [[step, value], ...]} by step; a step given twice keeps its last value."""
    by_name: dict[str, dict[float, float]] = {}
    for p in found:
        by_name.setdefault(p.name, {})[p.step] = p.value
    # Sorted by step: a job resumed from an earlier checkpoint prints some steps again.
    return {name: [[s, steps[s]] for s in sorted(steps)] for name, steps in by_name.items()}


# --------------------------------------------------------------------------- metric files


def jsonl_points(lines: Iterable[str], source: str) -> list[Point]:
    """The points of a JSON-lines metric file (FfDL records or `{"step": .., name: v}`
    objects; a line without a step counts its series 0, 1, ...), as a log's lines."""
    return [replace(p, source=source) for p in points(lines)]


def scalar_points(scalars: Iterable[tuple[str, float, float]], source: str) -> list[Point]:
    """(tag, step, value) records of a TensorBoard event file -> points; tags are the
    series names, non-finite values left out, at most MAX_SERIES series."""
    names: set[str] = set()
    out = []
    for index, (tag, step, value) in enumerate(scalars):
        name = str(tag)[:MAX_NAME]
        if not math.isfinite(value) or not math.isfinite(step):
            continue
        if name not in names:
            if len(names) >= MAX_SERIES:
                continue
            names.add(name)
        out.append(Point(name, _step_value(float(step)), value, index, source))
    return out


@dataclass
class Unseen:
    """Hands out each (source, name, step) once: a metric file is read again whole each
    time it grows, and only its new points go to a follower."""

    seen: set[tuple[str, str, float]] = field(default_factory=set)

    def new(self, found: Iterable[Point]) -> list[Point]:
        out = []
        for p in found:
            key = (p.source, p.name, p.step)
            if key not in self.seen:
                self.seen.add(key)
                out.append(p)
        return out
