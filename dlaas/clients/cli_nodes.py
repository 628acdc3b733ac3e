"""`dlaas nodes`: the cluster's nodes, and their planned maintenance (administrators).

`dlaas nodes` lists every node with its state (ready/down), availability (active, pause,
drain), capacity, what the running jobs hold of it, what their containers use now (as
measured; "unknown" where it is not, GPU utilization "n/a": not measured on these nodes)
and its topology labels (GET /v1/nodes; on a swarm read from the swarm's node objects). `dlaas nodes drain NODE` moves the node's
jobs off it from their checkpoints (elastic jobs shrink, never below their min) and places
nothing new there; `dlaas nodes activate NODE` puts it back in use. Both use the admin
token (admin.json, or --token).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from dlaas.clients.cli_accounts import _admin
from dlaas.clients.cli_app import _json, app, console, reports_errors

nodes_app = typer.Typer(help="The cluster's nodes: state, capacity, drain and activate.")
app.add_typer(nodes_app, name="nodes")

NodeName = Annotated[str, typer.Argument(help="node name, as `dlaas nodes` lists it")]


def _amount(a: dict) -> str:
    gpus = f", {a['gpus']} GPUs" if a.get("gpus") else ""
    return f"{a['cpus']:g} CPUs, {a['memory_mb']} MiB{gpus}"


def _used(n: dict) -> str:
    """The measured use: unknown values are said to be, never shown as 0."""
    u = n.get("utilization") or {}
    cpus, memory = u.get("cpus"), u.get("memory_mb")
    if cpus is None and memory is None:
        text = "unknown"
    else:
        text = "? CPUs" if cpus is None else f"{cpus:g} CPUs"
        text += ", ? MiB" if memory is None else f", {memory} MiB"
    if (n.get("capacity") or {}).get("gpus"):
        gpu = u.get("gpu_percent")
        text += ", GPUs n/a" if gpu is None else f", GPUs {gpu:.0f}%"
    return text


def nodes_table(nodes: list[dict]) -> Table:
    """The listing's table (pure: rows from GET /v1/nodes' `nodes`)."""
    table = Table(
        "node", "state", "availability", "capacity", "allocated", "used", "labels", "jobs"
    )  # fmt: skip
    for n in nodes:
        gpu = f" ({n['gpu_type']})" if n.get("gpu_type") else ""
        labels = ",".join(f"{k}={v}" for k, v in sorted((n.get("labels") or {}).items()))
        table.add_row(
            n["name"], n.get("state", "?"), n.get("availability", "?"),
            _amount(n["capacity"]) + gpu, _amount(n["allocated"]), _used(n), labels or "-",
            ", ".join(n.get("jobs") or []) or "-",
        )  # fmt: skip
    return table


@nodes_app.callback(invoke_without_command=True)
@reports_errors
def nodes_list(
    ctx: typer.Context, as_json: Annotated[bool, typer.Option("--json")] = False
) -> None:
    """Every node with state, availability, capacity, allocation, measured use and labels."""
    if ctx.invoked_subcommand is not None:
        return
    nodes = ctx.obj.client().nodes()["nodes"]
    if as_json:
        return _json(nodes)
    console.print(nodes_table(nodes))


@nodes_app.command("drain")
@reports_errors
def nodes_drain(ctx: typer.Context, name: NodeName) -> None:
    """Move a node's jobs off it from their checkpoints and place nothing new there."""
    n = _admin(ctx).set_node_availability(name, "drain")
    console.print(
        f"node {n['name']} drained: no new gangs; its jobs move from their checkpoints "
        "(elastic ones shrink, never below their min). `dlaas nodes activate` undoes it."
    )


@nodes_app.command("activate")
@reports_errors
def nodes_activate(ctx: typer.Context, name: NodeName) -> None:
    """Put a drained or paused node back in use (jobs may grow into it)."""
    n = _admin(ctx).set_node_availability(name, "active")
    console.print(f"node {n['name']} active ({n['state']})")
