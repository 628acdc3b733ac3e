"""The REST API against a real SQLite job store and a real S3 (SeaweedFS).

The LCM is the REAL one (its use cases behind its gRPC servicer) over the in-memory FAKES
of its ports (tests/lcm_fakes.py: status, container engine, scheduler, S3 identities);
the scheduler's own gRPC service is a FAKE (`FakeScheduler`). Both are in-process gRPC
servers speaking the real protos through the real SDK clients, so the API's gRPC path
and error mapping are exercised.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
import uuid
import zipfile

import pytest
from fastapi.testclient import TestClient
from lcm_fakes import fake_lcm
from sample_manifests import MANIFEST

from dlaas.adapters.grpc_server import start_server
from dlaas.clients.sdk import LcmClient, SchedulerClient
from dlaas.config import ApiSettings, PlatformSettings
from dlaas.domain import jobspec
from dlaas.domain.accounts import TokenRecord, User, token_hash
from dlaas.domain.errors import InvalidRequest, TemporaryError
from dlaas.domain.purge import PurgeRequest
from dlaas.domain.secretbox import new_key
from dlaas.domain.status import Status
from dlaas.local.processes import free_port
from dlaas.v1 import lcm_pb2_grpc, scheduler_pb2, scheduler_pb2_grpc
from services.api.app import create_app
from services.api.archive import normalize_archive
from services.api.tasks import CeleryTaskQueue, TaskQueue
from services.lcm.grpc_api import LcmServicer

ALICE, BOB, CAROL, ADMIN = "tok-alice", "tok-bob", "tok-carol", "tok-admin"
CLUSTER_CPUS = 8.0  # the fake cluster: 8 CPUs in all
# The platform key that seals stored passwords: the LCM seals, the API opens.
SECRETS_KEY = new_key()


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# --------------------------------------------------------------------------- fakes


class FakeScheduler(scheduler_pb2_grpc.SchedulerServicer):
    """FAKE scheduler: its queue is whatever the test puts in `entries`."""

    def __init__(self):
        self.entries: list[scheduler_pb2.QueueEntry] = []
        self.quotas: dict[str, scheduler_pb2.TeamQuota] = {}

    def Queue(self, request, context):
        return scheduler_pb2.QueueReply(entries=self.entries)

    def SetTeamQuota(self, request, context):
        self.quotas[request.team] = request
        return scheduler_pb2.SchedEmpty()

    def Teams(self, request, context):
        return scheduler_pb2.TeamsReply(
            teams=[
                scheduler_pb2.TeamUsage(
                    team=q.team, quota_gpus=q.gpus, guaranteed_gpus=min(q.gpus, 2), queued=1
                )
                for q in self.quotas.values()
            ]
        )


def scaled(lcm) -> list[tuple[str, int, str]]:
    """(job_id, learners, user) of every gang the LCM enqueued again with another learner
    count: a scale the LCM carried out (a resume enqueues the same count again)."""
    last: dict[str, int] = {}
    out = []
    for gang in lcm.scheduler.gangs:
        if last.get(gang.job_id, gang.learners) != gang.learners:
            out.append((gang.job_id, gang.learners, gang.user))
        last[gang.job_id] = gang.learners
    return out


def start_fakes(store):
    """The REAL LCM use cases (LcmServicer over Lcm) on the in-memory port fakes of
    tests/lcm_fakes.py (a cluster of CLUSTER_CPUS cpus), and the FAKE scheduler servicer."""
    settings = PlatformSettings(s3_access_key="k", s3_secret_key="s", secrets_key=SECRETS_KEY)
    lcm, sched = fake_lcm(store, settings, cpus=CLUSTER_CPUS), FakeScheduler()
    addr = f"127.0.0.1:{free_port()}"

    def register(server):
        lcm_pb2_grpc.add_LifecycleManagerServicer_to_server(LcmServicer(lcm), server)
        scheduler_pb2_grpc.add_SchedulerServicer_to_server(sched, server)

    server = start_server(addr, register, ["dlaas.v1.LifecycleManager", "dlaas.v1.Scheduler"])
    return server, addr, lcm, sched


def make_settings(s3_server, store_path, lcm_addr: str) -> tuple[PlatformSettings, ApiSettings]:
    settings = PlatformSettings(
        s3_endpoint=s3_server.endpoint,
        s3_access_key=s3_server.access_key,
        s3_secret_key=s3_server.secret_key,
        s3_bucket=f"plat-{uuid.uuid4().hex[:12]}",
        store_url=f"sqlite:///{store_path}",
        lcm_addr=lcm_addr,
        scheduler_addr=lcm_addr,
        secrets_key=SECRETS_KEY,
    )
    api = ApiSettings(admin_token=ADMIN, max_code_archive_mb=1)
    return settings, api


def seed_users(store) -> None:
    """alice and bob with the tokens ALICE and BOB, in no team (bucket names as given);
    carol in team vision (bucket names in vision's namespace)."""
    for name, token, team in (("alice", ALICE, ""), ("bob", BOB, ""), ("carol", CAROL, "vision")):
        store.add_user(User(name, team, False, 1.0))
        store.add_token(TokenRecord(token_hash(token), name, token[:6], 1.0))


class Env:
    """One API over the fakes, with handles the tests poke at."""

    def __init__(self, client, store, s3, settings, lcm, sched):
        self.client, self.store, self.s3, self.settings = client, store, s3, settings
        self.lcm, self.sched = lcm, sched
        self.results = f"res-{uuid.uuid4().hex[:12]}"
        s3.create_bucket(Bucket=self.results)

    def manifest(self, learners: int = 1, elastic: tuple[int, int] | None = None) -> str:
        text = MANIFEST.format(learners=learners, results=self.results)
        if elastic:
            text += f"min_learners: {elastic[0]}\nmax_learners: {elastic[1]}\n"
        return text

    def submit(self, token=ALICE, manifest: str | None = None, code=None, code_name="code.tar.gz"):
        files = {"manifest": ("manifest.yml", manifest or self.manifest(), "application/yaml")}
        if code is not None:
            files["code"] = (code_name, code, "application/gzip")
        return self.client.post("/v1/jobs", files=files, headers=auth(token))

    def finish(self, job_id: str, status: Status = Status.COMPLETED, **kw) -> None:
        """What the job monitor would write: the job walks to `status` in the LCM's status."""
        self.lcm.keeper.walk_to(job_id, status, kw.pop("reason", "done"), **kw)

    def code_objects(self) -> list[str]:
        try:
            listing = self.s3.list_objects_v2(Bucket=self.settings.s3_bucket, Prefix="code/")
        except self.s3.exceptions.NoSuchBucket:
            return []
        return [o["Key"] for o in listing.get("Contents", [])]


@pytest.fixture
def env(s3_server, s3_client, job_store, tmp_path):
    server, addr, lcm, sched = start_fakes(job_store)
    settings, api = make_settings(s3_server, tmp_path / "jobs.db", addr)
    seed_users(job_store)
    app = create_app(
        settings,
        api,
        store=job_store,
        lcm=LcmClient(addr),
        s3=s3_client,
        docker=False,
        scheduler=SchedulerClient(addr),
        log_poll_s=0.05,
        # No Redis here: purges are recorded (a test that wants the real adapter sets its own).
        tasks=FakeTaskQueue(),
    )
    try:
        with TestClient(app) as client:
            yield Env(client, job_store, s3_client, settings, lcm, sched)
    finally:
        server.stop(0)


def tar_gz(members: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return out.getvalue()


# --------------------------------------------------------------------------- system


def test_health_metrics_docs_need_no_token(env):
    assert env.client.get("/health").json() == {"status": "ok"}
    assert env.client.get("/metrics").status_code == 200
    assert env.client.get("/docs").status_code == 200
    spec = env.client.get("/openapi.json").json()
    assert "/v1/jobs/{job_id}/logs" in spec["paths"]
    # One-line route docstrings become the OpenAPI text.
    assert spec["paths"]["/v1/jobs"]["post"]["description"].startswith("Submit a job")


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer nope"}, {"Authorization": f"Basic {ALICE}"}],
    ids=["missing", "unknown", "not-bearer"],
)
def test_requests_without_a_valid_token_are_refused(env, headers):
    r = env.client.get("/v1/jobs", headers=headers)
    assert r.status_code == 401
    assert r.json()["error"] == "unauthorized"
    assert r.headers["www-authenticate"] == "Bearer"


# --------------------------------------------------------------------------- submit


def test_submit_then_get_shows_status_history_and_masked_manifest(env):
    r = env.submit()
    assert r.status_code == 201, r.text
    job_id = r.json()["job_id"]
    assert r.json()["status"] == "QUEUED"
    assert job_id.startswith("job-") and len(job_id) == 16
    got = env.client.get(f"/v1/jobs/{job_id}", headers=auth(ALICE))
    assert got.status_code == 200
    body = got.json()
    assert body["status"] == "QUEUED" and body["user"] == "alice" and body["name"] == "digits"
    assert [h["status"] for h in body["history"]] == ["QUEUED"]
    assert body["history"][0]["at"] > 0
    assert body["manifest"]["memory_mb"] == 512
    assert body["manifest"]["data_stores"][0]["connection"]["secret_key"] == "**********"
    assert "s3cr3t-never-shown" not in got.text
    assert "manifest_yaml" not in body


def test_get_shows_failure_reason_exit_code_and_learners(env):
    job_id = env.submit().json()["job_id"]
    env.store.update_info(job_id, {"learners": [{"index": 0, "container": "c0"}], "token": "x"})
    env.finish(job_id, Status.FAILED, reason="learner 0 exited 3", error_code="exit", exit_code=3)
    body = env.client.get(f"/v1/jobs/{job_id}", headers=auth(ALICE)).json()
    assert body["status"] == "FAILED" and body["exit_code"] == 3
    assert body["history"][-1] == {
        "status": "FAILED",
        "at": body["history"][-1]["at"],
        "reason": "learner 0 exited 3",
        "error_code": "exit",
        "exit_code": 3,
    }
    assert body["learners"] == [{"index": 0, "container": "c0"}]
    assert "token" not in body["info"]


@pytest.mark.parametrize("ctype", ["application/yaml", "text/plain"])
def test_submit_accepts_a_yaml_body(env, ctype):
    r = env.client.post(
        "/v1/jobs",
        content=env.manifest(),
        headers={**auth(ALICE), "Content-Type": ctype},
    )
    assert r.status_code == 201, r.text


def test_submit_accepts_a_json_body(env):
    import yaml

    as_object = yaml.safe_load(env.manifest())
    r1 = env.client.post("/v1/jobs", json=as_object, headers=auth(ALICE))
    r2 = env.client.post("/v1/jobs", json={"manifest": env.manifest()}, headers=auth(ALICE))
    assert (r1.status_code, r2.status_code) == (201, 201), (r1.text, r2.text)


def test_malformed_yaml_is_refused_with_its_position(env):
    r = env.submit(manifest="name: x\nframework: [unclosed\n")
    assert r.status_code == 422
    body = r.json()
    assert body["error"] == "invalid_manifest"
    assert "malformed YAML at line" in body["problems"][0]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (("learners: 1", "learners: many"), "learners"),
        (("learners: 1", "learners: 0"), "learners"),
        (("cpus: 1", "cpus: 0"), "cpus"),
        (("cpus: 1", "cpus: -2"), "cpus"),
        (("memory: 512MiB", "memory: 0Gb"), "memory"),
        (("memory: 512MiB", "memory: lots"), "memory"),
        (("    type: s3", "    type: nfs"), "data_stores[0].type"),
        (("  command: python3 train.py", "  command: [1, 2]"), "framework.command"),
    ],
)
def test_bad_fields_are_refused_naming_the_field(env, change, field):
    text = env.manifest().replace(*change)
    assert text != env.manifest()
    r = env.submit(manifest=text)
    assert r.status_code == 422
    body = r.json()
    assert body["error"] == "invalid_manifest"
    assert any(p.startswith(f"{field}:") for p in body["problems"]), body["problems"]
    assert "Traceback" not in r.text
    assert env.client.get("/v1/jobs", headers=auth(ALICE)).json()["total"] == 0


