"""A gang's helpers, one per node of its placement, as the one helper decide() judges (pure):
their containers folded into one (`fold_helpers`) and their event streams into one
(`fold_events`); `events_in` reads the events out of a helper's log lines."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from dlaas.domain import jobspec
from dlaas.domain.jobspec import EVENT_DATA_READY, EVENT_DISK_FULL, EVENT_ERROR
from dlaas.domain.ports import Container


def fold_helpers(helpers: list[Container]) -> Container:
    """The helpers of a gang spanning nodes as the one helper decide() judges (pure): running
    while any runs, exited when all have, with the first non-zero exit code."""
    first = helpers[0]
    live = [h for h in helpers if not h.exited]
    if live:
        return replace(first, state=live[0].state, exit_code=None, finished_at=None)
    failed = [h for h in helpers if h.exit_code]
    worst = failed[0] if failed else first
    return replace(
        first,
        state=worst.state,
        exit_code=worst.exit_code,
        oom_killed=worst.oom_killed,
        finished_at=max((h.finished_at or 0.0) for h in helpers) or None,
    )


def fold_events(per_helper: list[list[dict]]) -> list[dict]:
    """The events of every node's helper as one stream (pure): the job's helper's, with
    `data_ready` only once every helper printed it, and every helper's errors and usage."""
    if len(per_helper) <= 1:
        return list(per_helper[0]) if per_helper else []
    ready = all(any(e.get("event") == EVENT_DATA_READY for e in evs) for evs in per_helper)
    events = [e for e in per_helper[0] if ready or e.get("event") != EVENT_DATA_READY]
    for evs in per_helper[1:]:
        events += [
            e for e in evs if e.get("event") in (EVENT_ERROR, EVENT_DISK_FULL, jobspec.EVENT_USAGE)
        ]
    return events


def events_in(lines: Iterable[str]) -> list[dict]:
    return [e for e in (jobspec.parse_event(x.strip()) for x in lines) if e is not None]
