"""Account use cases over the store's port: make users and teams, issue and revoke tokens.

Used by the REST API's admin routes and by `dlaas up` (which makes the first user). Every
change appends an audit entry; a token is returned once, to the caller, and only its hash
is stored.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from dlaas.adapters.store.base import JobStore
from dlaas.domain.accounts import (
    DEFAULT_TEAM,
    MAX_TOKEN_DAYS,
    Quota,
    Team,
    TokenRecord,
    User,
    audit_entry,
    check_name,
    new_token,
    token_hash,
    token_prefix,
)
from dlaas.domain.errors import InvalidRequest, JobExists

DAY_S = 86_400.0


class AccountNotFound(InvalidRequest):
    # Its own code: sharing JobNotFound's made it come back as a JobNotFound over gRPC.
    code = "account_not_found"


@dataclass(frozen=True)
class IssuedToken:
    user: User
    token: str  # shown once
    expires_at: float


def ensure_team(store: JobStore, name: str, now: float | None = None) -> Team:
    """The team, made (without a quota) if it does not exist yet."""
    check_name("team", name)
    now = time.time() if now is None else now
    store.add_team(Team(name, Quota(), now))
    team = store.get_team(name)
    assert team is not None
    return team


def add_team(store: JobStore, actor: str, name: str, quota: Quota, now: float) -> Team:
    check_name("name", name)
    check_quota(quota)
    if not store.add_team(Team(name, quota, now)):
        raise JobExists(f"name: team {name!r} exists already")
    store.append_audit(audit_entry(now, actor, "add-team", name, _quota_text(quota)))
    return Team(name, quota, now)


def set_quota(store: JobStore, actor: str, name: str, quota: Quota, now: float) -> Team:
    check_quota(quota)
    if not store.set_quota(name, quota):
        raise AccountNotFound(f"team: no team {name!r}")
    store.append_audit(audit_entry(now, actor, "set-quota", name, _quota_text(quota)))
    team = store.get_team(name)
    assert team is not None
    return team


def check_quota(q: Quota) -> None:
    if not 0 <= q.gpus <= 1_000_000:
        raise InvalidRequest(f"gpus: must be between 0 and 1000000, got {q.gpus}")
    if not 0 <= q.cpus <= 10_000_000:
        raise InvalidRequest(f"cpus: must be between 0 and 10000000, got {q.cpus}")
    if not 0 <= q.memory_mb <= 2**40:
        raise InvalidRequest(f"memory_mb: must be between 0 and {2**40}, got {q.memory_mb}")


def _quota_text(q: Quota) -> str:
    return f"gpus={q.gpus} cpus={q.cpus:g} memory_mb={q.memory_mb}"


def add_user(
    store: JobStore,
    actor: str,
    name: str,
    team: str = DEFAULT_TEAM,
    admin: bool = False,
    expires_days: float = 0,
    now: float | None = None,
) -> IssuedToken:
    """Make a user (and its team if new) and its first token."""
    now = time.time() if now is None else now
    check_name("name", name)
    check_name("team", team)
    if name == "admin":
        raise InvalidRequest("name: 'admin' is the bootstrap administrator's name")
    ensure_team(store, team, now)
    user = User(name, team, admin, now)
    if not store.add_user(user):
        raise JobExists(
            f"name: user {name!r} exists already; `dlaas users token {name}` issues another token"
        )
    issued = issue_token(store, actor, name, expires_days, now, audit=False)
    store.append_audit(audit_entry(now, actor, "add-user", name, f"team={team} admin={admin}"))
    return issued


def issue_token(
    store: JobStore,
    actor: str,
    name: str,
    expires_days: float = 0,
    now: float | None = None,
    audit: bool = True,
) -> IssuedToken:
    now = time.time() if now is None else now
    if not 0 <= expires_days <= MAX_TOKEN_DAYS:
        raise InvalidRequest(
            f"expires_days: must be between 0 (never) and {MAX_TOKEN_DAYS}, got {expires_days}"
        )
    user = store.get_user(name)
    if user is None:
        raise AccountNotFound(f"user: no user {name!r}")
    token = new_token()
    expires_at = now + expires_days * DAY_S if expires_days else 0.0
    store.add_token(TokenRecord(token_hash(token), name, token_prefix(token), now, expires_at))
    if audit:
        store.append_audit(audit_entry(now, actor, "issue-token", name, token_prefix(token)))
    return IssuedToken(user, token, expires_at)


def revoke(store: JobStore, actor: str, who: str, now: float | None = None) -> int:
    """Revoke every token of user `who`, or the token `who`; how many tokens were valid."""
    now = time.time() if now is None else now
    if store.get_user(who) is not None:
        n = store.revoke_tokens(user=who, at=now)
        target = who
    else:
        record = store.find_token(token_hash(who))
        if record is None:
            raise AccountNotFound("user: no such user or token")
        n = store.revoke_tokens(token_hash=record.hash, at=now)
        target = f"{record.user} ({record.prefix}...)"
    store.append_audit(audit_entry(now, actor, "revoke", target, f"{n} token(s)"))
    return n