def test_missing_manifest_is_named(env):
    r = env.client.post(
        "/v1/jobs", files={"code": ("c.tar.gz", tar_gz({"a": b"1"}))}, headers=auth(ALICE)
    )
    assert r.status_code == 422
    assert r.json()["message"].startswith("manifest:")


def test_more_learners_than_the_cluster_can_hold_is_refused_leaving_nothing(env):
    r = env.submit(manifest=env.manifest(learners=9), code=tar_gz({"train.py": b"print(1)"}))
    assert r.status_code == 422
    assert r.json()["error"] == "capacity_exceeded"
    assert "can never fit" in r.json()["message"]
    assert env.client.get("/v1/jobs", headers=auth(ADMIN)).json()["total"] == 0
    assert env.code_objects() == []  # the uploaded archive was removed again


def test_unknown_image_is_refused_at_submit(env):
    text = env.manifest().replace("name: python", "name: no-such-image")
    r = env.submit(manifest=text)
    assert (r.status_code, r.json()["error"]) == (422, "image_unavailable")


def test_lcm_down_is_a_503_and_leaves_nothing(s3_server, s3_client, job_store, tmp_path):
    dead = f"127.0.0.1:{free_port()}"
    settings, api = make_settings(s3_server, tmp_path / "j.db", dead)
    seed_users(job_store)
    app = create_app(
        settings, api, store=job_store, lcm=LcmClient(dead, timeout=2), s3=s3_client, docker=False
    )
    with TestClient(app) as client:
        files = {
            "manifest": ("m.yml", MANIFEST.format(learners=1, results="r-results")),
            "code": ("c.tar.gz", tar_gz({"train.py": b"x"})),
        }
        r = client.post("/v1/jobs", files=files, headers=auth(ALICE))
    assert r.status_code == 503
    assert r.json()["error"] == "unavailable"
    listing = s3_client.list_objects_v2(Bucket=settings.s3_bucket)
    assert listing.get("KeyCount", 0) == 0


