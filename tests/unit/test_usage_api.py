"""GET /v1/usage and the per-team usage counters on /metrics, on the real app (create_app)
over a SQLite store in the test's tmp dir, with FAKE LCM, scheduler and S3 (none is asked).

Alice (ateam) and bob (bteam) each ran jobs yesterday; a user sees their own usage, the
administrator everyone's; the totals are the histories' allocation intervals."""

from __future__ import annotations

import datetime as dt

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from dlaas.adapters.store.base import JobRecord
from dlaas.config import ApiSettings, PlatformSettings
from dlaas.domain.accounts import Team, TokenRecord, User, token_hash
from dlaas.domain.secretbox import new_key
from dlaas.domain.status import Status, Transition
from dlaas.domain.usage import ALLOCATIONS_INFO
from services.api.app import create_app

ADMIN, ALICE, BOB = "tok-admin", "tok-alice", "tok-bob"
H = 3600.0
TODAY = dt.datetime.now(dt.UTC).date()
YESTERDAY = TODAY - dt.timedelta(days=1)
NOON = dt.datetime.combine(YESTERDAY, dt.time(12), dt.UTC).timestamp()
MANIFEST = "name: a\nlearners: 2\ngpus: 1\ncpus: 2\nmemory: 1Gi\nframework: {name: python, command: 'true'}\n"


class Unused:
    """FAKE LCM, scheduler and S3: the usage route asks none of them."""

    def cluster(self):
        return []

    def __getattr__(self, name):
        raise AssertionError(f"usage asked the {name} of a platform service")


def ran(store, job_id, user, team, hours, learners):
    """A job placed at noon yesterday with `learners`, ended `hours` later."""
    steps = [(Status.QUEUED, NOON - 60), (Status.PENDING, NOON), (Status.PROCESSING, NOON + 1)]
    steps.append((Status.COMPLETED, NOON + hours * H))
    history = [Transition(s, at, "r") for s, at in steps]
    store.create(JobRecord(job_id, user, "n", MANIFEST, NOON - 60, history=history[:1], team=team))
    for seq, t in enumerate(history[1:], start=1):
        store.record_transition(job_id, seq, t)
    store.update_info(job_id, {ALLOCATIONS_INFO: {"1": learners}})


@pytest.fixture
def client(job_store, tmp_path):
    settings = PlatformSettings(
        s3_endpoint="http://127.0.0.1:9", s3_access_key="unused", s3_secret_key="unused",
        s3_bucket="unused", store_url=f"sqlite:///{tmp_path / 'jobs.db'}",
        lcm_addr="127.0.0.1:9", scheduler_addr="127.0.0.1:9", secrets_key=new_key(),
    )  # fmt: skip
    for team in ("ateam", "bteam"):
        job_store.add_team(Team(team, created_at=1.0))
    for name, team, token in (("alice", "ateam", ALICE), ("bob", "bteam", BOB)):
        job_store.add_user(User(name, team, False, 1.0))
        job_store.add_token(TokenRecord(token_hash(token), name, token[:6], 1.0))
    ran(job_store, "job-a1", "alice", "ateam", hours=1, learners=2)
    ran(job_store, "job-a2", "alice", "ateam", hours=0.5, learners=1)
    ran(job_store, "job-b1", "bob", "bteam", hours=3, learners=2)
    app = create_app(
        settings, ApiSettings(admin_token=ADMIN), store=job_store, lcm=Unused(),
        s3=Unused(), docker=False, scheduler=Unused(), tasks=object(),
    )  # fmt: skip
    with TestClient(app) as c:
        yield c


def get(client, token, **params):
    r = client.get("/v1/usage", params=params, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
    return r.json()


def test_a_user_sees_their_own_usage_by_day(client):
    body = get(client, ALICE)
    assert [(r["day"], r["team"], r["user"]) for r in body["rows"]] == [
        (YESTERDAY.isoformat(), "ateam", "alice")
    ]
    # 2 learners x 1 h + 1 learner x 0.5 h, each learner 1 GPU, 2 CPUs, 1 GiB.
    assert body["total"] == {"gpu_hours": 2.5, "cpu_hours": 5.0, "memory_gib_hours": 2.5}
    assert [u["user"] for u in body["users"]] == ["alice"]
    assert "bob" not in str(body) and "bteam" not in str(body)
    # Asking for another user's usage finds none of it.
    assert get(client, ALICE, user="bob")["rows"] == []


def test_the_administrator_sees_every_team_and_filters(client):
    body = get(client, ADMIN, by="team")
    assert [(t["team"], t["gpu_hours"]) for t in body["teams"]] == [("ateam", 2.5), ("bteam", 6.0)]
    assert body["total"]["gpu_hours"] == 8.5
    assert [r["user"] for r in body["rows"]] == ["", ""]
    jobs = get(client, ADMIN, by="job", team="ateam")
    assert [(r["job_id"], r["gpu_hours"]) for r in jobs["rows"]] == [
        ("job-a1", 2.0),
        ("job-a2", 0.5),
    ]
    assert get(client, ADMIN, since=TODAY.isoformat())["rows"] == []


def test_a_bad_date_is_refused_naming_the_field(client):
    r = client.get(
        "/v1/usage", params={"since": "last week"}, headers={"Authorization": f"Bearer {BOB}"}
    )
    assert r.status_code == 422
    assert r.json()["problems"] == ["since: 'last week' is not a date (YYYY-MM-DD)"]
    r = client.get("/v1/usage", params={"by": "node"}, headers={"Authorization": f"Bearer {BOB}"})
    assert r.status_code == 422 and "by: must be one of team, user, job" in r.text
    assert client.get("/v1/usage").status_code == 401


def test_metrics_count_each_teams_hours(client):
    text = client.get("/metrics").text
    found = {
        (f.name, s.labels["team"]): s.value
        for f in text_string_to_metric_families(text)
        if f.name.startswith("dlaas_team_")
        for s in f.samples
    }
    assert found[("dlaas_team_gpu_hours", "ateam")] == 2.5
    assert found[("dlaas_team_gpu_hours", "bteam")] == 6.0
    assert found[("dlaas_team_cpu_hours", "bteam")] == 12.0
    assert found[("dlaas_team_memory_gib_hours", "ateam")] == 2.5


def test_the_cli_prints_the_routes_rows_as_csv_and_a_table(client, monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from dlaas.clients import cli_app
    from dlaas.clients.cli import app

    asked = {}

    class Client:
        def usage(self, **params):
            asked.update(params)
            return get(client, ADMIN, **{k: v for k, v in params.items() if v})

    monkeypatch.setattr(cli_app.Ctx, "client", lambda self: Client())
    runner = CliRunner()
    home = ["--home", str(tmp_path)]
    out = runner.invoke(app, [*home, "usage", "--by", "job", "--team", "bteam", "--csv"])
    assert out.exit_code == 0, out.output
    assert asked["by"] == "job" and asked["team"] == "bteam"
    assert out.output.splitlines() == [
        "day,team,user,job_id,gpu_hours,cpu_hours,memory_gib_hours",
        f"{YESTERDAY},bteam,bob,job-b1,6.0,12.0,6.0",
    ]
    out = runner.invoke(app, [*home, "usage", "--by", "team"])
    assert out.exit_code == 0, out.output
    assert "ateam" in out.output and "2.500" in out.output and "6.000" in out.output
