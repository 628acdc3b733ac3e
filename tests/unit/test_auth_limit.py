"""Failed token checks per client address: the limit, its window, its bounds, and what is
counted and audited (services/api/auth.py; over HTTP in tests/integration/test_api_auth_limit.py)."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from dlaas.adapters.store.sqlite import SqliteJobStore
from dlaas.domain.accounts import TokenRecord, User, token_hash
from services.api.auth import (
    Authenticator,
    AuthMetrics,
    FailureLimiter,
    TooManyFailures,
    client_key,
)
from services.api.errors import Unauthorized


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(tmp_path):
    s = SqliteJobStore(tmp_path / "jobs.db")
    s.add_user(User("alice", "nlp", False, 1.0))
    s.add_token(TokenRecord(token_hash("good"), "alice", "good", 1.0))
    yield s
    s.close()


def make(store, clock, registry=None):
    limiter = FailureLimiter(max_failures=3, window_s=60.0, clock=clock)
    metrics = AuthMetrics(registry or CollectorRegistry())
    return Authenticator(store, "admin-tok", clock, limiter=limiter, metrics=metrics)


def test_wrong_tokens_from_one_address_are_refused_then_let_through_again(store):
    clock, registry = Clock(), CollectorRegistry()
    auth = make(store, clock, registry)
    for _ in range(3):
        with pytest.raises(Unauthorized):
            asyncio.run(auth.caller("Bearer wrong", "198.51.100.7"))
    # Over the limit: refused before the token is looked at, even the right one.
    with pytest.raises(TooManyFailures) as limited:
        asyncio.run(auth.caller("Bearer good", "198.51.100.7"))
    assert limited.value.delay_s == 60.0
    # Another address is not touched by it.
    assert asyncio.run(auth.caller("Bearer good", "198.51.100.8")).user == "alice"
    clock.now += 30
    with pytest.raises(TooManyFailures) as later:
        asyncio.run(auth.caller("Bearer wrong", "198.51.100.7"))
    assert later.value.delay_s == 30.0
    clock.now += 30.5  # the window has passed
    assert asyncio.run(auth.caller("Bearer good", "198.51.100.7")).user == "alice"
    value = registry.get_sample_value
    assert value("dlaas_api_auth_failures_total", {"reason": "unknown"}) == 3
    assert value("dlaas_api_auth_refused_total") == 2


def test_each_address_reaching_the_limit_is_one_audit_entry(store):
    auth = make(store, Clock())
    for _ in range(3):
        with pytest.raises(Unauthorized):
            asyncio.run(auth.caller("Bearer wrong-" + "x" * 20, "198.51.100.7"))
    for _ in range(5):
        with pytest.raises(TooManyFailures):
            asyncio.run(auth.caller("Bearer wrong", "198.51.100.7"))
    entries, total = store.list_audit(offset=0, limit=10)
    assert total == 1
    (e,) = entries
    assert (e.actor, e.action, e.target) == ("-", "auth-failures", "198.51.100.7")
    assert e.detail == "3 failed token checks within 60 s; refused for 60 s"
    assert "wrong" not in e.detail  # never a token, not even a wrong one


def test_a_request_without_a_token_is_counted_but_guesses_nothing(store):
    registry = CollectorRegistry()
    auth = make(store, Clock(), registry)
    for _ in range(10):
        with pytest.raises(Unauthorized):
            asyncio.run(auth.caller(None, "198.51.100.7"))
    assert asyncio.run(auth.caller("Bearer good", "198.51.100.7")).user == "alice"
    assert registry.get_sample_value("dlaas_api_auth_failures_total", {"reason": "missing"}) == 10


def test_ipv6_clients_are_counted_per_64_and_mapped_ipv4_as_ipv4():
    assert client_key("2001:db8:1:2:aaaa::1") == client_key("2001:db8:1:2:bbbb::9")
    assert client_key("2001:db8:1:2:aaaa::1") == "2001:db8:1:2::/64"
    assert client_key("::ffff:198.51.100.7") == "198.51.100.7"
    assert client_key("testclient") == "testclient"


def test_the_limiter_forgets_the_least_recent_clients_past_its_bound():
    limiter = FailureLimiter(max_failures=1, window_s=60.0, max_clients=2, clock=Clock())
    for key in ("a", "b", "c"):
        limiter.failed(key)
    assert limiter.retry_after("a") == 0.0  # forgotten
    assert limiter.retry_after("b") > 0 and limiter.retry_after("c") > 0
