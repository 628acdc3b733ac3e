"""The REST reads answer on the event loop: checking a good token, listing jobs and showing
a job that needs no other service take no worker thread (under load, the hop to the thread
pool and the wait there behind other requests were most of a read's latency); what may
wait on another service (a running job's look at its logs, a queued job's place in the
scheduler's queue, counting a failed token in Redis) still goes to a thread.

The app is the real one (create_app) on a SQLite store in the test's tmp dir; every hop to
a worker thread passes through `anyio.to_thread.run_sync`, which the test counts.
"""

from __future__ import annotations

import threading
import time

import anyio.to_thread
import pytest
from fastapi.testclient import TestClient
from offline_settings import offline_settings

from dlaas.adapters.store.base import JobRecord
from dlaas.config import ApiSettings
from dlaas.domain.accounts import TokenRecord, User, token_hash
from dlaas.domain.status import Status, Transition
from services.api.app import create_app

ALICE = "tok-alice"
MANIFEST = """name: x
learners: 1
framework:
  name: python
  version: "3"
  command: python3 -c pass
"""


class Scheduler:
    def queue(self, running_left):
        return []


@pytest.fixture
def client(job_store, tmp_path, monkeypatch):
    settings = offline_settings(f"sqlite:///{tmp_path / 'jobs.db'}")
    job_store.add_user(User("alice", "", False, 1.0))
    job_store.add_token(TokenRecord(token_hash(ALICE), "alice", ALICE[:6], 1.0))
    jobs = (("j-done", Status.COMPLETED), ("j-queued", Status.QUEUED), ("j-run", Status.PROCESSING))
    for job_id, status in jobs:
        history = [Transition(Status.QUEUED, 1.0, "submitted")]
        job_store.create(JobRecord(job_id, "alice", job_id, MANIFEST, 1.0, history=history))
        if status != Status.QUEUED:
            job_store.record_transition(job_id, 1, Transition(status, 2.0, "moved"))
    app = create_app(
        settings, ApiSettings(admin_token="tok-admin"), store=job_store, lcm=object(),
        s3=object(), docker=False, scheduler=Scheduler(), tasks=object(), failure_counts=False,
    )  # fmt: skip
    hops: list[str] = []
    run_sync = anyio.to_thread.run_sync

    async def counted(func, *args, **kwargs):
        func_ = getattr(func, "func", func)  # run_in_threadpool passes a partial
        hops.append(func_.__name__)
        return await run_sync(func, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counted)
    # FAKE engine: a running learner's last lines (a look at them is an engine call).
    app.state.deps.logs.tail = lambda job_id, learner, n: [(1.0, "epoch 3/10 loss=0.5")]
    with TestClient(app) as c:
        c.hops = hops
        yield c


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a_job_list_takes_no_worker_thread(client):
    client.hops.clear()
    r = client.get("/v1/jobs", headers=auth(ALICE))
    assert r.status_code == 200 and r.json()["total"] == 3
    assert client.hops == ["many"]  # the running job's first look: on a thread
    client.hops.clear()
    r = client.get("/v1/jobs", headers=auth(ALICE))  # within the look's ttl: none
    assert r.status_code == 200 and client.hops == []
    running = next(j for j in r.json()["jobs"] if j["job_id"] == "j-run")
    assert running["progress"]["done"] == 3


def test_a_final_jobs_view_takes_no_worker_thread(client):
    client.hops.clear()
    r = client.get("/v1/jobs/j-done", headers=auth(ALICE))
    assert r.status_code == 200 and r.json()["status"] == "COMPLETED"
    assert client.hops == []


def test_a_running_jobs_view_looks_at_its_logs_on_a_worker_thread_once_per_ttl(client):
    client.hops.clear()
    first = client.get("/v1/jobs/j-run", headers=auth(ALICE))
    assert first.status_code == 200 and first.json()["progress"]["done"] == 3
    assert client.hops == ["_job_view"]
    client.hops.clear()
    again = client.get("/v1/jobs/j-run", headers=auth(ALICE))
    assert again.json()["progress"]["done"] == 3 and client.hops == []


def test_a_running_jobs_next_look_runs_behind_the_view_that_found_it_due(client):
    client.get("/v1/jobs/j-run", headers=auth(ALICE))  # the first look: waited for
    deps = client.app.state.deps
    deps.progress.ttl_s = 0.0  # every view from now on finds a look due
    looking, proceed = threading.Event(), threading.Event()

    def slow_tail(job_id, learner, n):  # FAKE engine, slow to answer
        looking.set()
        assert proceed.wait(10)
        return [(2.0, "epoch 5/10 loss=0.4")]

    deps.logs.tail = slow_tail
    client.hops.clear()
    r = client.get("/v1/jobs/j-run", headers=auth(ALICE))
    # Answered with what the last look saw, while the next look waits on the engine.
    assert r.status_code == 200 and r.json()["progress"]["done"] == 3
    assert looking.wait(10) and client.hops == ["of"]
    again = client.get("/v1/jobs/j-run", headers=auth(ALICE))  # one look at a time
    assert again.json()["progress"]["done"] == 3 and client.hops == ["of"]
    proceed.set()
    deadline = time.monotonic() + 10
    while client.get("/v1/jobs/j-run", headers=auth(ALICE)).json()["progress"]["done"] != 5:
        assert time.monotonic() < deadline, "the background look never landed"
        time.sleep(0.01)


def test_a_queued_jobs_place_is_asked_on_a_worker_thread(client):
    # The scheduler answers over gRPC: that wait must not hold the event loop.
    client.hops.clear()
    r = client.get("/v1/jobs/j-queued", headers=auth(ALICE))
    assert r.status_code == 200 and r.json()["status"] == "QUEUED"
    assert client.hops == ["_job_view"]


def test_a_failed_token_is_counted_on_a_worker_thread(client):
    client.hops.clear()
    r = client.get("/v1/jobs", headers=auth("tok-wrong"))
    assert r.status_code == 401
    assert client.hops == ["_failed"]
    # And the next good request is answered as before.
    assert client.get("/v1/jobs", headers=auth(ALICE)).status_code == 200
