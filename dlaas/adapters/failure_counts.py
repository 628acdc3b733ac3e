"""Failed token checks per client address, counted in Redis so that every API replica sees
the same counts (the API's `FailureLimiter` keeps its own count as the fallback).

One sorted set per address (`dlaas:auth-failures:<address>`, the address key only, never
token material): a member per failure, scored by Redis's own clock, so replicas on hosts
whose clocks differ still share one window. A Lua script drops the failures older than the
window, adds this one unless the limit is already reached (a refused guess does not
lengthen the refusal), and sets the key to expire with the window: at most `limit`
members per key, and no key outlives its window.
"""

from __future__ import annotations

import math
import secrets

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from dlaas.domain.errors import TemporaryError

PREFIX = "dlaas:auth-failures:"

# KEYS[1]: the address's set; ARGV: the limit, the window (ms), a random member suffix.
# Returns {failures within the window counting this one, ms until the oldest leaves it
# (0 below the limit)}; a count above the limit means this one was not recorded.
_ADD = """
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit, window = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local n = redis.call('ZCARD', KEYS[1]) + 1
if n <= limit then
  redis.call('ZADD', KEYS[1], now, now .. ':' .. ARGV[3])
  redis.call('PEXPIRE', KEYS[1], window)
end
if n < limit then return {n, 0} end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {n, math.max(0, tonumber(oldest[2]) + window - now)}
"""


class RedisFailureCounts:
    """The API's `FailureCounts` port on Redis. Short timeouts and no retries: a failed
    token check must not wait on a Redis that does not answer (the API then limits on its
    own, and asks again a few seconds later)."""

    def __init__(self, url: str, timeout_s: float = 0.5, client: redis.Redis | None = None):
        self._client = client or redis.Redis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
        )
        self._add = self._client.register_script(_ADD)

    def add(self, key: str, limit: int, window_s: float) -> tuple[int, float]:
        """Record one failure of `key` unless `limit` are already within the last
        `window_s`; the failures within the window counting this one, and from `limit` on
        the seconds until the oldest leaves it. TemporaryError while Redis does not answer."""
        window_ms = max(1, math.ceil(window_s * 1000))
        try:
            n, wait_ms = self._add(
                keys=[PREFIX + key], args=[limit, window_ms, secrets.token_hex(4)]
            )
        except (redis.RedisError, OSError) as exc:
            raise TemporaryError(f"failure counts: Redis does not answer ({exc})") from None
        return int(n), int(wait_ms) / 1000

    def close(self) -> None:
        self._client.close()
