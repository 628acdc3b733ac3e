"""Usage accounting: the GPU-, CPU- and memory-hours each job held (and, where measured,
the CPU-hours it used and its memory at its peak), by UTC day. Pure.

What a job is charged for is its allocation, read off its status history in the job store:
it holds its learners from its placement (the history's first DEPLOYED entry, PENDING) to
the first entry after it that leaves DEPLOYED (requeued: preempted, resized, restarted;
HALTED, FAILED, COMPLETED), or until now while it still holds them. A resize or a restart
is always such a return to QUEUED and a new placement, so the learner count is constant
within one interval: the LCM records it at each placement, by the PENDING entry's
sequence number, in the job's info (`ALLOCATIONS_INFO`); a placement it did not record
(a job placed before the record existed) counts the manifest's learners. Per learner the
job holds its manifest's `gpus`, `cpus` and `memory`.

Measured use comes from the learners' containers themselves: each learner wrapper reads
its cgroup's CPU counter and memory high-water mark when its command ends, the helper
reports them, and the job monitor records them per run in the job's info
(`MEASURED_INFO`: {"<seq of the run's QUEUED entry>": {"<learner>": {"cpu_s",
"memory_peak_mib"}}}; services/jobmonitor/measured.py). A run's measured figures belong
to the allocation interval that opens right after that QUEUED entry: its CPU-seconds are
spread over the interval's days in proportion to its time in each (`cpu_used_hours`), and
the sum of its learners' peaks is charged for the whole interval, like an allocation
(`memory_peak_gib_hours`: an upper bound of the memory-hours used). Only runs whose
learners ended by themselves (completed, failed) are measured; one ended from outside
(preempted, resized, halted, its node lost) counts its allocation only.

Arithmetic is exact: instants are rounded to the millisecond, CPUs to the millicore and
memory is in MiB, so each job's usage is integer resource-milliseconds, and a sum in any
order is the same number; hours are one division of that number at the end. Intervals are
split at midnight UTC.
"""

from __future__ import annotations

import datetime as dt
import math
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from dlaas.domain.errors import InvalidRequest
from dlaas.domain.status import DEPLOYED, Transition
from dlaas.domain.stored import stored_manifest_or_none

# The job info key the LCM records its placements under: {"<seq of PENDING>": learners}.
ALLOCATIONS_INFO = "allocations"
# The job info key the monitor records measured use under, and how many runs it keeps.
MEASURED_INFO = "measured_use"
MAX_MEASURED_RUNS = 100
US_PER_S = 1_000_000  # a CPU-second in millicore-milliseconds
MS_PER_HOUR = 3_600_000
DAY_MS = 86_400_000
MILLI = 1000
MIB_PER_GIB = 1024
# The longest range one question may cover, in days: bounds the rows of an answer.
MAX_RANGE_DAYS = 366
DEFAULT_RANGE_DAYS = 30

Grouping = Literal["team", "user", "job"]
GROUPINGS: tuple[Grouping, ...] = ("team", "user", "job")


@dataclass(frozen=True)
class Interval:
    """Learners held from `start_ms` to `end_ms` (ms since the epoch, end excluded); `seq`:
    the history entry that opened it (the run's QUEUED entry is the one before)."""

    start_ms: int
    end_ms: int
    learners: int
    seq: int = 0


@dataclass(frozen=True)
class Usage:
    """Resource-milliseconds: exact integers, summed in any order to the same value."""

    gpu_ms: int = 0
    millicpu_ms: int = 0
    memory_mib_ms: int = 0
    # measured (MEASURED_INFO): CPU used, and the learners' peak memory for the time held
    used_millicpu_ms: int = 0
    peak_memory_mib_ms: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.gpu_ms + other.gpu_ms,
            self.millicpu_ms + other.millicpu_ms,
            self.memory_mib_ms + other.memory_mib_ms,
            self.used_millicpu_ms + other.used_millicpu_ms,
            self.peak_memory_mib_ms + other.peak_memory_mib_ms,
        )

    @property
    def gpu_hours(self) -> float:
        return self.gpu_ms / MS_PER_HOUR

    @property
    def cpu_hours(self) -> float:
        return self.millicpu_ms / (MILLI * MS_PER_HOUR)

    @property
    def memory_gib_hours(self) -> float:
        return self.memory_mib_ms / (MIB_PER_GIB * MS_PER_HOUR)

    def hours(self) -> dict[str, float]:
        return {
            "gpu_hours": self.gpu_hours,
            "cpu_hours": self.cpu_hours,
            "memory_gib_hours": self.memory_gib_hours,
            "cpu_used_hours": self.used_millicpu_ms / (MILLI * MS_PER_HOUR),
            "memory_peak_gib_hours": self.peak_memory_mib_ms / (MIB_PER_GIB * MS_PER_HOUR),
        }


