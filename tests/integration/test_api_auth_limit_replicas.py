"""Token guessing against TWO API replicas (two real API apps over one job store and one real
Redis, as `dlaas up` runs them): failures spread over both count toward one limit, Redis
holds only the address and forgets it with the window, and with Redis down each replica's
own limit still holds."""

from __future__ import annotations

import logging

import pytest
import redis
from fastapi.testclient import TestClient
from test_api import ALICE, FakeTaskQueue, auth, make_settings, seed_users, start_fakes

from dlaas.adapters.failure_counts import PREFIX
from dlaas.clients.sdk import LcmClient, SchedulerClient
from services.api.app import create_app

ATTACKER, OTHER, USER = ("203.0.113.66", 40000), ("203.0.113.99", 40002), ("198.51.100.10", 40001)


@pytest.fixture
def replicas(s3_server, s3_client, job_store, redis_server, tmp_path):
    """Two API apps, `api-1` and `api-2`, sharing the store and the Redis."""
    server, addr, _lcm, _sched = start_fakes(job_store)
    settings, api = make_settings(s3_server, tmp_path / "jobs.db", addr)
    settings = settings.model_copy(update={"redis_url": redis_server.url})
    seed_users(job_store)
    apps = [
        create_app(
            settings,
            api.model_copy(update={"replica": f"api-{i}"}),
            store=job_store,
            lcm=LcmClient(addr),
            s3=s3_client,
            docker=False,
            scheduler=SchedulerClient(addr),
            tasks=FakeTaskQueue(),
        )
        for i in (1, 2)
    ]
    try:
        with TestClient(apps[0]) as one, TestClient(apps[1]) as two:
            yield one.app, two.app
    finally:
        server.stop(0)


def clients(apps, address) -> list[TestClient]:
    return [TestClient(app, client=address) for app in apps]


def test_wrong_tokens_spread_over_two_replicas_reach_one_limit(replicas, redis_server):
    limit = replicas[0].state.deps.api.auth_max_failures
    a1, a2 = clients(replicas, ATTACKER)
    codes = [
        (a1 if i % 2 else a2).get("/v1/jobs", headers=auth(f"dlt_guess{i}")).status_code
        for i in range(limit)
    ]
    assert codes == [401] * limit
    # The 21st is refused on either replica: each would have allowed 10 more on its own.
    for attacker in (a1, a2, a2, a1):
        r = attacker.get("/v1/jobs", headers=auth("dlt_guess-more"))
        assert r.status_code == 429, r.text
        assert 1 <= int(r.headers["Retry-After"]) <= 60
    for attacker in (a1, a2):  # even a right guess
        assert attacker.get("/v1/jobs", headers=auth(ALICE)).status_code == 429
    for user in clients(replicas, USER):
        assert user.get("/v1/jobs", headers=auth(ALICE)).status_code == 200
    # Redis holds the address only, at most `limit` failures, expiring with the window.
    r = redis.Redis.from_url(redis_server.url)
    assert r.keys(PREFIX + "*") == [f"{PREFIX}{ATTACKER[0]}".encode()]
    key = PREFIX + ATTACKER[0]
    assert r.zcard(key) == limit
    assert 0 < r.pttl(key) <= 60_000
    assert not any(b"guess" in m for m in r.zrange(key, 0, -1))
    entries = replicas[0].state.deps.store.list_audit(offset=0, limit=50)[0]
    assert [e.target for e in entries if e.action == "auth-failures"] == [ATTACKER[0]]


def test_redis_down_each_replica_still_limits(replicas, redis_server, caplog):
    limit = replicas[0].state.deps.api.auth_max_failures
    redis_server.stop()
    with caplog.at_level(logging.WARNING, logger="services.api.auth"):
        for attacker in clients(replicas, OTHER):
            codes = [
                attacker.get("/v1/jobs", headers=auth(f"dlt_guess{i}")).status_code
                for i in range(limit + 5)
            ]
            assert codes == [401] * limit + [429] * 5
    down = [r.getMessage() for r in caplog.records if "per API replica" in r.getMessage()]
    assert len(down) == 2, down  # once per replica, not per failure
    for user in clients(replicas, USER):
        assert user.get("/v1/jobs", headers=auth(ALICE)).status_code == 200
