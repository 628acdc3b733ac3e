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
guess. The limit is per API replica (each counts what it sees).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter

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


class FailureLimiter:
    """Failed token checks per client, over a sliding window; thread-safe and bounded
    (at most `max_clients` clients, the least recently failing forgotten first)."""

    def __init__(
        self,
        max_failures: int = 20,
        window_s: float = 60.0,
        max_clients: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.max_failures, self.window_s = max_failures, window_s
        self._max_clients, self._clock = max_clients, clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def _recent(self, key: str, now: float) -> deque[float] | None:
        times = self._failures.get(key)
        while times and times[0] <= now - self.window_s:
            times.popleft()
        if times is not None and not times:
            del self._failures[key]
            return None
        return times

    def retry_after(self, key: str) -> float:
        """0 while `key` may try; else the seconds until its oldest failure leaves the window."""
        now = self._clock()
        with self._lock:
            times = self._recent(key, now)
            if times is None or len(times) < self.max_failures:
                return 0.0
            return max(0.0, times[0] + self.window_s - now)

    def failed(self, key: str) -> int:
        """Record one failure of `key`; the failures within the window, this one included."""
        now = self._clock()
        with self._lock:
            times = self._recent(key, now)
            if times is None:
                times = self._failures[key] = deque(maxlen=self.max_failures)
                while len(self._failures) > self._max_clients:
                    self._failures.popitem(last=False)
            self._failures.move_to_end(key)
            times.append(now)
            return len(times)


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
            "Requests refused unchecked: their address failed too many token checks",
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

    def caller(self, authorization: str | None, client: str = "") -> Caller:
        """The caller for an `Authorization` header value sent from address `client`;
        raise Unauthorized, or TooManyFailures while that address is over its limit."""
        key = client_key(client)
        wait = self.limiter.retry_after(key)
        if wait > 0:
            self.metrics.refused.inc()
            raise TooManyFailures(
                "too many failed token checks from your address; try again later",
                delay_s=max(1.0, wait),
            )
        try:
            return self._check(authorization)
        except _Failed as exc:
            self.metrics.failures.labels(exc.reason).inc()
            if exc.reason != "missing":  # a request without a token guesses nothing
                self._count(key)
            raise Unauthorized(exc.message) from None

    def _count(self, key: str) -> None:
        n = self.limiter.failed(key)
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