# --------------------------------------------------------------------------- code archives


def test_code_archive_is_stored_under_the_job_id(env):
    code = tar_gz({"train.py": b"print('hi')\n", "pkg/util.py": b""})
    job_id = env.submit(code=code).json()["job_id"]
    key = f"code/{job_id}.tar.gz"
    assert env.store.get(job_id).code_key == key
    stored = env.s3.get_object(Bucket=env.settings.s3_bucket, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(stored)) as tar:
        assert sorted(tar.getnames()) == ["pkg/util.py", "train.py"]


def test_zip_archive_is_converted_to_tar_gz(env):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("train.py", "print('zip')\n")
    job_id = env.submit(code=buf.getvalue(), code_name="code.zip").json()["job_id"]
    stored = env.s3.get_object(Bucket=env.settings.s3_bucket, Key=f"code/{job_id}.tar.gz")
    with tarfile.open(fileobj=io.BytesIO(stored["Body"].read()), mode="r:gz") as tar:
        assert tar.extractfile("train.py").read() == b"print('zip')\n"


def test_oversized_code_archive_is_413_and_nothing_is_created(env):
    import os

    big = tar_gz({"weights.bin": os.urandom(1024 * 1024 + 10)})  # incompressible, > 1 MiB
    r = env.submit(code=big)
    assert r.status_code == 413
    assert r.json()["error"] == "payload_too_large"
    assert "code" in r.json()["message"]
    assert env.code_objects() == []
    assert env.client.get("/v1/jobs", headers=auth(ADMIN)).json()["total"] == 0


@pytest.mark.parametrize(
    ("members", "links", "offender"),
    [
        ({"../evil.py": b"x"}, None, "../evil.py"),
        ({"ok/../../evil.py": b"x"}, None, "ok/../../evil.py"),
        ({"/etc/cron.d/evil": b"x"}, None, "/etc/cron.d/evil"),
        ({"a.py": b"x"}, {"link": "../../etc/passwd"}, "link"),
        ({"a.py": b"x"}, {"abs": "/etc/passwd"}, "abs"),
    ],
    ids=["dotdot", "nested-dotdot", "absolute", "escaping-link", "absolute-link"],
)
def test_archive_escaping_its_root_is_refused_naming_the_member(env, members, links, offender):
    r = env.submit(code=tar_gz(members, links))
    assert r.status_code == 422
    assert r.json()["error"] == "invalid_request"
    assert repr(offender) in r.json()["message"]
    assert env.code_objects() == []
    assert env.client.get("/v1/jobs", headers=auth(ADMIN)).json()["total"] == 0


def test_zip_with_dotdot_is_refused():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("../../x.py", "x")
    with pytest.raises(Exception, match=r"'\.\./\.\./x\.py'"):
        normalize_archive(buf.getvalue(), "c.zip")


def test_links_inside_the_archive_and_garbage_archives():
    ok = normalize_archive(tar_gz({"a/b.py": b"x"}, {"a/c.py": "b.py"}))
    assert ok[:2] == b"\x1f\x8b"
    with pytest.raises(Exception, match="not a readable tar"):
        normalize_archive(b"definitely not an archive")


def test_archive_bomb_is_refused():
    bomb = tar_gz({"zeros": b"\0" * (3 * 2**20)})
    assert len(bomb) < 2**20
    with pytest.raises(Exception, match="unpacks to more than"):
        normalize_archive(bomb, max_unpacked=2**20)


# --------------------------------------------------------------------------- isolation, listing


def test_someone_elses_job_is_404_exactly_like_a_missing_one(env):
    job_id = env.submit(token=ALICE).json()["job_id"]
    missing = "job-000000000000"
    for method, path in [
        ("GET", ""),
        ("POST", "/halt"),
        ("POST", "/resume"),
        ("DELETE", ""),
        ("GET", "/logs"),
        ("GET", "/results"),
    ]:
        theirs = env.client.request(method, f"/v1/jobs/{job_id}{path}", headers=auth(BOB))
        nothing = env.client.request(method, f"/v1/jobs/{missing}{path}", headers=auth(BOB))
        assert theirs.status_code == nothing.status_code == 404, (method, path)
        assert theirs.json() == {
            **nothing.json(),
            "message": nothing.json()["message"].replace(missing, job_id),
        }
    assert env.client.get("/v1/jobs", headers=auth(BOB)).json()["total"] == 0
    assert env.store.get(job_id).status == Status.QUEUED  # bob's halt did nothing


def test_admin_sees_all_users_see_their_own(env):
    a = env.submit(token=ALICE).json()["job_id"]
    b = env.submit(token=BOB).json()["job_id"]

    def ids(tok):
        jobs = env.client.get("/v1/jobs", headers=auth(tok)).json()["jobs"]
        return {j["job_id"] for j in jobs}

    assert ids(ALICE) == {a}
    assert ids(BOB) == {b}
    assert ids(ADMIN) == {a, b}
    assert env.client.get(f"/v1/jobs/{b}", headers=auth(ADMIN)).status_code == 200


def test_list_filters_by_status_and_pages(env):
    ids = [env.submit().json()["job_id"] for _ in range(5)]
    env.finish(ids[0])
    env.finish(ids[1])
    page = env.client.get("/v1/jobs?limit=2&offset=0", headers=auth(ALICE)).json()
    assert (page["total"], len(page["jobs"]), page["limit"]) == (5, 2, 2)
    rest = env.client.get("/v1/jobs?limit=2&offset=4", headers=auth(ALICE)).json()
    assert len(rest["jobs"]) == 1
    seen = {j["job_id"] for off in (0, 2, 4) for j in env.client.get(
        f"/v1/jobs?limit=2&offset={off}", headers=auth(ALICE)).json()["jobs"]}  # fmt: skip
    assert seen == set(ids)
    done = env.client.get("/v1/jobs?status=completed", headers=auth(ALICE)).json()
    assert done["total"] == 2 and {j["job_id"] for j in done["jobs"]} == {ids[0], ids[1]}


