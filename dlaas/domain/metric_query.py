"""What a caller may ask of a learner's training metrics, and the answer cut to it. Pure.

The REST API (services/api/metrics.py) and the LCM's gRPC API (services/lcm/grpc_api.py,
`JobMetrics` and `FollowMetrics`) read the same series (dlaas.adapters.job_metrics); this module
checks a query's filters (which learner, which series, from which step, how many points)
and cuts a learner's series to them. Every refusal is an InvalidRequest naming the field.

Bounds: a learner's series are kept, however long the run, in at most `KEEP` points
each (`Decimated`: every point while they fit, then every 2nd, 4th, ... point, evenly
over the run; the first and the latest point always), so what one request reads into
memory does not grow with the files; `downsample` cuts a reply further for a chart
(`max_points` per series). The full-resolution files stay in the job's results.

Paging: `since_step` is exclusive and a reply that had to stop early says where to go on
(`next_since_step`). A reply never ends inside a step: it holds every series' point at
each step it reaches, so asking again from `next_since_step` misses and repeats nothing.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dlaas.domain.errors import InvalidRequest
from dlaas.domain.metrics import MAX_NAME, MAX_SERIES, Point

# Points in one reply: 100k points stay well inside gRPC's default 4 MiB message limit
# (two doubles each); more is paged with `since_step`.
MAX_LIMIT = 100_000
DEFAULT_LIMIT = 10_000
# Points kept of one series of one source (a log, a metric file): 4096 x 2 doubles = 64 KiB.
KEEP = 4096
# Points per series in a downsampled reply (`max_points`), at most.
MAX_POINTS = 10_000
# A learner index is bounded as the REST routes bound every integer parameter.
MAX_LEARNER = 10**9

Series = dict[str, list[list[float]]]  # name -> [[step, value], ...] by step


@dataclass(frozen=True)
class MetricQuery:
    """A checked query: `names` empty means every series; `since_step` None: from the first."""

    learner: int = 0
    names: frozenset[str] = frozenset()
    since_step: float | None = None
    limit: int = DEFAULT_LIMIT
    max_points: int = 0  # per series, evenly over the steps; 0: every point kept


def metric_query(
    learner: int = 0,
    names: Iterable[str] = (),
    since_step: float | None = None,
    limit: int = 0,
    max_points: int = 0,
) -> MetricQuery:
    """The query, checked; `limit` 0 takes DEFAULT_LIMIT, `max_points` 0 keeps every point
    kept. Raise InvalidRequest naming the field."""
    if not 0 <= max_points <= MAX_POINTS:
        raise InvalidRequest(
            f"max_points: must be 2 to {MAX_POINTS} points per series (0: all), not {max_points}"
        )
    if max_points == 1:
        raise InvalidRequest("max_points: must be 2 or more (the first and the last point)")
    if not 0 <= learner <= MAX_LEARNER:
        raise InvalidRequest(f"learner: must be 0 to {MAX_LEARNER}, not {learner}")
    names = list(names)
    if len(names) > MAX_SERIES:
        raise InvalidRequest(f"names: at most {MAX_SERIES} series, not {len(names)}")
    for name in names:
        if not name or len(name) > MAX_NAME:
            raise InvalidRequest(f"names: each name is 1 to {MAX_NAME} characters")
    if since_step is not None:
        if not math.isfinite(since_step):
            raise InvalidRequest("since_step: must be a finite number")
        if since_step < 0:
            raise InvalidRequest(f"since_step: must be 0 or more, not {since_step:g}")
    if limit < 0 or limit > MAX_LIMIT:
        raise InvalidRequest(
            f"limit: must be 1 to {MAX_LIMIT} points (0: {DEFAULT_LIMIT}), not {limit}; "
            "page through longer series with since_step"
        )
    return MetricQuery(learner, frozenset(names), since_step, limit or DEFAULT_LIMIT, max_points)


def check_learner(learner: int, learners: int) -> None:
    """Raise InvalidRequest unless `learner` is one of the job's 0..learners-1."""
    if learner >= learners:
        raise InvalidRequest(f"learner: the job has learners 0..{learners - 1}, not {learner}")


