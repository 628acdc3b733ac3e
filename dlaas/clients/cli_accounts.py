"""`dlaas users`, `dlaas teams`, `dlaas audit` and `dlaas data`: accounts and team data.

Administrators' commands use the admin token that `dlaas up` wrote to admin.json (or the
token given with --token); `dlaas data` and `dlaas teams list` work with any user's token,
inside that user's team.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from dlaas.clients.cli_app import _fail, _json, _when, app, console, reports_errors
from dlaas.clients.client import DlaasClient, NotConfigured, load_config
from dlaas.domain.durations import parse_duration_s
from dlaas.domain.run_time import duration_text
from dlaas.domain.sizes import parse_quota_bytes, size_text

users_app = typer.Typer(help="Users and their API tokens (administrators).")
teams_app = typer.Typer(help="Teams and their guaranteed shares (quotas).")
data_app = typer.Typer(help="Training data in your team's buckets of the platform's S3.")
app.add_typer(users_app, name="users")
app.add_typer(teams_app, name="teams")
app.add_typer(data_app, name="data")


def _admin(ctx: typer.Context) -> DlaasClient:
    obj = ctx.obj
    config = load_config(obj.home, obj.url, obj.token)
    # An explicit --token is used as given; else the admin token of admin.json.
    return DlaasClient.from_config(config, admin=not obj.token)


@users_app.command("add")
@reports_errors
def users_add(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="user name: lowercase letters, digits, hyphens")],
    team: Annotated[str, typer.Option(help="the user's team (made if new)")] = "default",
    admin: Annotated[bool, typer.Option("--admin", help="an administrator")] = False,
    expires_days: Annotated[float, typer.Option(help="token lifetime; 0: never")] = 0,
) -> None:
    """Add a user and print its API token (shown this once)."""
    made = _admin(ctx).add_user(name, team, admin, expires_days)
    console.print(f"user {made['name']} (team {made['team']}) added; API token, shown once:")
    console.print(made["token"], markup=False)
    console.print("give it to the user: dlaas --token TOKEN ... (or DLAAS_TOKEN=TOKEN)")


@users_app.command("token")
@reports_errors
def users_token(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="user name")],
    expires_days: Annotated[float, typer.Option(help="token lifetime; 0: never")] = 0,
) -> None:
    """Issue another API token for a user (shown this once)."""
    made = _admin(ctx).issue_token(name, expires_days)
    console.print(made["token"], markup=False)


@users_app.command("list")
@reports_errors
def users_list(ctx: typer.Context, as_json: Annotated[bool, typer.Option("--json")] = False):
    """Every user with team, role and valid tokens."""
    users = _admin(ctx).users()
    if as_json:
        return _json(users)
    table = Table("user", "team", "admin", "valid tokens", "created")
    for u in users:
        table.add_row(u["name"], u["team"], "yes" if u["admin"] else "", str(u["valid_tokens"]),
                      _when(u["created_at"]))  # fmt: skip
    console.print(table)


@users_app.command("revoke")
@reports_errors
def users_revoke(
    ctx: typer.Context, who: Annotated[str, typer.Argument(help="a user name, or one token")]
) -> None:
    """Revoke every token of a user, or one token; refused at once everywhere."""
    n = _admin(ctx).revoke(who)["revoked"]
    console.print(f"revoked {n} token(s)")


def _quota(q: dict) -> str:
    return f"{q['gpus']} GPUs, {q['cpus']:g} CPUs, {q['memory_mb']} MiB"


def _storage(t: dict) -> str:
    quota = t.get("storage_quota_bytes")
    return size_text(quota) if quota else "-"


def _run_times(t: dict) -> str:
    """The team's default and maximum run time, "2h/8h" ("-" for none)."""
    return "/".join(
        duration_text(s) if s else "-"
        for s in (t.get("default_duration_s"), t.get("max_duration_s"))
    )


def _filled(amounts: dict) -> dict:
    return {k: amounts.get(k, 0) for k in ("gpus", "cpus", "memory_mb")}


