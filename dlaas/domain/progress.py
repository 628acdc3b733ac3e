"""A training job's progress read off its learners' log lines: where each learner is, the
total where the log (or the manifest) says it, the rate, the share done and the finish.

Pure: lines and their times in, a `Progress` out; no I/O. The reader of the logs
(dlaas.adapters.job_progress) hands each look's last lines of a learner to a `Tracker`
with the time the engine stamped each line (a line without a stamp counts as printed when
the look saw it), so the rate comes from when the lines that moved the position were
printed: one look at a tail that holds two moves estimates, whichever process looks.

What a line says (the examples print all of these; dlaas.domain.metrics reads their
metrics from the same lines):

- `epoch 3/20 loss=...` (the PyTorch and MPI examples, printed when epoch 3 ended):
  3 of 20 epochs done;
- Keras' `Epoch 3/20` on a line of its own (printed when epoch 3 STARTS): 2 done, and its
  progress lines after it (`123/469 [====>...] - ETA: 1s - loss: ...`, or with
  `verbose=2` `469/469 - 2s - loss: ...` when the epoch ends) add the share of epoch 3;
- a tqdm-style counter `450/1000 [00:10<00:12, 43.2it/s]` (or `| 450/1000 [`): after an
  epoch line, the share of the next epoch; alone, 450 of 1000 steps;
- `step=N` (or `global_step`, `iteration`, `iter`) with the manifest's
  `progress: {total_steps: N}`, and `epoch N` with `progress: {total_epochs: N}`.

A manifest total wins over what the log says (the user said it on purpose).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from pydantic import BaseModel, ConfigDict, Field

# Bounds: how many lines of a look are parsed, how many samples a learner keeps.
MAX_LINE = 4096
MAX_SAMPLES = 64
MAX_TOTAL = 10**12

_EPOCH_TOTAL_RE = re.compile(r"(?<![\w])epoch\s*[=:]?\s*(\d+)\s*/\s*(\d+)(?![\w.])", re.IGNORECASE)
_EPOCH_RE = re.compile(r"(?<![\w])epoch\s*[=:]?\s*(\d+)(?![\w./])", re.IGNORECASE)
# Keras' epoch header: the line says nothing else.
_KERAS_HEADER_RE = re.compile(r"^\s*Epoch\s+(\d+)\s*/\s*(\d+)\s*$")
# tqdm's and Keras' counters: `450/1000 [`, `469/469 - 2s`, `| 450/1000 |`, Keras 3's bar
# `11/22 ━━━━━━━━━━ 0s 20ms/step`.
_COUNTER_RE = re.compile(r"(?<![\w./])(\d+)\s*/\s*(\d+)(?=\s*(?:\[|\||\u2501)|\s+-\s)")
_STEP_RE = re.compile(
    r"(?<![\w.\-/])(?:global_step|step|iteration|iter)\s*[=:]\s*(\d+)(?:\s*/\s*(\d+))?(?![\w.])",
    re.IGNORECASE,
)


class ProgressSpec(BaseModel):
    """The manifest's optional `progress:` section: the totals a log does not print."""

    model_config = ConfigDict(extra="forbid")

    total_steps: int | None = Field(default=None, ge=1, le=MAX_TOTAL)
    total_epochs: int | None = Field(default=None, ge=1, le=MAX_TOTAL)


@dataclass(frozen=True)
class Position:
    """Where a learner's log says it is: `done` of `total` `unit`s (None: total unknown)."""

    done: float
    total: float | None
    unit: str  # "epoch" or "step"

    @property
    def fraction(self) -> float | None:
        if not self.total:
            return None
        return min(1.0, max(0.0, self.done / self.total))


@dataclass
class _State:
    """What a learner's lines said so far, read in order."""

    epochs_done: float | None = None
    epochs_total: float | None = None
    inner: tuple[int, int] | None = None  # a counter since the last epoch line
    step: float | None = None
    step_total: float | None = None
    epoch: float | None = None  # `epoch N` with no total


def position(lines: Iterable[str], spec: ProgressSpec | None = None) -> Position | None:
    """Where the last of `lines` (a learner's log, oldest first) leave the learner; None
    when no line says anything about it."""
    st = _State()
    for raw in lines:
        _feed(st, raw)
    return _position(st, spec or ProgressSpec())


def timed_positions(
    lines: Iterable[tuple[float, str]], spec: ProgressSpec | None = None
) -> list[tuple[float, Position]]:
    """Where the learner stood after each of its timed `lines` (oldest first) that said
    something about it: (the line's time, the position)."""
    st, spec, out = _State(), spec or ProgressSpec(), []
    for at, raw in lines:
        if _feed(st, raw) and (pos := _position(st, spec)) is not None:
            out.append((at, pos))
    return out


def _position(st: _State, spec: ProgressSpec) -> Position | None:
    if spec.total_steps and st.step is not None:
        return Position(st.step, float(spec.total_steps), "step")
    if spec.total_epochs and (st.epochs_done is not None or st.epoch is not None):
        done = st.epochs_done if st.epochs_done is not None else st.epoch
        return Position(_with_inner(float(done or 0), st.inner), float(spec.total_epochs), "epoch")
    if st.epochs_total:
        return Position(_with_inner(st.epochs_done or 0.0, st.inner), st.epochs_total, "epoch")
    if st.inner is not None:
        return Position(float(st.inner[0]), float(st.inner[1]), "step")
    if st.step is not None:
        return Position(st.step, st.step_total, "step")
    if st.epoch is not None:
        return Position(st.epoch, None, "epoch")
    return None


