"""The worker's webhook delivery: one signed POST per attempt, logged for the hook's owner.

The task (services/worker/tasks.py, `dlaas.deliver_hook`) calls `attempt()` and retries
when it says so; the Celery task is acknowledged only when it returned, so a worker
killed mid-POST leaves it in Redis, which hands it out again: the receiver then sees the
same delivery twice, with the same idempotency key (at least once, see dlaas.domain.hooks).

Each attempt replaces the delivery's log entry (one per idempotency key): attempts so
far, state, the receiver's last status or error. A delivery the log shows delivered is
not sent again (a task run twice). Redirects are not followed: a receiver answers where
it was registered.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from dlaas.adapters import egress as egress_pin
from dlaas.adapters.store.base import JobStore
from dlaas.domain import egress, hooks
from dlaas.domain.errors import InvalidRequest

log = logging.getLogger(__name__)

MAX_ERROR = 300
# (url, body, headers, timeout_s) -> the receiver's status; raises httpx.HTTPError, or Refused.
Post = Callable[[str, bytes, dict[str, str], float], int]


def http_post(
    url: str, body: bytes, headers: dict[str, str], timeout_s: float, sni: str | None = None
) -> int:
    """POST; `sni`: the name to present and verify over TLS when `url` names an address."""
    extensions = {"sni_hostname": sni} if sni else None
    with httpx.Client(timeout=timeout_s, follow_redirects=False) as client:
        r = client.post(url, content=body, headers=headers, extensions=extensions)
    return r.status_code


class Refused(Exception):
    """The hook's destination is not one the platform posts to (the message says why);
    `final` unless the host resolved to nothing (a DNS outage passes: tried again)."""

    def __init__(self, message: str, final: bool = True):
        super().__init__(message)
        self.final = final


def guarded_post(
    url: str,
    body: bytes,
    headers: dict[str, str],
    timeout_s: float,
    *,
    allowed: Sequence[egress.Network] = (),
    resolve: Callable[[str, int], list[str]] = egress_pin.resolve,
    send: Callable[..., int] = http_post,
) -> int:
    """`http_post` to the address the URL's host resolves to, once every one passes the
    egress rule (dlaas.domain.egress); else Refused. A user names the URL and the worker
    runs inside the platform: unchecked, a hook could probe its etcd, S3 or a cloud's
    metadata. The POST goes to the address checked (the name in the Host header and, over
    TLS, as the name presented and verified), so a name that resolves elsewhere a moment
    later (DNS rebinding) changes nothing."""
    try:
        pinned = egress_pin.pin("url", url, allowed, resolve)
    except InvalidRequest as exc:  # EgressRefused, or a URL with no host to post to
        raise Refused(str(exc)) from None
    except egress_pin.Unresolved as exc:
        raise Refused(str(exc), final=False) from None
    named = {**headers, "Host": pinned.netloc}
    return send(pinned.url, body, named, timeout_s, pinned.hostname if pinned.https else None)


@dataclass(frozen=True)
class Outcome:
    state: str  # hooks.DELIVERED, PENDING (retry after `retry_in_s`) or GAVE_UP
    retry_in_s: float = 0.0


def attempt(
    hook_id: str,
    body: dict[str, Any],
    key: str,
    store: JobStore,
    platform_key: str,
    now: float,
    *,
    backoff_cap_s: float,
    post: Post = http_post,
    max_attempts: int = hooks.MAX_ATTEMPTS,
) -> Outcome:
    """One attempt at delivering `body` to hook `hook_id`, recorded in the delivery log."""
    hook = store.get_hook(hook_id)
    if hook is None:
        log.info("webhook %s: hook deleted, delivery %s dropped", hook_id, key)
        return Outcome(hooks.GAVE_UP)
    before = store.get_delivery(key)
    if before is not None and before.state != hooks.PENDING:
        log.info("webhook %s: delivery %s already %s", hook_id, key, before.state)
        return Outcome(before.state)
    attempts = (before.attempts if before else 0) + 1
    status: int | None = None
    refused = False  # a destination no retry will make one a hook may go to
    secret = hooks.hook_secret(platform_key, hook_id)
    if not secret:
        error, state = "the platform has no key to sign with (DLAAS_SECRETS_KEY)", hooks.GAVE_UP
    else:
        data = hooks.body_bytes(body)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "dlaas-webhooks/1",
            hooks.SIGNATURE_HEADER: hooks.signature(secret, data),
            hooks.IDEMPOTENCY_HEADER: key,
            hooks.EVENT_HEADER: str(body.get("event", "")),
        }
        try:
            status = post(hook.url, data, headers, hooks.TIMEOUT_S)
            error = "" if 200 <= status < 300 else f"HTTP {status}"
        except httpx.HTTPError as exc:
            # The class says what happened (ConnectError, ReadTimeout); the URL is the user's.
            error = f"{type(exc).__name__}: {exc}"[:MAX_ERROR]
        except Refused as exc:
            error, refused = str(exc)[:MAX_ERROR], exc.final
        if status is not None and 200 <= status < 300:
            state = hooks.DELIVERED
        elif refused:
            state = hooks.GAVE_UP
        elif hooks.retryable(status) and attempts < max_attempts:
            state = hooks.PENDING
        else:
            state = hooks.GAVE_UP
    store.record_delivery(
        hooks.Delivery(key, hook_id, str(body.get("job_id", "")), str(body.get("event", "")),
                       attempts, state, status, error, now)
    )  # fmt: skip
    if state == hooks.PENDING:
        wait = hooks.backoff_s(attempts, backoff_cap_s)
        log.info("webhook %s: delivery %s attempt %d failed (%s); again in %.0f s",
                 hook_id, key, attempts, error, wait)  # fmt: skip
        return Outcome(state, wait)
    log.info("webhook %s: delivery %s %s after %d attempt(s)%s", hook_id, key, state, attempts,
             f" ({error})" if error else "")  # fmt: skip
    return Outcome(state)
