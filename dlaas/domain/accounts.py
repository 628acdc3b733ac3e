"""Users, teams, API tokens and the audit log: the domain of who may do what. Pure.

A user belongs to one team; a team has a guaranteed share of the cluster (its quota, which
the scheduler enforces), a priority ceiling (the highest `priority` its users' manifests may
ask for, checked at submit; administrators are exempt) and a namespace of S3 buckets (see dlaas.domain.namespace)
with a storage quota (bytes; `dlaas data upload` past it is refused), and a default and
maximum run time for its jobs (dlaas.domain.run_time). API tokens are
random 256-bit strings shown once, when made; the store keeps only their SHA-256, so a
stolen store file gives no usable token (a token has far too much entropy for the missing
salt or stretching to matter). A token may expire; revoking marks it, so every API replica
refuses it at its next request (every request reads the store).

The audit log is append-only: who did what to which target, with a short detail that never
holds a secret.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

from dlaas.domain.errors import InvalidRequest

# Team and user names: they become parts of bucket names and IAM user names, so they are
# short, lowercase and never contain "--" (the namespace separator).
NAME_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
MAX_NAME = 24
DEFAULT_TEAM = "default"
ADMIN_USER = "admin"
# Token lifetime bound (days); 0 means the token does not expire.
MAX_TOKEN_DAYS = 3650
MAX_AUDIT_DETAIL = 300
# A new team's priority ceiling unless the administrator gives one: "high"; "critical"
# (1000) and above are the administrators' to grant.
DEFAULT_MAX_PRIORITY = 100
INT32_MAX = 2**31 - 1


def check_name(field: str, name: str) -> str:
    """`name` if it is a valid user/team name; else InvalidRequest naming `field`."""
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"{field}: must not be empty")
    if len(name) > MAX_NAME:
        raise InvalidRequest(f"{field}: at most {MAX_NAME} characters, got {len(name)}")
    if not NAME_RE.match(name):
        raise InvalidRequest(
            f"{field}: {name!r} must be lowercase letters, digits and single hyphens, "
            "starting with a letter"
        )
    return name


def new_token() -> str:
    return "dlt_" + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_prefix(token: str) -> str:
    """What may be shown of a token to tell it from others: its first characters only."""
    return token[:10]


@dataclass(frozen=True)
class Quota:
    """A team's guaranteed share, per resource (0: nothing guaranteed, it only borrows)."""

    gpus: int = 0
    cpus: float = 0.0
    memory_mb: int = 0


@dataclass(frozen=True)
class Team:
    name: str
    quota: Quota = Quota()
    created_at: float = 0.0
    max_priority: int = DEFAULT_MAX_PRIORITY
    # Bytes the team's buckets in the platform's S3 may hold (uploads past it are refused:
    # services/api/data.py); 0: no quota.
    storage_quota_bytes: int = 0
    # Running time, seconds, of a job whose manifest names no max_duration, and the most a
    # manifest may ask (dlaas.domain.run_time); 0: none.
    default_duration_s: int = 0
    max_duration_s: int = 0


@dataclass(frozen=True)
class User:
    name: str
    team: str
    admin: bool = False
    created_at: float = 0.0


@dataclass(frozen=True)
class TokenRecord:
    """A stored token: its hash, never the token itself."""

    hash: str
    user: str
    prefix: str
    created_at: float
    expires_at: float = 0.0  # 0: never
    revoked_at: float = 0.0  # 0: valid

    def valid_at(self, now: float) -> bool:
        return not self.revoked_at and (not self.expires_at or now < self.expires_at)


@dataclass(frozen=True)
class AuditEntry:
    at: float
    actor: str
    action: str
    target: str
    detail: str = ""
    seq: int = 0


def audit_entry(at: float, actor: str, action: str, target: str, detail: str = "") -> AuditEntry:
    """An entry with its detail bounded (the log is for people, and never grows unbounded)."""
    return AuditEntry(at, actor, action, target, detail[:MAX_AUDIT_DETAIL])