def _with_inner(done: float, inner: tuple[int, int] | None) -> float:
    return done + inner[0] / inner[1] if inner else done


def _feed(st: _State, raw: str) -> bool:
    """Read one line into `st`; whether it said anything about the position."""
    line = raw.rsplit("\r", 1)[-1][:MAX_LINE]
    before = replace(st)
    m = _KERAS_HEADER_RE.match(line)
    if m:  # the epoch starts
        st.epochs_done, st.epochs_total, st.inner = float(int(m.group(1)) - 1), _total(m, 2), None
        return True
    m = _EPOCH_TOTAL_RE.search(line)
    if m:  # the epoch ended
        st.epochs_done, st.epochs_total, st.inner = float(m.group(1)), _total(m, 2), None
    elif (m := _EPOCH_RE.search(line)) is not None:
        st.epoch, st.inner = float(m.group(1)), None
    m = _STEP_RE.search(line)
    if m:
        st.step = float(m.group(1))
        if m.group(2):
            st.step_total = _total(m, 2)
    for c in _COUNTER_RE.finditer(line):
        n, of = int(c.group(1)), int(c.group(2))
        if 0 < of <= MAX_TOTAL and n <= of:
            if n == of and st.epochs_total is not None and st.epochs_done is not None:
                # Keras' end-of-epoch line: the epoch it started is done.
                st.epochs_done, st.inner = st.epochs_done + 1, None
            else:
                st.inner = (n, of)
            break
    return st != before


def _total(m: re.Match[str], group: int) -> float | None:
    value = int(m.group(group))
    return float(value) if 0 < value <= MAX_TOTAL else None


# --------------------------------------------------------------------------- over time


@dataclass(frozen=True)
class Progress:
    """A learner's (or a job's) progress at `at`: its position, the rate it moves at (units
    per second, None until two looks saw it move), and the expected seconds left and finish
    time (None without a total or a rate)."""

    position: Position
    at: float
    rate: float | None = None
    remaining_s: float | None = None
    finish_at: float | None = None

    @property
    def fraction(self) -> float | None:
        return self.position.fraction

    def view(self) -> dict[str, object]:
        """The job view's `progress` object (REST, gRPC, CLI, dashboard)."""
        fraction = self.fraction
        return {
            "done": round(self.position.done, 3),
            "total": self.position.total,
            "unit": self.position.unit,
            "percent": None if fraction is None else round(100 * fraction, 1),
            "rate_per_s": None if self.rate is None else round(self.rate, 6),
            "remaining_s": None if self.remaining_s is None else round(self.remaining_s, 1),
            "finish_at": self.finish_at,
        }


@dataclass
class Tracker:
    """One learner's position over successive looks: when each new position was first seen.

    The rate is the position's change between the first and the last sample of this run
    (a position that goes back, a learner resumed from an earlier checkpoint, starts a new
    run), over the times they were first seen; the finish is the last move's time plus what
    is left at that rate (never before now)."""

    samples: list[tuple[float, float]] = field(default_factory=list)  # (seen at, done)
    last: Position | None = None
    seen_until: float = float("-inf")  # the time of the newest line a look fed in

    def observe_lines(
        self, lines: Iterable[tuple[float, str]], spec: ProgressSpec | None, now: float
    ) -> Progress | None:
        """A look at the learner's last lines, each with its time: the lines newer than
        the last look's move the position at their own times (older ones, read again in
        this tail, only set the context: a Keras epoch header before its counters)."""
        for at, pos in timed_positions(lines, spec):
            if at > self.seen_until:
                self.observe(pos, at)
                self.seen_until = at
        return self.progress(now)

    def observe(self, pos: Position | None, now: float) -> Progress | None:
        if pos is None:
            return None
        if self.last is not None and (pos.unit != self.last.unit or pos.total != self.last.total):
            self.samples = []  # another counter than before: its samples do not compare
        if self.samples and pos.done < self.samples[-1][1]:
            self.samples = []
        if not self.samples or pos.done > self.samples[-1][1]:
            self.samples.append((now, pos.done))
            del self.samples[1:-MAX_SAMPLES]  # the first (the run's start) and the latest
        self.last = pos
        return self.progress(now)

    def progress(self, now: float) -> Progress | None:
        if self.last is None or not self.samples:
            return None
        pos = self.last
        # The first sample's time is only when a look first saw the learner, not when it got
        # there: once the position moved twice, the rate counts from the first move.
        first = self.samples[1] if len(self.samples) >= 3 else self.samples[0]
        (t0, d0), (t1, d1) = first, self.samples[-1]
        rate = (d1 - d0) / (t1 - t0) if t1 > t0 and d1 > d0 else None
        if rate is None or pos.total is None:
            return Progress(pos, now, rate)
        left = max(0.0, pos.total - d1) / rate
        finish = max(now, t1 + left)
        return Progress(pos, now, rate, finish - now, finish)


def job_progress(learners: dict[int, Progress]) -> Progress | None:
    """A job's progress from its learners': the one furthest from its end (a gang ends with
    its slowest learner); learners without a total count only when none has one."""
    if not learners:
        return None
    with_total = [p for p in learners.values() if p.fraction is not None]
    if not with_total:
        return learners[min(learners)]
    return min(
        with_total,
        key=lambda p: (p.fraction, -(p.remaining_s if p.remaining_s is not None else -1.0)),
    )
