"""A Philly-style cluster trace for the simulator: its jobs, and their split into teams.

`load_trace` reads the CSV (timestamp, duration, num_gpus and, to pick a virtual cluster,
cluster) into `TraceJob`s with times in seconds; `team_of` and `equal_quotas` give
`--teams N` a stable split of the jobs and equal guarantees that make the whole cluster.
"""

from __future__ import annotations

import csv
import zlib
from dataclasses import dataclass
from datetime import datetime

from services.scheduler.policy import Node, TeamQuota


@dataclass(slots=True)
class TraceJob:
    job_id: str
    submit: float
    duration: float
    gpus: int


def load_trace(
    path: str, vc: str | None = None, start: datetime | None = None, end: datetime | None = None
) -> list[TraceJob]:
    """Jobs submitted in [start, end) (either bound may be open), of virtual cluster `vc` (None:
    every job; the trace then needs no `cluster` column). Times are seconds since `start`, or,
    without one, since the first job kept."""
    lo = start.strftime("%Y-%m-%d %H:%M:%S") if start else ""
    hi = end.strftime("%Y-%m-%d %H:%M:%S") if end else "~"  # "~" sorts after any timestamp
    try:
        fh = open(path, newline="")  # noqa: SIM115 - opened here so the error names the flag
    except OSError as e:
        raise SystemExit(f"error: --trace: cannot read {path}: {e.strerror}") from None
    rows: list[tuple[int, datetime, float, int]] = []
    with fh:
        reader = csv.DictReader(fh)
        need = {"timestamp", "duration", "num_gpus"} | ({"cluster"} if vc is not None else set())
        missing = need - set(reader.fieldnames or [])
        if missing:
            raise SystemExit(f"error: --trace: missing column(s) {', '.join(sorted(missing))}")
        for i, row in enumerate(reader, 2):  # line numbers as an editor shows them
            ts = row["timestamp"]
            if (vc is not None and row["cluster"] != vc) or not (lo <= ts < hi):
                continue  # ISO strings sort as times
            try:
                rows.append(
                    (
                        i,
                        datetime.strptime(ts, "%Y-%m-%d %H:%M:%S"),
                        float(row["duration"]),
                        int(float(row["num_gpus"])),
                    )
                )
            except (TypeError, ValueError):
                raise SystemExit(
                    f"error: --trace: line {i}: expected timestamp YYYY-MM-DD HH:MM:SS and "
                    f"numbers for duration and num_gpus, got {ts!r}, {row['duration']!r}, "
                    f"{row['num_gpus']!r}"
                ) from None
    t0 = start or min((r[1] for r in rows), default=None)
    out = [TraceJob(f"j{i - 2}", (ts - t0).total_seconds(), d, n) for i, ts, d, n in rows]
    out.sort(key=lambda j: (j.submit, j.job_id))
    return out


def team_of(job_id: str, teams: int) -> str:
    """The team a trace job belongs to under `--teams`: a stable hash of its id."""
    return f"team{zlib.crc32(job_id.encode()) % teams}"


def equal_quotas(teams: int, nodes: tuple[Node, ...]) -> dict[str, TeamQuota]:
    """Equal guarantees that together make the whole cluster (GPUs left over by the division
    go to the first teams, one each)."""
    gpus = sum(n.gpus for n in nodes)
    cpus = sum(n.cpus for n in nodes)
    mem = sum(n.memory_mb for n in nodes)
    return {
        f"team{i}": TeamQuota(gpus // teams + (i < gpus % teams), cpus / teams, mem // teams)
        for i in range(teams)
    }
