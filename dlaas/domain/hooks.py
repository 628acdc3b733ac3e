"""Webhooks: which job transitions users hear of, and how a delivery is signed. Pure.

A user registers a hook (a URL and the events it wants). Every job transition the status
keeper mirrors to the store is mapped here to at most one event (`event_for`); the
notifier (dlaas.adapters.notify) queues a delivery to each hook of the job's owner that wants it,
and the worker (services/worker/hooks.py) POSTs it. This module is the one place all
three read: the event names, the task's name and arguments, the payload, the signature,
the idempotency key and which answers are retried. It does no I/O. Where a hook may be
POSTed is the rule every user-named endpoint passes (dlaas.domain.egress).

Signing: each hook has its own secret, HMAC-SHA256(platform key, hook id), derived and
never stored, so the store holds nothing that signs. It is shown once, when the hook is
made; a receiver checks `X-Dlaas-Signature: sha256=<hex HMAC of the raw body>`.

Delivery is at least once: a receiver may see the same delivery twice (a worker killed
mid-POST, a lost acknowledgement). Its `X-Dlaas-Idempotency-Key` (also in the body) is
the same every time: hook id, job id and the transition's sequence number.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from dlaas.domain.errors import InvalidRequest
from dlaas.domain.status import Status, Transition

DELIVER_TASK = "dlaas.deliver_hook"

# Event names, in the order a job usually meets them.
QUEUED = "queued"  # submitted: waiting for the scheduler
STARTED = "started"  # training runs (PROCESSING), also after a restart or a rescale
PREEMPTED = "preempted"  # stopped for a higher priority job; queued again, resumes later
SHRUNK = "shrunk"  # elastic: restarted with fewer learners
GROWN = "grown"  # elastic: restarted with more learners
RESCALED = "rescaled"  # the user changed the number of learners
RESTARTED = "restarted"  # an infrastructure failure or a lost node: resumes from a checkpoint
RESUMED = "resumed"  # a halted job queued again by its user
COMPLETED = "completed"
FAILED = "failed"  # with the reason and error code
HALTED = "halted"
# No transition: the job monitor saw no learner log for the job's stall_after (with the
# evidence in the reason); sent whatever the manifest's on_stall does next.
STALLED = "stalled"
EVENTS = (
    QUEUED, STARTED, PREEMPTED, SHRUNK, GROWN, RESCALED, RESTARTED, RESUMED, STALLED, COMPLETED,
    FAILED, HALTED,
)  # fmt: skip

MAX_URL = 2048
MAX_HOOKS_PER_USER = 20
SIGNATURE_HEADER = "X-Dlaas-Signature"
IDEMPOTENCY_HEADER = "X-Dlaas-Idempotency-Key"
EVENT_HEADER = "X-Dlaas-Event"
TIMEOUT_S = 5.0
MAX_ATTEMPTS = 8  # the first try and 7 retries, backing off 1, 2, 4, ... s (capped)

# Delivery log states.
PENDING = "pending"  # tried, will be tried again
DELIVERED = "delivered"  # the receiver answered 2xx
GAVE_UP = "failed"  # a 4xx the receiver will keep giving, or out of attempts

# The QUEUED reasons the LCM writes (services/lcm/service.py), by the event they are.
_REQUEUE_PREFIXES = (
    ("preempted", PREEMPTED),
    ("shrink", SHRUNK),
    ("grow", GROWN),
    ("rescaled", RESCALED),
    ("restart", RESTARTED),
)


@dataclass(frozen=True)
class Hook:
    hook_id: str
    user: str
    url: str
    events: tuple[str, ...]
    created_at: float


@dataclass(frozen=True)
class Delivery:
    """One event for one hook, as the delivery log shows it (one row per idempotency key)."""

    key: str
    hook_id: str
    job_id: str
    event: str
    attempts: int
    state: str  # PENDING, DELIVERED or GAVE_UP
    last_status: int | None  # the receiver's HTTP status; None when it never answered
    last_error: str
    at: float  # the last attempt


def new_hook_id() -> str:
    return "hook-" + secrets.token_hex(8)


def check_url(url: str) -> str:
    """`url` if a hook may be sent there: http(s), a host, bounded length."""
    if not isinstance(url, str) or not url:
        raise InvalidRequest("url: must not be empty")
    if len(url) > MAX_URL:
        raise InvalidRequest(f"url: at most {MAX_URL} characters, got {len(url)}")
    if any(c.isspace() or ord(c) < 32 for c in url):
        raise InvalidRequest("url: must not contain spaces or control characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError:
        raise InvalidRequest(f"url: {url!r} is not a URL") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidRequest(f"url: must start with http:// or https://, got {url!r}")
    if not parts.hostname:
        raise InvalidRequest(f"url: {url!r} names no host")
    if parts.username or parts.password:
        # Credentials in a URL end up in logs; a receiver checks the signature instead.
        raise InvalidRequest("url: must not hold a user name or password")
    return url


def check_events(events: Iterable[str]) -> tuple[str, ...]:
    """The events, each known, without repeats, in EVENTS order; at least one."""
    wanted = [e.strip().lower() for e in events if e.strip()]
    unknown = sorted(set(wanted) - set(EVENTS))
    if unknown:
        raise InvalidRequest(f"events: unknown {', '.join(unknown)}; known: {', '.join(EVENTS)}")
    if not wanted:
        raise InvalidRequest(f"events: name at least one of {', '.join(EVENTS)}")
    return tuple(e for e in EVENTS if e in wanted)


def event_for(previous: Status | None, t: Transition) -> str | None:
    """The event a transition is for the job's owner, or None for an inner step.

    `previous`: the status the job left (None for the submission). PENDING, DOWNLOADING
    and STORING are steps of starting and ending that no one waits for.
    """
    if t.status == Status.QUEUED:
        if previous is None:
            return QUEUED
        if previous == Status.HALTED:
            return RESUMED
        reason = t.reason.lower()
        return next((ev for p, ev in _REQUEUE_PREFIXES if reason.startswith(p)), RESTARTED)
    return {
        Status.PROCESSING: STARTED,
        Status.COMPLETED: COMPLETED,
        Status.FAILED: FAILED,
        Status.HALTED: HALTED,
    }.get(t.status)


def idempotency_key(hook_id: str, job_id: str, seq: int) -> str:
    """The same for every attempt at one transition's delivery to one hook."""
    return f"{hook_id}.{job_id}.{seq}"


