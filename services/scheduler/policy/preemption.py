"""Preemption, shrink-before-kill and moves: how a round makes room for a gang that does not fit.

Part of the round (`round.Round` mixes `Preemption` in): the methods read and change the
round's state (its free index, decisions, `touched` jobs). A job that does not fit first
SHRINKS elastic lower-ranked jobs (never below their min), else PREEMPTS a minimal set of whole
lower-ranked jobs, in the policy's victim order inside a class (`Policy.victim_key`), skipping
any job that (re)started less than the policy's `min_run_s` ago (the thrash guard). Under the
policies in `PolicyConfig.move_policies`, a gang whose free GPUs are scattered over nodes may
MOVE a few small jobs off the nodes it needs instead. Who ranks below whom is the policy
object's answer (`Policy.queued_class` / `running_class`).
"""

from __future__ import annotations

import itertools
from bisect import bisect_right
from collections.abc import Iterable
from operator import itemgetter

from . import quota as qt
from .feasibility import gang_shape, placed_shape
from .model import Allocation, Decision, QueuedJob, RunningJob
from .policies import wait_since
from .state import RoundState


class Preemption(RoundState):
    """The round's preemption, shrink and move steps (a mixin of `round.Round`)."""

    # -- preemption -----------------------------------------------------------------------
    def _ranked(self) -> list[tuple[tuple, RunningJob]]:
        """Running jobs, least important first, then in the policy's victim order; once a round."""
        if self._ranked_cache is None:
            policy = self.policy
            now, min_run = self.now, policy.min_run_s(self.cfg)
            leveled = policy.leveled
            th = policy.thresholds(self.cfg) if leveled else ()
            by_service = policy.scales_service(self.cfg)
            victim_key = policy.victim_key(now, self.cfg)  # inside a class
            rows = []
            for r in self.snapshot.running:
                start = r.start_time
                if now - max(start, r.last_resize_time or start) < min_run:
                    continue  # thrash guard: never a victim
                allocs = r.allocations
                gpus = len(allocs[0].gpu_indices) if len(allocs) == 1 else r.gpus
                if leveled:
                    service = r.attained_service
                    if by_service:
                        service = policy.service(service, gpus, self.cfg)
                    lvl = bisect_right(th, service)  # = las_level (thresholds ascend)
                    cls: tuple = (-r.priority, lvl)
                    key = (r.priority, -lvl) + victim_key(r, gpus)
                else:
                    cls = policy.running_class(r, self.cfg)
                    key = (*(-x for x in cls), *victim_key(r, gpus))
                rows.append((key, (cls, r)))
            rows.sort(key=itemgetter(0))
            self._ranked_cache = list(map(itemgetter(1), rows))
            # (no min_learners: min is its size, nothing to shrink; the cheap test first)
            self._elastic = [
                x
                for x in self._ranked_cache
                if x[1].min_learners is not None and x[1].learners > x[1].min_gang
            ]
        return self._ranked_cache

    def _may_preempt(self, cls: tuple, can_preempt: bool) -> bool:
        if not can_preempt:
            return False
        ranked = self._ranked()
        for i in range(self._ranked_start, len(ranked)):
            rcls, r = ranked[i]
            if rcls <= cls:
                return False
            if r.job_id not in self.touched:
                return True
        return False

    def _victims(self, j: QueuedJob, elastic_only: bool = False, pool=None):
        """Lower-class running jobs this job may take resources from, best victim first
        (`pool`: only from this sub-list of `_ranked()`, in its order)."""
        cls = self.policy.queued_class(j, self.now, self.cfg)
        ranked = self._ranked()
        if pool is not None:
            yield from self._pool_victims(j, cls, pool)
            return
        if not elastic_only and len(self.touched) - self._compacted_at > max(64, len(ranked) // 16):
            # victims taken this round lie scattered in the list: drop them (amortized O(n))
            ranked = self._ranked_cache = [x for x in ranked if x[1].job_id not in self.touched]
            self._ranked_start = 0
            self._compacted_at = len(self.touched)
        if elastic_only:
            ranked = self._elastic
        else:
            # victims already taken sit at the front: skip them once, not on every attempt
            while self._ranked_start < len(ranked) and ranked[self._ranked_start][1].job_id in (
                self.touched
            ):
                self._ranked_start += 1
        first = 0 if elastic_only else self._ranked_start
        margin = self.policy.preempt_margin(self.cfg)
        skipped = yielded = 0
        for i in range(first, len(ranked)):
            rcls, r = ranked[i]
            if rcls <= cls:
                return  # sorted: everyone after is at least as important
            if r.job_id in self.touched:
                skipped += 1
                if skipped > 32 and not elastic_only and not yielded:
                    # many taken victims scattered in the list: compact it once (amortized)
                    self._ranked_cache = [x for x in ranked if x[1].job_id not in self.touched]
                    self._ranked_start = 0
                    yield from self._victims(j, elastic_only)
                    return
                continue
            if elastic_only and r.learners <= r.min_gang:
                continue
            if r.attained_service < j.attained_service + margin:
                continue  # not enough older than the waiting job to be worth a preemption
            if j.gpu_type and not any(
                self.idx.nodes.get(a.node) is not None
                and self.idx.nodes[a.node].node.gpu_type == j.gpu_type
                for a in r.allocations
            ):
                continue  # frees nothing this job can use
            yielded += 1
            yield r

    def _pool_victims(self, j: QueuedJob, cls: tuple, pool: list):
        margin = self.policy.preempt_margin(self.cfg)
        touched = self.touched
        for rcls, r in pool:
            if rcls <= cls:
                return  # sorted: everyone after is at least as important
            if r.job_id in touched:
                continue
            if r.attained_service < j.attained_service + margin:
                continue
            if j.gpu_type and not self._frees_for(r, j):
                continue
            yield r

    def _class_victims(self, j: QueuedJob, elastic_only: bool, reclaim: bool):
        """`_victims`, less those team quotas protect: another team's guaranteed job is never
        one (and in a reclaim, other teams' borrowed jobs come from `_reclaim_victims`)."""
        if not self.quotas:
            return self._victims(j, elastic_only)
        # Per team, the ranked victims it may take (built once a round: scanning the whole
        # ranked list past other teams' guaranteed jobs on every attempt was a third of a
        # 10,000-job round's quota overhead; and out of one pass over the list for every team)
        team = j.team
        key = (team, elastic_only, reclaim)
        pool = self._pools.get(key)
        if pool is None:
            base, borrowed, own = self._split_by_team(elastic_only)
            if not team:
                at: list[int] = [] if reclaim else borrowed
            else:
                mine, mine_borrowed = own.get(team, ([], []))
                # positions in `base`: two ascending runs, which sorted() merges in one pass
                at = sorted(mine + (mine_borrowed if reclaim else borrowed))
            pool = [base[i] for i in at]
            self._pools[key] = pool
        return self._victims(j, elastic_only, pool)

    def _split_by_team(self, elastic_only: bool) -> tuple[list, list[int], dict]:
        """(base, borrowed, own): `base` the ranked victims (the elastic ones only, or all),
        `borrowed` the positions in it of borrowed jobs, `own[team]` those of the team's
        jobs (not borrowed, borrowed); one pass, once a round for each kind."""
        found = self._by_team.get(elastic_only)
        if found is None:
            base = self._elastic if elastic_only else self._ranked()
            is_borrowed = self.borrowed
            borrowed: list[int] = []
            own: dict[str, tuple[list[int], list[int]]] = {}
            for i, (_, r) in enumerate(base):
                b = r.job_id in is_borrowed
                if b:
                    borrowed.append(i)
                if r.team:
                    mine = own.get(r.team)
                    if mine is None:
                        mine = own[r.team] = ([], [])
                    (mine[1] if b else mine[0]).append(i)
            found = self._by_team[elastic_only] = (base, borrowed, own)
        return found

    def try_preempt(self, j: QueuedJob, by_class: bool = True, reclaim: bool = False) -> bool:
        """Make room for j by shrinking or preempting lower-class jobs (`by_class`, as the policy
        ranks them) and, for a job inside its team's guarantee (`reclaim`), borrowed jobs of
        other teams first, whatever their class."""
        need = j.min_gang
        g = j.gpus_per_learner
        cause_cls = self.policy.queued_class(j, self.now, self.cfg)

        # 1. shrink-before-kill: remove learners of elastic victims, never below their min.
        elastic = self._class_victims(j, True, reclaim) if by_class else ()
        freed = self.free_learners_for(
            j,
            need,
            ((r, sorted(r.allocations, key=lambda a: -a.learner)[: r.learners - r.min_gang])
             for r in elastic),
        )  # fmt: skip
        if freed is not None:
            shrinks, room = freed
            self.record_shrinks(
                shrinks,
                lambda r, taken: (
                    f"shrunk by {len(taken)} learner(s) (to {r.learners - len(taken)}, min "
                    f"{r.min_gang}) to admit {j.job_id} (class {cause_cls} beats "
                    f"{self.policy.running_class(r, self.cfg)})"
                ),
            )
            self.start(j, room, f"started after shrinking elastic jobs ({gang_shape(j)})")
            return True

        # 2. preempt whole jobs, least important / least work lost first.
        allocs: list[Allocation] | None = None
        chosen: list[RunningJob] = []
        victims: Iterable[RunningJob] = self._class_victims(j, False, reclaim) if by_class else ()
        if reclaim:
            victims = itertools.chain(self._reclaim_victims(j), victims)
        max_victims = self.policy.max_victims(self.cfg)
        for r in victims:
            if len(chosen) >= max_victims:
                break
            self.idx.give(r.allocations)
            chosen.append(r)
            if g > 0 and self.idx.upper_capacity(g, j.gpu_type) < need:
                continue
            allocs = self.place(j, need)
            if allocs is not None:
                break
        if allocs is None:
            for r in chosen:
                self.idx.take(r.allocations)
            return False
        # minimality: drop victims whose resources turned out not to be needed
        dropped: set[str] = set()
        for r in reversed(chosen[:-1]):
            self.idx.take(r.allocations)
            if self.place(j, need) is None:
                self.idx.give(r.allocations)
            else:
                dropped.add(r.job_id)
        chosen = [r for r in chosen if r.job_id not in dropped]
        allocs = self.must_place(j, need)
        for r in chosen:
            self.touched.add(r.job_id)
            cause = (
                f"preempted for {j.job_id}: its class {cause_cls} beats "
                f"{self.policy.running_class(r, self.cfg)} "
                f"({len(chosen)} victim(s), the fewest that make room)"
            )
            if self.quotas:
                borrowed = r.job_id in self.borrowed
                if reclaim and borrowed and r.team != j.team:
                    q = self.quotas[j.team]
                    dim = qt.guarantee_dim(qt.demand(j), q)
                    used = qt.usage_text(self.used.get(j.team, qt.ZERO), q, dim)
                    cause = (
                        f"reclaimed for {j.job_id}: team {j.team} is below its guarantee "
                        f"({used}) and this job "
                        f"of {f'team {r.team}' if r.team else 'no team'} runs on borrowed "
                        f"capacity ({len(chosen)} victim(s), the fewest that make room)"
                    )
                self._account(r.team, r.allocations, -1.0, borrowed)
            self.decisions.append(Decision(r.job_id, "preempt", cause, list(r.allocations)))
        self.start(j, allocs, f"started by preempting {', '.join(r.job_id for r in chosen)}")
        return True

    # -- eviction by a job that waited too long -------------------------------------------
    def try_evict(self, j: QueuedJob) -> bool:
        """Start a job that has waited the policy's `evict_after` by preempting the fewest
        running jobs on the nodes cheapest to clear, whatever their class. Spared: jobs of a
        higher priority, jobs inside the thrash guard, jobs that waited `starve_after_s` in
        all themselves; at most `max_victims`. See PolicyConfig.evict_after_s for why."""
        now, bound = self.now, self.cfg.starve_after_s
        min_run = self.policy.min_run_s(self.cfg)
        candidates: dict[str, list[tuple[RunningJob, int]]] = {}
        for r in self.snapshot.running:
            if r.job_id in self.touched or r.priority > j.priority or not r.allocations:
                continue
            if now - max(r.start_time, r.last_resize_time or r.start_time) < min_run:
                continue  # thrash guard
            if now - r.submit_time - r.attained_service / max(r.gpus, 1) >= bound:
                continue  # it starved too: not taken for another
            for a in r.allocations:
                candidates.setdefault(a.node, []).append((r, len(a.gpu_indices)))
        for cands in candidates.values():
            # jobs wholly on the node first (nothing freed elsewhere for nothing), biggest first
            cands.sort(key=lambda x: (x[0].gpus - x[1], -x[1], x[0].job_id))
        victims = self._nodes_to_clear(j, candidates)
        if not victims or len(victims) > self.cfg.max_victims:
            return False
        for r in victims:
            self.idx.give(r.allocations)
        allocs = self.place(j, j.min_gang)
        if allocs is None:  # CPUs or memory still short
            for r in victims:
                self.idx.take(r.allocations)
            return False
        waited = (now - wait_since(j)) / 3600
        for r in victims:
            self.touched.add(r.job_id)
            if self.quotas:
                self._account(r.team, r.allocations, -1.0, r.job_id in self.borrowed)
            self.decisions.append(
                Decision(
                    r.job_id,
                    "preempt",
                    f"evicted for {j.job_id}, which has waited {waited:.1f} h "
                    f"({len(victims)} victim(s) on the nodes cheapest to clear)",
                    list(r.allocations),
                )
            )
        self.start(j, allocs, f"started by evicting {', '.join(r.job_id for r in victims)}")
        return True

    # -- moves (defragmentation) ---------------------------------------------------------
    def _movable_by_node(self) -> dict[str, list[RunningJob]]:
        """Running single-node GPU jobs past the thrash guard, by node; computed once a round."""
        if self._movable is None:
            self._movable = {}
            for r in self.snapshot.running:
                if not r.allocations or r.gpus == 0:
                    continue
                node = r.allocations[0].node
                if any(a.node != node for a in r.allocations):
                    continue
                since = max(r.start_time, r.last_resize_time or r.start_time)
                if self.now - since < self.cfg.min_run_s:
                    continue
                self._movable.setdefault(node, []).append(r)
        return self._movable

    def _nodes_to_clear(
        self, j: QueuedJob, candidates: dict[str, list[tuple[RunningJob, int]]]
    ) -> list[RunningJob] | None:
        """The jobs to take off the nodes cheapest to clear for j's gang: fewest jobs per learner
        slot first (nodes that need none lead). `candidates`: per node, the jobs that may go and
        the GPUs each frees there, in the order to take them. None if even all of them leave
        too few slots."""
        g, need = j.gpus_per_learner, j.min_gang
        options = []  # (jobs per learner slot, jobs, -slots, node name, jobs to take off)
        for nf in self.idx.nodes.values():
            n = nf.node
            if nf.reserved_for not in (None, j.job_id) or n.gpus < g:
                continue
            if j.gpu_type and n.gpu_type != j.gpu_type:
                continue
            free = len(nf.free)
            cands = candidates.get(n.name, ())
            slots = min((free + sum(k for _, k in cands)) // g, need)
            if slots == 0:
                continue
            chosen: list[RunningJob] = []
            while free < slots * g:
                r, k = cands[len(chosen)]
                chosen.append(r)
                free += k
            options.append((len(chosen) / slots, len(chosen), -slots, n.name, chosen))
        options.sort(key=lambda o: o[:4])
        out: dict[str, RunningJob] = {}  # a gang over several nodes is taken once
        slots = 0
        for *_, neg_slots, _, chosen in options:
            if slots >= need:
                break
            out.update((r.job_id, r) for r in chosen)
            slots -= neg_slots
        return list(out.values()) if slots >= need else None

    def try_move(self, j: QueuedJob) -> bool:
        """Start a gang that the free GPUs could hold, were they not scattered over nodes, by
        moving a few small jobs off the nodes it needs (each restarts elsewhere at once).
        The caller checked that the gang needs GPUs and that enough are free in total."""
        need = j.min_gang
        candidates = {
            node: [
                (r, r.gpus)
                for r in sorted(jobs, key=lambda r: (-r.gpus, r.job_id))
                if r.job_id not in self.touched and r.priority <= j.priority
            ]
            for node, jobs in self._movable_by_node().items()
        }
        movers = self._nodes_to_clear(j, candidates)
        if not movers or len(movers) > self.cfg.max_moves:
            return False
        for r in movers:
            self.idx.give(r.allocations)
        allocs = self.place(j, need)
        if allocs is None:
            for r in movers:
                self.idx.take(r.allocations)
            return False
        self.idx.take(allocs)
        used = {(a.node, i) for a in allocs for i in a.gpu_indices}
        moved = [
            r
            for r in movers
            if any((a.node, i) in used for a in r.allocations for i in a.gpu_indices)
        ]
        for r in movers:
            if r not in moved:
                self.idx.take(r.allocations)  # not in the gang's way after all: it stays
        placed: list[list[Allocation]] = []
        for r in moved:
            pg, pc, pm = r.per_learner()
            gtype = r.gpu_type or self.idx.nodes[r.allocations[0].node].node.gpu_type
            new = self.idx.place(r.job_id, r.learners, pg, pc, pm, gtype, r.placement)
            if new is None:  # nowhere to go: undo the whole move
                for x in placed:
                    self.idx.give(x)
                self.idx.give(allocs)
                for m in moved:
                    self.idx.take(m.allocations)
                return False
            self.idx.take(new)
            placed.append(new)
        for r in moved:
            self.touched.add(r.job_id)
            self.decisions.append(
                Decision(
                    r.job_id,
                    "preempt",
                    f"moved to make room for {j.job_id} ({gang_shape(j)}); restarts elsewhere now",
                    list(r.allocations),
                )
            )
        self.idx.give(allocs)  # start() takes them again and drops the gang's reservation
        cause = f"fits now ({placed_shape(j, len(allocs))})"
        if moved:
            cause = (
                f"started after moving {', '.join(r.job_id for r in moved)} ({gang_shape(j)}; "
                "enough GPUs were free, but scattered over nodes)"
            )
        self.start(j, allocs, cause)
        for r, new in zip(moved, placed, strict=True):
            self.decisions.append(
                Decision(r.job_id, "start", f"restarted after a move for {j.job_id}", new)
            )
        return True