@pytest.mark.parametrize(
    ("query", "field"),
    [("status=RUNNINGISH", "status"), ("limit=0", "limit"), ("offset=-1", "offset")],
)
def test_bad_list_parameters_are_named(env, query, field):
    r = env.client.get(f"/v1/jobs?{query}", headers=auth(ALICE))
    assert r.status_code == 422
    assert r.json()["error"] == "invalid_request"
    assert r.json()["problems"][0].startswith(f"{field}:"), r.json()


def test_unknown_job_is_404(env):
    r = env.client.get("/v1/jobs/job-ffffffffffff", headers=auth(ALICE))
    assert r.status_code == 404
    assert r.json() == {
        "error": "not_found",
        "message": "job job-ffffffffffff not found",
        "problems": [],
    }


# --------------------------------------------------------------------------- halt, delete


def test_delete_of_an_active_job_halts_and_deletes_it(env):
    # The LCM's rule (the old FakeLcm refused with 409 and a test asserted it: drift).
    job_id = env.submit().json()["job_id"]
    r = env.client.delete(f"/v1/jobs/{job_id}", headers=auth(ALICE))
    assert r.status_code == 200, r.text
    assert env.client.get(f"/v1/jobs/{job_id}", headers=auth(ALICE)).status_code == 404
    assert env.lcm.keeper.get(job_id) is None and job_id in env.lcm.scheduler.released


def test_halt_then_delete(env):
    job_id = env.submit(code=tar_gz({"train.py": b"x"})).json()["job_id"]
    r = env.client.post(f"/v1/jobs/{job_id}/halt", headers=auth(ALICE))
    assert r.json() == {"job_id": job_id, "status": "HALTED"}
    history = env.client.get(f"/v1/jobs/{job_id}", headers=auth(ALICE)).json()["history"]
    assert history[-1]["reason"] == "halted by alice through the API"
    again = env.client.post(f"/v1/jobs/{job_id}/halt", headers=auth(ALICE))
    assert again.status_code == 409
    r = env.client.delete(f"/v1/jobs/{job_id}", headers=auth(ALICE))
    assert r.status_code == 200, r.text
    prefix = jobspec.results_prefix(job_id)
    assert r.json() == {
        "job_id": job_id,
        "results": f"kept in bucket {env.results} under prefix {prefix}",
        "bucket": env.results,
        "prefix": prefix,
        "purge_queued": False,
    }
    assert env.client.get(f"/v1/jobs/{job_id}", headers=auth(ALICE)).status_code == 404
    assert env.code_objects() == []


class FakeTaskQueue(TaskQueue):
    """FAKE task queue: records what the API queued and called off; queues nothing."""

    def __init__(self):
        self.queued: list[PurgeRequest] = []
        self.cancelled: list[str] = []

    def enqueue_purge(self, req: PurgeRequest) -> str:
        request_id = f"req-{len(self.queued)}"
        self.queued.append(req)
        return request_id

    def cancel_purge(self, request_id: str) -> None:
        self.cancelled.append(request_id)


def _store_result(env, job_id: str) -> str:
    key = jobspec.results_prefix(job_id) + "model.bin"
    env.s3.put_object(Bucket=env.results, Key=key, Body=b"weights")
    return key


def test_delete_with_purge_queues_it_and_then_deletes_the_record(env):
    queue = env.client.app.state.deps.tasks = FakeTaskQueue()
    job_id = env.submit().json()["job_id"]
    env.finish(job_id)
    r = env.client.delete(f"/v1/jobs/{job_id}", params={"purge": "true"}, headers=auth(ALICE))
    assert r.status_code == 200, r.text
    prefix = jobspec.results_prefix(job_id)
    assert r.json()["purge_queued"] is True
    assert r.json()["results"] == (
        f"purge queued: every object in bucket {env.results} under prefix {prefix} will be deleted"
    )
    assert queue.queued == [
        PurgeRequest(env.results, prefix, env.settings.s3_endpoint, job_id=job_id)
    ]
    assert queue.cancelled == []
    assert env.client.get(f"/v1/jobs/{job_id}", headers=auth(ALICE)).status_code == 404


def test_a_purge_whose_delete_is_refused_is_called_off(env):
    queue = env.client.app.state.deps.tasks = FakeTaskQueue()
    job_id = env.submit().json()["job_id"]
    env.finish(job_id)
    # The LCM cannot delete: the scheduler (its port) does not answer.
    env.lcm.scheduler.raises = TemporaryError("the scheduler is not answering")
    r = env.client.delete(f"/v1/jobs/{job_id}", params={"purge": "true"}, headers=auth(ALICE))
    assert (r.status_code, r.json()["error"]) == (503, "unavailable")
    assert len(queue.queued) == 1 and queue.cancelled == ["req-0"]
    assert env.client.get(f"/v1/jobs/{job_id}", headers=auth(ALICE)).status_code == 200


def test_a_purge_with_the_queue_down_is_503_and_deletes_nothing(env):
    # The real adapter, on a port where no Redis listens.
    env.client.app.state.deps.tasks = CeleryTaskQueue(
        f"redis://127.0.0.1:{free_port()}/0", visibility_timeout_s=60, timeout_s=1
    )
    job_id = env.submit(code=tar_gz({"train.py": b"x"})).json()["job_id"]
    env.finish(job_id)
    key = _store_result(env, job_id)
    r = env.client.delete(f"/v1/jobs/{job_id}", params={"purge": "true"}, headers=auth(ALICE))
    assert r.status_code == 503, r.text
    assert r.json()["error"] == "unavailable"
    assert "Redis" in r.json()["message"] and "nothing was deleted" in r.json()["message"]
    assert "Retry-After" in r.headers
    assert env.client.get(f"/v1/jobs/{job_id}", headers=auth(ALICE)).status_code == 200
    assert env.code_objects() != []
    assert env.s3.get_object(Bucket=env.results, Key=key)["Body"].read() == b"weights"


def allow_networks(env, spec: str) -> None:
    """The operator's DLAAS_EGRESS_ALLOW_NETWORKS, as every service of a platform reads it:
    the API's settings and the LCM's (its submit checks the endpoints too)."""
    env.settings.egress_allow_networks = spec
    env.lcm.settings.egress_allow_networks = spec


