"""Team quotas: which work runs inside a team's guarantee and which runs on borrowed capacity.

A team's quota (model.TeamQuota) is its guaranteed share of GPUs, CPUs and memory. Work inside
it is GUARANTEED: no other team's job ever preempts it. Anything a team runs beyond it (and
everything a job of no team, or of a team without a quota, runs) is BORROWED idle capacity:
when a team below its guarantee has a job waiting that fits in the rest of its guarantee,
the round takes borrowed work of other teams back (fairshare.py, "reclaim").

Which running jobs are guaranteed is decided here, the same way for the round, the queue report
and the `Teams` view: a team's jobs in start order (oldest run first), each guaranteed if the
team's guaranteed usage including it stays within the quota in all three dimensions (first
fit: a small job may still fit after a big one did not). Start order means a job keeps its
status while later jobs come and go, and that whatever a team runs beyond its quota is the
work it started last. A QUEUED job is guaranteed if the team's whole usage plus the job (at
its requested size) stays within the quota; a team over its quota has only borrowed jobs
waiting.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .model import Allocation, QueuedJob, RunningJob, Snapshot, TeamQuota

EPS = 1e-9  # slack on float sums of CPUs and memory (public: the round compares with it too)

# (gpus, cpus, memory_mb)
Use = tuple[float, float, float]
ZERO: Use = (0.0, 0.0, 0.0)
_UNITS = ("GPUs", "CPUs", "MiB of memory")


def demand(j: QueuedJob) -> Use:
    """What the job takes at its requested size."""
    n = j.learners
    return (n * j.gpus_per_learner, n * j.cpus_per_learner, n * j.memory_mb_per_learner)


def held(allocations: Iterable[Allocation]) -> Use:
    g = c = m = 0.0
    for a in allocations:
        g += len(a.gpu_indices)
        c += a.cpus
        m += a.memory_mb
    return (g, c, m)


def add(a: Use, b: Use, sign: float = 1.0) -> Use:
    return (a[0] + sign * b[0], a[1] + sign * b[1], a[2] + sign * b[2])


def limits(q: TeamQuota) -> Use:
    return (float(q.gpus), float(q.cpus), float(q.memory_mb))


def within(used: Use, more: Use, quota: TeamQuota) -> bool:
    """Whether `used + more` stays within the quota in every dimension."""
    return fits(used, more, limits(quota))


def fits(used: Use, more: Use, lim: Use) -> bool:
    """`within` against limits already unpacked (a round asks this once per queued job)."""
    return (
        used[0] + more[0] <= lim[0] + EPS
        and used[1] + more[1] <= lim[1] + EPS
        and used[2] + more[2] <= lim[2] + EPS
    )


def exceeded(used: Use, more: Use, quota: TeamQuota) -> int:
    """The first dimension (0 GPUs, 1 CPUs, 2 memory) in which `used + more` exceeds the
    quota; -1 if none."""
    for i, (u, x, lim) in enumerate(zip(used, more, limits(quota), strict=True)):
        if u + x > lim + EPS:
            return i
    return -1


def unit(dim: int) -> str:
    return _UNITS[dim]


def amount(x: float, dim: int) -> str:
    return f"{x:g}" if dim == 1 else f"{x:.0f}"


def guarantee_dim(need: Use, q: TeamQuota) -> int:
    """The resource a reason about `q` speaks of for a job needing `need`: the first one the
    job needs that the quota guarantees (GPUs, CPUs, memory); else the first the quota
    guarantees; else GPUs for a GPU job, CPUs for another. A CPU-only cluster's teams are
    guaranteed CPUs, and "0/0 GPUs" would say nothing."""
    lim = limits(q)
    for dim in range(3):
        if need[dim] > EPS and lim[dim] > EPS:
            return dim
    return next((dim for dim in range(3) if lim[dim] > EPS), 0 if need[0] > EPS else 1)


def usage_text(used: Use, q: TeamQuota, dim: int) -> str:
    """ "1/4 GPUs", "0.5/8 CPUs": a team's use against its guarantee in one resource."""
    return f"{amount(used[dim], dim)}/{amount(limits(q)[dim], dim)} {unit(dim)}"


def borrowed_jobs(running: Iterable[RunningJob], quotas: Mapping[str, TeamQuota]) -> set[str]:
    """Ids of the running jobs on borrowed capacity (see the module docstring)."""
    out: set[str] = set()
    per_team: dict[str, list[RunningJob]] = {}
    for r in running:
        if r.team and r.team in quotas:
            per_team.setdefault(r.team, []).append(r)
        else:
            out.add(r.job_id)  # no team, or a team without a quota: nothing is guaranteed
    for team, jobs in per_team.items():
        lim = limits(quotas[team])
        used = ZERO
        for r in sorted(jobs, key=lambda r: (r.start_time, r.job_id)):
            use = held(r.allocations)
            if fits(used, use, lim):
                used = add(used, use)
            else:
                out.add(r.job_id)
    return out