@dataclass(frozen=True)
class Shape:
    """What one learner holds: GPUs, millicores and MiB."""

    gpus: int
    millicpus: int
    memory_mib: int

    def held(self, learners: int, ms: int) -> Usage:
        return Usage(
            learners * self.gpus * ms,
            learners * self.millicpus * ms,
            learners * self.memory_mib * ms,
        )


@dataclass(frozen=True)
class UsageRow:
    """One day's usage of one key: a team, a user of a team, or a job (the others "")."""

    day: str  # YYYY-MM-DD, UTC
    team: str
    user: str
    job_id: str
    usage: Usage


class Accountable(Protocol):
    """A job record (dlaas.adapters.store.base.JobRecord), as far as accounting goes."""

    job_id: str
    user: str
    team: str
    manifest_yaml: str
    history: list[Transition]
    info: dict[str, Any]


def to_ms(at: float) -> int:
    return round(at * MILLI)


def intervals(
    history: Sequence[Transition],
    allocations: Mapping[str, Any],
    default_learners: int,
    now: float,
) -> list[Interval]:
    """The allocation intervals of one job's history (its entries' index is their seq).

    An interval opens at an entry in DEPLOYED after one that was not (or the first entry)
    and closes at the next entry outside DEPLOYED; one still open closes at `now`.
    """
    out: list[Interval] = []
    opened: tuple[int, int, int] | None = None  # (start ms, learners, seq)
    for seq, t in enumerate(history):
        holding = t.status in DEPLOYED
        if holding and opened is None:
            recorded = allocations.get(str(seq))
            learners = recorded if isinstance(recorded, int) and recorded > 0 else default_learners
            opened = (to_ms(t.at), learners, seq)
        elif not holding and opened is not None:
            out.append(Interval(opened[0], max(opened[0], to_ms(t.at)), opened[1], opened[2]))
            opened = None
    if opened is not None:
        out.append(Interval(opened[0], max(opened[0], to_ms(now)), opened[1], opened[2]))
    return out


