"""A team's default and maximum run time (dlaas.domain.run_time): the settings' checks, the
refusal at submit, the deadline a job gets and what set it, the account use case over the
real SQLite store, and the monitor's bounded cache of the teams."""

from __future__ import annotations

import pytest

from dlaas.domain import account_ops
from dlaas.domain.accounts import Quota, Team
from dlaas.domain.errors import InvalidRequest
from dlaas.domain.manifest import MAX_DURATION_S
from dlaas.domain.run_time import (
    SOURCE_MANIFEST,
    SOURCE_PLATFORM_MAX,
    check_team_durations,
    deadline,
    duration_refusal,
    duration_text,
)
from services.jobmonitor import activity

H = 3600


def team(default_s: int = 0, max_s: int = 0) -> Team:
    return Team("nlp", Quota(), 0.0, default_duration_s=default_s, max_duration_s=max_s)


def test_duration_text():
    assert [duration_text(s) for s in (0, 59, 5400, 8 * H, 2 * 86400 + 1)] == [
        "0s", "59s", "1h 30m", "8h", "48h 1s",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("default_s", "max_s", "words"),
    [
        (-1, 0, "default_duration_s: must be between 0 (none) and"),
        (0, MAX_DURATION_S + 1, "max_duration_s: must be between 0 (none) and"),
        (10 * H, 8 * H, "default_duration_s: 10h is above the team's maximum run time 8h"),
    ],
)
def test_bad_team_run_times_are_refused_naming_the_field(default_s, max_s, words):
    with pytest.raises(InvalidRequest, match=words.replace("(", r"\(").replace(")", r"\)")):
        check_team_durations(default_s, max_s)


def test_good_team_run_times_pass():
    for default_s, max_s in ((0, 0), (2 * H, 8 * H), (8 * H, 8 * H), (2 * H, 0), (0, 8 * H)):
        check_team_durations(default_s, max_s)


def test_a_max_duration_above_the_teams_maximum_is_refused_naming_field_and_ceiling():
    why = duration_refusal("nlp", team(max_s=8 * H), 10 * H)
    assert why.startswith("max_duration: 10h is above team nlp's maximum run time 8h;"), why
    assert "dlaas teams set --max-duration" in why
    assert duration_refusal("nlp", team(max_s=8 * H), 8 * H) == ""  # at the ceiling: fine
    assert duration_refusal("nlp", team(max_s=8 * H), 0) == ""  # none: the team's applies
    assert duration_refusal("nlp", team(), 300 * 86400) == ""  # no team maximum
    assert duration_refusal("", None, 10 * H) == ""  # a team not in the store


def test_the_deadline_and_what_set_it():
    # The manifest's own, whatever the team's (checked at submit; administrators exempt).
    assert deadline(H, team(2 * H, 8 * H), 0) == (H, SOURCE_MANIFEST)
    assert deadline(10 * H, team(2 * H, 8 * H), 0) == (10 * H, SOURCE_MANIFEST)
    # None: the team's default, else its maximum.
    assert deadline(0, team(2 * H, 8 * H), 0) == (2 * H, "team nlp's default run time")
    assert deadline(0, team(0, 8 * H), 0) == (8 * H, "team nlp's maximum run time")
    # A default above the maximum (never stored: refused when set) yields to the maximum.
    assert deadline(0, team(9 * H, 8 * H), 0) == (8 * H, "team nlp's maximum run time")
    assert deadline(0, team(), 0) == (0, SOURCE_MANIFEST)  # no deadline at all
    assert deadline(0, None, 0) == (0, SOURCE_MANIFEST)
    # The platform's maximum bounds them all.
    assert deadline(0, team(2 * H, 8 * H), H) == (H, SOURCE_PLATFORM_MAX)
    assert deadline(10 * H, None, 4 * H) == (4 * H, SOURCE_PLATFORM_MAX)
    assert deadline(0, None, 4 * H) == (4 * H, SOURCE_PLATFORM_MAX)
    assert deadline(0, team(2 * H), 4 * H) == (2 * H, "team nlp's default run time")


def test_the_monitors_limits_take_the_teams_run_times():
    lim = activity.Limits(max_duration_s=4 * H).of(None, team(2 * H, 8 * H))
    assert (lim["max_duration_s"], lim["deadline_source"]) == (2 * H, "team nlp's default run time")


def test_administrators_set_a_teams_run_times_audited(job_store):
    made = account_ops.add_team(
        job_store, "admin", "nlp", Quota(), 1.0, default_duration_s=2 * H, max_duration_s=8 * H
    )
    assert (made.default_duration_s, made.max_duration_s) == (2 * H, 8 * H)
    # One left out stays; 0 lifts it.
    t = account_ops.set_durations(job_store, "admin", "nlp", None, 12 * H, 2.0)
    assert (t.default_duration_s, t.max_duration_s) == (2 * H, 12 * H)
    t = account_ops.set_durations(job_store, "admin", "nlp", 0, None, 3.0)
    assert (t.default_duration_s, t.max_duration_s) == (0, 12 * H)
    entries, _ = job_store.list_audit(offset=0, limit=10)
    assert [(e.action, e.detail) for e in entries[:2]] == [
        ("set-run-times", f"default_duration_s=0 max_duration_s={12 * H}"),
        ("set-run-times", f"default_duration_s={2 * H} max_duration_s={12 * H}"),
    ]
    assert f"default_duration_s={2 * H} max_duration_s={8 * H}" in entries[2].detail
    # A default above the maximum, with the other value as stored: refused, nothing changed.
    with pytest.raises(InvalidRequest, match="default_duration_s: 13h is above"):
        account_ops.set_durations(job_store, "admin", "nlp", 13 * H, None, 4.0)
    with pytest.raises(InvalidRequest, match="default_duration_s: 2h is above"):
        account_ops.add_team(job_store, "admin", "cv", Quota(), 1.0, 100, 0, 2 * H, H)
    with pytest.raises(account_ops.AccountNotFound, match="team: no team 'gone'"):
        account_ops.set_durations(job_store, "admin", "gone", H, None, 4.0)
    assert job_store.get_team("nlp").max_duration_s == 12 * H
    assert job_store.get_team("cv") is None


def test_submit_checks_the_stored_teams_maximum(job_store):
    account_ops.add_team(job_store, "admin", "nlp", Quota(), 1.0, max_duration_s=8 * H)
    account_ops.check_max_duration(job_store, "nlp", 8 * H)
    account_ops.check_max_duration(job_store, "other", 100 * H)  # no such team: no maximum
    with pytest.raises(InvalidRequest, match="max_duration: 9h is above team nlp's maximum"):
        account_ops.check_max_duration(job_store, "nlp", 9 * H)


def test_the_monitors_team_cache_is_bounded_and_expires(monkeypatch):
    monkeypatch.setattr(activity, "MAX_TEAMS_CACHED", 2)
    reads: list[str] = []
    now = [0.0]

    def get_team(name: str) -> Team | None:
        reads.append(name)
        return Team(name, Quota(), 0.0, max_duration_s=len(reads))

    teams = activity.TeamRunTimes(get_team, lambda: now[0])
    assert teams.get("") is None and reads == []  # a job from before teams: no read
    assert teams.get("a").max_duration_s == 1
    assert teams.get("a").max_duration_s == 1 and reads == ["a"]  # kept
    now[0] = activity.TEAM_TTL_S
    assert teams.get("a").max_duration_s == 2  # read again once old
    teams.get("b")
    teams.get("c")  # past the bound: "a", read least recently, is dropped
    assert teams.get("a").max_duration_s == 5 and reads == ["a", "a", "b", "c", "a"]