@teams_app.command("list")
@reports_errors
def teams_list(ctx: typer.Context, as_json: Annotated[bool, typer.Option("--json")] = False):
    """Teams with their guaranteed shares and what they use now."""
    try:
        client = _admin(ctx)
    except NotConfigured:  # no admin token here: a user sees their own team
        client = ctx.obj.client()
    teams = client.teams()
    if as_json:
        return _json(teams)
    table = Table(
        "team", "guaranteed", "in use", "borrowed", "queued", "max priority", "storage quota",
        "run time default/max",
    )  # fmt: skip
    for t in teams:
        u = t.get("usage") or {}
        used = u.get("used") or {}
        borrowed = u.get("borrowed") or {}
        table.add_row(
            t["name"], _quota(t["quota"]),
            _quota(_filled(used)) if u else "-",
            # All three amounts: a team may borrow CPUs or memory as well as GPUs.
            _quota(_filled(borrowed)) if u else "-",
            str(u.get("queued", "-")),
            str(t.get("max_priority", "-")),
            _storage(t),
            _run_times(t),
        )  # fmt: skip
    console.print(table)


# The options of a guaranteed share, shared by `teams add` and `teams set-quota`.
TeamName = Annotated[str, typer.Argument(help="team name")]
Gpus = Annotated[int, typer.Option(min=0, help="guaranteed GPUs")]
Cpus = Annotated[float, typer.Option(min=0, help="guaranteed CPUs")]
MemoryMb = Annotated[int, typer.Option(min=0, help="guaranteed memory, MiB")]
MaxPriority = Annotated[
    int | None,
    typer.Option(
        help="the highest priority the team's users may submit with (a number; high is 100, "
        "critical 1000); administrators are exempt. Default for a new team: 100"
    ),
]