def allow_loopback(env) -> None:
    """Let users name stores on this host (the test's S3, a tarpit); without it such a store
    is refused (test_api_egress.py)."""
    allow_networks(env, "127.0.0.0/8")


def test_purge_refused_for_results_in_the_users_own_store(env, s3_server):
    allow_loopback(env)
    queue = env.client.app.state.deps.tasks = FakeTaskQueue()
    own = env.manifest().replace(
        "      access_key: someone\n      password: s3cr3t-never-shown\n",
        f"      endpoint: {s3_server.endpoint}\n      access_key: someone\n"
        "      password: s3cr3t-never-shown\n",
    )
    assert "endpoint:" in own
    job_id = env.submit(manifest=own).json()["job_id"]
    env.finish(job_id)
    r = env.client.delete(f"/v1/jobs/{job_id}", params={"purge": "true"}, headers=auth(ALICE))
    assert r.status_code == 422, r.text
    assert r.json()["problems"][0].startswith("purge: the results are in your own object store")
    assert queue.queued == []
    assert env.client.get(f"/v1/jobs/{job_id}", headers=auth(ALICE)).status_code == 200
    # Without --purge the reply names the store the results stay in.
    r = env.client.delete(f"/v1/jobs/{job_id}", headers=auth(ALICE))
    assert r.json()["results"].endswith(f" at {s3_server.endpoint}")


# --------------------------------------------------------------------------- resume, scale


def test_resume_a_halted_job_queues_it_again(env):
    job_id = env.submit().json()["job_id"]
    r = env.client.post(f"/v1/jobs/{job_id}/resume", headers=auth(ALICE))
    assert (r.status_code, r.json()["error"]) == (409, "invalid_transition")
    assert "only a HALTED job can be resumed" in r.json()["message"]
    env.client.post(f"/v1/jobs/{job_id}/halt", headers=auth(ALICE))
    r = env.client.post(f"/v1/jobs/{job_id}/resume", headers=auth(ALICE))
    assert r.status_code == 200, r.text
    assert r.json() == {"job_id": job_id, "status": "QUEUED"}
    history = env.client.get(f"/v1/jobs/{job_id}", headers=auth(ALICE)).json()["history"]
    assert [h["status"] for h in history] == ["QUEUED", "HALTED", "QUEUED"]
    assert history[-1]["reason"] == "resumed by alice through the API"


def test_resume_someone_elses_job_is_404_and_changes_nothing(env):
    job_id = env.submit(token=ALICE).json()["job_id"]
    env.client.post(f"/v1/jobs/{job_id}/halt", headers=auth(ALICE))
    r = env.client.post(f"/v1/jobs/{job_id}/resume", headers=auth(BOB))
    assert (r.status_code, r.json()["error"]) == (404, "not_found")
    assert env.store.get(job_id).status == Status.HALTED
    # The admin may resume anyone's job.
    r = env.client.post(f"/v1/jobs/{job_id}/resume", headers=auth(ADMIN))
    assert r.json()["status"] == "QUEUED"


def scale(env, job_id, body, token=ALICE):
    return env.client.post(f"/v1/jobs/{job_id}/scale", json=body, headers=auth(token))


def test_scale_an_elastic_job_within_its_range(env):
    job_id = env.submit(manifest=env.manifest(learners=2, elastic=(1, 4))).json()["job_id"]
    r = scale(env, job_id, {"learners": 4})
    assert r.status_code == 200, r.text
    assert r.json() == {"job_id": job_id, "status": "QUEUED", "learners": 4}
    r = scale(env, job_id, {"learners": 1}, token=ADMIN)
    assert r.status_code == 200
    assert scaled(env.lcm) == [(job_id, 4, "alice"), (job_id, 1, "alice")]


@pytest.mark.parametrize(
    ("learners", "elastic", "words"),
    [
        (5, (1, 4), "5 is outside the job's elastic range; allowed 1 to 4"),
        (0, (1, 4), "0 is outside the job's elastic range; allowed 1 to 4"),
        (3, None, "is not elastic (it runs exactly 2 learner(s))"),
    ],
    ids=["above", "below", "not-elastic"],
)
def test_scale_outside_the_range_is_422_naming_learners(env, learners, elastic, words):
    job_id = env.submit(manifest=env.manifest(learners=2, elastic=elastic)).json()["job_id"]
    r = scale(env, job_id, {"learners": learners})
    assert r.status_code == 422
    body = r.json()
    assert body["error"] == "invalid_request"
    assert body["problems"][0].startswith("learners:") and words in body["problems"][0]
    assert scaled(env.lcm) == []


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({}, "learners: Field required"),
        ({"learners": "3"}, "learners: Input should be a valid integer"),
        ({"learners": True}, "learners: Input should be a valid integer"),
        ({"learners": 2, "learner": 3}, "learner: Extra inputs are not permitted"),
    ],
    ids=["missing", "string", "boolean", "typo"],
)
def test_scale_body_errors_name_the_field(env, body, problem):
    job_id = env.submit(manifest=env.manifest(learners=2, elastic=(1, 4))).json()["job_id"]
    r = scale(env, job_id, body)
    assert r.status_code == 422
    assert problem in r.json()["problems"], r.json()


def test_a_malformed_json_body_is_named_with_where_it_breaks(env):
    job_id = env.submit(manifest=env.manifest(learners=2, elastic=(1, 4))).json()["job_id"]
    r = env.client.post(
        f"/v1/jobs/{job_id}/scale", content=b'{"learners": 2',
        headers={**auth(ALICE), "Content-Type": "application/json"},
    )  # fmt: skip
    assert r.status_code == 422
    assert r.json()["problems"] == ["body: malformed JSON at character 14"]


def test_scale_refusals_of_the_lcm_are_mapped(env):
    job_id = env.submit(manifest=env.manifest(learners=2, elastic=(1, 4))).json()["job_id"]
    # A refusal from inside the LCM's scale (here its scheduler port's) reaches the user.
    refusal = "learners: the job is being rescaled already; try again later"
    env.lcm.scheduler.raises = InvalidRequest(refusal)
    r = scale(env, job_id, {"learners": 3})
    assert (r.status_code, r.json()["problems"]) == (422, [refusal])
    env.lcm.scheduler.raises = None
    env.finish(job_id, Status.HALTED)
    r = scale(env, job_id, {"learners": 3})
    assert (r.status_code, r.json()["error"]) == (409, "invalid_transition")


