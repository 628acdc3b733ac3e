"""Fair share in a round: team quotas (guarantee, borrow, reclaim) and DRF across users.

Part of the round (`round.Round` mixes `FairShare` in). With team quotas (only when the
snapshot carries some; without them nothing here runs and every decision is as it was) the
queue is walked twice in the policy's order: first the jobs that fit in what is left of their
team's guarantee (`quota.py`); such a job that does not fit may RECLAIM, under any policy:
preempt whole borrowed jobs of other teams (lowest priority, least work lost since their last
checkpoint, least progress first; the thrash guard does not protect borrowed work). Then every
other job, borrowing what is idle; it may preempt by class as the policy does, but only
borrowed work or its own team's: a guaranteed job is never the victim of another team.

The `fair` policy orders the queue by DRF (`drf_order`): the user with the smallest dominant
share goes next, shares updated on the round's starts.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator

from . import quota as qt
from .model import Allocation, QueuedJob, RunningJob


class FairShare:
    """The round's team-quota accounting, reclaim and DRF order (a mixin of `round.Round`)."""

    def _account(self, team: str, allocs: Iterable[Allocation], sign: float, borrowed: bool):
        # qt.held and qt.add inlined: a round calls this for every start
        g = c = m = 0.0
        for a in allocs:
            g += len(a.gpu_indices)
            c += a.cpus
            m += a.memory_mb
        u = self.used.get(team, qt.ZERO)
        self.used[team] = (u[0] + sign * g, u[1] + sign * c, u[2] + sign * m)
        if borrowed:
            b = self.used_borrowed.get(team, qt.ZERO)
            self.used_borrowed[team] = (b[0] + sign * g, b[1] + sign * c, b[2] + sign * m)

    def _reclaimable(self) -> list[RunningJob]:
        """Borrowed running jobs, best victim first: lowest priority, least work lost since the
        last checkpoint (GPU-seconds), least progress; computed once a round."""
        if self._reclaim is None:
            now = self.now

            def key(r: RunningJob) -> tuple:
                ck = r.last_checkpoint_time
                lost = now - (r.start_time if ck is None or ck < r.start_time else ck)
                return (r.priority, lost * max(r.gpus, 1), r.attained_service, r.job_id)

            self._reclaim = sorted(
                (r for r in self.snapshot.running if r.job_id in self.borrowed), key=key
            )
        return self._reclaim

    def _frees_for(self, r: RunningJob, j: QueuedJob) -> bool:
        """Whether preempting r frees anything of the GPU type j needs."""
        return not j.gpu_type or any(
            self.idx.nodes.get(a.node) is not None
            and self.idx.nodes[a.node].node.gpu_type == j.gpu_type
            for a in r.allocations
        )

    def _reclaim_victims(self, j: QueuedJob) -> Iterator[RunningJob]:
        for r in self._reclaimable():
            if r.job_id not in self.touched and r.team != j.team and self._frees_for(r, j):
                yield r

    def _may_reclaim(self, j: QueuedJob) -> bool:
        return any(r.job_id not in self.touched and r.team != j.team for r in self._reclaimable())

    def _quota_note(self, j: QueuedJob) -> str:
        """Why the job's team cannot have more now, in the words of its quota."""
        team = j.team
        q = self.quotas.get(team) if team else None
        used = self.used.get(team, qt.ZERO)
        need = qt.demand(j)
        if q is not None and self.in_guarantee:
            dim = qt.guarantee_dim(need, q)
            return (
                f"team {team} uses {qt.usage_text(used, q, dim)} guaranteed and this job fits its "
                "guarantee, but preempting other teams' borrowed jobs cannot make room for it"
            )
        if q is None:
            dim = 0 if need[0] else 1
            head = f"team {team} has no quota" if team else "no team"
            head += ": it only borrows idle capacity"
        else:
            dim = max(qt.exceeded(used, need, q), 0)
            lim = qt.limits(q)[dim]
            head = (
                f"team {team} uses {qt.amount(used[dim], dim)}/{qt.amount(lim, dim)} guaranteed "
                f"{qt.unit(dim)} (this job needs {qt.amount(need[dim], dim)})"
            )
        parts = []
        for other in sorted(self.used):
            if other == team:
                continue
            b = self.used_borrowed.get(other, qt.ZERO)[dim]
            g = self.used[other][dim] - b
            who = f"team {other}'s" if other else "no team's"
            if g > qt.EPS:
                parts.append(f"{qt.amount(g, dim)} by {who} guaranteed jobs")
            if b > qt.EPS:
                parts.append(f"{qt.amount(b, dim)} by {who} borrowed jobs")
        if not parts:
            return head
        first, _, rest = parts[0].partition(" by ")
        parts[0] = f"{first} borrowable {qt.unit(dim)} are held by {rest}"
        return f"{head}; " + ", ".join(parts)

    def _drf_order(self, queue):
        """DRF: repeatedly serve the user with the smallest dominant share (updated on starts)."""
        tot_g = sum(n.gpus for n in self.snapshot.nodes if n.healthy) or 1
        tot_c = sum(n.cpus for n in self.snapshot.nodes if n.healthy) or 1.0
        tot_m = sum(n.memory_mb for n in self.snapshot.nodes if n.healthy) or 1
        used: dict[str, list[float]] = {}
        for r in self.snapshot.running:
            u = used.setdefault(r.user, [0.0, 0.0, 0.0])
            for a in r.allocations:
                u[0] += len(a.gpu_indices)
                u[1] += a.cpus
                u[2] += a.memory_mb
        per_user: dict[str, list[QueuedJob]] = {}
        for j in sorted(queue, key=lambda j: (-j.priority, j.submit_time, j.job_id)):
            per_user.setdefault(j.user, []).append(j)

        def share(user: str) -> float:
            u = used.get(user, [0.0, 0.0, 0.0])
            return max(u[0] / tot_g, u[1] / tot_c, u[2] / tot_m)

        heap = [(share(u), js[0].submit_time, u) for u, js in per_user.items()]
        heapq.heapify(heap)
        pos = dict.fromkeys(per_user, 0)
        while heap:
            _, _, u = heapq.heappop(heap)
            j = per_user[u][pos[u]]
            pos[u] += 1
            before = len(self.decisions)
            yield j
            for d in self.decisions[before:]:
                if d.action == "start" and d.job_id == j.job_id:
                    x = used.setdefault(u, [0.0, 0.0, 0.0])
                    for a in d.allocations:
                        x[0] += len(a.gpu_indices)
                        x[1] += a.cpus
                        x[2] += a.memory_mb
            if pos[u] < len(per_user[u]):
                heapq.heappush(heap, (share(u), per_user[u][pos[u]].submit_time, u))
