"""Who is calling: bearer tokens looked up in the job store, and who may see which job
(the domain's rule, dlaas.domain.authz).

`Authenticator` maps a token to a `Caller` on EVERY request by the token's SHA-256 in the
store (no cache), so a token revoked through one API replica fails at once on all of them.
The bootstrap admin token comes from the settings (DLAAS_API_ADMIN_TOKEN); every other
account lives in the store (`dlaas users add`). Someone else's job looks exactly like a
missing one (`JobNotFound`), so a user cannot learn that a job id exists.

Guessing tokens is rate-limited per client address (`FailureLimiter`): past
`max_failures` failed checks within `window_s`, every request from that address is refused
(429 with Retry-After) before its token is looked at, so a right guess is not even
noticed until the window frees. Each failure is counted on /metrics
(`dlaas_api_auth_failures_total`, by reason; `dlaas_api_auth_refused_total` for requests
refused by the limit) and each address that reaches the limit is one audit entry
(`auth-failures`: the address, how many failures, for how long it is refused), not one per
guess. The failures are counted in Redis (`dlaas.adapters.failure_counts`), so the limit
holds across the API replicas; while Redis does not answer, each replica's own count is the
limit. A good token costs no Redis call: only failed checks are counted there, and an
address found over the limit is refused from this replica's memory until its window frees.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import NoReturn, Protocol

from prometheus_client import CollectorRegistry, Counter
from starlette.concurrency import run_in_threadpool

from dlaas.adapters.store.base import JobStore
from dlaas.domain import authz
from dlaas.domain.accounts import ADMIN_USER, DEFAULT_TEAM, audit_entry, token_hash
from dlaas.domain.errors import TemporaryError
from services.api.errors import Forbidden, Unauthorized

log = logging.getLogger(__name__)

# The audit log's actor for what nobody signed in did.
ANONYMOUS = "-"


class TooManyFailures(TemporaryError):
    """Too many failed token checks from the caller's address (HTTP 429, Retry-After)."""

    code = "rate_limited"


def client_key(address: str) -> str:
    """What one client is: its IPv4 address, or its IPv6 /64 (one host owns a whole /64,
    so counting single IPv6 addresses would give it 2**64 tries)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address[:64]  # not an address (a test client's name): as it is, bounded
    if ip.version == 4:
        return str(ip)
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ipaddress.ip_network(f"{ip}/64", strict=False))


class FailureCounts(Protocol):
    """Failures counted where every API replica sees them (dlaas.adapters.failure_counts)."""

    def add(self, key: str, limit: int, window_s: float) -> tuple[int, float]:
        """Record one failure of `key` unless `limit` are already within the last
        `window_s`; the failures within the window counting this one (above `limit`: it
        was not recorded), and from `limit` on the seconds until the oldest leaves it.
        Raises TemporaryError while the counts cannot be reached."""
        ...


class _Client:
    """One address's failures seen by this replica, and until when the shared counts said
    it is refused."""

    __slots__ = ("times", "until")

    def __init__(self, max_failures: int):
        self.times: deque[float] = deque(maxlen=max_failures)
        self.until = 0.0


class FailureLimiter:
    """Failed token checks per client, over a sliding window; thread-safe and bounded
    (at most `max_clients` clients, the least recently failing forgotten first).

    With `shared` counts (Redis), a failure is counted there, so the limit holds across
    API replicas; an address found over the limit is remembered here until its window
    frees, so its further requests cost no call to `shared`. This replica also counts on
    its own, always: while `shared` does not answer (logged once, asked again every
    `shared_retry_s`), that count is the limit, never none at all.
    """

    def __init__(
        self,
        max_failures: int = 20,
        window_s: float = 60.0,
        max_clients: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
        *,
        shared: FailureCounts | None = None,
        shared_retry_s: float = 5.0,
    ):
        self.max_failures, self.window_s = max_failures, window_s
        self._max_clients, self._clock = max_clients, clock
        self._clients: OrderedDict[str, _Client] = OrderedDict()
        self._lock = threading.Lock()
        self._shared, self._shared_retry_s = shared, shared_retry_s
        self._shared_down_until: float | None = None  # None: answering

    def _recent(self, key: str, now: float) -> _Client | None:
        client = self._clients.get(key)
        if client is None:
            return None
        times = client.times
        while times and times[0] <= now - self.window_s:
            times.popleft()
        if not times and client.until <= now:
            del self._clients[key]
            return None
        return client

    def _entry(self, key: str, now: float) -> _Client:
        client = self._recent(key, now)
        if client is None:
            client = self._clients[key] = _Client(self.max_failures)
            while len(self._clients) > self._max_clients:
                self._clients.popitem(last=False)
        self._clients.move_to_end(key)
        return client

    def retry_after(self, key: str) -> float:
        """0 while `key` may try; else the seconds until it may (from this replica's count,
        or what the shared counts said). Never asks the shared counts."""
        now = self._clock()
        with self._lock:
            client = self._recent(key, now)
            if client is None:
                return 0.0
            wait = client.until - now
            if len(client.times) >= self.max_failures:
                wait = max(wait, client.times[0] + self.window_s - now)
            return max(0.0, wait)

    def failed(self, key: str) -> int:
        """Record one failure of `key`; the failures within the window, this one included:
        across replicas while the shared counts answer (above `max_failures` when another
        replica had already reached the limit), else this replica's."""
        now = self._clock()
        with self._lock:
            times = self._entry(key, now).times
            times.append(now)
            here = len(times)
        counted = self._count_shared(key, now)
        if counted is None:
            return here
        n, wait = counted
        if n >= self.max_failures:
            with self._lock:
                client = self._entry(key, now)
                client.until = max(client.until, now + wait)
        # This replica's own count can be the higher one only when Redis lost its counts.
        return max(n, here)

    def _count_shared(self, key: str, now: float) -> tuple[int, float] | None:
        """The shared count after this failure; None while it does not answer."""
        if self._shared is None:
            return None
        down_until = self._shared_down_until
        if down_until is not None and now < down_until:
            return None
        try:
            counted = self._shared.add(key, self.max_failures, self.window_s)
        except TemporaryError as exc:
            with self._lock:
                first = self._shared_down_until is None
                self._shared_down_until = now + self._shared_retry_s
            if first:
                log.warning(
                    "%s; failed token checks are limited per API replica until it answers",
                    exc.message,
                )
            return None
        if down_until is not None:
            with self._lock:
                again = self._shared_down_until is not None
                self._shared_down_until = None
            if again:
                log.warning("failure counts answer again; the token-guessing limit is shared")
        return counted


