"""What a job's learners used, as measured: the job monitor's part of usage accounting.

Each learner wrapper leaves its container's CPU-seconds and peak memory (its cgroup's
counters, dlaas.learner.usage) on the job volume when its command ends; the helper of
each node reports its learners' in one `usage` event before it stores the results (all
nodes' helpers' events reach the view: fold.fold_events). This module records them in
the job's info under `dlaas.domain.usage.MEASURED_INFO`, per run (the seq of the run's
QUEUED entry: the allocation interval that opens right after it), where usage accounting
reads them beside the allocation. A run ended from outside (preempted, resized, halted,
its node lost) has no helper finish of its own and is not measured.

`usage_in` is pure; `record_measured` writes only when a run's figures changed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from dlaas.adapters.store.base import JobStore
from dlaas.domain import jobspec
from dlaas.domain.status import Status, between
from dlaas.domain.usage import MAX_MEASURED_RUNS, MEASURED_INFO
from services.jobmonitor.observe import Seen, update_info

# The most learners one event is read for (a gang is far smaller; bounds a bad event).
MAX_LEARNERS = 4096


def _figures(value: Any) -> dict[str, float | int] | None:
    """One learner's {"cpu_s", "memory_peak_mib"}, checked; None if it is not that."""
    if not isinstance(value, dict):
        return None
    cpu, peak = value.get("cpu_s"), value.get("memory_peak_mib")
    if isinstance(cpu, bool) or not isinstance(cpu, (int, float)) or not math.isfinite(cpu):
        return None
    if isinstance(peak, bool) or not isinstance(peak, int) or cpu < 0 or peak < 0:
        return None
    return {"cpu_s": float(cpu), "memory_peak_mib": peak}


def usage_in(events: Iterable[dict]) -> dict[str, dict[str, float | int]]:
    """Every learner's figures from the helpers' `usage` events, by learner id."""
    out: dict[str, dict[str, float | int]] = {}
    for e in events:
        learners = e.get("learners") if e.get("event") == jobspec.EVENT_USAGE else None
        if not isinstance(learners, dict):
            continue
        for learner, value in list(learners.items())[:MAX_LEARNERS]:
            figures = _figures(value)
            if figures is not None and str(learner).isdigit():
                out[str(learner)] = figures
    return out


def record_measured(store: JobStore, job_id: str, seen: Seen) -> None:
    """Record what this run's learners used, once the helpers reported it."""
    if seen.view.state.status in between(Status.QUEUED, Status.PENDING):
        return  # the containers seen may be the previous run's
    used = usage_in(seen.view.helper_events)
    if not used:
        return
    info = seen.run.info
    kept = info.get(MEASURED_INFO)
    runs = dict(kept) if isinstance(kept, dict) else {}
    run = str(seen.run.run)
    if runs.get(run) == used:
        return
    runs[run] = used
    for old in sorted(runs, key=lambda k: int(k) if k.isdigit() else -1)[:-MAX_MEASURED_RUNS]:
        del runs[old]
    update_info(store, job_id, {MEASURED_INFO: runs})
    info[MEASURED_INFO] = runs