def learners_with_logs(requested: int, info: dict[str, Any]) -> int:
    """How many learners (0..n-1) of a job may have logs: the most of its size as submitted,
    its target (the user's last scale) and its current deployment (an elastic job grown past
    its target runs learners the manifest does not count)."""
    deployed = info.get("learners")
    now = len(deployed) if isinstance(deployed, list) else 0
    try:
        target = int(info.get("learners_target") or 0)
    except (TypeError, ValueError):  # the store holds what the LCM wrote; be safe all the same
        target = 0
    return max(requested, target, now, 1)


def wanted(p: Point, q: MetricQuery) -> bool:
    """Whether a point passes the query's series and step filters (a follow's test)."""
    return (not q.names or p.name in q.names) and (q.since_step is None or p.step > q.since_step)


@dataclass(frozen=True)
class Selection:
    series: Series
    # More points follow past `next_since_step` (ask again from there).
    truncated: bool = False
    next_since_step: float | None = None


def select(series: Series, q: MetricQuery) -> Selection:
    """`series` (dlaas.domain.metrics.series' shape) cut to the query: its names, the steps after
    `since_step`, downsampled to `max_points` per series, and at most `limit` points, whole
    steps only (a first step with more points than `limit`, at most MAX_SERIES of them,
    comes whole all the same)."""
    kept = {
        name: downsample([p for p in points if q.since_step is None or p[0] > q.since_step],
                         q.max_points)
        for name, points in series.items()
        if not q.names or name in q.names
    }  # fmt: skip
    per_step = Counter(p[0] for points in kept.values() for p in points)
    taken, last = 0, None
    for step in sorted(per_step):
        if taken and taken + per_step[step] > q.limit:
            break
        taken += per_step[step]
        last = step
    truncated = last is not None and any(step > last for step in per_step)
    out = {
        name: cut for name, points in kept.items() if (cut := [p for p in points if p[0] <= last])
    } if last is not None else {}  # fmt: skip
    return Selection(out, truncated, last if truncated else None)


def downsample(points: list[list[float]], max_points: int) -> list[list[float]]:
    """At most `max_points` of `points` (0: all), evenly spaced by index, the first and the
    last always among them."""
    n = len(points)
    if not max_points or n <= max_points:
        return points
    return [points[round(i * (n - 1) / (max_points - 1))] for i in range(max_points)]


class Decimated:
    """One series of one source, kept in at most `keep` points however many come.

    Every point is kept while they fit; when full, every other kept point is dropped and
    from then on only every `stride`-th point that comes is kept, so what is kept stays
    evenly spread over the run. The latest point is always there (a chart's end, a table's
    last value). A point at the step of the one before replaces it (a progress line
    printed again).
    """

    __slots__ = ("keep", "last", "seen", "steps", "stride", "values")

    def __init__(self, keep: int = KEEP):
        if keep < 2:
            raise ValueError("keep must be >= 2")
        self.keep = keep
        self.steps, self.values = array("d"), array("d")
        self.stride, self.seen = 1, 0
        self.last: tuple[float, float] | None = None  # the latest point, kept or not

    def add(self, step: float, value: float) -> None:
        if self.last is not None and step == self.last[0]:
            self.last = (step, value)
            if self.steps and self.steps[-1] == step:
                self.values[-1] = value
            return
        self.last = (step, value)
        if self.seen % self.stride == 0:
            self.steps.append(step)
            self.values.append(value)
            if len(self.steps) >= self.keep:
                self.steps, self.values = self.steps[::2], self.values[::2]
                self.stride *= 2
        self.seen += 1

    def points(self, after: float | None = None) -> list[tuple[float, float]]:
        """The kept points and the latest one, in arrival order; only steps past `after`."""
        out = list(zip(self.steps, self.values, strict=True))
        if self.last is not None and (not out or out[-1][0] != self.last[0]):
            out.append(self.last)
        return out if after is None else [p for p in out if p[0] > after]


def merge_series(parts: Iterable[dict[str, list[tuple[float, float]]]]) -> Series:
    """The kept points of several sources (name -> [(step, value), ...] in arrival order)
    -> {name: [[step, value], ...]} by step; a step given twice keeps its last value (a
    resumed run writes some steps again)."""
    by_name: dict[str, dict[float, float]] = {}
    for part in parts:
        for name, points in part.items():
            steps = by_name.setdefault(name, {})
            for step, value in points:
                steps[step] = value
    return {name: [[whole(s), steps[s]] for s in sorted(steps)] for name, steps in by_name.items()}


def whole(step: float) -> float:
    """A step as the series show it: 3, not 3.0."""
    return int(step) if float(step).is_integer() else step
