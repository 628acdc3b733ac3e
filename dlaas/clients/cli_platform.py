"""The `dlaas` commands for the platform itself: up, down, status, images build, simulate.

They run on this machine (dlaas.local, the scheduler's simulator), not over the API.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from dlaas.clients.cli_app import EXIT_FAILED, _fail, _json, app, console, images_app


@app.command()
def up(
    ctx: typer.Context,
    no_images: Annotated[bool, typer.Option(help="do not build the job image")] = False,
    nodes: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="nodes to run jobs on: N > 1 builds an N-node Docker Swarm on this machine, "
            "1 is the machine's engine alone (default: as last time, else 1)",
        ),
    ] = None,
    etcd_members: Annotated[
        int | None,
        typer.Option(help="1, or 3 for an etcd cluster that survives losing a member"),
    ] = None,
) -> None:
    """Bring the whole platform up on this machine (idempotent)."""
    from dlaas.local import platform

    try:
        info = platform.up(
            ctx.obj.home,
            progress=console.print,
            build_images=not no_images,
            nodes=nodes,
            etcd_members=etcd_members,
        )
    except platform.PlatformError as exc:
        _fail(str(exc))
    console.print(f"[green]up[/green]: API at {info.api_url} (state in {info.state_dir})")


@app.command()
def down(ctx: typer.Context) -> None:
    """Stop everything `dlaas up` started."""
    from dlaas.local import platform

    stopped = platform.down(ctx.obj.home, progress=console.print)
    console.print(f"stopped: {', '.join(stopped) or 'nothing'}")


@app.command()
def status(ctx: typer.Context, as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Show each platform component: is it running, does it answer as it should (exit 1 if not)."""
    from dlaas.local import components

    comps = components.status(ctx.obj.home)
    if as_json:
        _json([c.__dict__ for c in comps])
    else:
        table = Table("component", "running", "healthy", "pid", "address", "detail")
        for c in comps:
            table.add_row(
                c.name, _yes_no(c.running), "-" if c.healthy is None else _yes_no(c.healthy),
                str(c.pid or "-"), c.address, c.detail,
            )  # fmt: skip
        console.print(table)
    if not all(c.running and c.healthy is not False for c in comps):
        raise typer.Exit(EXIT_FAILED)


def _yes_no(flag: bool) -> str:
    return "[green]yes[/green]" if flag else "[red]no[/red]"


@images_app.command("build")
def images_build(
    force: Annotated[bool, typer.Option(help="rebuild even if current")] = False,
    framework: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME[:VERSION]",
            help="build only the learner image and this framework's (repeatable): pytorch, "
            "tensorflow, mpi, e.g. pytorch:2.13; default: every framework image",
        ),
    ] = None,
    learner_only: Annotated[
        bool, typer.Option(help="build only the learner image (what `dlaas up` builds)")
    ] = False,
    stack: Annotated[
        bool, typer.Option(help="also docker-compose.yml's images, for a swarm with no registry")
    ] = False,
):
    """Build the learner/helper image and the framework images (PyTorch, TensorFlow, MPI)
    locally, and with --stack the platform's own. See images/README.md."""
    from dlaas.local import images

    args = ["--force"] if force else []
    args += ["--learner-only"] if learner_only else []
    for item in framework or ():
        args += ["--framework", item]
    code = images.main(args)
    if code == 0 and stack:
        from dlaas.local import stack as stack_images

        code = stack_images.main(["--force"] if force else [])
    raise typer.Exit(code)


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def simulate(ctx: typer.Context) -> None:
    """Replay a cluster trace through the scheduling policies (see `dlaas simulate --help`)."""
    from services.scheduler import simulator

    raise typer.Exit(simulator.main(list(ctx.args)) or 0)
