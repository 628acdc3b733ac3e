"""A team's run-time default and maximum, and the deadline a job gets from them. Pure.

Administrators set both per team (`dlaas teams add|set --default-duration 2h --max-duration
8h`; dlaas.domain.account_ops stores them, audited). They act in two places:
- at submit (services/api/admission.py): a manifest whose `max_duration` is above its
  team's maximum is refused, naming the field and the ceiling. Administrators are exempt,
  as for the priority ceiling; a job submitted before the maximum was lowered keeps what
  it asked.
- in the job monitor (services/jobmonitor/activity.py): a job whose manifest names no
  `max_duration` runs for its team's default, else its team's maximum. The platform's
  maximum (DLAAS_MONITOR_MAX_DURATION_S) bounds every job, administrators' too.
The deadline carries its source, which the job's `deadline_exceeded` reason names.
"""

from __future__ import annotations

from dlaas.domain.accounts import DEFAULT_TEAM, Team
from dlaas.domain.errors import InvalidRequest
from dlaas.domain.manifest import MAX_DURATION_S

SOURCE_MANIFEST = "max_duration"
SOURCE_PLATFORM_MAX = "the platform's maximum run time"


def duration_text(seconds: float) -> str:
    """`5400` -> "1h 30m": how a run time is shown (CLI, reasons, refusals)."""
    s = int(seconds)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return " ".join(f"{v}{u}" for v, u in ((h, "h"), (m, "m"), (sec, "s")) if v) or "0s"


def check_team_durations(default_s: int, max_s: int) -> None:
    """Refuse run times out of range, or a default above the maximum (0: none)."""
    for field, value in (("default_duration_s", default_s), ("max_duration_s", max_s)):
        if not 0 <= value <= MAX_DURATION_S:
            raise InvalidRequest(
                f"{field}: must be between 0 (none) and {MAX_DURATION_S} (366 days), got {value}"
            )
    if default_s and max_s and default_s > max_s:
        raise InvalidRequest(
            f"default_duration_s: {duration_text(default_s)} is above the team's maximum "
            f"run time {duration_text(max_s)}"
        )


def duration_refusal(team_name: str, team: Team | None, asked_s: int) -> str:
    """Why a manifest's `max_duration` may not be submitted by a member of the team ("" when
    it may): above the team's maximum. Naming none is fine: the team's default applies."""
    ceiling = team.max_duration_s if team is not None else 0
    if not ceiling or asked_s <= ceiling:
        return ""
    return (
        f"max_duration: {duration_text(asked_s)} is above team {team_name or DEFAULT_TEAM}'s "
        f"maximum run time {duration_text(ceiling)}; ask for less, or an administrator "
        "raises it (dlaas teams set --max-duration)"
    )


def deadline(asked_s: float, team: Team | None, platform_max_s: float) -> tuple[float, str]:
    """The running time a job gets (0: none) and what set it.

    The manifest's `max_duration` (checked against the team's maximum at submit), else the
    team's default bounded by its maximum, else that maximum; then the platform's maximum
    bounds it."""
    limit, source = float(asked_s), SOURCE_MANIFEST
    if not limit and team is not None:
        default, ceiling = team.default_duration_s, team.max_duration_s
        if default and (not ceiling or default <= ceiling):
            limit, source = float(default), f"team {team.name}'s default run time"
        elif ceiling:
            limit, source = float(ceiling), f"team {team.name}'s maximum run time"
    if platform_max_s and (not limit or limit > platform_max_s):
        limit, source = float(platform_max_s), SOURCE_PLATFORM_MAX
    return limit, source
