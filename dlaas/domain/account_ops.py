"""Account use cases over the store's port: make users and teams, issue and revoke tokens.

Used by the REST API's admin routes and by `dlaas up` (which makes the first user). Every
change appends an audit entry; a token is returned once, to the caller, and only its hash
is stored.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from dlaas.domain.accounts import (
    DEFAULT_MAX_PRIORITY,
    DEFAULT_TEAM,
    INT32_MAX,
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
from dlaas.domain.ports import AccountStore
from dlaas.domain.run_time import check_team_durations, duration_refusal
from dlaas.domain.sizes import MAX_SIZE_BYTES, size_text

DAY_S = 86_400.0


class AccountNotFound(InvalidRequest):
    # Its own code: sharing JobNotFound's made it come back as a JobNotFound over gRPC.
    code = "account_not_found"


@dataclass(frozen=True)
class IssuedToken:
    user: User
    token: str  # shown once
    expires_at: float


def ensure_team(store: AccountStore, name: str, now: float | None = None) -> Team:
    """The team, made (without a quota) if it does not exist yet."""
    check_name("team", name)
    now = time.time() if now is None else now
    store.add_team(Team(name, Quota(), now))
    return _stored_team(store, name)


def _stored_team(store: AccountStore, name: str) -> Team:
    """The team just written; one removed meanwhile (by another request) is not found."""
    team = store.get_team(name)
    if team is None:
        raise AccountNotFound(f"team: no team {name!r}")
    return team


def add_team(
    store: AccountStore,
    actor: str,
    name: str,
    quota: Quota,
    now: float,
    max_priority: int = DEFAULT_MAX_PRIORITY,
    storage_quota_bytes: int = 0,
    default_duration_s: int = 0,
    max_duration_s: int = 0,
) -> Team:
    check_name("name", name)
    check_quota(quota)
    check_max_priority(max_priority)
    check_storage_quota(storage_quota_bytes)
    check_team_durations(default_duration_s, max_duration_s)
    team = Team(
        name, quota, now, max_priority, storage_quota_bytes, default_duration_s, max_duration_s
    )
    if not store.add_team(team):
        raise JobExists(
            f"name: team {name!r} exists already (`dlaas users add --team` makes a team it "
            "names); `dlaas teams set-quota` and `dlaas teams set` change it"
        )
    detail = (
        f"{_quota_text(quota)} max_priority={max_priority} "
        f"storage_quota_bytes={storage_quota_bytes} {_durations_text(team)}"
    )
    store.append_audit(audit_entry(now, actor, "add-team", name, detail))
    return team


def set_max_priority(store: AccountStore, actor: str, name: str, ceiling: int, now: float) -> Team:
    """Set the highest priority the team's users may submit with."""
    check_max_priority(ceiling)
    if not store.set_max_priority(name, ceiling):
        raise AccountNotFound(f"team: no team {name!r}")
    store.append_audit(audit_entry(now, actor, "set-max-priority", name, str(ceiling)))
    return _stored_team(store, name)


def set_storage_quota(
    store: AccountStore, actor: str, name: str, quota_bytes: int, now: float
) -> Team:
    """Set the bytes the team's buckets in the platform's S3 may hold (0: no quota)."""
    check_storage_quota(quota_bytes)
    if not store.set_storage_quota(name, quota_bytes):
        raise AccountNotFound(f"team: no team {name!r}")
    store.append_audit(audit_entry(now, actor, "set-storage-quota", name, str(quota_bytes)))
    return _stored_team(store, name)


def set_durations(
    store: AccountStore,
    actor: str,
    name: str,
    default_s: int | None,
    max_s: int | None,
    now: float,
) -> Team:
    """Set the team's default and/or maximum run time (None: unchanged; 0: none)."""
    team = _stored_team(store, name)
    default_s = team.default_duration_s if default_s is None else default_s
    max_s = team.max_duration_s if max_s is None else max_s
    check_team_durations(default_s, max_s)
    if not store.set_durations(name, default_s, max_s):
        raise AccountNotFound(f"team: no team {name!r}")
    team = _stored_team(store, name)
    store.append_audit(audit_entry(now, actor, "set-run-times", name, _durations_text(team)))
    return team


def _durations_text(team: Team) -> str:
    return f"default_duration_s={team.default_duration_s} max_duration_s={team.max_duration_s}"


def check_max_duration(store: AccountStore, team: str, asked_s: int) -> None:
    """Refuse a manifest's max_duration above the team's maximum run time."""
    refusal = duration_refusal(team, store.get_team(team), asked_s)
    if refusal:
        raise InvalidRequest(refusal)


def check_storage_quota(quota_bytes: int) -> None:
    if not 0 <= quota_bytes <= MAX_SIZE_BYTES:
        raise InvalidRequest(
            f"storage_quota_bytes: must be between 0 (no quota) and {MAX_SIZE_BYTES} (1 PiB), "
            f"got {quota_bytes}"
        )


def storage_refusal(team: str, quota_bytes: int, used_bytes: int, adding: int) -> str:
    """Why `adding` bytes may not go into the team's buckets ("" when they fit): the
    upload's 4xx, naming the quota and the current use."""
    if not quota_bytes or used_bytes + adding <= quota_bytes:
        return ""
    return (
        f"storage quota: team {team}'s buckets hold {size_text(used_bytes)} of its "
        f"{size_text(quota_bytes)} quota; this upload ({size_text(adding)}) would exceed it. "
        "Delete data or ask an administrator (dlaas teams set --storage-quota)"
    )


def check_max_priority(ceiling: int) -> None:
    if not -INT32_MAX - 1 <= ceiling <= INT32_MAX:
        raise InvalidRequest(
            f"max_priority: must be between {-INT32_MAX - 1} and {INT32_MAX}, got {ceiling}"
        )


def check_priority(store: AccountStore, team: str, priority: int) -> None:
    """Refuse a priority above the team's ceiling (a team not in the store, such as the
    users made before teams had ceilings, has the default one)."""
    found = store.get_team(team)
    ceiling = found.max_priority if found is not None else DEFAULT_MAX_PRIORITY
    if priority > ceiling:
        raise InvalidRequest(
            f"priority: {priority} is above team {team or DEFAULT_TEAM}'s ceiling {ceiling}; "
            "an administrator sets it (dlaas teams set --max-priority)"
        )


def set_quota(store: AccountStore, actor: str, name: str, quota: Quota, now: float) -> Team:
    check_quota(quota)
    if not store.set_quota(name, quota):
        raise AccountNotFound(f"team: no team {name!r}")
    store.append_audit(audit_entry(now, actor, "set-quota", name, _quota_text(quota)))
    return _stored_team(store, name)


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
    store: AccountStore,
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
    store: AccountStore,
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


def revoke(store: AccountStore, actor: str, who: str, now: float | None = None) -> int:
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
