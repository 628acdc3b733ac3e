"""`dlaas metrics JOB [JOB ...]`: training metrics read from the learners' logs.

One job: a table of its series (points, last, min, max and a sparkline of each).
Several jobs: one row per series, one column per job, side by side. `--json` prints the
API's replies; `--follow` (one job) prints each point as the learner logs it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from itertools import pairwise
from typing import Annotated

import typer
from rich.table import Table

from dlaas.clients.cli_app import _fail, _json, app, console, reports_errors

BARS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 24


def sparkline(values: Sequence[float], width: int = SPARK_WIDTH) -> str:
    """Values -> at most `width` bars, lowest value ▁, highest █ (a flat series is all ▄).

    More values than bars: each bar is the mean of its share of the values, in order.
    """
    if not values:
        return ""
    if len(values) > width:
        n = len(values)
        cuts = [round(i * n / width) for i in range(width + 1)]
        values = [sum(values[a:b]) / (b - a) for a, b in pairwise(cuts)]
    lo, hi = min(values), max(values)
    if hi == lo:
        return BARS[len(BARS) // 2 - 1] * len(values)
    top = len(BARS) - 1
    return "".join(BARS[round((v - lo) / (hi - lo) * top)] for v in values)


def number(value: float) -> str:
    return f"{value:.6g}"


def summary(points: list[list[float]]) -> dict[str, float]:
    values = [v for _, v in points]
    return {"last": values[-1], "min": min(values), "max": max(values), "last_step": points[-1][0]}


def job_table(reply: dict) -> Table:
    table = Table("series", "points", "last step", "last", "min", "max", "trend")
    for name, points in sorted(reply["series"].items()):
        s = summary(points)
        values = [v for _, v in points]
        table.add_row(
            name,
            str(len(points)),
            number(s["last_step"]),
            number(s["last"]),
            number(s["min"]),
            number(s["max"]),
            sparkline(values),
        )
    return table


def compare_table(replies: list[dict]) -> Table:
    """One row per series of any job; each job's cell: last (min..max) and its sparkline."""
    table = Table("series", *(r["job_id"] for r in replies))
    names = sorted({name for r in replies for name in r["series"]})
    for name in names:
        cells = []
        for r in replies:
            points = r["series"].get(name)
            if not points:
                cells.append("-")
                continue
            s = summary(points)
            values = [v for _, v in points]
            spread = f"{number(s['min'])}..{number(s['max'])}"
            cells.append(f"{number(s['last'])} ({spread})\n{sparkline(values, 16)}")
        table.add_row(name, *cells)
    return table


@app.command("metrics")
@reports_errors
def metrics(
    ctx: typer.Context,
    job_ids: Annotated[list[str], typer.Argument(help="one job, or several to compare")],
    learner: Annotated[int, typer.Option(min=0, help="learner index")] = 0,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="print points as they come (one job)")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="raw JSON")] = False,
) -> None:
    """Show a job's training metrics (read from its logs), or compare several jobs'."""
    client = ctx.obj.client()
    if follow:
        if len(job_ids) != 1:
            _fail("--follow: give exactly one job")
        for p in client.follow_metrics(job_ids[0], learner):
            if as_json:
                sys.stdout.write(json.dumps(p) + "\n")
                sys.stdout.flush()
            else:
                console.print(f"{p['name']} step {number(p['step'])}: {number(p['value'])}")
        return
    replies = [client.metrics(job_id, learner) for job_id in job_ids]
    if as_json:
        return _json(replies[0] if len(replies) == 1 else replies)
    if not any(r["series"] for r in replies):
        console.print(
            "no metrics yet: none of the log lines so far has a `name=value` pair, "
            "a JSON metrics record or a match of the manifest's evaluation_metrics groups",
            markup=False,
        )
        return
    console.print(job_table(replies[0]) if len(replies) == 1 else compare_table(replies))