def test_scale_someone_elses_job_is_404_like_a_missing_one(env):
    job_id = env.submit(manifest=env.manifest(learners=2, elastic=(1, 4))).json()["job_id"]
    theirs = scale(env, job_id, {"learners": 3}, token=BOB)
    nothing = scale(env, "job-000000000000", {"learners": 3}, token=BOB)
    assert theirs.status_code == nothing.status_code == 404
    assert theirs.json()["error"] == nothing.json()["error"] == "not_found"
    # Out of range for alice's job: still 404, so bob learns nothing about its manifest.
    assert scale(env, job_id, {"learners": 99}, token=BOB).status_code == 404
    assert scaled(env.lcm) == []


# --------------------------------------------------------------------------- logs, results


def put_log(env, job_id: str, learner: int, lines: list[str]) -> None:
    key = jobspec.log_object_key(job_id, learner)
    env.s3.put_object(Bucket=env.results, Key=key, Body=("\n".join(lines) + "\n").encode())


def test_logs_from_s3_with_offset(env):
    job_id = env.submit().json()["job_id"]
    lines = [f"epoch {i} loss {1 / (i + 1):.3f}" for i in range(10)]
    put_log(env, job_id, 0, lines)
    env.finish(job_id)
    r = env.client.get(f"/v1/jobs/{job_id}/logs", headers=auth(ALICE))
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    assert r.text.splitlines() == lines
    r = env.client.get(f"/v1/jobs/{job_id}/logs?offset=7", headers=auth(ALICE))
    assert r.text.splitlines() == lines[7:]
    r = env.client.get(f"/v1/jobs/{job_id}/logs?offset=99", headers=auth(ALICE))
    assert r.text == ""


def test_follow_waits_for_the_logs_and_ends_when_the_job_is_final(env):
    import threading

    job_id = env.submit(manifest=env.manifest(learners=2)).json()["job_id"]

    def later():
        time.sleep(0.4)
        put_log(env, job_id, 1, ["one", "two"])
        env.finish(job_id)

    threading.Thread(target=later).start()
    start = time.monotonic()
    r = env.client.get(f"/v1/jobs/{job_id}/logs?learner=1&follow=true", headers=auth(ALICE))
    assert r.text.splitlines() == ["one", "two"]
    assert time.monotonic() - start >= 0.4


def test_logs_of_a_learner_the_job_does_not_have(env):
    job_id = env.submit().json()["job_id"]
    r = env.client.get(f"/v1/jobs/{job_id}/logs?learner=3", headers=auth(ALICE))
    assert r.status_code == 422
    assert r.json()["message"].startswith("learner:")


def test_logs_of_a_learner_an_elastic_job_grew_are_readable(env):
    # 2 learners asked for; the LCM deployed 3 (grown past its target with auto_grow)
    job_id = env.submit(manifest=env.manifest(learners=2, elastic=(1, 4))).json()["job_id"]
    grown = [{"id": i, "node": "local", "container": f"c{i}", "state": "running"} for i in range(3)]
    env.store.update_info(job_id, {"learners": grown})
    put_log(env, job_id, 2, ["grown learner"])
    env.finish(job_id)
    r = env.client.get(f"/v1/jobs/{job_id}/logs?learner=2", headers=auth(ALICE))
    assert (r.status_code, r.text) == (200, "grown learner\n")
    r = env.client.get(f"/v1/jobs/{job_id}/logs?learner=3", headers=auth(ALICE))
    assert r.status_code == 422
    assert r.json()["message"] == "learner: the job has learners 0..2, not 3"


def test_logs_of_the_learners_a_scaled_job_asked_for_are_readable(env):
    job_id = env.submit(manifest=env.manifest(learners=1, elastic=(1, 4))).json()["job_id"]
    env.store.update_info(job_id, {"learners_target": 4})  # `dlaas scale JOB 4`
    put_log(env, job_id, 3, ["fourth"])
    env.finish(job_id)
    r = env.client.get(f"/v1/jobs/{job_id}/logs?learner=3", headers=auth(ALICE))
    assert (r.status_code, r.text) == (200, "fourth\n")


def test_results_download_is_a_tar_gz_of_the_results_prefix(env):
    job_id = env.submit().json()["job_id"]
    r = env.client.get(f"/v1/jobs/{job_id}/results", headers=auth(ALICE))
    assert (r.status_code, r.json()["error"]) == (404, "no_results")
    model = bytes(range(256)) * 5  # not a multiple of the tar block size
    env.s3.put_object(Bucket=env.results, Key=f"{job_id}/model.npz", Body=model)
    put_log(env, job_id, 0, ["done"])
    env.s3.put_object(Bucket=env.results, Key="job-other/model.npz", Body=b"not mine")
    r = env.client.get(f"/v1/jobs/{job_id}/results", headers=auth(ALICE))
    assert r.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(r.content), mode="r:gz") as tar:
        assert sorted(tar.getnames()) == ["logs/learner-0.log", "model.npz"]
        assert tar.extractfile("model.npz").read() == model


# --------------------------------------------------------------------------- queue, metrics


def test_queue_shows_only_your_jobs(env):
    a = env.submit(token=ALICE).json()["job_id"]
    b = env.submit(token=BOB).json()["job_id"]
    env.sched.entries = [
        scheduler_pb2.QueueEntry(job_id=a, position=1, reason="waiting for cpus", eta_low_s=5),
        scheduler_pb2.QueueEntry(job_id=b, position=2, reason="behind job 1", eta_high_s=9),
        scheduler_pb2.QueueEntry(job_id="job-gone", position=3, reason="deleted meanwhile"),
    ]
    mine = env.client.get("/v1/queue", headers=auth(ALICE)).json()["entries"]
    assert [(e["job_id"], e["reason"]) for e in mine] == [(a, "waiting for cpus")]
    every = env.client.get("/v1/queue", headers=auth(ADMIN)).json()["entries"]
    assert [e["job_id"] for e in every] == [a, b, "job-gone"]


def test_queue_entry_that_can_never_start_has_a_null_eta(env):
    a = env.submit().json()["job_id"]
    env.sched.entries = [
        scheduler_pb2.QueueEntry(
            job_id=a, position=1, reason="can never fit", eta_low_s=60, eta_high_s=float("inf")
        )
    ]
    (entry,) = env.client.get("/v1/queue", headers=auth(ALICE)).json()["entries"]
    assert (entry["eta_low_s"], entry["eta_high_s"]) == (60, None)


REASON = "needs 8 GPUs on one node; largest free block is 4; would start now as 2x4 GPUs"


