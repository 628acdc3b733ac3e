"""Every route of the REST API's OpenAPI spec, walked as another user and as no user.

Alice owns a job, a webhook and her team's data; bob, of another team, calls every
operation the spec lists with alice's ids in its path. Each answer is a plain refusal
(401 with no token; 404 for alice's job or hook, exactly as for a missing one; 403 for an
administrator's route) or bob's own (empty) data, and no answer names alice, her job,
hook, team or data. A route added to the API is walked too (a body-taking route must be
given a body here, or this test says so).

The app is the real one (create_app), made once for the module, on an in-memory SQLite
store, with FAKE LCM, scheduler, S3 and task queue that hold alice's things too.
"""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient
from offline_settings import offline_settings

from dlaas.adapters.store.base import JobRecord
from dlaas.clients.sdk import QueueEntry, TeamUsage
from dlaas.config import ApiSettings
from dlaas.domain.accounts import Team, TokenRecord, User, token_hash
from dlaas.domain.hooks import Hook
from dlaas.domain.namespace import team_bucket
from dlaas.domain.status import Status
from services.api.app import PUBLIC_PATHS, create_app

ADMIN, ALICE, BOB = "tok-admin", "tok-alice", "tok-bob"
JOB, HOOK = "job-a11ce0000001", "hook-a11ce0000001"
ALICES_BUCKET = team_bucket("ateam", "data")
# What bob must never read: alice's name, her job, hook, team and data.
ALICES = ("alice", JOB, HOOK, "ateam", "secret-object")
MANIFEST = "name: a\nlearners: 1\nframework: {name: python, command: 'true'}\n"

# The body of each route that reads one: valid, so that the route's own check is reached.
BODIES = {
    ("post", "/v1/jobs/{job_id}/scale"): {"learners": 2},
    ("put", "/v1/nodes/{name}/availability"): {"availability": "drain"},
    ("post", "/v1/users"): {"name": "carol", "team": "ateam"},
    ("post", "/v1/users/{name}/tokens"): {"expires_days": 1},
    ("post", "/v1/revoke"): {"who": "alice"},
    ("post", "/v1/teams"): {"name": "cteam"},
    ("put", "/v1/teams/{name}/quota"): {"gpus": 1},
    ("put", "/v1/teams/{name}/max-priority"): {"max_priority": 1},
    ("put", "/v1/teams/{name}/storage-quota"): {"storage_quota_bytes": 1},
    ("put", "/v1/teams/{name}/run-times"): {"max_duration_s": 3600},
    ("post", "/v1/hooks"): {"url": "not a url", "events": ["job.failed"]},
}
# Path parameters: alice's where they name her things.
PATH_VALUES = {"job_id": JOB, "hook_id": HOOK, "name": "alice", "bucket": "data", "key": "x.csv"}
# Routes that name one of alice's things: bob is told it does not exist (or may not ask).
REFUSED = {"job_id": 404, "hook_id": 404}


class FakeLcm:
    """FAKE LCM: a cluster of one node running alice's job; changes are not expected."""

    def cluster(self):
        return []

    def __getattr__(self, name):
        raise AssertionError(f"the LCM was asked to {name} for another user's job")


class FakeScheduler:
    """FAKE scheduler: alice's job queued, alice's team using its quota."""

    def queue(self, remaining_s=None):
        return [QueueEntry(JOB, 1, "waiting for GPUs", 10.0, 20.0)]

    def teams(self):
        return [TeamUsage("ateam", 1, 1.0, 1, 1, 1.0, 1, 0, 0.0, 0, 1)]


class FakeS3:
    """FAKE platform S3 holding alice's team bucket; bob's uploads land in his own."""

    def __init__(self):
        self.buckets = {ALICES_BUCKET: {"secret-object.csv": b"alice's"}}

    def list_buckets(self):
        return {"Buckets": [{"Name": n} for n in self.buckets]}

    def list_objects_v2(self, Bucket, **kw):
        found = self.buckets.get(Bucket, {})
        return {"Contents": [{"Key": k, "Size": len(v)} for k, v in found.items()]}

    def head_bucket(self, Bucket):
        self.buckets.setdefault(Bucket, {})

    def upload_fileobj(self, body, bucket, key):
        self.buckets.setdefault(bucket, {})[key] = body.read()