def round_usage(
    running: Iterable[RunningJob], quotas: Mapping[str, TeamQuota]
) -> tuple[set[str], dict[str, Use], dict[str, Use]]:
    """(borrowed job ids, use per team, borrowed use per team) in one pass: what a round
    starts from (the same answer as `borrowed_jobs` plus summing `held`, at half the cost)."""
    borrowed: set[str] = set()
    used: dict[str, list[float]] = {}
    used_b: dict[str, list[float]] = {}
    per_team: dict[str, list[tuple[float, str, float, float, float]]] = {}
    # (a round starts with this for every running job: no list made only to be thrown away)
    for r in running:
        g = c = m = 0.0
        for a in r.allocations:
            g += len(a.gpu_indices)
            c += a.cpus
            m += a.memory_mb
        team = r.team
        u = used.get(team)
        if u is None:
            u = used[team] = [0.0, 0.0, 0.0]
        u[0] += g
        u[1] += c
        u[2] += m
        if team and team in quotas:
            mine = per_team.get(team)
            if mine is None:
                mine = per_team[team] = []
            mine.append((r.start_time, r.job_id, g, c, m))
        else:
            borrowed.add(r.job_id)  # no team, or a team without a quota: nothing is guaranteed
            b = used_b.setdefault(r.team, [0.0, 0.0, 0.0])
            b[0] += g
            b[1] += c
            b[2] += m
    for team, jobs in per_team.items():
        lg, lc, lm = limits(quotas[team])
        ug = uc = um = 0.0
        jobs.sort()
        for _, job_id, g, c, m in jobs:
            if ug + g <= lg + EPS and uc + c <= lc + EPS and um + m <= lm + EPS:
                ug += g
                uc += c
                um += m
            else:
                borrowed.add(job_id)
                b = used_b.setdefault(team, [0.0, 0.0, 0.0])
                b[0] += g
                b[1] += c
                b[2] += m
    return (
        borrowed,
        {t: (x[0], x[1], x[2]) for t, x in used.items()},
        {t: (x[0], x[1], x[2]) for t, x in used_b.items()},
    )


@dataclass(frozen=True, slots=True)
class TeamUsage:
    """One team's quota against what it holds now: guaranteed and borrowed (gpus, cpus, mem)."""

    team: str
    quota: TeamQuota
    guaranteed: Use
    borrowed: Use
    queued: int


def team_usage(snapshot: Snapshot) -> list[TeamUsage]:
    """Every team with a quota or a job (running or queued), by name. Jobs of no team are not
    listed (they are nobody's guarantee)."""
    borrowed = borrowed_jobs(snapshot.running, snapshot.quotas)
    g: dict[str, Use] = {}
    b: dict[str, Use] = {}
    queued: dict[str, int] = {}
    for r in snapshot.running:
        if not r.team:
            continue
        into = b if r.job_id in borrowed else g
        into[r.team] = add(into.get(r.team, ZERO), held(r.allocations))
    for j in snapshot.queue:
        if j.team:
            queued[j.team] = queued.get(j.team, 0) + 1
    teams = sorted({*snapshot.quotas, *g, *b, *queued})
    return [
        TeamUsage(
            t,
            snapshot.quotas.get(t, TeamQuota()),
            g.get(t, ZERO),
            b.get(t, ZERO),
            queued.get(t, 0),
        )
        for t in teams
    ]


def guaranteed_first(
    order: Iterable[QueuedJob], running: Iterable[RunningJob], quotas: Mapping[str, TeamQuota]
) -> list[QueuedJob]:
    """The queue as a round with these quotas walks it: the jobs inside their team's guarantee
    first, then the rest, each part in the given (policy) order. An estimate for positions and
    ETAs: it assumes each guaranteed job starts (a round decides that as it goes)."""
    used: dict[str, Use] = {}
    for r in running:
        used[r.team] = add(used.get(r.team, ZERO), held(r.allocations))
    lims = {team: limits(q) for team, q in quotas.items() if team}
    first, rest = [], []
    for j in order:
        lim = lims.get(j.team)
        if lim is not None:
            d = demand(j)
            u = used.get(j.team, ZERO)
            if fits(u, d, lim):
                used[j.team] = add(u, d)
                first.append(j)
                continue
        rest.append(j)
    return first + rest
