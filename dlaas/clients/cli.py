"""The `dlaas` command line: bring the platform up, submit jobs, follow them.

The entrypoint (typer + rich): the manifest and job commands, over dlaas.domain.manifest
(validate, no server needed) and dlaas.clients.client (everything else, over REST); the
platform's commands (up/down/status, over dlaas.local) are in cli_platform.py, the app and
what the commands share in cli_app.py. The API's address and token come from
<home>/client.json, written by `dlaas up` (home: --home, $DLAAS_HOME or ~/.dlaas), or from
--url/--token ($DLAAS_URL/$DLAAS_TOKEN).

Exit codes: 0 ok; 1 refused, invalid, or (submit --follow) the job did not complete;
2 usage; 3 the platform is not reachable or not configured. Errors are one clear line
(plus the problems, one per line), never a traceback. `--json` prints raw JSON.
"""

from __future__ import annotations

import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.table import Column, Table

# The platform's commands first: `dlaas --help` lists them before the jobs'.
from dlaas.clients import cli_platform  # noqa: F401
from dlaas.clients.cli_app import (
    EXIT_FAILED,
    _fail,
    _id_column,
    _json,
    _status,
    _status_column,
    _when,
    _when_short,
    app,
    console,
    err,
    reports_errors,
)
from dlaas.clients.cli_progress import progress_cell, progress_line
from dlaas.clients.client import ApiError, DlaasClient, pack_code
from dlaas.domain.status import FINAL, Status

# --- queue positions and start-time estimates, in words ------------------------------

# (limit in seconds below which the unit is used, unit's seconds, name)
_UNITS = ((90, 1, "s"), (90 * 60, 60, "min"), (48 * 3600, 3600, "h"), (float("inf"), 86400, "d"))


def _amount(seconds: float, unit: float) -> str:
    value = seconds / unit
    if unit >= 3600 and value < 10:
        return f"{value:.1f}".removesuffix(".0")  # 1.5 h, 2 h
    return f"{value:.0f}"


def eta_text(low: float | None, high: float | None) -> str:
    """A start-time range in the unit that suits it: `20–40 min`, `under 30 s`, `now`."""
    if high is None:
        return "unknown (does not fit the cluster as it is now)"
    low = min(low or 0.0, high)
    if high < 1:
        return "now"
    _, unit, name = next(u for u in _UNITS if high < u[0])
    lo, hi = _amount(low, unit), _amount(high, unit)
    if float(lo) == 0:
        return f"under {hi} {name}"
    if lo == hi:
        return f"about {hi} {name}"
    return f"{lo}–{hi} {name}"


def queue_reason(reason: str) -> str:
    """The scheduler's reason without its own ETA words: the CLI shows the ETA from the numbers."""
    parts = [p for p in reason.split("; ") if not p.startswith("expected to start in")]
    return "; ".join(parts)


def queued_line(queue: dict | None, note: str = "") -> str:
    """`queued: position 3, expected to start in 20–40 min; needs 8 GPUs on one node; ...`"""
    if not queue:
        return f"queued: {note or 'position unknown'}"
    line = f"queued: position {queue['position']}, "
    eta = eta_text(queue.get("eta_low_s"), queue.get("eta_high_s"))
    if eta == "now":
        line += "starting now"
    elif eta.startswith("unknown"):
        line += f"start time {eta}"
    else:
        line += f"expected to start in {eta}"
    reason = queue_reason(queue.get("reason") or "")
    return f"{line}; {reason}" if reason else line


def learners_table(learners: list) -> Table:
    """A job's learners as the LCM placed them and the monitor saw them, one row each."""
    table = Table(
        "learner", "node", Column("state", no_wrap=True), "exit", "container", title="learners"
    )
    for entry in learners:
        if not isinstance(entry, dict):  # written by an older platform: show it as it is
            table.add_row("-", "", "", "", str(entry))
            continue
        exit_code = entry.get("exit_code")
        exit_text = "" if exit_code is None else str(exit_code)
        if entry.get("oom_killed"):
            exit_text = f"{exit_text} (out of memory)".strip()
        table.add_row(
            str(entry.get("id", "-")), str(entry.get("node") or ""), str(entry.get("state") or ""),
            exit_text, str(entry.get("container") or ""),
        )  # fmt: skip
    return table


# --------------------------------------------------------------------------- manifests