def _storage_bytes(value: str | None) -> int | None:
    if value is None:
        return None
    if value.strip() in ("0", "none"):
        return 0
    try:
        return parse_quota_bytes(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


StorageQuota = Annotated[
    str | None,
    typer.Option(
        help="bytes the team's buckets in the platform's S3 may hold, e.g. 50GiB or 1TB "
        "(a bare number: bytes; 0 or none: no quota); `data upload` past it is refused. "
        "Default for a new team: none"
    ),
]


def _seconds(option: str, value: str | None) -> int | None:
    if value is None:
        return None
    if value.strip() == "none":
        return 0
    try:
        return parse_duration_s(value)
    except ValueError as exc:
        raise typer.BadParameter(f"{option}: {exc}") from None


DefaultDuration = Annotated[
    str | None,
    typer.Option(
        help="how long a job of the team runs when its manifest names no max_duration, "
        "e.g. 2h, 1h30m, 2d (0 or none: no default; then the maximum). Queued and halted "
        "time does not count. Default for a new team: none"
    ),
]
MaxDuration = Annotated[
    str | None,
    typer.Option(
        help="the most a manifest's max_duration may ask, e.g. 8h (0 or none: no maximum "
        "but the platform's); a job naming none and without a team default runs this long. "
        "Administrators are exempt. Default for a new team: none"
    ),
]


@teams_app.command("add")
@reports_errors
def teams_add(
    ctx: typer.Context,
    name: TeamName,
    gpus: Gpus = 0,
    cpus: Cpus = 0,
    memory_mb: MemoryMb = 0,
    max_priority: MaxPriority = None,
    storage_quota: StorageQuota = None,
    default_duration: DefaultDuration = None,
    max_duration: MaxDuration = None,
) -> None:
    """Add a team with a guaranteed share, a priority ceiling, a storage quota and run
    times."""
    storage = _storage_bytes(storage_quota)
    default_s = _seconds("--default-duration", default_duration)
    max_s = _seconds("--max-duration", max_duration)
    t = _admin(ctx).add_team(name, gpus, cpus, memory_mb, max_priority, storage, default_s, max_s)
    console.print(
        f"team {t['name']} added: {_quota(t['quota'])} guaranteed, "
        f"priority at most {t['max_priority']}, storage quota {_storage(t)}, "
        f"run time (default/max) {_run_times(t)}"
    )


@teams_app.command("set")
@reports_errors
def teams_set(
    ctx: typer.Context,
    name: TeamName,
    max_priority: MaxPriority = None,
    storage_quota: StorageQuota = None,
    default_duration: DefaultDuration = None,
    max_duration: MaxDuration = None,
) -> None:
    """Change a team's settings: its priority ceiling, its storage quota, its jobs' run
    times (`set-quota` sets its share)."""
    storage = _storage_bytes(storage_quota)
    default_s = _seconds("--default-duration", default_duration)
    max_s = _seconds("--max-duration", max_duration)
    if max_priority is None and storage is None and default_s is None and max_s is None:
        raise typer.BadParameter(
            "name what to change: --max-priority N, --storage-quota SIZE, "
            "--default-duration TIME, --max-duration TIME"
        )
    if max_priority is not None:
        t = _admin(ctx).set_max_priority(name, max_priority)
        console.print(f"team {t['name']}: priority at most {t['max_priority']}")
    if storage is not None:
        t = _admin(ctx).set_storage_quota(name, storage)
        console.print(f"team {t['name']}: storage quota {_storage(t)}")
    if default_s is not None or max_s is not None:
        t = _admin(ctx).set_run_times(name, default_s, max_s)
        console.print(f"team {t['name']}: run time (default/max) {_run_times(t)}")


@teams_app.command("set-quota")
@reports_errors
def teams_set_quota(
    ctx: typer.Context, name: TeamName, gpus: Gpus = 0, cpus: Cpus = 0, memory_mb: MemoryMb = 0
) -> None:
    """Set a team's guaranteed share."""
    t = _admin(ctx).set_quota(name, gpus, cpus, memory_mb)
    console.print(f"team {t['name']}: {_quota(t['quota'])} guaranteed")


@app.command()
@reports_errors
def audit(
    ctx: typer.Context,
    offset: Annotated[int, typer.Option(min=0)] = 0,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """The audit log (administrators): who submitted, halted, deleted, added users."""
    page = _admin(ctx).audit(offset, limit)
    if as_json:
        return _json(page)
    table = Table("#", "when", "who", "action", "target", "detail")
    for e in page["entries"]:
        table.add_row(str(e["seq"]), _when(e["at"]), e["actor"], e["action"], e["target"],
                      e["detail"])  # fmt: skip
    console.print(table)


@data_app.command("upload")
@reports_errors
def data_upload(
    ctx: typer.Context,
    bucket: Annotated[str, typer.Argument(help="one of your team's buckets (made if new)")],
    paths: Annotated[list[Path], typer.Argument(help="files or directories")],
    prefix: Annotated[str, typer.Option(help="key prefix inside the bucket")] = "",
) -> None:
    """Upload files (directories recursively) into one of your team's buckets."""
    files = []
    for path in paths:
        if not path.exists():
            _fail(f"{path}: no such file or directory")
        base = path if path.is_dir() else path.parent
        files += [
            (f, f.relative_to(base).as_posix())
            for f in ([path] if path.is_file() else sorted(path.rglob("*")))
            if f.is_file()
        ]
    client = ctx.obj.client()
    for f, key in files:
        done = client.data_upload(bucket, prefix + key, f)
        console.print(f"uploaded {bucket}/{done['key']} ({done['size']} bytes)")


@data_app.command("ls")
@reports_errors
def data_ls(
    ctx: typer.Context,
    bucket: Annotated[str | None, typer.Argument(help="a bucket; none: list your buckets")] = None,
    prefix: Annotated[str, typer.Option(help="only keys under this prefix")] = "",
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Your team's buckets, or the objects in one of them."""
    client = ctx.obj.client()
    if bucket is None:
        names = client.data_buckets()
        if as_json:
            return _json(names)
        for n in names:
            console.print(n, markup=False)
        return None
    page = client.data_list(bucket, prefix)
    if as_json:
        return _json(page)
    for o in page["objects"]:
        console.print(f"{o['size']:>12}  {o['key']}", markup=False)
    if page["truncated"]:
        console.print("(more objects: narrow with --prefix)")
