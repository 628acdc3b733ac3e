"""Log follows cannot starve the API: the API of test_api (the real LCM use cases on fakes,
the real S3 and job store) served by uvicorn on a port, as `dlaas up` serves it.

One user opens 200 follows of a job that is never going to print (each used to hold one
of the 40 threads every route runs on, until the learner's next line); another user's
reads, `/health` and the admin routes answer all the while; the follows past the user's
limit get 429 with `Retry-After`; when the follower goes away its follows are freed at
once. The latency figures (p99 under load) are benchmarks/api_load.py's.
"""

from __future__ import annotations

import socket
import threading
import time
from urllib.parse import urlsplit

import httpx
import pytest
import uvicorn
from test_api import (
    ADMIN,
    ALICE,
    BOB,
    MANIFEST,
    FakeTaskQueue,
    make_settings,
    seed_users,
    start_fakes,
)

from dlaas.clients.sdk import LcmClient, SchedulerClient
from services.api.app import create_app
from services.api.follows import PER_USER

FOLLOWS = 200


def _manifest(results: str) -> str:
    return MANIFEST.format(learners=1, results=results)


@pytest.fixture
def served(s3_server, s3_client, job_store, tmp_path):
    server, addr, _, _ = start_fakes(job_store)
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
        log_poll_s=0.2,
        tasks=FakeTaskQueue(),
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    uv = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while not uv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    results = "res-follows"
    s3_client.create_bucket(Bucket=results)
    try:
        yield app, url, results
    finally:
        uv.should_exit = True
        thread.join(10)
        server.stop(0)


def submit(url: str, token: str, results: str) -> str:
    files = {"manifest": ("manifest.yml", _manifest(results), "application/yaml")}
    r = httpx.post(f"{url}/v1/jobs", files=files, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code in (200, 201, 202), r.text
    return r.json()["job_id"]


def open_follow(url: str, path: str, token: str) -> tuple[socket.socket, bytes]:
    """A follow request on a socket of its own: the socket (held open) and its status line."""
    parts = urlsplit(url)
    s = socket.create_connection((parts.hostname, parts.port), timeout=10)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        if not chunk:
            break
        head += chunk
    return s, head


def test_one_users_follows_starve_no_one_and_free_at_once_when_they_go(served):
    app, url, results = served
    alices = submit(url, ALICE, results)
    bobs = submit(url, BOB, results)
    path = f"/v1/jobs/{alices}/logs?follow=true"
    opened = []
    for _ in range(FOLLOWS):
        opened.append(open_follow(url, path, ALICE))

    bob = {"Authorization": f"Bearer {BOB}"}
    with httpx.Client(base_url=url, timeout=5) as c:
        for _ in range(50):
            assert c.get("/v1/jobs", headers=bob).status_code == 200
            assert c.get(f"/v1/jobs/{bobs}", headers=bob).status_code == 200
        assert c.get("/health").status_code in (200, 503)  # it answers
        admin = c.get("/v1/users", headers={"Authorization": f"Bearer {ADMIN}"})
        assert admin.status_code == 200
        # Bob's own follows are not counted against Alice's.
        s, head = open_follow(url, f"/v1/jobs/{bobs}/logs?follow=true", BOB)
        assert head.startswith(b"HTTP/1.1 200")
        s.close()
    heads = [head for _, head in opened]
    accepted = [h for h in heads if h.startswith(b"HTTP/1.1 200")]
    refused = [h for h in heads if h.startswith(b"HTTP/1.1 429")]
    assert len(accepted) == PER_USER and len(refused) == FOLLOWS - PER_USER
    assert b"retry-after: " in refused[0].lower()

    for s, _ in opened:
        s.close()
    gone = time.monotonic()
    while app.state.follows.held.get("alice") and time.monotonic() - gone < 1.0:
        time.sleep(0.02)
    assert not app.state.follows.held.get("alice"), "follows still held 1 s after the client left"
    s, head = open_follow(url, path, ALICE)
    assert head.startswith(b"HTTP/1.1 200")
    s.close()
