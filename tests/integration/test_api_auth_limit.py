"""Token guessing over HTTP (test_api's `env`: the real API app): many wrong tokens from one
address end in 429 with Retry-After, while a good token from another address still works;
the failures are on /metrics and summarized in the audit log."""

from __future__ import annotations

import json
import re

import httpx
from fastapi.testclient import TestClient
from test_api import ADMIN, ALICE, auth, env  # noqa: F401 - env is a fixture
from test_cli import server  # noqa: F401 - a fixture

ATTACKER, USER = ("203.0.113.66", 40000), ("198.51.100.10", 40001)


def test_many_wrong_tokens_from_one_address_are_429_others_unaffected(env):  # noqa: F811
    app = env.client.app
    attacker, user = TestClient(app, client=ATTACKER), TestClient(app, client=USER)
    limit = app.state.deps.api.auth_max_failures
    codes = [
        attacker.get("/v1/jobs", headers=auth(f"dlt_guess{i}")).status_code
        for i in range(limit + 30)
    ]
    assert codes[:limit] == [401] * limit
    assert set(codes[limit:]) == {429}
    r = attacker.get("/v1/jobs", headers=auth(ALICE))  # even a right guess goes unnoticed
    assert r.status_code == 429, r.text
    assert r.json()["error"] == "rate_limited"
    assert 1 <= int(r.headers["Retry-After"]) <= 60
    assert user.get("/v1/jobs", headers=auth(ALICE)).status_code == 200
    # Unauthenticated routes stay open to everybody.
    assert attacker.get("/health").status_code in (200, 503)
    metrics = attacker.get("/metrics").text
    failed = re.search(
        r'^dlaas_api_auth_failures_total\{[^}]*reason="unknown"[^}]*\} (\S+)$',
        metrics,
        re.MULTILINE,
    )
    assert failed and float(failed.group(1)) == limit, metrics
    assert "dlaas_api_auth_refused_total" in metrics
    entries = user.get("/v1/audit", headers=auth(ADMIN)).json()["entries"]
    summary = [e for e in entries if e["action"] == "auth-failures"]
    assert len(summary) == 1 and summary[0]["target"] == ATTACKER[0]
    assert "dlt_guess" not in str(entries)


def test_over_real_sockets_the_limit_is_per_source_address(server):  # noqa: F811
    # A real uvicorn on 127.0.0.1: the attacker connects from 127.0.0.2 (also loopback), the
    # user from 127.0.0.1; the address the limit counts is the connection's own.
    cfg = json.loads((server.home / "client.json").read_text())
    attacker = httpx.Client(
        base_url=cfg["url"], transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=10
    )
    user = httpx.Client(base_url=cfg["url"], timeout=10)
    with attacker, user:
        codes = [
            attacker.get("/v1/jobs", headers=auth(f"dlt_guess{i}")).status_code for i in range(200)
        ]
        assert codes.count(401) == 20 and codes.count(429) == 180, codes
        limited = attacker.get("/v1/jobs", headers=auth(ALICE))
        assert limited.status_code == 429 and int(limited.headers["Retry-After"]) >= 1
        assert user.get("/v1/jobs", headers=auth(ALICE)).status_code == 200
