"""Token guessing over HTTP (test_api's `env`: the real API app): many wrong tokens from one
address end in 429 with Retry-After, while a good token from another address still works;
the failures are on /metrics and summarized in the audit log."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from test_api import ADMIN, ALICE, auth, env  # noqa: F401 - env is a fixture

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
