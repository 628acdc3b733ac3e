"""Attacks on the API's connections to user-named stores (test_api's `env`: a real API, S3
and job store): a manifest's `connection` pointing at this host's ports, at a cloud's
metadata address or at a name that resolves to loopback is refused at submit and again at
connect (results, metrics, logs), with one answer whether a port is open or closed, and nothing
ever connects there."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from test_api import ALICE, allow_networks, auth, env  # noqa: F401 - env is a fixture

from dlaas.domain import egress
from dlaas.local.processes import free_port


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A real listening port on loopback (a stand-in for etcd or Redis); the test checks
    afterwards that nobody connected to it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.settimeout(0.2)
    try:
        yield sock
    finally:
        sock.close()


def nobody_connected(sock: socket.socket) -> bool:
    try:
        conn, _ = sock.accept()
    except TimeoutError:
        return True
    conn.close()
    return False


def with_store(env, endpoint: str) -> str:  # noqa: F811
    return env.manifest().replace(
        "    connection:\n", f"    connection:\n      endpoint: {endpoint}\n"
    )


def submit_to(env, endpoint: str):  # noqa: F811
    return env.submit(manifest=with_store(env, endpoint))


def test_an_inside_store_is_refused_at_submit_with_one_answer(env, listener):  # noqa: F811
    open_port = listener.getsockname()[1]
    answers = {}
    for name, endpoint in {
        "open": f"http://127.0.0.1:{open_port}",
        "closed": f"http://127.0.0.1:{free_port()}",
        "metadata": "http://169.254.169.254/latest/meta-data",
        "mapped": f"http://[::ffff:127.0.0.1]:{open_port}",
        "name": f"http://localhost:{open_port}",
    }.items():
        r = submit_to(env, endpoint)
        assert r.status_code == 422, (name, r.text)
        body = r.json()
        assert body["error"] == "address_refused", body
        answers[name] = body["message"]
        assert str(open_port) not in r.text  # nothing about the port, open or closed
    # The open and the closed port read the same: the answer maps nothing.
    assert answers["open"] == answers["closed"]
    assert answers["open"] == egress.refusal("data_stores[0].connection.endpoint", "127.0.0.1")
    assert answers["name"].startswith("data_stores[0].connection.endpoint: localhost is not")
    assert "127.0.0.1" not in answers["name"]
    assert nobody_connected(listener)
    assert env.client.get("/v1/jobs", headers=auth(ALICE)).json()["jobs"] == []


def test_the_operator_may_allow_an_inside_network(env, listener):  # noqa: F811
    allow_networks(env, "127.0.0.0/8")
    r = submit_to(env, f"http://localhost:{listener.getsockname()[1]}")
    assert r.status_code == 201, r.text


@pytest.mark.parametrize("route", ["results", "metrics", "logs", "logs?follow=true"])
def test_a_stored_job_at_an_inside_address_is_a_4xx_at_connect(env, listener, route):  # noqa: F811
    # Jobs stored while the operator allowed loopback (or a name that resolved outside at
    # submit): once the rule refuses the address, the routes refuse before connecting.
    allow_networks(env, "127.0.0.0/8")
    jobs = {
        "open": submit_to(env, f"http://127.0.0.1:{listener.getsockname()[1]}"),
        "closed": submit_to(env, f"http://127.0.0.1:{free_port()}"),
    }
    ids = {k: r.json()["job_id"] for k, r in jobs.items()}
    for job_id in ids.values():
        env.finish(job_id)
    allow_networks(env, "")
    answers = {}
    for name, job_id in ids.items():
        r = env.client.get(f"/v1/jobs/{job_id}/{route}", headers=auth(ALICE))
        assert r.status_code == 422, (name, r.text)
        assert r.json()["error"] == "address_refused"
        answers[name] = r.json()["message"]
    assert answers["open"] == answers["closed"]
    assert nobody_connected(listener)


def test_the_platforms_own_store_on_loopback_keeps_working(env):  # noqa: F811
    # The platform's S3 is on 127.0.0.1 here: only endpoints users name are checked.
    job_id = env.submit().json()["job_id"]
    env.finish(job_id)
    r = env.client.get(f"/v1/jobs/{job_id}/metrics", headers=auth(ALICE))
    assert r.status_code == 200, r.text


def test_an_allowed_store_that_does_not_answer_is_a_503_not_a_500(env):  # noqa: F811
    # The metrics route was a 500 for such a job (the connection error reached no handler),
    # the logs route a 200 with an empty body.
    allow_networks(env, "127.0.0.0/8")
    job_id = submit_to(env, f"http://127.0.0.1:{free_port()}").json()["job_id"]
    env.finish(job_id)
    for route in ("metrics", "results", "logs"):
        r = env.client.get(f"/v1/jobs/{job_id}/{route}", headers=auth(ALICE))
        assert (r.status_code, r.json()["error"]) == (503, "unavailable"), (route, r.text)
        assert "Retry-After" in r.headers and "Traceback" not in r.text
