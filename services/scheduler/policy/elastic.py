"""Elastic jobs in a round: lent learners given back, and idle GPUs grown into.

Part of the round (`round.Round` mixes `Elastic` in). Elastic capacity is LENT, not owned:
learners above a job's target are given back (the job SHRINKS toward its target; the LCM
checkpoints it and restarts it smaller) before any queued job waits for them, under every
policy, whatever the two jobs' classes and the thrash guard. This comes before preemption: a
lent learner costs its job one restart, a preemption the whole run. Leftover idle GPUs then
GROW elastic jobs back toward their target (the size the user asked for), and past it toward
their max only with `auto_grow`, if nobody waiting could use them.
"""

from __future__ import annotations

from .feasibility import placed_shape
from .model import Decision, QueuedJob, RunningJob


def grow_cause(r: RunningJob, added: int) -> str:
    n, t = r.learners + added, r.target
    if n <= t:
        return (
            f"grown by {added} learner(s) back to {n} (its target {t}) into idle resources; "
            "nobody waiting can use them"
        )
    return (
        f"grown by {added} learner(s) to {n} (target {t}, max {r.max_gang}, auto_grow) into "
        f"idle resources nobody waiting can use; the {n - t} above its target are lent: given "
        "back as soon as a queued job needs them"
    )


class Elastic:
    """The round's give-back and grow steps (a mixin of `round.Round`)."""

    def _lenders(self) -> list[RunningJob]:
        """Running jobs holding learners above their target, least important first."""
        if self._lenders_cache is None:
            self._lenders_cache = sorted(
                (r for r in self.snapshot.running if r.lent and r.allocations),
                key=lambda r: (r.priority, -r.lent, r.job_id),
            )
        return self._lenders_cache

    def _lent_left(self) -> bool:
        return any(r.job_id not in self.touched for r in self._lenders())

    def _give_back_for(self, j: QueuedJob, want: int, lenders: list[RunningJob]):
        """(shrinks, allocations) that start `want` learners of j out of lent learners
        only, the fewest given back; None (the index untouched) if they cannot."""
        return self.free_learners_for(
            j,
            want,
            ((r, sorted(r.allocations, key=lambda a: -a.learner)[: r.lent]) for r in lenders),
        )

    def try_give_back(self, j: QueuedJob, below_min: bool) -> bool:
        """Start j on learners other jobs hold above their target: lent capacity goes back
        before j waits for it. First for j's whole size; for its minimum too if nothing of it
        fits otherwise (`below_min`)."""
        lenders = [r for r in self._lenders() if r.job_id not in self.touched]
        lenders = [r for r in lenders if self._frees_for(r, j)]
        if not lenders:
            return False
        wants = [j.learners]
        if below_min and j.min_gang < j.learners:
            wants.append(j.min_gang)
        for want in wants:
            found = self._give_back_for(j, want, lenders)
            if found is None:
                continue
            shrinks, allocs = found
            self.record_shrinks(
                shrinks,
                lambda r, taken: (
                    f"gave back {len(taken)} lent learner(s) (to {r.learners - len(taken)}, "
                    f"its target {r.target}) for {j.job_id}: learners above the target are "
                    "lent, not owned"
                ),
            )
            self.start(
                j,
                allocs,
                f"started on learners given back by {', '.join(r.job_id for r, _ in shrinks)} "
                f"({placed_shape(j, len(allocs))})",
            )
            return True
        return False

    # -- grow -----------------------------------------------------------------------------
    def grow(self) -> None:
        if not self.cfg.grow:
            return
        if not any(r.learners < r.grow_limit for r in self.snapshot.running):
            return
        for j in self.waiting:
            # A waiting job that could use idle GPUs has them first.
            if (
                j.gpus_per_learner == 0
                or self.idx.upper_capacity(j.gpus_per_learner, j.gpu_type) >= j.min_gang
            ):
                return
        elastic = [
            r
            for r in self.snapshot.running
            if r.job_id not in self.touched and r.learners < r.grow_limit and r.allocations
        ]
        # jobs below their target first (those learners are theirs), then auto_grow lending
        elastic.sort(
            key=lambda r: (
                r.learners >= r.target,
                r.learners / r.grow_limit,
                r.start_time,
                r.job_id,
            )
        )
        for r in elastic:
            g, c, m = r.per_learner()
            gtype = r.gpu_type
            if not gtype:
                nf = self.idx.nodes.get(r.allocations[0].node)
                gtype = nf.node.gpu_type if nf is not None else ""
            add = r.grow_limit - r.learners
            first = max(a.learner for a in r.allocations) + 1
            allocs = None
            while add > 0:
                if r.placement == "node":
                    node = r.allocations[0].node
                    allocs = self.idx.place_on(node, r.job_id, add, g, c, m, first)
                else:
                    allocs = self.idx.place(r.job_id, add, g, c, m, gtype, r.placement, first)
                if allocs is not None:
                    break
                add -= 1
            if allocs:
                self.idx.take(allocs)
                self.touched.add(r.job_id)
                self.decisions.append(
                    Decision(r.job_id, "grow", grow_cause(r, len(allocs)), allocs)
                )
