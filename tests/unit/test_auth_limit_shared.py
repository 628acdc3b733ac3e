"""The token-guessing limit across API replicas (services/api/auth.py's FailureLimiter over a
shared `FailureCounts`): two replicas, each its own limiter, over one FAKE of the counts with
the Redis script's rules; with the counts down, each replica's own limit. Against the real
Redis and two real API apps: tests/integration/test_api_auth_limit_replicas.py."""

from __future__ import annotations

import asyncio
import logging
from collections import deque

import pytest
from prometheus_client import CollectorRegistry

from dlaas.adapters.store.sqlite import SqliteJobStore
from dlaas.domain.accounts import TokenRecord, User, token_hash
from dlaas.domain.errors import TemporaryError
from services.api.auth import Authenticator, AuthMetrics, FailureLimiter, TooManyFailures
from services.api.errors import Unauthorized

LIMIT, WINDOW = 3, 60.0
ATTACKER, USER = "203.0.113.66", "198.51.100.10"


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeCounts:
    """FAKE of the shared counts (dlaas.adapters.failure_counts' rules): a sliding window
    per key, a failure not recorded once `limit` are in it; `down` raises as Redis would."""

    def __init__(self, clock: Clock):
        self.clock, self.down, self.calls = clock, False, 0
        self.times: dict[str, deque[float]] = {}

    def add(self, key: str, limit: int, window_s: float) -> tuple[int, float]:
        self.calls += 1
        if self.down:
            raise TemporaryError("failure counts: Redis does not answer (refused)")
        now = self.clock()
        times = self.times.setdefault(key, deque())
        while times and times[0] <= now - window_s:
            times.popleft()
        n = len(times) + 1
        if n <= limit:
            times.append(now)
        return n, (times[0] + window_s - now if n >= limit else 0.0)


@pytest.fixture
def store(tmp_path):
    s = SqliteJobStore(tmp_path / "jobs.db")
    s.add_user(User("alice", "nlp", False, 1.0))
    s.add_token(TokenRecord(token_hash("good"), "alice", "good", 1.0))
    yield s
    s.close()


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def counts(clock):
    return FakeCounts(clock)


def replica(store, clock, counts, registry=None) -> Authenticator:
    limiter = FailureLimiter(LIMIT, WINDOW, clock=clock, shared=counts, shared_retry_s=5.0)
    metrics = AuthMetrics(registry or CollectorRegistry())
    return Authenticator(store, "admin-tok", clock, limiter=limiter, metrics=metrics)


def wrong(auth: Authenticator, address: str = ATTACKER) -> type[Exception]:
    with pytest.raises((Unauthorized, TooManyFailures)) as refused:
        asyncio.run(auth.caller("Bearer wrong", address))
    return refused.type


def test_failures_spread_over_two_replicas_reach_one_limit(store, clock, counts):
    registry = CollectorRegistry()
    a, b = replica(store, clock, counts, registry), replica(store, clock, counts)
    assert [wrong(a), wrong(b), wrong(a)] == [Unauthorized] * LIMIT
    # b has seen one failure of its own, yet the next guess there is refused: the count is shared.
    clock.now += 10
    with pytest.raises(TooManyFailures) as limited:
        asyncio.run(b.caller("Bearer wrong", ATTACKER))
    assert limited.value.delay_s == 50.0  # until the first failure leaves the window
    # Both now refuse the address from memory, even its right token, asking the counts nothing.
    calls = counts.calls
    for auth in (a, b):
        with pytest.raises(TooManyFailures):
            asyncio.run(auth.caller("Bearer good", ATTACKER))
    assert counts.calls == calls
    # Another address is untouched, and a good token costs no call to the counts.
    assert (
        asyncio.run(a.caller("Bearer good", USER)).user
        == asyncio.run(b.caller("Bearer good", USER)).user
        == "alice"
    )
    assert counts.calls == calls
    # The refused guess was not recorded: the window frees when the first failure leaves it.
    clock.now += 50.5
    assert asyncio.run(b.caller("Bearer good", ATTACKER)).user == "alice"
    value = registry.get_sample_value
    assert value("dlaas_api_auth_failures_total", {"reason": "unknown"}) == 2
    assert value("dlaas_api_auth_refused_total") == 1


def test_the_address_reaching_the_shared_limit_is_one_audit_entry(store, clock, counts):
    a, b = replica(store, clock, counts), replica(store, clock, counts)
    for auth in (a, b, a, b, a, b):
        wrong(auth)
    entries, total = store.list_audit(offset=0, limit=10)
    assert total == 1, entries
    assert (entries[0].action, entries[0].target) == ("auth-failures", ATTACKER)


def test_counts_down_each_replica_limits_on_its_own_and_says_so_once(store, clock, counts, caplog):
    a, b = replica(store, clock, counts), replica(store, clock, counts)
    counts.down = True
    with caplog.at_level(logging.WARNING, logger="services.api.auth"):
        assert [wrong(a) for _ in range(LIMIT + 2)] == [Unauthorized] * LIMIT + [
            TooManyFailures
        ] * 2
        assert [wrong(b) for _ in range(LIMIT + 1)] == [Unauthorized] * LIMIT + [TooManyFailures]
    down = [r for r in caplog.records if "limited per API replica" in r.getMessage()]
    assert len(down) == 2  # one line per replica, not one per failure
    assert "Redis does not answer" in down[0].getMessage()
    # While down, the counts are asked again only every few seconds, not on each failure.
    assert counts.calls == 2
    wrong(a, USER)
    assert counts.calls == 2
    clock.now += 5
    counts.down = False
    with caplog.at_level(logging.WARNING, logger="services.api.auth"):
        wrong(a, USER)
    assert counts.calls == 3
    assert any("answer again" in r.getMessage() for r in caplog.records)


def test_a_limit_reached_here_holds_though_the_counts_lost_theirs(store, clock, counts):
    a = replica(store, clock, counts)
    for _ in range(LIMIT):
        wrong(a)
    counts.times.clear()  # Redis restarted, its counts gone
    with pytest.raises(TooManyFailures):
        asyncio.run(a.caller("Bearer good", ATTACKER))


def test_a_learned_refusal_is_forgotten_once_its_window_ends(clock, counts):
    limiter = FailureLimiter(1, WINDOW, max_clients=2, clock=clock, shared=counts)
    counts.add("x", 1, WINDOW)  # another replica's failure
    assert limiter.failed("x") == 2 and limiter.retry_after("x") == 60.0
    clock.now += 60
    assert limiter.retry_after("x") == 0.0
    for key in ("y", "z"):  # and bounded: the oldest client goes past max_clients
        limiter.failed(key)
    assert "x" not in limiter._clients
