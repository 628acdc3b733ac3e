"""Bring the whole platform up (and down) on one machine: `dlaas up`, `dlaas down`.

Everything lives in a state directory ($DLAAS_HOME or ~/.dlaas):

    secrets.json   S3 keys and API tokens, generated once (0600)
    client.json    {"url", "token"} for the CLI: the first user's (0600)
    admin.json     {"url", "admin_token"}: the bootstrap administrator's (0600)
    platform.json  the ports chosen, kept across restarts so clients keep working, and
                   digests of the settings (DLAAS_ variables) the platform started with
    swarm/         with `--nodes N` (N > 1): the local swarm's nodes (data roots, sockets)
    jobs.db        the job store (embedded SQLite)
    etcd/ s3/      server data
    redis/         the worker's queue (Redis, append-only file: queued purges survive it)
    logs/<name>.log, pids/<name>.json

`up` is idempotent: a component whose recorded PID is alive, still runs the expected
program (a stale pid file whose number the OS reused is detected) and answers is left
alone; anything else is (re)started. A service also restarts when the configuration it
would get changed (a server came back on another port), recognised by a fingerprint of its
environment. Settings (the DLAAS_ variables `up` is given) are read when the platform
starts: an `up` of a running platform with other settings is refused (`dlaas down` first).
`down` stops by PID what `up` started: services first, then servers, and the Docker engine
only if `up` started it (it holds the image cache and may be the machine's) and no other
platform uses it (dlaas.local.dockerd.engine_users).

Several nodes on one machine (`up(nodes=N)`, `dlaas up --nodes N`): a Docker Swarm of N
nodes, one dockerd per network namespace (dlaas.local.swarm), each given a copy of the job
image (no registry: save/load). The services reach it only through the swarm manager's
API (DLAAS_SWARM_MANAGER), as they would a real cluster; gangs may span nodes. Declared
capacity: see `UpSteps.swarm_lab`. The node count is kept in platform.json: a later `up`
without one keeps it; `--nodes 1` takes the swarm down.

What runs, and `dlaas status`: dlaas.local.components; the servers themselves:
dlaas.local.etcd, .seaweedfs, .redis, .dockerd.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from dlaas.domain import jobspec
from dlaas.domain.accounts import DEFAULT_TEAM, audit_entry
from dlaas.local import firewall
from dlaas.local.components import (
    API_NAMES,
    EXTRA_ETCD,
    LCM_NAMES,
    SERVERS,
    SERVICES,
    ComponentStatus,
    kind_of,
    status,
)
from dlaas.local.dockerd import (
    DEFAULT_DOCKER_HOST,
    EngineUser,
    engine_users,
    mark_user,
    unmark_user,
)
from dlaas.local.processes import (
    ServerError,
    stop_pid,
)
from dlaas.local.state import StateDir, default_state_dir, read_json, record_alive, write_private
from dlaas.local.swarm import SwarmLab, SwarmLabError
from dlaas.local.up_steps import PlatformError, Progress, UpSteps, _retire_old_engines

USER_NAME = "user"


@dataclass
class PlatformInfo:
    """What `up` brought up. Holds no secret: the CLI reads tokens from `client_config`."""

    state_dir: Path
    api_url: str
    client_config: Path
    etcd_endpoint: str
    s3_endpoint: str
    docker_host: str
    components: list[ComponentStatus] = field(default_factory=list)


# --------------------------------------------------------------------------- up


def up(
    state_dir: Path | None = None,
    progress: Progress = print,
    build_images: bool = True,
    nodes: int | None = None,
    etcd_members: int | None = None,
) -> PlatformInfo:
    """Bring every component up (or find it running); write client.json for the CLI.

    `nodes`: 1, the machine's Docker engine; N > 1, a local swarm of N nodes (see above);
    None keeps the count of the last `up` (1 the first time). `etcd_members`: 1, or 3 for
    a real etcd cluster (survives losing a member); None keeps the last choice.
    """
    if etcd_members not in (None, 1, 3):
        raise PlatformError("etcd_members: use 1 or 3")
    state = StateDir(Path(state_dir or default_state_dir()))
    state.prepare()
    with state.locked():
        run = UpSteps(state, progress, build_images)
        try:
            return _up(run, nodes, etcd_members)
        except ServerError as e:
            raise PlatformError(str(e)) from None


def _up(run: UpSteps, nodes: int | None = None, etcd_members: int | None = None) -> PlatformInfo:
    state, creds = run.state, run.creds
    _check_settings(run)
    run.docker()
    members = etcd_members or run.config.get("etcd_members", 1)
    if members != run.config.get("etcd_members", 1):
        # A different etcd layout starts afresh (its data dirs are per member name).
        for name in ("etcd", *EXTRA_ETCD):
            run._stop_stale(name, run.state.read_pid(name))
            run.state.forget(name)
        run.config["etcd_members"] = members
    etcd_endpoint = run.etcd_cluster(members) if members > 1 else run.etcd()
    s3_endpoint = run.s3()
    redis_url = run.redis()
    bucket = os.environ.get("DLAAS_S3_BUCKET", "dlaas")
    run.bucket(s3_endpoint, bucket)
    run.images()
    gateway = run.gateway_ip()
    s3_port = s3_endpoint.rsplit(":", 1)[1]
    # One id per platform instance labels its containers (a shared engine stays untangled)
    # and names the bridges its firewall fences: the job networks' and the swarm lab's.
    platform_id = run.config.get("platform_id") or f"dlaas-{secrets.token_hex(4)}"
    run.config.update(platform_id=platform_id)
    # Another platform's `down` then leaves the engine running while this one is up.
    mark_user(platform_id, state.root, run.docker_host)
    swarm = run.nodes(nodes)

    lcm_ports = {name: run.service_port(name) for name in LCM_NAMES}
    scheduler_port = run.service_port("scheduler")
    api_port = run.service_port("api", API_NAMES)
    run.config.update(
        **{f"{name}_port": port for name, port in lcm_ports.items()},
        scheduler_port=scheduler_port,
        api_port=api_port,
    )
    run.save_config()
    # Before any service runs: no job container may ever start unfenced.
    run.firewall(platform_id, int(s3_port))

    env = {
        "DLAAS_PLATFORM_ID": platform_id,
        "DLAAS_ETCD_ENDPOINTS": etcd_endpoint,
        "DLAAS_STORE_URL": f"sqlite:///{state.root / 'jobs.db'}",
        "DLAAS_S3_ENDPOINT": s3_endpoint,
        "DLAAS_S3_ACCESS_KEY": creds["s3_access_key"],
        "DLAAS_S3_SECRET_KEY": creds["s3_secret_key"],
        "DLAAS_S3_BUCKET": bucket,
        "DLAAS_S3_ENDPOINT_FOR_CONTAINERS": f"http://{gateway}:{s3_port}",
        "DLAAS_DOCKER_HOST": run.docker_host,
        "DLAAS_REDIS_URL": redis_url,
        # Every replica: clients fail over between them.
        "DLAAS_LCM_ADDR": ",".join(f"127.0.0.1:{p}" for p in lcm_ports.values()),
        "DLAAS_SCHEDULER_ADDR": f"127.0.0.1:{scheduler_port}",
        "DLAAS_API_HOST": "127.0.0.1",
        "DLAAS_API_PORT": str(api_port),
        "DLAAS_API_ADMIN_TOKEN": creds["admin_token"],
        "DLAAS_SECRETS_KEY": creds["secrets_key"],
    }
    _first_user(state.root / "jobs.db", creds["user_token"])
    if swarm is not None:
        # The services reach the swarm through its manager's API; its containers reach S3
        # through the lab's bridge.
        env["DLAAS_SWARM_MANAGER"] = swarm.manager_socket
        env["DLAAS_S3_ENDPOINT_FOR_CONTAINERS"] = f"http://{swarm.host_address}:{s3_port}"
    api_url = f"http://127.0.0.1:{api_port}"
    addresses = {
        "scheduler": env["DLAAS_SCHEDULER_ADDR"],
        **{name: f"127.0.0.1:{port}" for name, port in lcm_ports.items()},
        "jobmonitor": "",
        "worker": "",
        **{name: api_url for name in API_NAMES},
    }
    # A platform from before the API was replicated ran one "api" on the port, alone.
    run._stop_stale("api", run.state.read_pid("api"))
    wanted = []
    for name in SERVICES:
        _require_service_module(name)
        own = {"DLAAS_LCM_LISTEN": addresses[name]} if kind_of(name) == "lcm" else {}
        if kind_of(name) == "api":
            own = {"DLAAS_API_REPLICA": name}
        if kind_of(name) == "worker":
            # In its fingerprint: a new retention restarts the worker with it.
            days = os.environ.get("DLAAS_RESULTS_RETENTION_DAYS", "0")
            own = {"DLAAS_RESULTS_RETENTION_DAYS": days}
        wanted.append((name, {**env, **own}, addresses[name]))
    run.services(wanted)
    run.supervisor()

    client_config = state.root / "client.json"
    # The user's configuration holds the user's token only; the administrator's is apart.
    write_private(client_config, {"url": api_url, "token": creds["user_token"]})
    write_private(state.root / "admin.json", {"url": api_url, "admin_token": creds["admin_token"]})
    run.progress(f"platform up: API at {api_url}; CLI configuration in {client_config}")
    run.progress(
        f"you are user {USER_NAME!r} of team {DEFAULT_TEAM!r}; add users with "
        "`dlaas users add NAME --team TEAM` (prints their token), teams with `dlaas teams add`"
    )
    return PlatformInfo(
        state_dir=state.root,
        api_url=api_url,
        client_config=client_config,
        etcd_endpoint=etcd_endpoint,
        s3_endpoint=s3_endpoint,
        docker_host=run.docker_host,
        components=status(state.root),
    )


# Read by `dlaas` itself, not settings of the platform: which state dir, the CLI's API and token.
NOT_SETTINGS = frozenset({"DLAAS_HOME", "DLAAS_URL", "DLAAS_TOKEN"})


def given_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """The platform's settings in `environ` (its DLAAS_ variables), each value as a digest:
    platform.json records them, and some are secrets."""
    return {
        name: hashlib.sha256(value.encode()).hexdigest()[:16]
        for name, value in sorted(environ.items())
        if name.startswith("DLAAS_") and name not in NOT_SETTINGS
    }


def settings_changes(recorded: Mapping[str, str], given: Mapping[str, str]) -> list[str]:
    """Each setting `given` that differs from the `recorded` ones, with how."""
    changes = []
    for name in sorted(set(recorded) | set(given)):
        if name not in given:
            changes.append(f"{name} (not given now)")
        elif name not in recorded:
            changes.append(f"{name} (new)")
        elif recorded[name] != given[name]:
            changes.append(f"{name} (changed)")
    return changes


def _check_settings(run: UpSteps) -> None:
    """Refuse an `up` of a running platform with other settings than the ones it started
    with: the servers, nodes and services read their settings when they start, so a
    changed one would be silently ignored. A stopped platform takes the new ones."""
    given = given_settings(os.environ)
    recorded = run.config.get("settings")
    running = any(record_alive(run.state.read_pid(name)) for name in ("supervisor", *SERVICES))
    if recorded is not None and running and (changes := settings_changes(recorded, given)):
        raise PlatformError(
            f"the platform in {run.state.root} runs with other settings than this `up` gives: "
            f"{', '.join(changes)}. Settings take effect when the platform starts: run "
            "`dlaas down`, then `dlaas up` with them (or give `up` the settings it runs with)"
        )
    run.config["settings"] = given


def _first_user(store_path: Path, token: str) -> None:
    """The user `up` makes for whoever runs it, with the token client.json holds (its hash)."""
    from dlaas.adapters.store.sqlite import SqliteJobStore
    from dlaas.domain import account_ops
    from dlaas.domain.accounts import TokenRecord, User, token_hash, token_prefix

    store = SqliteJobStore(store_path)
    try:
        now = time.time()
        account_ops.ensure_team(store, DEFAULT_TEAM, now)
        if store.add_user(User(USER_NAME, DEFAULT_TEAM, False, now)):
            store.append_audit(audit_entry(now, "dlaas up", "add-user", USER_NAME, "first user"))
        if store.find_token(token_hash(token)) is None:
            store.add_token(TokenRecord(token_hash(token), USER_NAME, token_prefix(token), now))
    finally:
        store.close()


def _require_service_module(name: str) -> None:
    import importlib.util

    module = f"services.{kind_of(name)}.main"
    if importlib.util.find_spec(module) is None:
        raise PlatformError(f"{name}: module {module} is not installed")


# --------------------------------------------------------------------------- down


def down(state_dir: Path | None = None, progress: Progress = print) -> list[str]:
    """Stop what `up` started, services first; return the names stopped. Idempotent."""
    state = StateDir(Path(state_dir or default_state_dir()))
    if not state.root.exists():
        progress("nothing to stop")
        return []
    stopped = []
    with state.locked():
        # The supervisor first, or it would restart what is being stopped.
        stopped += _stop_all(state, ["supervisor"], progress)
        stopped += _stop_all(state, list(reversed(SERVICES)), progress)
        stopped += _retire_old_engines(state, progress)
        lab = SwarmLab(state.root / "swarm", progress=lambda line: progress(f"swarm: {line}"))
        with contextlib.suppress(SwarmLabError):
            lab.info()  # raises when no lab is recorded
            lab.down()
            stopped.append("swarm")
        stopped += _stop_all(state, [*reversed(SERVERS), *EXTRA_ETCD], progress)
        for name in EXTRA_ETCD:
            state.forget(name)
        if _stop_engine(state, progress):
            stopped.append("dockerd")
        _remove_firewall(state, progress)
    if not stopped:
        progress("nothing was running")
    return stopped


def _stop_engine(state: StateDir, progress: Progress) -> bool:
    """Stop the Docker engine `up` started, unless another platform uses it; True if stopped.

    Another platform (another DLAAS_HOME) uses the engine while it is up (its mark) or
    while its containers run there: then the engine stays, and the record of it moves to
    that platform's state dir, so that the last `down` of the platforms using it stops it.
    """
    own = read_json(state.root / "platform.json").get("platform_id", "")
    record = state.read_pid("dockerd")
    host = (record or {}).get("address") or DEFAULT_DOCKER_HOST
    if own:
        unmark_user(own, host)
    if not record or not record_alive(record):
        return _stop_recorded(state, "dockerd", progress)
    others = [
        u for u in engine_users(host) if u.platform_id != own and (u.running or _is_up(u.home))
    ]
    if not others:
        return _stop_recorded(state, "dockerd", progress)
    heir = next((h for u in others if (h := _hand_over(u, record)) is not None), None)
    users = ", ".join(_describe(u) for u in others)
    then = (
        f"the record of it moves to {heir}: its `dlaas down` stops it"
        if heir is not None
        else f"stop it (kill {record['pid']}) once they are done"
    )
    progress(
        f"dockerd: left running (pid {record['pid']}), other platforms use it: {users}; {then}"
    )
    state.forget("dockerd")
    return False


def _hand_over(user: EngineUser, record: dict) -> Path | None:
    """Give the engine's record to `user`'s state dir if that platform is up; the dir, or
    None where it could not be (not up, not known, not writable)."""
    if not _is_up(user.home):
        return None
    other = StateDir(Path(user.home))
    try:
        if not other.read_pid("dockerd"):  # it may hold the record already
            other.write_pid("dockerd", record)
    except OSError:
        return None
    return other.root


def _describe(user: EngineUser) -> str:
    where = f" ({user.home})" if user.home else ""
    jobs = f" with {user.running} running container(s)" if user.running else ""
    return f"{user.platform_id}{where}{jobs}"


def _is_up(home: str) -> bool:
    """Whether the platform with state dir `home` runs (its supervisor or an API replica)."""
    if not home:
        return False
    other = StateDir(Path(home))
    return any(record_alive(other.read_pid(name)) for name in ("supervisor", *API_NAMES))


def _remove_firewall(state: StateDir, progress: Progress) -> None:
    """Remove the platform's firewall rules, unless job bridges they fence still exist.

    `down` leaves the jobs' containers on the machine's engine when it did not start that
    engine: their networks (and the hostile code in them) stay fenced in until the LCM
    removes them after the next `up`; a later `down` then removes the rules.
    """
    platform_id = read_json(state.root / "platform.json").get("platform_id")
    if not platform_id:
        return
    prefix = jobspec.bridge_prefix(platform_id)
    left = sorted(p.name for p in Path("/sys/class/net").glob(f"{prefix}*"))
    try:
        if left:
            progress(f"firewall: kept, {len(left)} job network(s) still exist ({left[0]} ...)")
        elif firewall.remove(platform_id):
            progress("firewall: rules removed")
    except firewall.FirewallError as e:
        progress(f"firewall: {e}")


def _stop_all(state: StateDir, names: list[str], progress: Progress) -> list[str]:
    """Stop components `names` at once, each with its own grace (their lines in the order
    of `names`); the names of those that were running. One after another, the services'
    graceful stops took 2.2 s of a 5.6 s `down` (measured 2026-11-27)."""
    lines: dict[str, list[str]] = {name: [] for name in names}
    with ThreadPoolExecutor(max(1, len(names)), thread_name_prefix="down") as pool:
        ran = list(pool.map(lambda name: _stop_recorded(state, name, lines[name].append), names))
    for name in names:
        for line in lines[name]:
            progress(line)
    return [name for name, running in zip(names, ran, strict=True) if running]


def _stop_recorded(state: StateDir, name: str, progress: Progress) -> bool:
    """Stop component `name` by its recorded pid; True if it was running."""
    record = state.read_pid(name)
    if not record:
        return False
    running = record_alive(record)
    if running:
        # SeaweedFS's graceful stop hangs (see dlaas.local.seaweedfs.S3Server.stop); dockerd needs
        # time to stop its containers; the worker may finish a purge (or leave it queued).
        grace = {"s3": 3.0, "dockerd": 30.0}.get(name, 10.0)
        stop_pid(int(record["pid"]), timeout=grace)
        progress(f"{name}: stopped (pid {record['pid']})")
    else:
        progress(f"{name}: was not running (stale pid file removed)")
    state.forget(name)
    return running


# --------------------------------------------------------------------------- data


def platform_s3(state_dir: Path | None = None):
    """A boto3 client for the platform's own S3, from the state dir (the platform must be up)."""
    from dlaas.adapters.s3 import client

    state = StateDir(Path(state_dir or default_state_dir()))
    port = read_json(state.root / "platform.json").get("s3_port")
    creds = read_json(state.root / "secrets.json")
    if not port or not creds.get("s3_access_key"):
        raise PlatformError(f"no platform in {state.root}: run `dlaas up` first")
    return client(f"http://127.0.0.1:{port}", creds["s3_access_key"], creds["s3_secret_key"])
