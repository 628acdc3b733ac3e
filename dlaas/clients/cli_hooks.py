"""`dlaas hooks`: webhooks that POST your jobs' events to a URL, and their delivery log.

`dlaas hooks add URL --events completed,failed` prints the hook's signing secret once; the
receiver checks each body's `X-Dlaas-Signature: sha256=<HMAC-SHA256>` with it and uses
`X-Dlaas-Idempotency-Key` to ignore a delivery it has seen (delivery is at least once).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Column, Table

from dlaas.clients.cli_app import _json, _when, app, console, reports_errors
from dlaas.domain.hooks import EVENTS

hooks_app = typer.Typer(help="Webhooks: your jobs' events POSTed to a URL, signed.")
app.add_typer(hooks_app, name="hooks")


@hooks_app.command("add")
@reports_errors
def hooks_add(
    ctx: typer.Context,
    url: Annotated[str, typer.Argument(help="http(s) URL the events are POSTed to")],
    events: Annotated[
        str, typer.Option(help=f"comma-separated, of: {', '.join(EVENTS)}")
    ] = "completed,failed",
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Register a webhook and print its signing secret (shown this once)."""
    made = ctx.obj.client().add_hook(url, [e for e in events.split(",") if e.strip()])
    if as_json:
        return _json(made)
    console.print(f"hook {made['id']} added for {', '.join(made['events'])}", markup=False)
    console.print("signing secret, shown once (X-Dlaas-Signature is its HMAC-SHA256 of the body):")
    console.print(made["secret"], markup=False)


@hooks_app.command("list")
@reports_errors
def hooks_list(ctx: typer.Context, as_json: Annotated[bool, typer.Option("--json")] = False):
    """Your webhooks."""
    found = ctx.obj.client().hooks()
    if as_json:
        return _json(found)
    if not found:
        console.print("no webhooks: add one with `dlaas hooks add URL --events ...`")
        return
    table = Table(Column("hook", no_wrap=True), "url", "events", "created")
    for h in found:
        table.add_row(h["id"], h["url"], ", ".join(h["events"]), _when(h["created_at"]))
    console.print(table)


@hooks_app.command("rm")
@reports_errors
def hooks_rm(ctx: typer.Context, hook_id: Annotated[str, typer.Argument(help="hook id")]):
    """Remove a webhook and its delivery log."""
    ctx.obj.client().delete_hook(hook_id)
    console.print(f"hook {hook_id} removed", markup=False)


@hooks_app.command("deliveries")
@reports_errors
def hooks_deliveries(
    ctx: typer.Context,
    hook_id: Annotated[str, typer.Argument(help="hook id")],
    limit: Annotated[int, typer.Option(min=1, max=500)] = 50,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """A webhook's delivery log, latest first: attempts and the receiver's last answer."""
    page = ctx.obj.client().hook_deliveries(hook_id, limit=limit)
    if as_json:
        return _json(page)
    if not page["deliveries"]:
        console.print(f"hook {hook_id} has delivered nothing yet", markup=False)
        return
    table = Table(Column("when", no_wrap=True), Column("job", no_wrap=True), "event", "state",
                  "attempts", "last answer")  # fmt: skip
    for d in page["deliveries"]:
        answer = d["last_error"] or (f"HTTP {d['last_status']}" if d["last_status"] else "-")
        table.add_row(_when(d["at"]), d["job_id"], d["event"], d["state"], str(d["attempts"]),
                      answer)  # fmt: skip
    console.print(table)
    if page["total"] > len(page["deliveries"]):
        console.print(f"({len(page['deliveries'])} of {page['total']})")