@pytest.fixture(scope="module")
def client(module_job_store, tmp_path_factory):
    """The app, made once for the module: its OpenAPI spec (what the walk reads) is built
    once, not per test. No test here changes what another reads (bob's calls are refused
    or make bob's own things)."""
    job_store = module_job_store
    settings = offline_settings(f"sqlite:///{tmp_path_factory.mktemp('unused') / 'jobs.db'}")
    for team in ("ateam", "bteam"):
        job_store.add_team(Team(team, created_at=1.0))
    for name, team, token in (("alice", "ateam", ALICE), ("bob", "bteam", BOB)):
        job_store.add_user(User(name, team, False, 1.0))
        job_store.add_token(TokenRecord(token_hash(token), name, token[:6], 1.0))
    now = time.time()
    job_store.create(JobRecord(JOB, "alice", "a", MANIFEST, now, Status.QUEUED, now, team="ateam"))
    job_store.add_hook(Hook(HOOK, "alice", "https://alice.example/h", ("job.failed",), now))
    app = create_app(
        settings, ApiSettings(admin_token=ADMIN), store=job_store, lcm=FakeLcm(),
        s3=FakeS3(), docker=False, scheduler=FakeScheduler(), tasks=object(),
    )  # fmt: skip
    with TestClient(app) as c:
        yield c


def operations(client):
    """(method, path template, has a body) of every operation the spec lists, but the
    public ones (health, metrics, the docs), which answer anyone the same."""
    for path, ops in client.app.openapi()["paths"].items():
        if path in PUBLIC_PATHS:
            continue
        for method, op in ops.items():
            yield method, path, "requestBody" in op


def call(client, method: str, path: str, has_body: bool, token: str | None, **values):
    url = path
    for name, value in {**PATH_VALUES, **values}.items():
        url = url.replace("{" + name + "}", value).replace("{" + name + ":path}", value)
    assert "{" not in url, f"{path}: give its parameter a value in PATH_VALUES"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    kw: dict = {}
    if has_body and (method, path) in BODIES:
        kw["json"] = BODIES[(method, path)]
    elif has_body and path.startswith("/v1/data/"):
        kw["content"] = b"bob's"
    elif has_body and (method, path) != ("post", "/v1/jobs"):  # a submission: bob's own
        pytest.fail(f"{method.upper()} {path} reads a body: give it one in BODIES")
    return client.request(method, url, headers=headers, **kw)


def test_the_walk_covers_the_api(client):
    walked = {(m, p) for m, p, _ in operations(client)}
    assert len(walked) >= 29 and ("get", "/v1/jobs/{job_id}/results") in walked


def test_with_no_token_every_route_is_a_plain_401(client):
    for method, path, has_body in operations(client):
        r = call(client, method, path, has_body, None)
        assert r.status_code == 401, f"{method.upper()} {path}: {r.status_code} {r.text[:200]}"
        assert r.json()["error"] == "unauthorized"


def test_another_user_is_refused_alices_things_and_reads_nothing_of_hers(client):
    for method, path, has_body in operations(client):
        r = call(client, method, path, has_body, BOB)
        what = f"{method.upper()} {path}: {r.status_code} {r.text[:300]}"
        asked = [name for name in REFUSED if "{" + name + "}" in path]
        for name in asked:
            assert r.status_code == REFUSED[name], what
            # Word for word the answer for a missing one: nothing tells that it exists.
            missing = call(client, method, path, has_body, BOB, **{name: "job-000000000000"})
            assert r.text == missing.text.replace("job-000000000000", PATH_VALUES[name]), what
        if r.status_code == 403:
            assert r.json()["error"] == "forbidden", what
        assert r.status_code < 500, what
        named = {PATH_VALUES[name] for name in asked}  # bob's own words, echoed back
        for secret in ALICES:
            assert secret in named or secret not in r.text, what


def test_alice_herself_sees_her_job_and_hook(client):
    """The walk refuses bob for the right reason: the same calls answer alice."""
    mine = {"Authorization": f"Bearer {ALICE}"}
    assert client.get(f"/v1/jobs/{JOB}", headers=mine).json()["job_id"] == JOB
    assert [h["id"] for h in client.get("/v1/hooks", headers=mine).json()] == [HOOK]
    assert [e["job_id"] for e in client.get("/v1/queue", headers=mine).json()["entries"]] == [JOB]