def _read_manifest(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        _fail(f"cannot read {path}: {(exc.strerror or str(exc)).lower()}")
    except UnicodeDecodeError as exc:
        _fail(f"cannot read {path}: not UTF-8 text (byte {exc.start})")


@app.command()
def validate(
    file: Annotated[Path, typer.Argument(help="manifest YAML")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Check a manifest (no server needed): print it normalized, or its errors."""
    from dlaas.domain.errors import ImageUnavailable, InvalidManifest
    from dlaas.domain.manifest import parse_manifest

    text = _read_manifest(file)
    try:
        manifest = parse_manifest(text)
    except InvalidManifest as exc:
        if as_json:
            _json({"valid": False, "problems": exc.problems})
            raise typer.Exit(EXIT_FAILED) from None
        _fail(f"{file} is not a valid manifest", exc.problems)
    warnings = []
    # A framework with no image is refused as submit would refuse it: which frameworks
    # have one is the platform's, not the cluster's. What depends on the cluster (GPUs,
    # an image present on the nodes) is only a warning here; submit checks it again.
    try:
        from dlaas.domain.frameworks import resolve_image

        resolve_image(manifest, "dlaas/learner:latest")
    except ImageUnavailable as exc:
        if as_json:
            _json({"valid": False, "problems": [exc.message]})
            raise typer.Exit(EXIT_FAILED) from None
        _fail(f"{file} cannot run on this platform", [exc.message])
    if manifest.gpus:
        warnings.append(f"gpus: {manifest.gpus} per learner; submit refuses it if no node has them")
    normalized = manifest.normalized()
    if as_json:
        return _json({"valid": True, "warnings": warnings, "manifest": normalized})
    # The path as printed (no markup read in it), on one line however narrow the terminal:
    # what follows is YAML, read back by scripts below this first line.
    console.print("[green]valid[/green]: ", end="")
    console.print(str(file), markup=False, soft_wrap=True)
    for w in warnings:
        err.print(f"[yellow]warning:[/yellow] {w}", soft_wrap=True)
    console.print(yaml.safe_dump(normalized, sort_keys=False), markup=False, end="", soft_wrap=True)


# --------------------------------------------------------------------------- jobs


def _follow(client: DlaasClient, job_id: str, learners: list[int], offset: int = 0) -> dict:
    """Print the learners' log lines until the job ends; return the final job.

    With several learners their lines interleave as they come, each prefixed `[i] `. A log
    that cannot be read (its store refused or did not answer) is a warning: the job goes
    on, and its final status is what the user waits for. The job is read again after the
    streams end, until it is final: a stream may end before the job does (its store broke
    it), and the status printed is never an intermediate one.
    """
    if len(learners) == 1:
        lines = client.logs(job_id, learner=learners[0], offset=offset, follow=True)
        stream: Iterator[tuple[int, str]] = ((learners[0], line) for line in lines)
    else:
        stream = client.follow_learners(job_id, learners, offset)
    with console.status(f"{job_id}: waiting for log lines ...") as live:
        try:
            for learner, line in stream:
                text = f"[{learner}] {line}" if len(learners) > 1 else line
                console.print(text, markup=False, highlight=False, soft_wrap=True)
                live.update(f"{job_id}: running")
        except ApiError as exc:
            err.print(f"warning: no more log lines: {exc.message}", markup=False, soft_wrap=True)
        live.update(f"{job_id}: waiting for its end ...")
        return _final_job(client, job_id)


def _final_job(client: DlaasClient, job_id: str) -> dict:
    """The job once it is final, read every 0.5 s at first, then every 2 s (no deadline: a
    follow lasts as long as the job; Ctrl-C ends it)."""
    job, pause = client.get_job(job_id), 0.5
    while job["status"] not in FINAL:
        time.sleep(pause)
        pause = min(pause * 1.5, 2.0)
        job = client.get_job(job_id)
    return job


def _learner_ids(job: dict) -> list[int]:
    """Every learner of a job, as its manifest asks (a manifest the API cannot show: one)."""
    learners = (job.get("manifest") or {}).get("learners")
    return list(range(learners)) if isinstance(learners, int) and learners > 0 else [0]


def _print_final(job: dict) -> None:
    line = f"{job['job_id']}: {_status(job['status'])}"
    if job.get("reason"):
        line += f" ({job['reason']})"
    if job.get("exit_code") is not None:
        line += f", exit code {job['exit_code']}"
    console.print(line)


@app.command()
@reports_errors
def submit(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="manifest YAML")],
    code: Annotated[
        Path | None, typer.Option(help="code: a directory (packed to tar.gz) or a .tar.gz/.zip")
    ] = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            "-f",
            help="stream every learner's log (lines prefixed [i] when several) until the job ends",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Submit a job; print its id (with --follow: its logs, then its final status)."""
    text = _read_manifest(file)
    archive, name = pack_code(code) if code is not None else (None, "")
    client = ctx.obj.client()
    reply = client.submit(text, archive, name)
    if as_json and not follow:
        return _json(reply)
    if as_json:
        _json(reply)
    else:
        console.print(reply["job_id"], markup=False)
        for w in reply.get("warnings") or []:
            err.print(f"[yellow]warning:[/yellow] {w}", soft_wrap=True)
    if follow:
        job = _follow(client, reply["job_id"], _learner_ids(client.get_job(reply["job_id"])))
        _json(job) if as_json else _print_final(job)
        raise typer.Exit(0 if job["status"] == "COMPLETED" else EXIT_FAILED)


@app.command("list")
@reports_errors
def list_jobs(
    ctx: typer.Context,
    status: Annotated[str | None, typer.Option(help="only jobs in this status")] = None,
    offset: Annotated[int, typer.Option(min=0)] = 0,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 50,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """List your jobs, newest first."""
    page = ctx.obj.client().list_jobs(status, offset, limit)
    if as_json:
        return _json(page)
    # Only an admin's page has other users' jobs: a column of one name is left out.
    users = len({j["user"] for j in page["jobs"]}) > 1
    # `since`: when the job took its status (its creation is in `dlaas show`, and --json).
    table = Table(_id_column(), Column("name", min_width=8), _status_column())
    if users:
        table.add_column("user")
    table.add_column("since", no_wrap=True)
    table.add_column("progress", no_wrap=True)
    table.add_column("reason", ratio=1)
    for j in page["jobs"]:
        who = [j["user"]] if users else []
        table.add_row(
            j["job_id"], j["name"], _status(j["status"]), *who,
            _when_short(j["updated_at"]), progress_cell(j.get("progress")), j["reason"],
        )  # fmt: skip
    console.print(table)
    shown = len(page["jobs"])
    console.print(f"{offset + 1 if shown else 0}-{offset + shown} of {page['total']}")


@app.command()
@reports_errors
def show(
    ctx: typer.Context,
    job: Annotated[str, typer.Argument(help="job id")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Show a job: status, history, learners and its normalized manifest."""
    data = ctx.obj.client().get_job(job)
    if as_json:
        return _json(data)
    console.print(f"[bold]{data['job_id']}[/bold]  {data['name']}  {_status(data['status'])}")
    console.print(f"user {data['user']}, created {_when(data['created_at'])}", markup=False)
    if data["status"] == "QUEUED":
        line = queued_line(data.get("queue"), data.get("queue_note", ""))
        console.print(line, markup=False, soft_wrap=True)
    if data.get("progress"):
        console.print(progress_line(data["progress"]), markup=False, soft_wrap=True)
    if data.get("exit_code") is not None or data.get("error_code"):
        line = f"error: {data.get('error_code') or '-'}"
        if data.get("exit_code") is not None:
            line += f", exit code {data['exit_code']}"
        console.print(line, markup=False)
    history = Table(
        Column("at", no_wrap=True), _status_column(), "reason", "error", "exit", title="history"
    )
    for h in data["history"]:
        history.add_row(
            _when_short(h["at"]), _status(h["status"]), h["reason"], h["error_code"],
            "" if h["exit_code"] is None else str(h["exit_code"]),
        )  # fmt: skip
    console.print(history)
    if data.get("learners"):
        console.print(learners_table(data["learners"]))
    for made in (data.get("info") or {}).get("learner_restarts") or []:
        if isinstance(made, dict):  # the job monitor's restarts in place in this run
            line = f"{_when_short(made.get('at') or 0)}  restarted in place: {made.get('reason')}"
            console.print(line, markup=False, soft_wrap=True)
    if data.get("manifest"):
        console.print("manifest:", markup=False)
        console.print(
            yaml.safe_dump(data["manifest"], sort_keys=False), markup=False, end="", soft_wrap=True
        )


@app.command()
@reports_errors
def logs(
    ctx: typer.Context,
    job: Annotated[str, typer.Argument(help="job id")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="until the job ends")] = False,
    learner: Annotated[int, typer.Option(min=0, help="learner index")] = 0,
    offset: Annotated[int, typer.Option(min=0, help="lines to skip")] = 0,
) -> None:
    """Print a learner's log lines (-f: keep following until the job ends)."""
    client = ctx.obj.client()
    if follow:
        _print_final(_follow(client, job, [learner], offset))
        return
    for line in client.logs(job, learner=learner, offset=offset):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


@app.command()
@reports_errors
def halt(ctx: typer.Context, job: Annotated[str, typer.Argument(help="job id")]) -> None:
    """Halt a job; its logs are kept."""
    reply = ctx.obj.client().halt(job)
    console.print(f"{reply['job_id']}: {_status(reply['status'])}")


@app.command()
@reports_errors
def resume(ctx: typer.Context, job: Annotated[str, typer.Argument(help="job id")]) -> None:
    """Resume a HALTED job: it is queued again and continues from its last checkpoint."""
    reply = ctx.obj.client().resume(job)
    console.print(f"{reply['job_id']}: {_status(reply['status'])}")


@app.command()
@reports_errors
def scale(
    ctx: typer.Context,
    job: Annotated[str, typer.Argument(help="job id")],
    learners: Annotated[int, typer.Argument(help="new learner count, within the job's range")],
) -> None:
    """Set an elastic job's target: its gang restarts from its checkpoint with LEARNERS
    learners, unless it runs with that many already (then nothing restarts)."""
    reply = ctx.obj.client().scale(job, learners)
    console.print(
        f"{reply['job_id']}: {_status(reply['status'])}, target {reply['learners']} learners"
    )


def _interactive() -> bool:
    """Whether a person can answer a question (tests replace this)."""
    return sys.stdin.isatty()


@app.command()
@reports_errors
def delete(
    ctx: typer.Context,
    job: Annotated[str, typer.Argument(help="job id")],
    purge: Annotated[
        bool, typer.Option("--purge", help="also delete its results (model, logs, checkpoints)")
    ] = False,
    force: Annotated[
        bool,
        typer.Option("--force", "-f", help="delete a job that has not ended without asking"),
    ] = False,
) -> None:
    """Delete a job: its record, containers and uploaded code.

    A job that has not ended (queued or running) is halted first: its learners stop at
    once, without a last checkpoint, so work since its last checkpoint is lost; you are
    asked to confirm (or pass --force; without a terminal, --force is required). Its
    results (model, logs, checkpoints) stay in its results bucket unless --purge.
    `dlaas halt JOB` keeps the job, to resume later.
    """
    client = ctx.obj.client()
    if not force:
        status = str(client.get_job(job)["status"])
        if status not in FINAL:
            if status == Status.QUEUED.value:  # nothing of it runs: no work is lost
                what = f"{job} is QUEUED: deleting it takes it out of the queue for good"
            else:
                what = (
                    f"{job} is {status}: deleting it stops its learners at once; work since "
                    "its last checkpoint is lost"
                )
            if not _interactive():
                _fail(f"{what}. Add --force to delete it, or `dlaas halt {job}` to keep it")
            if not typer.confirm(f"{what}. Delete it?", default=False):
                _fail(f"{job}: not deleted")
    reply = client.delete(job, purge=purge)
    console.print(f"{job}: deleted; results {reply['results']}", markup=False)


@app.command()
@reports_errors
def download(
    ctx: typer.Context,
    job: Annotated[str, typer.Argument(help="job id")],
    output: Annotated[Path | None, typer.Option("-o", "--output", help="directory")] = None,
) -> None:
    """Download a job's results (model, logs) into a directory (default ./<job>)."""
    target = output or Path(job)
    # Spooled: small results stay in memory, large ones go to a temporary file.
    with tempfile.SpooledTemporaryFile(max_size=64 * 2**20) as buf:
        for chunk in ctx.obj.client().download(job):
            buf.write(chunk)
        buf.seek(0)
        target.mkdir(parents=True, exist_ok=True)
        names = _extract(buf, target)
    console.print(f"{len(names)} files in {target}", markup=False)


def _extract(buf, target: Path) -> list[str]:
    with tarfile.open(fileobj=buf, mode="r:gz") as tar:
        names = tar.getnames()
        tar.extractall(target, filter="data")  # "data": nothing outside target, no devices
    return names


@app.command()
@reports_errors
def queue(ctx: typer.Context, as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Show the scheduler's queue: positions, reasons and start-time estimates."""
    data = ctx.obj.client().queue()
    if as_json:
        return _json(data)
    if not data["entries"]:
        # The API lists an admin every queued job, anyone else their own.
        console.print("the queue is empty: no job is waiting to start", markup=False)
        return
    table = Table("#", _id_column(), Column("starts in", no_wrap=True), "reason")
    for e in data["entries"]:
        eta = eta_text(e.get("eta_low_s"), e.get("eta_high_s"))
        table.add_row(str(e["position"]), e["job_id"], eta, queue_reason(e["reason"]))
    console.print(table)


# The account, team, audit, data, metrics, hooks, nodes and usage commands register on `app`.
from dlaas.clients import cli_accounts, cli_hooks, cli_metrics, cli_nodes, cli_usage  # noqa: F401

if __name__ == "__main__":  # after the registrations: `python -m dlaas.clients.cli usage` works
    app()