def payload(event: str, job_id: str, seq: int, t: Transition, key: str) -> dict[str, Any]:
    """The JSON body a receiver gets."""
    return {
        "event": event,
        "job_id": job_id,
        "status": str(t.status),
        "reason": t.reason,
        "error_code": t.error_code,
        "exit_code": t.exit_code,
        "at": t.at,
        "seq": seq,
        "idempotency_key": key,
    }


def body_bytes(body: dict[str, Any]) -> bytes:
    """The exact bytes sent and signed (sorted keys: the same body, the same bytes)."""
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def hook_secret(platform_key: str, hook_id: str) -> str:
    """The hook's signing secret, derived from the platform's key; "" without a key."""
    if not platform_key:
        return ""
    mac = hmac.new(platform_key.encode(), b"dlaas-webhook:v1:" + hook_id.encode(), hashlib.sha256)
    return "whsec_" + mac.hexdigest()


def signature(secret: str, body: bytes) -> str:
    """The value of X-Dlaas-Signature for `body`."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(secret: str, body: bytes, header: str) -> bool:
    """What a receiver does: True if `header` signs `body` with `secret`."""
    return hmac.compare_digest(signature(secret, body), header or "")


def retryable(status: int | None) -> bool:
    """Whether an answer is worth trying again: no answer, 5xx, 408 and 429."""
    return status is None or status >= 500 or status in (408, 429)


def backoff_s(attempt: int, cap_s: float) -> float:
    """The wait after failed attempt number `attempt` (1-based): 1, 2, 4, ... up to `cap_s`."""
    return float(min(cap_s, 2 ** max(0, attempt - 1)))
