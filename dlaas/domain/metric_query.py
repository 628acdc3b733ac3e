"""What a caller may ask of a learner's training metrics, and the answer cut to it. Pure.

The REST API (services/api/metrics.py) and the LCM's gRPC API (services/lcm/grpc_api.py,
`JobMetrics` and `FollowMetrics`) read the same series (dlaas.adapters.job_metrics); this module
checks a query's filters (which learner, which series, from which step, how many points)
and cuts a learner's series to them. Every refusal is an InvalidRequest naming the field.

Paging: `since_step` is exclusive and a reply that had to stop early says where to go on
(`next_since_step`). A reply never ends inside a step: it holds every series' point at
each step it reaches, so asking again from `next_since_step` misses and repeats nothing.
"""

from __future__ import annotations

import math
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


def metric_query(
    learner: int = 0,
    names: Iterable[str] = (),
    since_step: float | None = None,
    limit: int = 0,
) -> MetricQuery:
    """The query, checked; `limit` 0 takes DEFAULT_LIMIT. Raise InvalidRequest naming the field."""
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
    return MetricQuery(learner, frozenset(names), since_step, limit or DEFAULT_LIMIT)


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
    `since_step`, and at most `limit` points, whole steps only (a first step with more
    points than `limit`, at most MAX_SERIES of them, comes whole all the same)."""
    kept = {
        name: [p for p in points if q.since_step is None or p[0] > q.since_step]
        for name, points in series.items()
        if not q.names or name in q.names
    }
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
