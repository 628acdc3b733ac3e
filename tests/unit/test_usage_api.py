"""GET /v1/usage and the per-team usage counters on /metrics, on the real app (create_app)
made once for the module over an in-memory SQLite store, with FAKE LCM, scheduler and S3
(none is asked).

Alice (ateam) and bob (bteam) each ran jobs yesterday; a user sees their own usage, the
administrator everyone's; the totals are the histories' allocation intervals."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from usage_data import ADMIN, ALICE, BOB, TODAY, YESTERDAY, ran, usage_app


@pytest.fixture(scope="module")
def client(module_job_store, tmp_path_factory):
    """The app and its jobs, made once for the module (its first request builds every
    route); every test here only reads them."""
    job_store = module_job_store
    app = usage_app(job_store, tmp_path_factory.mktemp("usage"))
    ran(job_store, "job-a1", "alice", "ateam", hours=1, learners=2)
    ran(job_store, "job-a2", "alice", "ateam", hours=0.5, learners=1)
    # bob's learners used 1.5 h and 1 h of CPU (of the 2 x 2 CPUs x 3 h held), 512 MiB each
    used = {
        "0": {"cpu_s": 5400.0, "memory_peak_mib": 512},
        "1": {"cpu_s": 3600.0, "memory_peak_mib": 512},
    }
    ran(job_store, "job-b1", "bob", "bteam", hours=3, learners=2, used=used)
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
    # Nothing of alice's was measured: 0 used (not "used nothing": see docs/accounting.md).
    assert body["total"] == {
        "gpu_hours": 2.5,
        "cpu_hours": 5.0,
        "memory_gib_hours": 2.5,
        "cpu_used_hours": 0.0,
        "memory_peak_gib_hours": 0.0,
    }
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
    assert found[("dlaas_team_cpu_used_hours", "bteam")] == 2.5  # measured, beside the 12
    assert found[("dlaas_team_memory_peak_gib_hours", "bteam")] == 3.0  # 1 GiB x 3 h
    assert found[("dlaas_team_cpu_used_hours", "ateam")] == 0.0


def test_the_cli_prints_the_routes_rows_as_csv_and_a_table(client, monkeypatch, tmp_path):
    from cli_runner import CliRunner

    from dlaas.clients import cli_app
    from dlaas.clients.cli import app
    from dlaas.clients.cli_usage import COLUMNS

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
    assert COLUMNS[-2:] == ("cpu_used_hours", "memory_peak_gib_hours")
    assert out.output.splitlines() == [
        ",".join(COLUMNS),
        f"{YESTERDAY},bteam,bob,job-b1,6.0,12.0,6.0,2.5,3.0",
    ]
    out = runner.invoke(app, [*home, "usage", "--by", "team"])
    assert out.exit_code == 0, out.output
    assert "ateam" in out.output and "2.500" in out.output and "6.000" in out.output
    assert "CPU-h used" in out.output and "3.000" in out.output  # bteam's peak GiB-h
