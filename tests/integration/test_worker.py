"""The worker against the real things: SeaweedFS S3, a SQLite job store, Redis, Celery.

The purge core and the retention sweep are called directly against S3; the delivery
guarantees are tested end to end: the API's queue adapter publishes, a real worker
process (`python -m services.worker.main`) consumes, and is killed with SIGKILL while
it holds the task unacknowledged; a new worker finishes the purge. Nothing is faked.
"""

from __future__ import annotations

import os
import signal
import socket
import socketserver
import sys
import threading
import time
from pathlib import Path

import pytest
import redis

from dlaas.adapters.s3_purge import purge_prefix
from dlaas.adapters.store.base import JobRecord
from dlaas.config import PlatformSettings
from dlaas.domain import jobspec, purge
from dlaas.domain.errors import TemporaryError
from dlaas.domain.namespace import DEFAULT_RESULTS, team_bucket
from dlaas.domain.status import Status, Transition
from dlaas.local import processes
from services.api.tasks import CeleryTaskQueue
from services.worker.tasks import run_purge, sweep_retention

REPO = Path(__file__).resolve().parents[2]
VISIBILITY_S = 2  # a dead worker's task is handed out again after this long
WAIT_S = 60


def put(s3, bucket: str, *keys: str) -> None:
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=b"x" * 10)


