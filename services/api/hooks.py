"""The REST API's webhook routes: register, list and remove hooks, read their delivery log.

A hook belongs to the user who made it and hears of that user's jobs only; another
user's hook is reported as missing, as another user's job is. The signing secret is in
the reply to the POST, once; it is derived from the platform's key (dlaas.domain.hooks) and
never stored, so it cannot be shown again: a user who lost it removes the hook and adds
another. A URL at an address the worker would refuse (dlaas.domain.egress) is refused here.
"""

from __future__ import annotations

import contextlib
import time
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from dlaas.adapters import egress as egress_pin
from dlaas.domain import egress, hooks
from dlaas.domain.errors import InvalidRequest
from services.api.auth import Caller
from services.api.deps import MAX_OFFSET, CallerDep, DepsDep
from services.api.errors import HookNotFound
from services.api.models import error_responses

router = APIRouter(prefix="/v1", tags=["webhooks"])

EventName = Annotated[str, Field(max_length=32)]


class HookCreate(BaseModel):
    url: str = Field(max_length=hooks.MAX_URL, description="http(s) URL the events are POSTed to")
    events: list[EventName] = Field(
        min_length=1, max_length=4 * len(hooks.EVENTS), description=f"of {', '.join(hooks.EVENTS)}"
    )


class HookPublic(BaseModel):
    id: str
    user: str
    url: str
    events: list[str]
    created_at: float


class HookCreated(HookPublic):
    secret: str = Field(
        description="shown once: the receiver checks `X-Dlaas-Signature: sha256=<HMAC-SHA256 "
        "of the body under this secret>`"
    )


class DeliveryPublic(BaseModel):
    idempotency_key: str
    job_id: str
    event: str
    attempts: int
    state: str = Field(description="pending (tried again later), delivered or failed (given up)")
    last_status: int | None = Field(description="the receiver's last HTTP status; null: no answer")
    last_error: str
    at: float = Field(description="when it was last tried")


class DeliveryList(BaseModel):
    deliveries: list[DeliveryPublic]
    total: int


def _public(h: hooks.Hook) -> HookPublic:
    return HookPublic(id=h.hook_id, user=h.user, url=h.url, events=list(h.events),
                      created_at=h.created_at)  # fmt: skip


def _owned(deps, caller: Caller, hook_id: str) -> hooks.Hook:
    hook = deps.store.get_hook(hook_id[:64])
    if hook is None or not caller.can_see(hook.user):
        raise HookNotFound(f"hook {hook_id[:64]} not found")
    return hook


def _check_destination(url: str, allow: str) -> None:
    """Refuse, now, a URL the worker would refuse at delivery (dlaas.domain.egress, one
    rule for both); a host that resolves to nothing yet is let through, as the worker
    tries it again later."""
    with contextlib.suppress(egress_pin.Unresolved):
        egress_pin.check_url("url", url, egress.allowed_networks(allow))


@router.post("/hooks", status_code=201, response_model=HookCreated, responses=error_responses(422))
def add_hook(body: HookCreate, deps: DepsDep, caller: CallerDep) -> HookCreated:
    """Register a webhook for events of your jobs; its signing secret is shown this once."""
    url = hooks.check_url(body.url)
    events = hooks.check_events(body.events)
    _check_destination(url, deps.settings.egress_allow_networks)
    platform_key = deps.settings.secrets_key.get_secret_value()
    if not platform_key:
        # Not a 503: it stays so until the administrator sets a key (`dlaas up` makes one).
        raise InvalidRequest(
            "webhooks: this platform has no key to sign deliveries with (DLAAS_SECRETS_KEY); "
            "ask its administrator to set one"
        )
    if len(deps.store.list_hooks(caller.user)) >= hooks.MAX_HOOKS_PER_USER:
        raise InvalidRequest(
            f"url: you have {hooks.MAX_HOOKS_PER_USER} hooks already, the most a user may "
            "have; remove one first"
        )
    hook = hooks.Hook(hooks.new_hook_id(), caller.user, url, events, time.time())
    deps.store.add_hook(hook)
    return HookCreated(
        **_public(hook).model_dump(), secret=hooks.hook_secret(platform_key, hook.hook_id)
    )


@router.get("/hooks", response_model=list[HookPublic])
def list_hooks(deps: DepsDep, caller: CallerDep) -> list[HookPublic]:
    """Your webhooks (an administrator's: everyone's), oldest first; never their secrets."""
    return [_public(h) for h in deps.store.list_hooks(caller.user_filter)]


@router.delete("/hooks/{hook_id}", status_code=204, responses=error_responses(404))
def delete_hook(hook_id: str, deps: DepsDep, caller: CallerDep) -> None:
    """Remove a webhook and its delivery log; deliveries already queued are dropped."""
    hook = _owned(deps, caller, hook_id)
    deps.store.delete_hook(hook.hook_id)


@router.get(
    "/hooks/{hook_id}/deliveries",
    response_model=DeliveryList,
    responses=error_responses(404, 422),
)
def list_deliveries(
    hook_id: str,
    deps: DepsDep,
    caller: CallerDep,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> DeliveryList:
    """A webhook's delivery log, latest attempt first: one entry per event, its attempts
    and the receiver's last answer."""
    hook = _owned(deps, caller, hook_id)
    entries, total = deps.store.list_deliveries(hook.hook_id, offset=offset, limit=limit)
    return DeliveryList(
        deliveries=[
            DeliveryPublic(
                idempotency_key=d.key, job_id=d.job_id, event=d.event, attempts=d.attempts,
                state=d.state, last_status=d.last_status, last_error=d.last_error, at=d.at,
            )
            for d in entries
        ],
        total=total,
    )  # fmt: skip
