"""The `dlaas` command line's typer app, its global options, and what every command shares.

The commands register themselves on `app`: the job and manifest commands in
dlaas/clients/cli.py (the entrypoint), the platform's in cli_platform.py, the others in the
other cli_*.py modules. Shared here: the API client from the global options (`Ctx`), one
error line and exit code for every failure (`_fail`, `reports_errors`), `--json` output and
the time and status columns.

Exit codes: 0 ok; 1 refused, invalid, or (submit --follow) the job did not complete;
2 usage; 3 the platform is not reachable or not configured.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Column

from dlaas.clients.client import (
    ApiError,
    ClientError,
    DlaasClient,
    NotConfigured,
    Unreachable,
    load_config,
)
from dlaas.domain.status import Status

EXIT_FAILED, EXIT_UNREACHABLE = 1, 3

app = typer.Typer(
    name="dlaas",
    help="Deep-learning training as a service: submit manifests, follow jobs, fetch results.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
images_app = typer.Typer(help="Job container images (built locally, no registry needed).")
app.add_typer(images_app, name="images")

console = Console(highlight=False)
err = Console(stderr=True, highlight=False)


class Ctx:
    def __init__(self, home: Path, url: str | None, token: str | None, admin: bool):
        self.home, self.url, self.token, self.admin = home, url, token, admin

    def client(self) -> DlaasClient:
        return DlaasClient.from_config(load_config(self.home, self.url, self.token), self.admin)


@app.callback()
def main(
    ctx: typer.Context,
    home: Annotated[
        Path | None, typer.Option(help="state directory (default $DLAAS_HOME or ~/.dlaas)")
    ] = None,
    url: Annotated[str | None, typer.Option(help="API address, e.g. http://127.0.0.1:8080")] = None,
    token: Annotated[str | None, typer.Option(help="API token (default from client.json)")] = None,
    admin: Annotated[bool, typer.Option(help="use the admin token from admin.json")] = False,
) -> None:
    home = home or Path(os.environ.get("DLAAS_HOME") or Path.home() / ".dlaas")
    ctx.obj = Ctx(home, url, token, admin)


def _fail(message: str, problems: list[str] | None = None, code: int = EXIT_FAILED):
    err.print(f"[red]error:[/red] {message}", markup=True, soft_wrap=True)
    for p in problems or []:
        err.print(f"  - {p}", markup=False, soft_wrap=True)
    raise typer.Exit(code)


def reports_errors(fn):
    """Turn client errors into one clear line and an exit code, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ApiError as exc:
            problems = [p for p in exc.problems if p != exc.message]
            message = exc.message
            joined = "; ".join(problems)
            if problems and message.endswith(joined) and len(message) > len(joined):
                # "invalid manifest: a; b": the list below says a and b, once.
                message = message[: -len(joined)].rstrip(": ")
            _fail(f"{message} ({exc.code}, HTTP {exc.status})", problems)
        except (Unreachable, NotConfigured) as exc:
            _fail(str(exc), code=EXIT_UNREACHABLE)
        except ClientError as exc:
            _fail(str(exc))

    return wrapper


def _json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def _when(ts: float | None) -> str:
    if not ts:
        return "-"
    return datetime.fromtimestamp(ts, UTC).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _when_short(ts: float | None, now: float | None = None) -> str:
    """A time for a table column: the clock time today, the day and minute this year."""
    if not ts:
        return "-"
    at = datetime.fromtimestamp(ts, UTC).astimezone()
    today = datetime.fromtimestamp(time.time() if now is None else now, UTC).astimezone()
    if at.date() == today.date():
        return at.strftime("%H:%M:%S")
    return at.strftime("%b %d %H:%M" if at.year == today.year else "%Y-%m-%d")


_STATUS_STYLE = {
    "COMPLETED": "green",
    "FAILED": "red",
    "HALTED": "yellow",
    "QUEUED": "cyan",
}


def _status(s: str) -> str:
    style = _STATUS_STYLE.get(s, "blue")
    return f"[{style}]{s}[/{style}]"


def _id_column():
    return Column("job", no_wrap=True, min_width=16)  # ids are copied from here: never wrap


# The longest status word: a status column never narrower, so no terminal cuts one short.
_STATUS_WIDTH = max(len(s) for s in Status)


def _status_column() -> Column:
    return Column("status", no_wrap=True, min_width=_STATUS_WIDTH)
