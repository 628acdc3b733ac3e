"""The platform's one authorization rule (dlaas.domain.authz): a caller sees what it owns,
an administrator everything; the LCM applies the same rule to the user a call names."""

from __future__ import annotations

import pytest

from dlaas.domain.accounts import ADMIN_USER
from dlaas.domain.authz import PLATFORM, Caller, on_behalf_of
from dlaas.domain.errors import JobNotFound


def test_a_user_sees_only_what_it_owns():
    bob = Caller("bob", "bteam")
    assert bob.can_see("bob") and not bob.can_see("alice")
    assert bob.user_filter == "bob"
    with pytest.raises(JobNotFound, match="job j1 not found"):  # as if it did not exist
        bob.check_owner("j1", "alice")


def test_an_administrator_sees_everything():
    root = Caller("root", admin=True)
    assert root.can_see("alice") and root.can_see_team("ateam")
    assert root.user_filter is None
    root.check_owner("j1", "alice")


def test_a_team_is_seen_by_its_members():
    bob = Caller("bob", "bteam")
    assert bob.can_see_team("bteam") and not bob.can_see_team("ateam")


@pytest.mark.parametrize(
    ("user", "sees_alices"), [("alice", True), ("bob", False), (ADMIN_USER, True), ("", True)]
)
def test_an_lcm_call_acts_for_the_user_it_names(user, sees_alices):
    assert on_behalf_of(user).can_see("alice") is sees_alices


def test_a_call_naming_no_user_is_the_platforms_own():
    assert on_behalf_of("") is PLATFORM and PLATFORM.admin
