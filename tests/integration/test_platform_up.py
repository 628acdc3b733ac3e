"""`dlaas up` / `dlaas down` on one machine, in a temporary state dir.

One `up` for the module (about 5 s: etcd, SeaweedFS, four services); the tests then check
what it wrote, that a second `up` finds everything running, that a dead or stale component
is restarted alone, and (last) that `down` stops everything and is idempotent, and that
accounts and revocations made before it survive the next `up`. The learner image build is
left to tests/integration of dlaas.local.images (`build_images=False`).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import time

import httpx
import pytest

from dlaas.local import components, dockerd, platform, processes, seaweedfs

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def up_state(tmp_path_factory, docker_client):
    state_dir = tmp_path_factory.mktemp("dlaas-home")
    lines: list[str] = []
    try:
        info = platform.up(state_dir, progress=lines.append, build_images=False)
        yield state_dir, info, lines
    finally:
        platform.down(state_dir, progress=lambda _: None)


def _pids(state_dir) -> dict[str, int]:
    return {c.name: c.pid for c in components.status(state_dir) if c.pid}


def _client(state_dir) -> dict:
    return json.loads((state_dir / "client.json").read_text())


def test_up_starts_every_component(up_state):
    state_dir, info, lines = up_state
    found = {c.name: c for c in components.status(state_dir)}
    for name in (*components.SERVERS, *components.SERVICES):
        assert found[name].running, f"{name}: {found[name].detail}"
        # Running is not enough: each answers on its address (the job monitor has none).
        expected = None if name in ("jobmonitor", "worker") else True
        assert found[name].healthy is expected, f"{name}: {found[name].detail}"
    # One progress line per step, naming the component.
    for name in ("docker", "etcd", "s3", *components.SERVICES):
        assert any(line.startswith(f"{name}:") for line in lines), name
    assert info.api_url.startswith("http://127.0.0.1:")
    for name in components.SERVICES:
        assert (state_dir / "logs" / f"{name}.log").exists()


def test_client_config_is_private_and_works(up_state):
    state_dir, info, _ = up_state
    for secret_file in ("client.json", "admin.json", "secrets.json", "jobs.db"):
        mode = stat.S_IMODE(os.stat(state_dir / secret_file).st_mode)
        assert mode == 0o600, f"{secret_file} has mode {oct(mode)}"
    config = _client(state_dir)
    assert config["url"] == info.api_url
    # The user's configuration holds no administrator's token.
    assert set(config) == {"url", "token"}
    admin = json.loads((state_dir / "admin.json").read_text())
    assert admin["admin_token"] and admin["admin_token"] != config["token"]
    me = httpx.get(
        f"{config['url']}/v1/me", headers={"Authorization": f"Bearer {config['token']}"}, timeout=5
    ).json()
    assert me == {"user": "user", "team": "default", "admin": False}
    # up says how to add a user.
    assert any("dlaas users add" in line for line in up_state[2])

    assert httpx.get(f"{config['url']}/health", timeout=5).status_code == 200
    auth = {"Authorization": f"Bearer {config['token']}"}
    assert httpx.get(f"{config['url']}/v1/jobs", headers=auth, timeout=5).status_code == 200
    assert httpx.get(f"{config['url']}/v1/jobs", timeout=5).status_code == 401


def test_info_holds_no_secret(up_state):
    state_dir, info, lines = up_state
    creds = json.loads((state_dir / "secrets.json").read_text())
    shown = repr(info) + "\n".join(lines)
    for value in creds.values():
        assert value not in shown


def test_s3_uses_the_generated_credentials(up_state):
    state_dir, info, _ = up_state
    creds = json.loads((state_dir / "secrets.json").read_text())
    good = seaweedfs.make_s3_client(
        info.s3_endpoint, creds["s3_access_key"], creds["s3_secret_key"]
    )
    assert "dlaas" in [b["Name"] for b in good.list_buckets()["Buckets"]]
    bad = seaweedfs.make_s3_client(info.s3_endpoint, creds["s3_access_key"], "wrong")
    with pytest.raises(Exception, match="SignatureDoesNotMatch|AccessDenied|403"):
        bad.list_buckets()


def test_second_up_finds_everything_running(up_state):
    state_dir, info, _ = up_state
    before = _pids(state_dir)
    lines: list[str] = []
    started = time.monotonic()
    again = platform.up(state_dir, progress=lines.append, build_images=False)
    assert time.monotonic() - started < 5
    assert _pids(state_dir) == before
    assert again.api_url == info.api_url
    assert not any("started" in line for line in lines), lines


def test_up_restarts_a_dead_service_and_detects_a_stale_pid(up_state):
    state_dir, info, _ = up_state
    before = _pids(state_dir)
    # This test is about what `up` itself detects: the supervisor would repair it first.
    processes.stop_pid(before["supervisor"])
    (state_dir / "pids" / "supervisor.json").unlink()
    processes.stop_pid(before["jobmonitor"])
    # A pid file naming a live process that is not the service (the number was reused).
    record = json.loads((state_dir / "pids" / "lcm-1.json").read_text())
    processes.stop_pid(record["pid"])
    record["pid"] = os.getpid()
    (state_dir / "pids" / "lcm-1.json").write_text(json.dumps(record))

    lines: list[str] = []
    platform.up(state_dir, progress=lines.append, build_images=False)
    after = _pids(state_dir)
    assert after["jobmonitor"] != before["jobmonitor"]
    assert after["lcm-1"] not in (before["lcm-1"], os.getpid())
    # Same ports, same configuration: nothing else was touched.
    for name in ("etcd", "s3", "scheduler", "lcm-0", "lcm-2", "api-0", "api-1"):
        assert after[name] == before[name], name
    assert any(line.startswith("lcm-1: stale pid file") for line in lines), lines
    assert httpx.get(f"{info.api_url}/health", timeout=5).status_code == 200


def test_the_api_answers_while_one_replica_is_dead(up_state):
    state_dir, info, _ = up_state
    processes.stop_pid(_pids(state_dir)["supervisor"])  # `up` below is the repair under test
    (state_dir / "pids" / "supervisor.json").unlink()
    before = _pids(state_dir)
    os.kill(before["api-1"], signal.SIGKILL)
    processes.wait_until(lambda: not processes.pid_alive(before["api-1"]), 5, "api-1 to die")
    # Every fresh connection is taken by the live replica on the same port.
    answers = [httpx.get(f"{info.api_url}/health", timeout=5).json() for _ in range(10)]
    assert answers == [{"status": "ok", "replica": "api-0"}] * 10
    platform.up(state_dir, progress=lambda line: None, build_images=False)
    after = _pids(state_dir)
    assert after["api-0"] == before["api-0"] and after["api-1"] != before["api-1"]
    replicas = {httpx.get(f"{info.api_url}/health", timeout=5).json()["replica"] for _ in range(40)}
    assert replicas == {"api-0", "api-1"}  # both serve the one port again


def test_down_stops_everything_is_idempotent_and_accounts_and_revocations_survive_it(up_state):
    """Last in the module: one down and up serve both (each costs seconds)."""
    state_dir, info, _ = up_state
    admin = json.loads((state_dir / "admin.json").read_text())["admin_token"]
    as_admin = {"Authorization": f"Bearer {admin}"}
    made = httpx.post(
        f"{info.api_url}/v1/users",
        json={"name": "zed", "team": "ops"},
        headers=as_admin,
        timeout=10,
    ).json()
    gone = httpx.post(
        f"{info.api_url}/v1/users/zed/tokens", json={}, headers=as_admin, timeout=10
    ).json()["token"]
    httpx.post(f"{info.api_url}/v1/revoke", json={"who": gone}, headers=as_admin, timeout=10)

    pids = _pids(state_dir)
    stopped = platform.down(state_dir, progress=lambda _: None)
    assert set(stopped) == {*components.SERVERS, *components.SERVICES, "supervisor"}
    for name, pid in pids.items():
        assert not processes.pid_alive(pid), f"{name} (pid {pid}) still alive"
    assert not any(c.running for c in components.status(state_dir) if c.name != "dockerd")
    # The machine's Docker engine was not started by up, so down leaves it alone.
    assert dockerd.docker_answers()
    assert platform.down(state_dir, progress=lambda _: None) == []

    info = platform.up(state_dir, progress=lambda _: None, build_images=False)

    def me(token: str) -> httpx.Response:
        auth = {"Authorization": f"Bearer {token}"}
        return httpx.get(f"{info.api_url}/v1/me", headers=auth, timeout=10)

    assert me(made["token"]).json() == {"user": "zed", "team": "ops", "admin": False}
    assert me(gone).status_code == 401
    assert me(_client(state_dir)["token"]).json()["user"] == "user"
    # The store file holds the tokens' hashes only.
    assert made["token"].encode() not in (state_dir / "jobs.db").read_bytes()