def keys(s3, bucket: str, prefix: str = "") -> list[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def settings_for(s3_server, store_url: str, redis_url: str = "", **kw) -> PlatformSettings:
    return PlatformSettings(
        s3_endpoint=s3_server.endpoint,
        s3_access_key=s3_server.access_key,
        s3_secret_key=s3_server.secret_key,
        store_url=store_url,
        redis_url=redis_url or "redis://127.0.0.1:1/0",
        **kw,
    )


def add_job(store, job_id: str, status: Status, ended_at: float, manifest: str = "", team=""):
    store.create(JobRecord(job_id, "alice", "n", manifest, ended_at - 60, team=team))
    store.record_transition(job_id, 1, Transition(status, ended_at, "ended"))


# --------------------------------------------------------------------------- the core


def test_purge_deletes_every_object_under_the_prefix_and_nothing_else(s3_client, s3_bucket):
    many = [f"job-1/checkpoints/step-{i:04d}" for i in range(1203)]  # more than a page
    put(s3_client, s3_bucket, "job-1/model.bin", "job-1/logs/learner-0.log", *many)
    put(s3_client, s3_bucket, "job-10/model.bin", "job-1", "other/job-1/x")
    assert purge_prefix(s3_client, s3_bucket, "job-1/") == 1205
    assert keys(s3_client, s3_bucket) == ["job-1", "job-10/model.bin", "other/job-1/x"]
    # Idempotent: a second run (a redelivered task) finds nothing and is fine.
    assert purge_prefix(s3_client, s3_bucket, "job-1/") == 0


def test_purge_of_a_missing_bucket_is_nothing_to_do(s3_client):
    assert purge_prefix(s3_client, "no-such-bucket-for-purge", "job-1/") == 0


def test_purge_refuses_a_prefix_that_would_reach_other_jobs(s3_client, s3_bucket):
    put(s3_client, s3_bucket, "job-10/model.bin")
    for prefix in ("", "job-1"):
        with pytest.raises(ValueError, match="prefix"):
            purge_prefix(s3_client, s3_bucket, prefix)
    assert keys(s3_client, s3_bucket) == ["job-10/model.bin"]


def test_a_purge_waits_for_the_job_record_and_heeds_a_cancel(
    s3_server, s3_client, s3_bucket, job_store, tmp_path
):
    settings = settings_for(s3_server, f"sqlite:///{tmp_path / 'jobs.db'}")
    put(s3_client, s3_bucket, "job-1/model.bin")
    add_job(job_store, "job-1", Status.COMPLETED, time.time())
    req = purge.PurgeRequest(s3_bucket, "job-1/", s3_server.endpoint, "job-1", "r1")
    with pytest.raises(Exception, match="still being deleted"):
        run_purge(req, settings, job_store, s3_client, cancelled=lambda rid: False)
    job_store.delete("job-1")
    assert run_purge(req, settings, job_store, s3_client, cancelled=lambda rid: rid == "r1") == 0
    assert keys(s3_client, s3_bucket) == ["job-1/model.bin"]
    # Another endpoint never gets the platform's key: dropped, nothing deleted.
    elsewhere = purge.PurgeRequest(s3_bucket, "job-1/", "http://127.0.0.1:9", "job-1")
    assert run_purge(elsewhere, settings, job_store, s3_client, cancelled=lambda r: False) == 0
    assert keys(s3_client, s3_bucket) == ["job-1/model.bin"]
    assert run_purge(req, settings, job_store, s3_client, cancelled=lambda rid: False) == 1
    assert keys(s3_client, s3_bucket) == []


def test_retention_purges_ended_jobs_past_the_limit_and_marks_them(
    s3_server, s3_client, job_store, tmp_path
):
    team = "ret-" + os.urandom(4).hex()
    bucket = team_bucket(team, DEFAULT_RESULTS)
    s3_client.create_bucket(Bucket=bucket)
    manifest = "name: n\nframework: {name: python, version: '3.11', command: x}\n"
    own = manifest + (
        "data_stores:\n  - id: mine\n    type: s3\n"
        f"    training_results: {{container: {bucket}}}\n"
        f"    connection: {{endpoint: {s3_server.endpoint}, access_key: a, password: b}}\n"
    )
    now = time.time()
    day = purge.DAY_S
    add_job(job_store, "job-old", Status.COMPLETED, now - 10 * day, manifest, team)
    add_job(job_store, "job-failed", Status.FAILED, now - 8 * day, manifest, team)
    add_job(job_store, "job-new", Status.COMPLETED, now - 1 * day, manifest, team)
    add_job(job_store, "job-halted", Status.HALTED, now - 30 * day, manifest, team)
    add_job(job_store, "job-own", Status.COMPLETED, now - 30 * day, own, team)
    for job_id in ("job-old", "job-failed", "job-new", "job-halted", "job-own"):
        put(s3_client, bucket, jobspec.results_prefix(job_id) + "model.bin")
    settings = settings_for(
        s3_server, f"sqlite:///{tmp_path / 'jobs.db'}", results_retention_days=7
    )
    assert sweep_retention(settings, job_store, s3_client, now) == ["job-old", "job-failed"]
    assert keys(s3_client, bucket) == [
        "job-halted/model.bin", "job-new/model.bin", "job-own/model.bin",
    ]  # fmt: skip
    assert job_store.get("job-old").info[purge.PURGED_INFO] == now
    entries, _ = job_store.list_audit()
    assert {(e.actor, e.action, e.target) for e in entries} == {
        ("worker", "purge-results", "job-old"), ("worker", "purge-results", "job-failed"),
    }  # fmt: skip
    # Marked: the next sweep has nothing to do.
    assert sweep_retention(settings, job_store, s3_client, now + 60) == []
    off = settings_for(s3_server, f"sqlite:///{tmp_path / 'jobs.db'}")
    assert sweep_retention(off, job_store, s3_client, now + 100 * day) == []


# --------------------------------------------------------------------------- delivery


class Worker:
    """A real worker process on the test's Redis, S3 and job store."""

    def __init__(self, settings: PlatformSettings, workdir: Path, **extra: str):
        self.env = {
            **extra,
            **os.environ,
            "PYTHONPATH": str(REPO),
            "DLAAS_REDIS_URL": settings.redis_url,
            "DLAAS_S3_ENDPOINT": settings.s3_endpoint,
            "DLAAS_S3_ACCESS_KEY": settings.s3_access_key,
            "DLAAS_S3_SECRET_KEY": settings.s3_secret_key.get_secret_value(),
            "DLAAS_STORE_URL": settings.store_url,
            "DLAAS_WORKER_VISIBILITY_TIMEOUT_S": str(VISIBILITY_S),
        }
        self.workdir = workdir
        self.log = workdir / "worker.log"
        self.process: processes.ManagedProcess | None = None

    def start(self) -> None:
        self.process = processes.spawn(
            "worker", [sys.executable, "-m", "services.worker.main"], self.log,
            env=self.env, cwd=self.workdir,
        )  # fmt: skip

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


@pytest.fixture
def worker_env(s3_server, redis_server, tmp_path):
    settings = settings_for(s3_server, f"sqlite:///{tmp_path / 'jobs.db'}", redis_server.url)
    from dlaas.adapters.store import open_store

    store = open_store(settings.store_url)
    worker = Worker(settings, tmp_path)
    try:
        yield settings, store, worker
    finally:
        worker.stop()
        store.close()


class HoldingProxy:
    """A TCP proxy in front of S3 that can hold requests: a worker whose S3 call is held
    is in the middle of its task (started, not finished, not acknowledged)."""

    def __init__(self, upstream_port: int):
        self.hold = True
        self.held = threading.Event()
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                if proxy.hold:
                    proxy.held.set()
                    self.request.recv(65536)  # until the client goes away
                    return
                with socket.create_connection(("127.0.0.1", upstream_port)) as up:
                    back = threading.Thread(target=pipe, args=(up, self.request), daemon=True)
                    back.start()
                    pipe(self.request, up)
                    back.join(timeout=10)

        def pipe(src: socket.socket, dst: socket.socket) -> None:
            try:
                while data := src.recv(65536):
                    dst.sendall(data)
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

        socketserver.ThreadingTCPServer.daemon_threads = True
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def in_redis(redis_url: str) -> int:
    """Tasks Redis holds: queued, or handed to a worker and not acknowledged yet."""
    r = redis.Redis.from_url(redis_url)
    return r.llen("celery") + r.hlen("unacked")


def test_a_purge_survives_a_worker_killed_while_holding_it(worker_env, s3_client, s3_bucket):
    settings, store, worker = worker_env
    put(s3_client, s3_bucket, "job-1/model.bin", "job-1/logs/learner-0.log", "job-2/model.bin")
    add_job(store, "job-1", Status.COMPLETED, time.time())
    queue = CeleryTaskQueue(settings.redis_url, VISIBILITY_S)
    queue.enqueue_purge(purge.PurgeRequest(s3_bucket, "job-1/", settings.s3_endpoint, "job-1"))
    worker.start()
    # The record is still there (the job's delete "in progress"): the worker retries,
    # holding the task unacknowledged between tries. A retry publishes the next try before
    # it acknowledges the one that failed, so Redis briefly holds two; killed between tries
    # (one held), without a goodbye:
    processes.wait_until(
        lambda: "Retry in" in worker.output() and in_redis(settings.redis_url) == 1,
        WAIT_S, "a worker retry, the failed try acknowledged",
    )  # fmt: skip
    worker.kill()
    assert in_redis(settings.redis_url) == 1, "the task must outlive the worker"
    assert keys(s3_client, s3_bucket, "job-1/") != []
    store.delete("job-1")  # the delete finished meanwhile
    worker.start()
    processes.wait_until(
        lambda: keys(s3_client, s3_bucket, "job-1/") == [], WAIT_S, "the purge",
        log=worker.log,
    )  # fmt: skip
    assert keys(s3_client, s3_bucket) == ["job-2/model.bin"]
    processes.wait_until(lambda: in_redis(settings.redis_url) == 0, WAIT_S, "the task's ack")


def test_a_purge_survives_a_worker_killed_in_the_middle_of_it(
    s3_server, redis_server, s3_client, s3_bucket, tmp_path
):
    proxy = HoldingProxy(s3_server.port)
    settings = settings_for(s3_server, f"sqlite:///{tmp_path / 'jobs.db'}", redis_server.url)
    settings = settings.model_copy(update={"s3_endpoint": proxy.endpoint})
    worker = Worker(settings, tmp_path)
    put(s3_client, s3_bucket, "job-1/model.bin", "job-2/model.bin")
    try:
        queue = CeleryTaskQueue(settings.redis_url, VISIBILITY_S)
        queue.enqueue_purge(purge.PurgeRequest(s3_bucket, "job-1/", proxy.endpoint))
        worker.start()
        assert proxy.held.wait(WAIT_S), worker.output()
        worker.kill()  # mid-task: its first S3 call is held
        assert in_redis(settings.redis_url) == 1, "the task must outlive the worker"
        proxy.hold = False
        worker.start()
        processes.wait_until(
            lambda: keys(s3_client, s3_bucket, "job-1/") == [], WAIT_S, "the purge",
            log=worker.log,
        )  # fmt: skip
        assert keys(s3_client, s3_bucket) == ["job-2/model.bin"]
    finally:
        worker.stop()
        proxy.close()


def test_the_worker_applies_retention_on_its_own(s3_server, redis_server, s3_client, tmp_path):
    settings = settings_for(s3_server, f"sqlite:///{tmp_path / 'jobs.db'}", redis_server.url)
    from dlaas.adapters.store import open_store

    store = open_store(settings.store_url)
    team = "ret-" + os.urandom(4).hex()
    bucket = team_bucket(team, DEFAULT_RESULTS)
    s3_client.create_bucket(Bucket=bucket)
    manifest = "name: n\nframework: {name: python, version: '3.11', command: x}\n"
    add_job(store, "job-old", Status.COMPLETED, time.time() - 10 * purge.DAY_S, manifest, team)
    add_job(store, "job-new", Status.COMPLETED, time.time(), manifest, team)
    put(s3_client, bucket, "job-old/model.bin", "job-new/model.bin")
    worker = Worker(
        settings, tmp_path, DLAAS_RESULTS_RETENTION_DAYS="7", DLAAS_RETENTION_SWEEP_S="1"
    )
    try:
        worker.start()  # it queues the sweep for itself every second
        processes.wait_until(
            lambda: purge.PURGED_INFO in store.get("job-old").info, WAIT_S, "the sweep",
            log=worker.log,
        )  # fmt: skip
        assert keys(s3_client, bucket) == ["job-new/model.bin"]
        assert purge.PURGED_INFO not in store.get("job-new").info
    finally:
        worker.stop()
        store.close()


def test_a_cancelled_purge_deletes_nothing(worker_env, s3_client, s3_bucket):
    settings, _store, worker = worker_env
    put(s3_client, s3_bucket, "job-1/model.bin")
    queue = CeleryTaskQueue(settings.redis_url, VISIBILITY_S)
    request_id = queue.enqueue_purge(
        purge.PurgeRequest(s3_bucket, "job-1/", settings.s3_endpoint, "job-1")
    )
    queue.cancel_purge(request_id)
    worker.start()
    processes.wait_until(lambda: "cancelled by the API" in worker.output(), WAIT_S, "the cancel")
    assert keys(s3_client, s3_bucket) == ["job-1/model.bin"]


def test_queueing_with_redis_gone_is_a_temporary_error(s3_server, redis_server, s3_bucket):
    queue = CeleryTaskQueue(redis_server.url, VISIBILITY_S, timeout_s=1)
    req = purge.PurgeRequest(s3_bucket, "job-1/", s3_server.endpoint, "job-1")
    queue.enqueue_purge(req)  # a live broker takes it
    redis_server.stop()
    with pytest.raises(TemporaryError, match="Redis"):
        queue.enqueue_purge(req)
