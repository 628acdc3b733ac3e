"""Who is calling: bearer tokens looked up in the job store, and who may see which job
(the domain's rule, dlaas.domain.authz).

`Authenticator` maps a token to a `Caller` on EVERY request by the token's SHA-256 in the
store (no cache), so a token revoked through one API replica fails at once on all of them.
The bootstrap admin token comes from the settings (DLAAS_API_ADMIN_TOKEN); every other
account lives in the store (`dlaas users add`). Someone else's job looks exactly like a
missing one (`JobNotFound`), so a user cannot learn that a job id exists.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable

from dlaas.adapters.store.base import JobStore
from dlaas.domain import authz
from dlaas.domain.accounts import ADMIN_USER, DEFAULT_TEAM, token_hash
from services.api.errors import Forbidden, Unauthorized


class Caller(authz.Caller):
    """The domain's Caller (its one rule: `can_see`), with the API's refusal of a route
    that is for administrators only."""

    def require_admin(self) -> None:
        if not self.admin:
            raise Forbidden("this route is for administrators only")


class Authenticator:
    def __init__(self, store: JobStore, admin_token: str, clock: Callable[[], float] = time.time):
        if not admin_token:
            raise ValueError("DLAAS_API_ADMIN_TOKEN must not be empty")
        self._store = store
        self._admin = admin_token
        self._clock = clock

    def caller(self, authorization: str | None) -> Caller:
        """The caller for an `Authorization` header value; raise Unauthorized."""
        if not authorization:
            raise Unauthorized("missing Authorization header; send 'Authorization: Bearer <token>'")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or len(token) > 256:
            raise Unauthorized("the Authorization header must be 'Bearer <token>'")
        # Constant-time comparison: the time a refusal takes says nothing about the token.
        if hmac.compare_digest(token.encode(), self._admin.encode()):
            return Caller(ADMIN_USER, DEFAULT_TEAM, admin=True)
        # Stored tokens are found by their hash: an equality lookup on a hash of the token
        # reveals nothing through its timing that helps to guess a token.
        record = self._store.find_token(token_hash(token))
        if record is None:
            raise Unauthorized("unknown API token")
        if not record.valid_at(self._clock()):
            raise Unauthorized("this API token was revoked or has expired")
        user = self._store.get_user(record.user)
        if user is None:
            raise Unauthorized("this API token's user no longer exists")
        return Caller(user.name, user.team, admin=user.admin)
