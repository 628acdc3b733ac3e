"""Who is calling: API bearer tokens mapped to users, and who may see which job.

`TokenTable` is pure (built once from ApiSettings); `Caller` is what every route gets.
Someone else's job looks exactly like a missing one (`JobNotFound`), so a user cannot
learn that a job id exists.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from dlaas.errors import JobNotFound
from services.api.errors import Unauthorized

ADMIN_USER = "admin"


@dataclass(frozen=True)
class Caller:
    user: str
    admin: bool = False

    def check_owner(self, job_id: str, owner: str) -> None:
        """Raise JobNotFound unless the caller owns the job or is the admin."""
        if not (self.admin or owner == self.user):
            raise JobNotFound(job_id)

    @property
    def user_filter(self) -> str | None:
        """The owner to filter listings by (None: every job, for the admin)."""
        return None if self.admin else self.user


def parse_tokens(spec: str) -> dict[str, str]:
    """`"token:user,token:user"` -> {token: user}; refuse a malformed entry by position."""
    table: dict[str, str] = {}
    for i, item in enumerate(spec.split(",")):
        item = item.strip()
        if not item:
            continue
        token, sep, user = item.partition(":")
        if not sep or not token.strip() or not user.strip():
            # Never echo the entry: it holds a token.
            raise ValueError(f"DLAAS_API_TOKENS entry {i + 1} is not 'token:user'")
        table[token.strip()] = user.strip()
    return table


class TokenTable:
    def __init__(self, tokens: str, admin_token: str):
        if not admin_token:
            raise ValueError("DLAAS_API_ADMIN_TOKEN must not be empty")
        self._users = parse_tokens(tokens)
        self._admin = admin_token

    def caller(self, authorization: str | None) -> Caller:
        """The caller for an `Authorization` header value; raise Unauthorized."""
        if not authorization:
            raise Unauthorized("missing Authorization header; send 'Authorization: Bearer <token>'")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized("the Authorization header must be 'Bearer <token>'")
        # Constant-time comparisons: the time a refusal takes says nothing about a token.
        if hmac.compare_digest(token.encode(), self._admin.encode()):
            return Caller(ADMIN_USER, admin=True)
        found = None
        for known, user in self._users.items():
            if hmac.compare_digest(token.encode(), known.encode()):
                found = user
        if found is None:
            raise Unauthorized("unknown API token")
        return Caller(found)
