"""Who may see what: the platform's one authorization rule. Pure.

A caller sees (and acts on) what it owns, and an administrator everything: jobs, their
logs, metrics and results, webhooks, and the jobs shown on the nodes (`Caller.can_see`).
A team's quota and use are seen by its members and administrators (`can_see_team`).
Whatever a caller may not see is answered exactly as a missing one (JobNotFound), so a
user cannot learn that another's job id exists.

The REST API makes its Caller from the request's token (services/api/auth.py); a call to
the LCM names the user it acts for, and `on_behalf_of` makes that Caller there.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlaas.domain.accounts import ADMIN_USER, DEFAULT_TEAM
from dlaas.domain.errors import JobNotFound


@dataclass(frozen=True)
class Caller:
    user: str
    team: str = DEFAULT_TEAM
    admin: bool = False

    def can_see(self, owner: str) -> bool:
        """Whether the caller may see (and act on) what `owner` owns."""
        return self.admin or owner == self.user

    def can_see_team(self, team: str) -> bool:
        """Whether the caller may see team `team`'s quota and use."""
        return self.admin or team == self.team

    def check_owner(self, job_id: str, owner: str) -> None:
        """Raise JobNotFound (the answer for a missing job) unless the caller can see it."""
        if not self.can_see(owner):
            raise JobNotFound(job_id)

    @property
    def user_filter(self) -> str | None:
        """`can_see` as a listing's filter: the owner to list (None: every one)."""
        return None if self.admin else self.user


# The platform's own calls to the LCM, which name no user (a service acting for itself).
PLATFORM = Caller("", admin=True)


def on_behalf_of(user: str) -> Caller:
    """The Caller an internal call acts for, by the user it names: the platform itself when
    it names none, the bootstrap administrator (ADMIN_USER) with every right. (The API
    checks its caller before it calls the LCM, and then names the job's owner.)"""
    if not user:
        return PLATFORM
    return Caller(user, admin=user == ADMIN_USER)
