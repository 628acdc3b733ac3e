"""The REST API's account routes: users, tokens, teams with quotas, priority ceilings,
storage quotas and run times, the audit log.

Administrators only, except `GET /v1/me`. Tokens travel in bodies, never in URLs (URLs end
up in access logs). A new token is in the reply once; the store keeps its hash.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from dlaas.domain import account_ops
from dlaas.domain.accounts import (
    DEFAULT_MAX_PRIORITY,
    DEFAULT_TEAM,
    INT32_MAX,
    MAX_NAME,
    MAX_TOKEN_DAYS,
    Quota,
    Team,
)
from dlaas.domain.errors import DlaasError, InvalidRequest
from dlaas.domain.manifest import MAX_DURATION_S
from dlaas.domain.sizes import MAX_SIZE_BYTES
from services.api.deps import CallerDep, DepsDep
from services.api.models import error_responses

router = APIRouter(prefix="/v1", tags=["accounts"])


class UserCreate(BaseModel):
    name: str = Field(max_length=MAX_NAME)
    team: str = Field(DEFAULT_TEAM, max_length=MAX_NAME)
    admin: bool = False
    expires_days: float = Field(0, ge=0, le=MAX_TOKEN_DAYS, description="0: never expires")


class TokenCreate(BaseModel):
    expires_days: float = Field(0, ge=0, le=MAX_TOKEN_DAYS)


class TokenIssued(BaseModel):
    name: str
    team: str
    admin: bool
    token: str = Field(description="shown once; only its hash is stored")
    expires_at: float


class UserPublic(BaseModel):
    name: str
    team: str
    admin: bool
    created_at: float
    valid_tokens: int


class RevokeRequest(BaseModel):
    who: str = Field(max_length=256, description="a user name (all its tokens) or one token")


class RevokeReply(BaseModel):
    revoked: int


class QuotaBody(BaseModel):
    gpus: int = Field(0, ge=0, le=1_000_000)
    cpus: float = Field(0, ge=0, le=10_000_000)
    memory_mb: int = Field(0, ge=0, le=2**40)


PriorityCeiling = Field(
    DEFAULT_MAX_PRIORITY,
    ge=-INT32_MAX - 1,
    le=INT32_MAX,
    description="the highest manifest `priority` the team's users may submit with "
    "(administrators are exempt)",
)


StorageQuota = Field(
    0,
    ge=0,
    le=MAX_SIZE_BYTES,
    description="bytes the team's buckets in the platform's S3 may hold; uploads past it "
    "are refused (0: no quota)",
)


DEFAULT_DURATION_TEXT = (
    "seconds a job of the team runs when its manifest names no max_duration (0: none; then "
    "the team's maximum)"
)
MAX_DURATION_TEXT = (
    "the most seconds a manifest's max_duration may ask (administrators are exempt), and the "
    "run time of a job that names none and has no team default (0: none)"
)


class TeamCreate(QuotaBody):
    name: str = Field(max_length=MAX_NAME)
    max_priority: int = PriorityCeiling
    storage_quota_bytes: int = StorageQuota
    default_duration_s: int = Field(0, ge=0, le=MAX_DURATION_S, description=DEFAULT_DURATION_TEXT)
    max_duration_s: int = Field(0, ge=0, le=MAX_DURATION_S, description=MAX_DURATION_TEXT)


class MaxPriorityBody(BaseModel):
    max_priority: int = PriorityCeiling


class StorageQuotaBody(BaseModel):
    storage_quota_bytes: int = StorageQuota


class RunTimesBody(BaseModel):
    """Either or both; one left out stays as it is."""

    default_duration_s: int | None = Field(
        None, ge=0, le=MAX_DURATION_S, description=DEFAULT_DURATION_TEXT
    )
    max_duration_s: int | None = Field(None, ge=0, le=MAX_DURATION_S, description=MAX_DURATION_TEXT)


class TeamPublic(BaseModel):
    name: str
    quota: QuotaBody
    max_priority: int
    storage_quota_bytes: int
    default_duration_s: int
    max_duration_s: int
    usage: dict[str, Any] = Field(
        default_factory=dict, description="what the scheduler reports: used, borrowed, queued"
    )


class Me(BaseModel):
    user: str
    team: str
    admin: bool


class AuditPublic(BaseModel):
    seq: int
    at: float
    actor: str
    action: str
    target: str
    detail: str


class AuditList(BaseModel):
    entries: list[AuditPublic]
    total: int


def _team_public(team: Team, usage: dict[str, Any] | None = None) -> TeamPublic:
    q = team.quota
    return TeamPublic(
        name=team.name,
        quota=QuotaBody(gpus=q.gpus, cpus=q.cpus, memory_mb=q.memory_mb),
        max_priority=team.max_priority,
        storage_quota_bytes=team.storage_quota_bytes,
        default_duration_s=team.default_duration_s,
        max_duration_s=team.max_duration_s,
        usage=usage or {},
    )


@router.get("/me", response_model=Me)
def me(caller: CallerDep) -> Me:
    """Who the token belongs to: user, team, whether an administrator."""
    return Me(user=caller.user, team=caller.team, admin=caller.admin)


@router.post(
    "/users", status_code=201, response_model=TokenIssued, responses=error_responses(403, 409, 422)
)
def add_user(body: UserCreate, deps: DepsDep, caller: CallerDep) -> TokenIssued:
    """Add a user to a team (made if new) and issue its first token (shown once)."""
    caller.require_admin()
    issued = account_ops.add_user(
        deps.store, caller.user, body.name, body.team, body.admin, body.expires_days
    )
    u = issued.user
    return TokenIssued(
        name=u.name, team=u.team, admin=u.admin, token=issued.token, expires_at=issued.expires_at
    )


@router.post(
    "/users/{name}/tokens",
    status_code=201,
    response_model=TokenIssued,
    responses=error_responses(403, 422),
)
def add_token(name: str, body: TokenCreate, deps: DepsDep, caller: CallerDep) -> TokenIssued:
    """Issue another token for a user (shown once)."""
    caller.require_admin()
    issued = account_ops.issue_token(deps.store, caller.user, name[:MAX_NAME], body.expires_days)
    u = issued.user
    return TokenIssued(
        name=u.name, team=u.team, admin=u.admin, token=issued.token, expires_at=issued.expires_at
    )


@router.get("/users", response_model=list[UserPublic], responses=error_responses(403))
def list_users(deps: DepsDep, caller: CallerDep) -> list[UserPublic]:
    """Every user with its team and how many valid tokens it holds."""
    caller.require_admin()
    now = time.time()
    valid: dict[str, int] = {}
    for t in deps.store.list_tokens():
        if t.valid_at(now):
            valid[t.user] = valid.get(t.user, 0) + 1
    return [
        UserPublic(
            name=u.name,
            team=u.team,
            admin=u.admin,
            created_at=u.created_at,
            valid_tokens=valid.get(u.name, 0),
        )
        for u in deps.store.list_users()
    ]


@router.post("/revoke", response_model=RevokeReply, responses=error_responses(403, 422))
def revoke(body: RevokeRequest, deps: DepsDep, caller: CallerDep) -> RevokeReply:
    """Revoke every token of a user, or one token; refused at once on every API replica."""
    caller.require_admin()
    return RevokeReply(revoked=account_ops.revoke(deps.store, caller.user, body.who))


def _usage(deps) -> dict[str, dict[str, Any]]:
    """Per-team usage as the scheduler reports it; {} while it does not answer."""
    try:
        usage = deps.scheduler.teams()
    except DlaasError:
        return {}
    return {
        t.team: {
            "used": {
                "gpus": t.guaranteed_gpus + t.borrowed_gpus,
                "cpus": t.guaranteed_cpus + t.borrowed_cpus,
                "memory_mb": t.guaranteed_memory_mb + t.borrowed_memory_mb,
            },
            "borrowed": {
                "gpus": t.borrowed_gpus,
                "cpus": t.borrowed_cpus,
                "memory_mb": t.borrowed_memory_mb,
            },
            "queued": t.queued,
        }
        for t in usage
    }


@router.get("/teams", response_model=list[TeamPublic])
def list_teams(deps: DepsDep, caller: CallerDep) -> list[TeamPublic]:
    """Teams with their quotas and what they use now (yours only unless you are an admin)."""
    usage = _usage(deps)
    teams = deps.store.list_teams()
    teams = [t for t in teams if caller.can_see_team(t.name)]
    return [_team_public(t, usage.get(t.name)) for t in teams]


def _push_quota(deps, name: str, quota: Quota) -> None:
    """The scheduler enforces quotas: it hears of a change before the store records it."""
    deps.scheduler.set_team_quota(name, quota.gpus, quota.cpus, quota.memory_mb)


@router.post(
    "/teams", status_code=201, response_model=TeamPublic, responses=error_responses(403, 409, 422)
)
def add_team(body: TeamCreate, deps: DepsDep, caller: CallerDep) -> TeamPublic:
    """Add a team with its guaranteed share (GPUs, CPUs, memory), priority ceiling,
    storage quota and run times."""
    caller.require_admin()
    quota = Quota(body.gpus, body.cpus, body.memory_mb)
    account_ops.check_name("name", body.name)
    if deps.store.get_team(body.name) is None:
        _push_quota(deps, body.name, quota)
    team = account_ops.add_team(
        deps.store, caller.user, body.name, quota, time.time(), body.max_priority,
        body.storage_quota_bytes, body.default_duration_s, body.max_duration_s,
    )  # fmt: skip
    return _team_public(team)


@router.put(
    "/teams/{name}/max-priority", response_model=TeamPublic, responses=error_responses(403, 422)
)
def set_max_priority(
    name: str, body: MaxPriorityBody, deps: DepsDep, caller: CallerDep
) -> TeamPublic:
    """Set the highest priority a team's users may submit with."""
    caller.require_admin()
    return _team_public(
        account_ops.set_max_priority(
            deps.store, caller.user, name[:MAX_NAME], body.max_priority, time.time()
        )
    )