class AuthMetrics:
    """The counters /metrics shows of token checks."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.failures = Counter(
            "dlaas_api_auth_failures_total",
            "Failed token checks, by reason (missing, malformed, unknown, expired, no_user)",
            ["reason"],
            registry=registry,
        )
        self.refused = Counter(
            "dlaas_api_auth_refused_total",
            "Requests refused by the token-guessing limit (their address failed too many checks)",
            registry=registry,
        )


class Caller(authz.Caller):
    """The domain's Caller (its one rule: `can_see`), with the API's refusal of a route
    that is for administrators only."""

    def require_admin(self) -> None:
        if not self.admin:
            raise Forbidden("this route is for administrators only")


class _Failed(Exception):
    """A failed token check, with the reason /metrics counts it by (becomes Unauthorized)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason, self.message = reason, message


class Authenticator:
    def __init__(
        self,
        store: JobStore,
        admin_token: str,
        clock: Callable[[], float] = time.time,
        *,
        limiter: FailureLimiter | None = None,
        metrics: AuthMetrics | None = None,
    ):
        if not admin_token:
            raise ValueError("DLAAS_API_ADMIN_TOKEN must not be empty")
        self._store = store
        self._admin = admin_token
        self._clock = clock
        self.limiter = limiter or FailureLimiter()
        self.metrics = metrics or AuthMetrics(CollectorRegistry())

    async def caller(self, authorization: str | None, client: str = "") -> Caller:
        """The caller for an `Authorization` header value sent from address `client`;
        raise Unauthorized, or TooManyFailures while that address is over its limit.

        On the event loop (the API's dependency): a token's check is two store reads by
        primary key, less work than the hop to a worker thread and back, so it runs here;
        only a failure goes to a thread, as counting it may wait for Redis and write the
        audit log."""
        key = self._admitted(client)
        try:
            return self._check(authorization)
        except _Failed as exc:
            await run_in_threadpool(self._failed, key, exc)
            raise AssertionError("unreachable: _failed raises") from None

    def _admitted(self, client: str) -> str:
        """The client's key; TooManyFailures while it is over its limit (from memory)."""
        key = client_key(client)
        wait = self.limiter.retry_after(key)
        if wait > 0:
            self._refuse(wait)
        return key

    def _failed(self, key: str, exc: _Failed) -> NoReturn:
        self.metrics.failures.labels(exc.reason).inc()
        if exc.reason != "missing":  # a request without a token guesses nothing
            self._count(key)
        raise Unauthorized(exc.message) from None

    def _refuse(self, wait: float) -> None:
        self.metrics.refused.inc()
        raise TooManyFailures(
            "too many failed token checks from your address; try again later",
            delay_s=max(1.0, wait),
        )

    def _count(self, key: str) -> None:
        n = self.limiter.failed(key)
        if n > self.limiter.max_failures:
            # Over the limit another replica saw it reach: refused like the rest.
            self._refuse(self.limiter.retry_after(key))
        if n < self.limiter.max_failures:
            return
        # One audit entry per address reaching the limit, not one per guess: the log stays
        # readable, and guessing cannot fill it.
        wait = self.limiter.retry_after(key)
        detail = (
            f"{n} failed token checks within {self.limiter.window_s:g} s; refused for {wait:.0f} s"
        )
        log.warning("token checks from %s: %s", key, detail)
        try:
            self._store.append_audit(
                audit_entry(self._clock(), ANONYMOUS, "auth-failures", key, detail)
            )
        except Exception:  # broad: the refusal goes on; a store hiccup must not make a 500
            log.exception("could not audit the failed token checks from %s", key)

    def _check(self, authorization: str | None) -> Caller:
        if not authorization:
            raise _Failed(
                "missing", "missing Authorization header; send 'Authorization: Bearer <token>'"
            )
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or len(token) > 256:
            raise _Failed("malformed", "the Authorization header must be 'Bearer <token>'")
        # Constant-time comparison: the time a refusal takes says nothing about the token.
        if hmac.compare_digest(token.encode(), self._admin.encode()):
            return Caller(ADMIN_USER, DEFAULT_TEAM, admin=True)
        # Stored tokens are found by their hash: an equality lookup on a hash of the token
        # reveals nothing through its timing that helps to guess a token.
        record = self._store.find_token(token_hash(token))
        if record is None:
            raise _Failed("unknown", "unknown API token")
        if not record.valid_at(self._clock()):
            raise _Failed("expired", "this API token was revoked or has expired")
        user = self._store.get_user(record.user)
        if user is None:
            raise _Failed("no_user", "this API token's user no longer exists")
        return Caller(user.name, user.team, admin=user.admin)