def day_of(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms // DAY_MS * 86400, dt.UTC).date().isoformat()


def split_days(interval: Interval) -> list[tuple[str, int]]:
    """(day, milliseconds) of the interval in each UTC day it touches, in order."""
    out = []
    start = interval.start_ms
    while start < interval.end_ms:
        midnight = (start // DAY_MS + 1) * DAY_MS
        end = min(midnight, interval.end_ms)
        out.append((day_of(start), end - start))
        start = end
    return out


@dataclass(frozen=True)
class Measured:
    """What one run's learners used: CPU in millicore-ms, the sum of their peaks in MiB."""

    used_millicpu_ms: int
    peak_memory_mib: int


def measured_runs(recorded: Mapping[str, Any]) -> dict[int, Measured]:
    """MEASURED_INFO read defensively, by the seq of each run's QUEUED entry."""
    out: dict[int, Measured] = {}
    for run, learners in recorded.items():
        if not (isinstance(run, str) and run.isdigit() and isinstance(learners, dict)):
            continue
        cpu, peak = 0, 0
        for fig in learners.values():
            c = fig.get("cpu_s") if isinstance(fig, dict) else None
            p = fig.get("memory_peak_mib") if isinstance(fig, dict) else None
            if isinstance(c, int | float) and 0 <= c < math.inf:
                cpu += round(c * US_PER_S)
            if isinstance(p, int) and p >= 0:
                peak += p
        out[int(run)] = Measured(cpu, peak)
    return out


def spread(total: int, pieces: Sequence[int]) -> list[int]:
    """`total` split in proportion to `pieces`, exactly (the remainder in the last piece)."""
    whole = sum(pieces)
    if whole <= 0:
        return [total] + [0] * (len(pieces) - 1) if pieces else []
    shares = [total * p // whole for p in pieces]
    shares[-1] += total - sum(shares)
    return shares


def daily(
    spans: Iterable[Interval], shape: Shape, measured: Mapping[int, Measured] | None = None
) -> dict[str, Usage]:
    """Usage by UTC day of the intervals, for learners of `shape`; a span whose run was
    measured (by the seq of its QUEUED entry, `span.seq - 1`) adds what it used."""
    out: dict[str, Usage] = {}
    for span in spans:
        days = split_days(span)
        m = (measured or {}).get(span.seq - 1)
        used = spread(m.used_millicpu_ms, [ms for _, ms in days]) if m else [0] * len(days)
        for (day, ms), cpu in zip(days, used, strict=True):
            held = shape.held(span.learners, ms)
            if m is not None:
                held = replace(
                    held, used_millicpu_ms=cpu, peak_memory_mib_ms=m.peak_memory_mib * ms
                )
            out[day] = out.get(day, Usage()) + held
    return out


def job_usage(record: Accountable, now: float) -> list[UsageRow]:
    """One job's usage by day; none for a manifest that no longer parses (its size is
    unknown, not guessed, as on the capacity page)."""
    m = stored_manifest_or_none(record)
    if m is None:
        return []
    shape = Shape(m.gpus, round(m.cpus * MILLI), m.memory_mb)
    recorded = record.info.get(ALLOCATIONS_INFO)
    allocations = recorded if isinstance(recorded, dict) else {}
    spans = intervals(record.history, allocations, m.learners, now)
    kept = record.info.get(MEASURED_INFO)
    measured = measured_runs(kept) if isinstance(kept, dict) else {}
    return [
        UsageRow(day, record.team, record.user, record.job_id, u)
        for day, u in sorted(daily(spans, shape, measured).items())
    ]


def holds_now(record: Accountable) -> bool:
    """Whether the job's last entry holds an allocation (its usage still grows)."""
    return bool(record.history) and record.history[-1].status in DEPLOYED


def _measured_count(record: Accountable) -> int:
    """How many learners' figures the job's info holds (the monitor may add some after the
    job's last status change: its cached rows are then stale)."""
    kept = record.info.get(MEASURED_INFO)
    if not isinstance(kept, dict):
        return 0
    return sum(len(v) for v in kept.values() if isinstance(v, dict))


class UsageCache:
    """Each job's rows, kept while its history does not change, for jobs that hold nothing
    (a holding job's usage grows with the clock: computed each time). Bounded, oldest
    use dropped first; a dropped job is computed again."""

    def __init__(self, size: int = 50_000):
        self.size = size
        self._rows: OrderedDict[str, tuple[tuple[int, int], list[UsageRow]]] = OrderedDict()

    def rows(self, record: Accountable, now: float) -> list[UsageRow]:
        if holds_now(record):
            return job_usage(record, now)
        seq = (len(record.history), _measured_count(record))
        kept = self._rows.get(record.job_id)
        if kept is not None and kept[0] == seq:
            self._rows.move_to_end(record.job_id)
            return kept[1]
        rows = job_usage(record, now)
        self._rows[record.job_id] = (seq, rows)
        self._rows.move_to_end(record.job_id)
        while len(self._rows) > self.size:
            self._rows.popitem(last=False)
        return rows


@dataclass(frozen=True)
class Query:
    """Which usage a question is about: days from `since` to `until`, both included."""

    since: str
    until: str
    team: str = ""
    user: str = ""
    by: Grouping = "user"

    def wants(self, row: UsageRow) -> bool:
        return (
            self.since <= row.day <= self.until
            and (not self.team or row.team == self.team)
            and (not self.user or row.user == self.user)
        )


def parse_day(text: str, name: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise InvalidRequest(f"{name}: {text[:40]!r} is not a date (YYYY-MM-DD)") from None


def make_query(since: str, until: str, team: str, user: str, by: str, today: dt.date) -> Query:
    """A checked Query; empty dates: the last DEFAULT_RANGE_DAYS days up to `today`."""
    if by not in GROUPINGS:
        raise InvalidRequest(f"by: must be one of {', '.join(GROUPINGS)}, got {by[:40]!r}")
    last = parse_day(until, "until") if until else today
    first = parse_day(since, "since") if since else last - dt.timedelta(DEFAULT_RANGE_DAYS - 1)
    if first > last:
        raise InvalidRequest(f"since: {first} is after until ({last})")
    if (last - first).days >= MAX_RANGE_DAYS:
        raise InvalidRequest(f"since: at most {MAX_RANGE_DAYS} days from since to until")
    return Query(first.isoformat(), last.isoformat(), team, user, by)


def group(rows: Iterable[UsageRow], by: Grouping) -> list[UsageRow]:
    """Rows summed per day and key: the team, the team and user, or the job; by day, key."""
    sums: dict[tuple[str, str, str, str], Usage] = {}
    for r in rows:
        key = (
            r.day,
            r.team,
            r.user if by != "team" else "",
            r.job_id if by == "job" else "",
        )
        sums[key] = sums.get(key, Usage()) + r.usage
    return [UsageRow(*k, u) for k, u in sorted(sums.items())]


def totals(rows: Iterable[UsageRow], key: str) -> dict[str, Usage]:
    """Usage summed per `key` ("team", "user" or "job_id") over every day."""
    out: dict[str, Usage] = {}
    for r in rows:
        k = getattr(r, key)
        out[k] = out.get(k, Usage()) + r.usage
    return out