def test_a_queued_job_shows_its_position_reason_and_eta(env):
    first = env.submit().json()["job_id"]
    job_id = env.submit().json()["job_id"]
    env.sched.entries = [
        scheduler_pb2.QueueEntry(job_id=first, position=1, reason="next", eta_high_s=10),
        scheduler_pb2.QueueEntry(
            job_id=job_id, position=2, reason=REASON, eta_low_s=1200, eta_high_s=2400
        ),
    ]
    body = env.client.get(f"/v1/jobs/{job_id}", headers=auth(ALICE)).json()
    assert body["queue"] == {
        "position": 2,
        "reason": REASON,
        "eta_low_s": 1200,
        "eta_high_s": 2400,
    }
    assert body["queue_note"] == ""


def test_a_job_that_is_not_queued_has_no_queue_info(env):
    job_id = env.submit().json()["job_id"]
    env.sched.entries = [scheduler_pb2.QueueEntry(job_id=job_id, position=1, reason="stale")]
    env.finish(job_id, Status.HALTED)
    body = env.client.get(f"/v1/jobs/{job_id}", headers=auth(ALICE)).json()
    assert body["status"] == "HALTED"
    assert (body["queue"], body["queue_note"]) == (None, "")


def test_a_queued_job_the_scheduler_does_not_list_yet_has_a_note(env):
    job_id = env.submit().json()["job_id"]
    body = env.client.get(f"/v1/jobs/{job_id}", headers=auth(ALICE)).json()
    assert body["queue"] is None
    assert "not in the scheduler's queue yet" in body["queue_note"]


def test_a_gang_in_restart_back_off_says_so(env):
    job_id = env.submit().json()["job_id"]
    env.store.update_info(job_id, {"restarts": 1, "not_before": time.time() + 30})
    body = env.client.get(f"/v1/jobs/{job_id}", headers=auth(ALICE)).json()
    assert body["queue"] is None
    assert "restarting after a failure; handed to the scheduler in" in body["queue_note"]


def test_scheduler_down_still_shows_the_job_with_a_note(s3_server, s3_client, job_store, tmp_path):
    server, addr, _, _ = start_fakes(job_store)
    settings, api = make_settings(s3_server, tmp_path / "j.db", addr)
    seed_users(job_store)
    dead = SchedulerClient(f"127.0.0.1:{free_port()}", timeout=2)
    app = create_app(
        settings, api, store=job_store, lcm=LcmClient(addr), s3=s3_client, docker=False,
        scheduler=dead,
    )  # fmt: skip
    try:
        with TestClient(app) as client:
            files = {"manifest": ("m.yml", MANIFEST.format(learners=1, results="r-results"))}
            job_id = client.post("/v1/jobs", files=files, headers=auth(ALICE)).json()["job_id"]
            r = client.get(f"/v1/jobs/{job_id}", headers=auth(ALICE))
            assert r.status_code == 200, r.text
            assert r.json()["status"] == "QUEUED" and r.json()["queue"] is None
            assert "scheduler is not answering" in r.json()["queue_note"]
            # The queue itself has nothing to show without the scheduler: retry later.
            r = client.get("/v1/queue", headers=auth(ALICE))
            assert (r.status_code, r.json()["error"]) == (503, "unavailable")
            assert r.headers["retry-after"] == "1"
    finally:
        server.stop(0)


def test_metrics_count_requests_and_submissions(env):
    env.submit()
    env.submit(manifest="name: [")
    env.client.get("/v1/jobs", headers=auth(ALICE))
    text = env.client.get("/metrics").text
    # Each series names the replica that counted it (unnamed: the host name).
    r = 'replica="' + env.client.app.state.deps.metrics.replica + '"'
    assert f"dlaas_api_jobs_submitted_total{{{r}}} 1.0" in text
    assert f'dlaas_api_jobs_refused_total{{error="invalid_manifest",{r}}} 1.0' in text
    assert f'dlaas_api_requests_total{{method="GET",{r},route="/v1/jobs",status="200"}} 1.0' in text
    assert f'dlaas_api_request_seconds_count{{method="POST",{r},route="/v1/jobs"}} 2.0' in text


def test_error_bodies_never_carry_a_trace(env):
    r = env.client.post(
        "/v1/jobs", content=b"\xff\xfe", headers={**auth(ALICE), "Content-Type": "application/yaml"}
    )
    assert r.status_code == 422
    assert set(r.json()) == {"error", "message", "problems"}
    r = env.client.post(
        "/v1/jobs", content=b"{", headers={**auth(ALICE), "Content-Type": "application/json"}
    )
    assert r.status_code == 422 and "malformed JSON" in r.json()["problems"][0]
    assert json.loads(r.text)["error"] == "invalid_manifest"


# --------------------------------------------------------------------------- logs: container -> S3


@pytest.mark.docker
def test_follow_hands_over_from_the_container_to_s3_without_gaps(env, docker_client, learner_image):
    """Lines come live from `docker logs`; when the container is removed mid-stream, the rest
    comes from the S3 log object, with no line lost or repeated."""
    import contextlib
    import threading

    import docker.errors

    from dlaas.adapters.engines.docker_engine import Deployer
    from dlaas.adapters.logs import LogReader

    job_id = env.submit().json()["job_id"]
    lines = [f"line {i}" for i in range(10)]
    # The container has written lines 0-4 when it is removed; lines 5-9 exist only in S3
    # (the reader was slower than the learner), so they must come from there, once.
    script = (
        "import time\n"
        "for i in range(5):\n"
        "    print(f'line {i}', flush=True)\n"
        "    time.sleep(0.1)\n"
        "time.sleep(30)\n"  # keeps running: the test removes it mid-stream
    )
    container = docker_client.containers.run(
        learner_image,
        ["python3", "-c", script],
        name=jobspec.learner_name(job_id, 0),
        detach=True,
        init=True,
        labels={  # as the LCM labels a learner
            jobspec.LABEL_MANAGED: env.settings.platform_id,
            jobspec.LABEL_JOB: job_id,
            jobspec.LABEL_ROLE: jobspec.ROLE_LEARNER,
            jobspec.LABEL_LEARNER: "0",
        },
    )
    engine = Deployer(docker_client, platform_id=env.settings.platform_id, node="local")
    reader = LogReader(env.store, env.settings, engine, lambda loc: env.s3, poll_s=0.05)
    got: list[str] = []

    def clean_up_like_the_monitor():
        deadline = time.monotonic() + 20
        while len(got) < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        put_log(env, job_id, 0, lines)  # the helper stores the whole log ...
        container.remove(force=True)  # ... then the monitor removes the container
        time.sleep(0.3)
        env.finish(job_id)

    try:
        cleaner = threading.Thread(target=clean_up_like_the_monitor)
        cleaner.start()
        got.extend(reader.lines(job_id, 0, offset=1, follow=True))  # appends as lines arrive
        cleaner.join()
    finally:
        with contextlib.suppress(docker.errors.NotFound):  # already removed by the test
            container.remove(force=True)
    assert got == lines[1:]


