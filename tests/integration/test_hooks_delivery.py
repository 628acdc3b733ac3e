"""Webhooks end to end against the real things: etcd, SQLite, Redis, a worker, a receiver.

A job's transitions go through the real StatusKeeper with the real notifier, which queues
deliveries on a real Redis; a real worker process (`python -m services.worker.main`)
POSTs them to a real HTTP server in this process. The receiver is taken down and brought
back, and the worker is SIGKILLed while the receiver holds its request open: the delivery
arrives all the same, signed, with the same idempotency key every time (at least once).
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
import redis

from dlaas.adapters.etcd_status import StatusKeeper
from dlaas.adapters.notify import hook_notifier
from dlaas.adapters.store import open_store
from dlaas.adapters.store.base import JobRecord
from dlaas.config import PlatformSettings
from dlaas.domain import egress, hooks
from dlaas.domain.secretbox import new_key
from dlaas.domain.status import Status, Transition
from dlaas.local import processes

REPO = Path(__file__).resolve().parents[2]
VISIBILITY_S = 2  # a dead worker's task is handed out again after this long
WAIT_S = 60


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Receiver:
    """An HTTP server that records every POST; `hold` keeps the next one open unanswered."""

    def __init__(self, port: int):
        self.port = port
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.hold = False
        self.held = threading.Event()
        self.release = threading.Event()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                if receiver.hold:
                    receiver.hold = False
                    receiver.held.set()
                    receiver.release.wait(WAIT_S)  # the worker dies meanwhile
                    return
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        http.server.ThreadingHTTPServer.allow_reuse_address = True
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def bodies(self) -> list[dict]:
        return [json.loads(body) for _, body in self.requests]


class Worker:
    """A real worker process on the test's Redis and job store."""

    def __init__(self, settings: PlatformSettings, workdir: Path):
        self.env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "DLAAS_REDIS_URL": settings.redis_url,
            "DLAAS_S3_ACCESS_KEY": "unused",  # deliveries never reach S3
            "DLAAS_S3_SECRET_KEY": "unused",
            "DLAAS_STORE_URL": settings.store_url,
            "DLAAS_SECRETS_KEY": settings.secrets_key.get_secret_value(),
            "DLAAS_WORKER_VISIBILITY_TIMEOUT_S": str(VISIBILITY_S),
            # The test's receivers listen on loopback, which hooks may not reach unless
            # the operator allows it (test_a_hook_to_the_platforms_own_host_is_refused);
            # by its old name here, which still works (DLAAS_EGRESS_ALLOW_NETWORKS now).
            "DLAAS_HOOKS_ALLOW_NETWORKS": "127.0.0.0/8",
        }
        self.log = workdir / "worker.log"
        self.workdir = workdir
        self.process: processes.ManagedProcess | None = None

    def start(self) -> None:
        self.process = processes.spawn(
            "worker", [sys.executable, "-m", "services.worker.main"], self.log,
            env=self.env, cwd=self.workdir,
        )  # fmt: skip

    def kill(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        if self.process.proc is not None:
            self.process.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


@pytest.fixture
def env(redis_server, etcd_client, etcd_prefix, tmp_path):
    settings = PlatformSettings(
        s3_access_key="unused",
        s3_secret_key="unused",
        store_url=f"sqlite:///{tmp_path / 'jobs.db'}",
        redis_url=redis_server.url,
        secrets_key=new_key(),
        worker_visibility_timeout_s=VISIBILITY_S,
    )
    store = open_store(settings.store_url)
    keeper = StatusKeeper(etcd_client, store, etcd_prefix, notifier=hook_notifier(settings, store))
    worker = Worker(settings, tmp_path)
    try:
        yield settings, store, keeper, worker
    finally:
        worker.stop()
        store.close()


def add_hook(store, url: str, events: tuple[str, ...], user: str = "alice") -> hooks.Hook:
    hook = hooks.Hook(hooks.new_hook_id(), user, url, events, time.time())
    store.add_hook(hook)
    return hook


def submit(store, keeper, job_id: str, user: str = "alice") -> None:
    store.create(JobRecord(job_id, user, "n", "name: n\n", time.time()))
    keeper.create(job_id)


def delivered(store, hook_id: str) -> list[hooks.Delivery]:
    return [d for d in store.list_deliveries(hook_id)[0] if d.state == hooks.DELIVERED]


def test_transitions_reach_the_owners_hook_signed_with_their_idempotency_key(env):
    settings, store, keeper, worker = env
    receiver = Receiver(free_port())
    try:
        hook = add_hook(store, receiver.url, (hooks.QUEUED, hooks.FAILED))
        add_hook(store, receiver.url, (hooks.QUEUED,), user="bob")  # not bob's job
        worker.start()
        submit(store, keeper, "job-1")
        keeper.transition("job-1", Status.PENDING, "placed on local")  # no event
        keeper.transition("job-1", Status.FAILED, "image missing", error_code="image_unavailable")
        processes.wait_until(
            lambda: len(delivered(store, hook.hook_id)) == 2, WAIT_S, "two deliveries",
            log=worker.log,
        )  # fmt: skip
        secret = hooks.hook_secret(settings.secrets_key.get_secret_value(), hook.hook_id)
        by_event = {}
        for headers, body in receiver.requests:
            assert hooks.verify(secret, body, headers["x-dlaas-signature"])
            data = json.loads(body)
            assert headers["x-dlaas-idempotency-key"] == data["idempotency_key"]
            by_event[data["event"]] = data
        assert sorted(by_event) == ["failed", "queued"]
        failed = by_event["failed"]
        assert (failed["job_id"], failed["status"], failed["reason"], failed["error_code"]) == (
            "job-1", "FAILED", "image missing", "image_unavailable",
        )  # fmt: skip
        assert failed["idempotency_key"] == hooks.idempotency_key(hook.hook_id, "job-1", 2)
        # Another key forges nothing.
        other = hooks.hook_secret("another-key", hook.hook_id)
        assert not hooks.verify(
            other, receiver.requests[0][1], receiver.requests[0][0]["x-dlaas-signature"]
        )
    finally:
        receiver.close()


def test_a_hook_to_the_platforms_own_host_is_refused(env):
    # As an attacker would: a hook at the host's loopback, where the platform's etcd, S3
    # and Redis listen. The worker as deployed (no allowance) posts nothing there.
    _settings, store, keeper, worker = env
    del worker.env["DLAAS_HOOKS_ALLOW_NETWORKS"]
    receiver = Receiver(free_port())
    try:
        hook = add_hook(store, receiver.url.replace("127.0.0.1", "localhost"), (hooks.QUEUED,))
        worker.start()
        submit(store, keeper, "job-1")

        def given_up() -> list[hooks.Delivery]:
            return [d for d in store.list_deliveries(hook.hook_id)[0] if d.state == hooks.GAVE_UP]

        processes.wait_until(given_up, WAIT_S, "the refusal", log=worker.log)
        (refusal,) = given_up()
        assert refusal.attempts == 1 and refusal.last_status is None
        assert refusal.last_error == egress.refusal("url", "localhost")
        assert "DLAAS_EGRESS_ALLOW_NETWORKS" in refusal.last_error
        assert receiver.requests == []
    finally:
        receiver.close()


def test_a_receiver_that_is_down_gets_the_delivery_once_it_is_back(env):
    _settings, store, keeper, worker = env
    port = free_port()  # nothing listens there yet
    hook = add_hook(store, f"http://127.0.0.1:{port}/hook", (hooks.QUEUED,))
    worker.start()
    submit(store, keeper, "job-1")
    key = hooks.idempotency_key(hook.hook_id, "job-1", 0)

    def failed_twice() -> bool:
        d = store.get_delivery(key)
        return d is not None and d.attempts >= 2

    processes.wait_until(failed_twice, WAIT_S, "two failed attempts", log=worker.log)
    pending = store.get_delivery(key)
    assert pending.state == hooks.PENDING
    assert pending.last_status is None and "Connect" in pending.last_error
    receiver = Receiver(port)
    try:
        processes.wait_until(
            lambda: delivered(store, hook.hook_id) != [], WAIT_S, "the delivery", log=worker.log
        )
        assert [b["idempotency_key"] for b in receiver.bodies()] == [key]
        assert store.get_delivery(key).last_status == 200
    finally:
        receiver.close()


def test_a_worker_killed_mid_delivery_leaves_it_to_the_next_with_the_same_key(env):
    settings, store, keeper, worker = env
    receiver = Receiver(free_port())
    receiver.hold = True
    try:
        hook = add_hook(store, receiver.url, (hooks.COMPLETED,))
        submit(store, keeper, "job-1")
        for status in (Status.PENDING, Status.DOWNLOADING, Status.PROCESSING, Status.STORING):
            keeper.transition("job-1", status, "step")
        keeper.transition("job-1", Status.COMPLETED, "helper stored results and logs")
        worker.start()
        assert receiver.held.wait(WAIT_S), worker.log.read_text(errors="replace")
        worker.kill()  # mid-POST: the receiver has the request and has not answered
        r = redis.Redis.from_url(settings.redis_url)
        assert r.llen("celery") + r.hlen("unacked") == 1, "the task must outlive the worker"
        receiver.release.set()
        worker.start()
        processes.wait_until(
            lambda: delivered(store, hook.hook_id) != [], WAIT_S, "the redelivery",
            log=worker.log,
        )  # fmt: skip
        keys = [b["idempotency_key"] for b in receiver.bodies()]
        assert keys == [hooks.idempotency_key(hook.hook_id, "job-1", 5)] * 2
    finally:
        receiver.close()


def test_transitions_go_on_while_redis_is_down(env, redis_server):
    _settings, store, keeper, _worker = env
    add_hook(store, "http://127.0.0.1:9/hook", tuple(hooks.EVENTS))
    redis_server.stop()
    submit(store, keeper, "job-1")
    keeper.transition("job-1", Status.HALTED, "halted by the user")
    assert store.get("job-1").status == Status.HALTED
    assert [t.status for t in store.get("job-1").history] == [Status.QUEUED, Status.HALTED]


def test_a_deleted_job_or_a_user_without_hooks_queues_nothing(env):
    _settings, store, keeper, _worker = env
    notifier = keeper.notifier
    store.create(JobRecord("job-1", "carol", "n", "name: n\n", time.time()))
    t = Transition(Status.FAILED, time.time(), "x")
    assert notifier.publish("job-1", 1, t, hooks.FAILED) == 0
    add_hook(store, "http://127.0.0.1:9/hook", (hooks.FAILED,), user="carol")
    assert notifier.publish("job-1", 1, t, hooks.FAILED) == 1
    store.delete("job-1")
    assert notifier.publish("job-1", 1, t, hooks.FAILED) == 0
