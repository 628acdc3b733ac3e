"""`dlaas usage`: GPU-, CPU- and memory-hours your jobs held, by UTC day (GET /v1/usage).

A user sees their own jobs' usage; with the admin token (`dlaas --admin usage`) every
user's and team's. `--by team|user|job` sets the rows; the range is the last 30 days unless
`--since`/`--until` say otherwise; `--csv` prints the rows for a spreadsheet, in full
precision. The hours are allocated (what the jobs held); beside them the CPU-hours the
jobs' containers used and their memory at its peak x the hours held, where measured (runs
whose learners ended by themselves; docs/accounting.md).
"""

from __future__ import annotations

import csv
import sys
from typing import Annotated

import typer
from rich.table import Table

from dlaas.clients.cli_app import _json, app, console, reports_errors

COLUMNS = (
    "day",
    "team",
    "user",
    "job_id",
    "gpu_hours",
    "cpu_hours",
    "memory_gib_hours",
    "cpu_used_hours",
    "memory_peak_gib_hours",
)


def usage_table(body: dict) -> Table:
    """The rows and each team's total (pure: from GET /v1/usage's answer)."""
    by = body["by"]
    keys = {"team": ["team"], "user": ["team", "user"], "job": ["team", "user", "job_id"]}[by]
    table = Table("day", *keys, "GPU-h", "CPU-h", "memory GiB-h", "CPU-h used", "peak GiB-h")
    for r in body["rows"]:
        table.add_row(r["day"], *(r[k] for k in keys), *_hours(r))
    for t in body["teams"]:
        table.add_row("total", t["team"], *([""] * (len(keys) - 1)), *_hours(t), style="bold")
    return table


def _hours(r: dict) -> tuple[str, ...]:
    # (the measured columns: 0 from a server that does not report them)
    return tuple(f"{r.get(k, 0.0):.3f}" for k in COLUMNS[4:])


@app.command("usage")
@reports_errors
def usage(
    ctx: typer.Context,
    team: Annotated[str, typer.Option(help="only this team's jobs")] = "",
    user: Annotated[str, typer.Option(help="only this user's jobs")] = "",
    since: Annotated[
        str, typer.Option(help="first UTC day, YYYY-MM-DD (default 30 days ago)")
    ] = "",
    until: Annotated[str, typer.Option(help="last UTC day, YYYY-MM-DD (default today)")] = "",
    by: Annotated[str, typer.Option(help="rows per team, user or job")] = "user",
    as_csv: Annotated[bool, typer.Option("--csv", help="the rows as CSV")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """GPU-, CPU- and memory-hours allocated to your jobs (everyone's with --admin), by day."""
    body = ctx.obj.client().usage(team=team, user=user, since=since, until=until, by=by)
    if as_json:
        return _json(body)
    if as_csv:
        out = csv.writer(sys.stdout, lineterminator="\n")
        out.writerow(COLUMNS)
        for r in body["rows"]:
            out.writerow([r.get(c, 0.0) for c in COLUMNS])
        return
    if not body["rows"]:
        console.print(f"no usage from {body['since']} to {body['until']}", markup=False)
        return
    console.print(usage_table(body))
    if body.get("truncated"):
        console.print("more rows than one answer holds: narrow the range or filter", markup=False)