# --------------------------------------------------------------------------- limits


def _chunks(total_mib: int):
    """A body with no Content-Length: the client sends it chunked, as it is generated."""
    for _ in range(total_mib):
        yield b"x" * 2**20


@pytest.mark.parametrize(
    "ctype", ["application/yaml", "application/json", "multipart/form-data; boundary=b"]
)
def test_a_chunked_body_over_the_limit_is_413_not_500(env, ctype):
    headers = {**auth(ALICE), "Content-Type": ctype}
    r = env.client.post("/v1/jobs", content=_chunks(100), headers=headers)
    assert r.status_code == 413, r.text
    assert r.json()["error"] == "payload_too_large"
    assert r.json()["problems"][0].startswith("request:")
    assert env.client.get("/v1/jobs", headers=auth(ADMIN)).json()["total"] == 0


def test_a_body_that_is_not_utf8_is_refused_naming_the_manifest(env):
    body = '{"name": "caf\xe9"}'.encode("latin-1")
    for ctype in ("application/json", "application/yaml"):
        r = env.client.post(
            "/v1/jobs", content=body, headers={**auth(ALICE), "Content-Type": ctype}
        )
        assert r.status_code == 422, r.text
        assert r.json()["problems"] == ["(manifest): not UTF-8 text"]


@pytest.mark.parametrize("levels", [500, 100_000])
def test_deeply_nested_json_is_refused_not_a_recursion_error(env, levels):
    body = '{"name": "x", "evaluation_metrics": {"a": ' + "[" * levels + "]" * levels + "}}"
    r = env.client.post(
        "/v1/jobs", content=body, headers={**auth(ALICE), "Content-Type": "application/json"}
    )
    assert r.status_code == 422, r.text[:300]
    assert "nested deeper than 32 levels" in r.json()["problems"][0]


def test_yaml_aliases_are_refused_at_submit(env):
    laughs = (
        'evaluation_metrics:\n  a: &a ["lol", "lol", "lol", "lol", "lol", "lol"]\n'
        "  b: &b [*a, *a, *a, *a, *a, *a]\n  c: [*b, *b, *b, *b, *b, *b]\n"
    )
    r = env.submit(manifest=env.manifest() + laughs)
    assert r.status_code == 422
    assert "aliases" in r.json()["problems"][0]
    assert env.client.get("/v1/jobs", headers=auth(ADMIN)).json()["total"] == 0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"priority": 1e26}, "priority"),
        ({"priority": 2**31}, "priority"),
        ({"memory": 2**70}, "memory"),
        ({"memory": 1}, "memory"),
        ({"learners": 2**40}, "learners"),
        ({"env": {"A": "x\0y"}}, "env.A"),
        ({"name": "a\0b"}, "name"),
    ],
)
def test_numbers_and_text_no_proto_or_docker_can_carry_are_refused(env, change, field):
    import yaml

    manifest = {**yaml.safe_load(env.manifest()), **change}
    r = env.client.post("/v1/jobs", json=manifest, headers=auth(ALICE))
    assert r.status_code == 422, r.text
    assert any(p.startswith(f"{field}:") for p in r.json()["problems"]), r.json()
    assert env.client.get("/v1/jobs", headers=auth(ADMIN)).json()["total"] == 0


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/v1/jobs?offset=1e30", "offset"),
        ("/v1/jobs?offset=100000000000000000000", "offset"),
        ("/v1/jobs?limit=100000000000000000000", "limit"),
        ("/v1/jobs/{job}/logs?offset=100000000000000000000", "offset"),
        ("/v1/jobs/{job}/logs?learner=100000000000000000000", "learner"),
    ],
)
def test_huge_integer_parameters_are_refused_naming_them(env, path, field):
    job_id = env.submit().json()["job_id"]
    r = env.client.get(path.format(job=job_id), headers=auth(ALICE))
    assert r.status_code == 422, r.text
    assert r.json()["problems"][0].startswith(f"{field}:"), r.json()


def _with_endpoint(env, endpoint: str) -> str:
    """Submit a job whose results live on `endpoint` (a store of the user's own, on this
    host: allowed by the operator here)."""
    allow_loopback(env)
    manifest = env.manifest().replace(
        "    connection:\n", f"    connection:\n      endpoint: {endpoint}\n"
    )
    r = env.submit(manifest=manifest)
    assert r.status_code == 201, r.text
    return r.json()["job_id"]


@pytest.fixture
def tarpit():
    """A port that accepts connections (the kernel's backlog) and never answers."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


@pytest.mark.timeout(60)  # the bound: without timeouts botocore waits 60 s x 4 attempts
def test_results_from_a_store_that_never_answers_end_in_a_503(env, tarpit, monkeypatch):
    import dlaas.adapters.s3

    monkeypatch.setattr(dlaas.adapters.s3, "USER_READ_TIMEOUT_S", 0.5)  # 10 s in service
    job_id = _with_endpoint(env, tarpit)
    r = env.client.get(f"/v1/jobs/{job_id}/results", headers=auth(ALICE))
    assert r.status_code == 503, r.text
    body = r.json()
    assert body["error"] == "unavailable"
    assert body["message"].startswith("data_stores[0].connection.endpoint:")
    assert "did not answer" in body["message"] and "127.0.0.1" in body["message"]
    assert "Traceback" not in r.text


def test_results_from_a_store_that_refuses_connections_end_in_a_503(env):
    from dlaas.local.processes import free_port

    job_id = _with_endpoint(env, f"http://127.0.0.1:{free_port()}")
    r = env.client.get(f"/v1/jobs/{job_id}/results", headers=auth(ALICE))
    assert (r.status_code, r.json()["error"]) == (503, "unavailable"), r.text


def test_results_from_a_store_that_refuses_the_credentials_is_422(env, s3_server):
    job_id = _with_endpoint(env, s3_server.endpoint)  # the manifest's keys are not valid
    r = env.client.get(f"/v1/jobs/{job_id}/results", headers=auth(ALICE))
    assert r.status_code == 422, r.text
    assert r.json()["message"].startswith("data_stores[0].connection:")
    assert "s3cr3t" not in r.text


def test_user_store_clients_have_short_timeouts_and_no_retries():
    from dlaas.adapters.s3 import client_for
    from dlaas.domain.locations import S3Location

    loc = S3Location("http://127.0.0.1:1", "a", "b", "bucket", allow_networks="127.0.0.0/8")
    config = client_for(loc).meta.config
    assert (config.connect_timeout, config.read_timeout) == (3.0, 10.0)
    assert config.retries["total_max_attempts"] == 1
