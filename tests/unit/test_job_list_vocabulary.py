"""The job list's vocabulary over REST: `GET /v1/statuses` is the status table of
dlaas.domain.status (the dashboard's select and its "final" rule come from it, not from
a copy), and `GET /v1/jobs?label=` finds the FAILED jobs by their triage label.

The app is the real one (create_app), made once for the module, on an in-memory SQLite
store; no other platform service is called by these routes.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from offline_settings import offline_settings

from dlaas.adapters.store.base import JobRecord
from dlaas.config import ApiSettings
from dlaas.domain import status as job_status
from dlaas.domain.accounts import TokenRecord, User, token_hash
from dlaas.domain.status import Status, Transition
from services.api.app import create_app

ADMIN, ALICE, BOB = "tok-admin", "tok-alice", "tok-bob"


@pytest.fixture(scope="module")
def client(module_job_store, tmp_path_factory):
    """The app, made once for the module (its first request builds every route); the test
    that adds jobs takes `job_store`, which deletes them after."""
    job_store = module_job_store
    unused = tmp_path_factory.mktemp("unused") / "jobs.db"  # the app is given its store
    settings = offline_settings(f"sqlite:///{unused}")
    for name, token in (("alice", ALICE), ("bob", BOB)):
        job_store.add_user(User(name, "", False, 1.0))
        job_store.add_token(TokenRecord(token_hash(token), name, token[:6], 1.0))
    app = create_app(
        settings, ApiSettings(admin_token=ADMIN), store=job_store, lcm=object(), s3=object(),
        docker=False, scheduler=object(), tasks=object(),
    )  # fmt: skip
    with TestClient(app) as c:
        yield c


@pytest.fixture
def job_store(module_job_store):
    """The app's store, for a test that adds jobs: every job is deleted after the test."""
    yield module_job_store
    for job in list(module_job_store.each()):
        module_job_store.delete(job.job_id)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def failed(store, job_id: str, user: str, label: str, at: float) -> None:
    store.create(
        JobRecord(job_id, user, job_id, "name: x\n", at, history=[Transition(Status.QUEUED, at, "submitted")])
    )  # fmt: skip
    reason = f"{label}: learner 0 exited with code 1"
    store.record_transition(job_id, 1, Transition(Status.FAILED, at + 1, reason, label, 1))


def test_statuses_are_the_domains_table_in_its_order(client):
    body = client.get("/v1/statuses", headers=auth(ALICE)).json()
    assert body["statuses"] == [str(s) for s in Status]
    assert body["final"] == [str(s) for s in Status if s in job_status.FINAL]
    assert body["terminal"] == [str(s) for s in Status if s in job_status.TERMINAL]
    assert body["transitions"] == {
        str(s): sorted(map(str, nxt), key=list(Status).index)
        for s, nxt in job_status.TRANSITIONS.items()
    }
    assert set(body["final"]) == {"COMPLETED", "FAILED", "HALTED"}  # what the dashboard ends on


def test_statuses_need_a_token(client):
    assert client.get("/v1/statuses").status_code == 401


def test_jobs_are_filtered_by_their_triage_label(client, job_store):
    failed(job_store, "j-oom-1", "alice", "gpu_oom", 10.0)
    failed(job_store, "j-disk", "alice", "disk_full", 11.0)
    failed(job_store, "j-oom-2", "alice", "gpu_oom", 12.0)
    failed(job_store, "j-oom-bob", "bob", "gpu_oom", 13.0)
    r = client.get("/v1/jobs?label=gpu_oom", headers=auth(ALICE))
    assert r.status_code == 200
    body = r.json()
    assert [j["job_id"] for j in body["jobs"]] == ["j-oom-2", "j-oom-1"] and body["total"] == 2
    assert {j["error_code"] for j in body["jobs"]} == {"gpu_oom"}
    r = client.get("/v1/jobs?label=disk_full&status=failed", headers=auth(ALICE))
    assert [j["job_id"] for j in r.json()["jobs"]] == ["j-disk"]
    # The administrator sees everyone's; an empty label is no filter.
    r = client.get("/v1/jobs?label=gpu_oom", headers=auth(ADMIN))
    assert r.json()["total"] == 3
    assert client.get("/v1/jobs?label=", headers=auth(ALICE)).json()["total"] == 3


def test_a_bad_label_is_refused_naming_the_field(client):
    r = client.get("/v1/jobs", params={"label": "GPU OOM'; --"}, headers=auth(ALICE))
    assert r.status_code == 422
    assert r.json()["message"].startswith("label: ")
