"""`GET /health`: cheap liveness by default, each component's answer with `components=true`.

Against the same app and FAKE LCM/scheduler as test_api.py (real SQLite store, real S3);
a component "down" is an address where nothing listens, or a store whose reads fail.
"""

from __future__ import annotations

import pytest
import test_api

from dlaas.local.processes import free_port

env = test_api.env


@pytest.fixture
def deps(env):
    return env.client.app.state.deps


def test_plain_health_is_liveness_only(env):
    assert env.client.get("/health").json() == {"status": "ok"}


def test_components_report_every_dependency_answering(env):
    r = env.client.get("/health", params={"components": "true"})
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok"
    assert set(body["components"]) == {"store", "lcm", "scheduler", "s3"}
    assert all(c["ok"] for c in body["components"].values()), body
    assert body["components"]["lcm"]["detail"] == "1 of 1 replicas serving"
    assert body["components"]["scheduler"]["detail"] == "SERVING"


def test_a_component_not_answering_is_named_and_the_report_is_degraded(env, deps, monkeypatch):
    dead = f"127.0.0.1:{free_port()}"  # nothing listens there
    settings = deps.settings.model_copy(
        update={"scheduler_addr": dead, "lcm_addr": f"{deps.settings.lcm_addr},{dead}"}
    )
    monkeypatch.setattr(deps, "settings", settings)
    r = env.client.get("/health", params={"components": "true"})
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "degraded"
    parts = body["components"]
    assert parts["scheduler"] == {"ok": False, "detail": f"{dead} does not answer (UNAVAILABLE)"}
    # One LCM replica serving is enough: the others stand by (or restart).
    assert parts["lcm"]["ok"] is True
    assert parts["lcm"]["detail"].startswith("1 of 2 replicas serving; " + dead)
    assert parts["store"]["ok"] and parts["s3"]["ok"]
    assert env.client.get("/health").status_code == 200  # liveness asks the store only


def test_a_store_not_answering_fails_liveness_and_shows_in_the_report(env, deps, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("disk gone")

    monkeypatch.setattr(deps.store, "list", broken)
    r = env.client.get("/health")
    assert r.status_code == 503
    assert r.json()["error"] == "unavailable" and "job store" in r.json()["message"]
    assert "Traceback" not in r.text
    r = env.client.get("/health", params={"components": "true"})
    assert r.status_code == 200
    store = r.json()["components"]["store"]
    assert r.json()["status"] == "degraded"
    assert store == {"ok": False, "detail": "not answering (OSError)"}