@router.put(
    "/teams/{name}/storage-quota", response_model=TeamPublic, responses=error_responses(403, 422)
)
def set_storage_quota(
    name: str, body: StorageQuotaBody, deps: DepsDep, caller: CallerDep
) -> TeamPublic:
    """Set the bytes a team's buckets in the platform's S3 may hold (0: no quota)."""
    caller.require_admin()
    return _team_public(
        account_ops.set_storage_quota(
            deps.store, caller.user, name[:MAX_NAME], body.storage_quota_bytes, time.time()
        )
    )


@router.put(
    "/teams/{name}/run-times", response_model=TeamPublic, responses=error_responses(403, 422)
)
def set_run_times(name: str, body: RunTimesBody, deps: DepsDep, caller: CallerDep) -> TeamPublic:
    """Set a team's default and/or maximum run time for its jobs (seconds; 0: none)."""
    caller.require_admin()
    if body.default_duration_s is None and body.max_duration_s is None:
        raise InvalidRequest("default_duration_s, max_duration_s: name at least one")
    return _team_public(
        account_ops.set_durations(
            deps.store, caller.user, name[:MAX_NAME], body.default_duration_s,
            body.max_duration_s, time.time(),
        )
    )  # fmt: skip


@router.put("/teams/{name}/quota", response_model=TeamPublic, responses=error_responses(403, 422))
def set_quota(name: str, body: QuotaBody, deps: DepsDep, caller: CallerDep) -> TeamPublic:
    """Set a team's guaranteed share."""
    caller.require_admin()
    quota = Quota(body.gpus, body.cpus, body.memory_mb)
    if deps.store.get_team(name[:MAX_NAME]) is None:
        raise account_ops.AccountNotFound(f"team: no team {name[:MAX_NAME]!r}")
    _push_quota(deps, name, quota)
    return _team_public(account_ops.set_quota(deps.store, caller.user, name, quota, time.time()))


@router.get("/audit", response_model=AuditList, responses=error_responses(403, 422))
def audit(
    deps: DepsDep,
    caller: CallerDep,
    offset: Annotated[int, Query(ge=0, le=10**9)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> AuditList:
    """The audit log, newest first: who submitted, halted, deleted, rescaled, added users."""
    caller.require_admin()
    entries, total = deps.store.list_audit(offset=offset, limit=limit)
    return AuditList(
        entries=[
            AuditPublic(
                seq=e.seq, at=e.at, actor=e.actor, action=e.action, target=e.target, detail=e.detail
            )
            for e in entries
        ],
        total=total,
    )
