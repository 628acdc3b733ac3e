"""The REST API's usage route: GPU-, CPU- and memory-hours allocated (and CPU-hours used,
memory at its peak, where measured), by UTC day.

`GET /v1/usage?since=&until=&team=&user=&by=` sums what dlaas.domain.usage reads off the
jobs' histories in the job store, computed on demand: every job the caller may see is
read in pages, and a job that holds nothing now has its rows cached until its history
changes (`UsageCache`, one per app). Nothing is kept apart from the histories, so the
totals survive restarts and `dlaas down`/`up` with the store, and deleting a job (its
record and history) takes its usage with it.

Who sees what is the platform's one rule (`Caller.can_see`): a user sees the usage of
their own jobs (in every team they ran them in), an administrator everyone's.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from dlaas.adapters.store.base import JobStore
from dlaas.domain import usage
from services.api.deps import CallerDep, DepsDep
from services.api.models import error_responses

router = APIRouter(prefix="/v1", tags=["usage"])

# The most rows one answer holds (by=job over a long range may have more): the answer
# says it was cut, and a narrower range or filter gets the rest.
MAX_ROWS = 10_000


class Hours(BaseModel):
    gpu_hours: float = Field(description="GPUs held x hours")
    cpu_hours: float = Field(description="CPU cores held x hours")
    memory_gib_hours: float = Field(description="GiB of memory held x hours")
    cpu_used_hours: float = Field(
        description="CPU-hours the jobs' containers used, where measured (runs whose learners "
        "ended by themselves; 0 for the others)"
    )
    memory_peak_gib_hours: float = Field(
        description="the learners' peak memory, GiB, x the hours held, where measured"
    )


class UsageRowPublic(Hours):
    day: str = Field(description="the UTC day, YYYY-MM-DD")
    team: str
    user: str = Field(description='"" when the rows are by team')
    job_id: str = Field(description='"" unless the rows are by job')


class TeamTotal(Hours):
    team: str


class UserTotal(Hours):
    user: str


class UsageReply(BaseModel):
    since: str
    until: str
    by: str
    rows: list[UsageRowPublic] = Field(description="by day, then team, user, job")
    truncated: bool = Field(description=f"true when there were more than {MAX_ROWS} rows")
    teams: list[TeamTotal] = Field(description="each team's total over the range")
    users: list[UserTotal] = Field(description="each user's total over the range")
    total: Hours


def usage_rows(
    store: JobStore, cache: usage.UsageCache, user: str | None, q: usage.Query, now: float
) -> list[usage.UsageRow]:
    """The rows `q` asks for, per job and day, of the jobs of `user` (None: all)."""
    return [row for r in store.each(user) for row in cache.rows(r, now) if q.wants(row)]


def _cache(request: Request) -> usage.UsageCache:
    cache = getattr(request.app.state, "usage_cache", None)
    if cache is None:
        cache = request.app.state.usage_cache = usage.UsageCache()
    return cache


@router.get("/usage", response_model=UsageReply, responses=error_responses(422))
def get_usage(
    request: Request,
    deps: DepsDep,
    caller: CallerDep,
    since: Annotated[str, Query(max_length=10, description="first UTC day, YYYY-MM-DD")] = "",
    until: Annotated[str, Query(max_length=10, description="last UTC day (default today)")] = "",
    team: Annotated[str, Query(max_length=64, description="only this team's jobs")] = "",
    user: Annotated[str, Query(max_length=64, description="only this user's jobs")] = "",
    by: Annotated[str, Query(max_length=8, description="rows per team, user or job")] = "user",
) -> UsageReply:
    """GPU-, CPU- and memory-hours allocated (CPU used and peak memory where measured) by
    UTC day (default the last 30 days): yours, or anyone's for an administrator."""
    now = time.time()
    today = dt.datetime.fromtimestamp(now, dt.UTC).date()
    q = usage.make_query(since, until, team, user, by, today)
    rows = usage_rows(deps.store, _cache(request), caller.user_filter, q, now)
    grouped = usage.group(rows, q.by)
    return UsageReply(
        since=q.since,
        until=q.until,
        by=q.by,
        rows=[
            UsageRowPublic(day=r.day, team=r.team, user=r.user, job_id=r.job_id, **r.usage.hours())
            for r in grouped[:MAX_ROWS]
        ],
        truncated=len(grouped) > MAX_ROWS,
        teams=[
            TeamTotal(team=k, **u.hours()) for k, u in sorted(usage.totals(rows, "team").items())
        ],
        users=[
            UserTotal(user=k, **u.hours()) for k, u in sorted(usage.totals(rows, "user").items())
        ],
        total=Hours(**sum((r.usage for r in rows), usage.Usage()).hours()),
    )
