"""Elastic jobs in a round: lent learners given back, and idle GPUs grown into.

Part of the round (`round.Round` mixes `Elastic` in). Elastic capacity is LENT, not owned:
learners above a job's target are given back (the job SHRINKS toward its target; the LCM
checkpoints it and restarts it smaller) before any queued job waits for them, under every
policy, whatever the two jobs' classes and the thrash guard, once the loan is
`resize_interval_s` old; a younger loan goes back only to a job of higher priority or one
inside its team's guarantee. This comes before preemption: a lent learner costs its job one
restart, a preemption the whole run. Leftover idle GPUs then
GROW elastic jobs back toward their target (the size the user asked for), and past it toward
their max only with `auto_grow`, if nobody waiting could use them.

Growth without thrash: every resize is a gang restart from a checkpoint, so a job (re)started or
resized less than `resize_interval_s` ago is not grown (nor, as said, does its fresh loan go
back to just any queued job), and `auto_grow` lends learners only
when the idle capacity is expected to stay idle long enough to pay for the restarts of the loan
(its grow and its give-back; `PolicyConfig.grow_payback`). How long capacity stays idle is read
from the recent gaps between arrivals and between finishes, which the caller learns with
`IdleForecast`, and what a restart costs from the pauses measured, `restarts.RestartTimes`
(the round itself reads no clock and keeps no history).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import replace

from .config import PolicyConfig
from .feasibility import placed_shape
from .model import Decision, QueuedJob, RunningJob
from .state import RoundState

# Arrivals and finishes an IdleForecast averages over: enough to smooth one burst of a sweep,
# few enough to follow the day's pace.
FORECAST_EVENTS = 32


class IdleForecast:
    """The recent pace of arrivals and finishes, as the gaps the grow rule reads.

    The caller (live service, simulator) notes each job's arrival and end; `config(cfg, now)`
    gives `cfg` with `arrival_gap_s` / `finish_gap_s` set to the mean gap over the last
    `FORECAST_EVENTS` of each, up to `now` (a quiet spell lengthens it). None until one was seen.
    """

    def __init__(self, events: int = FORECAST_EVENTS) -> None:
        if events < 1:
            raise ValueError(f"events must be at least 1, got {events}")
        self._arrivals: deque[float] = deque(maxlen=events)
        self._finishes: deque[float] = deque(maxlen=events)

    def arrived(self, t: float) -> None:
        self._arrivals.append(t)

    def finished(self, t: float) -> None:
        self._finishes.append(t)

    @staticmethod
    def _gap(times: deque[float], now: float) -> float | None:
        return max(0.0, now - times[0]) / len(times) if times else None

    def config(self, cfg: PolicyConfig, now: float) -> PolicyConfig:
        if cfg.grow_payback <= 0:
            return cfg  # the rule is off: nothing to read
        return replace(
            cfg,
            arrival_gap_s=self._gap(self._arrivals, now),
            finish_gap_s=self._gap(self._finishes, now),
        )


def min_lent_that_pays(r: RunningJob, idle_s: float | None, cfg: PolicyConfig) -> float:
    """The fewest learners above its target that pay for lending them to `r` (math.inf: no
    loan pays; 0: the rule is off or the idle time unknown).

    Lending `lent` learners for `idle_s` gains lent x idle_s learner-seconds and costs
    `restart_s` for every learner of two restarts, the grow (base + lent learners) and the
    give-back that ends the loan (down to the target), base = max(learners now, target):
    lent x idle_s >= k x restart_s x (base + lent + target), solved for lent. `restart_s` is
    the job's own measured pause if it was resized before, else the platform's (restarts.py)."""
    k = cfg.grow_payback
    if k <= 0 or idle_s is None:
        return 0.0
    restart_s = r.restart_s if r.restart_s is not None else cfg.restart_s
    rate = idle_s - k * restart_s
    if rate <= 0:
        return math.inf
    return k * restart_s * (max(r.learners, r.target) + r.target) / rate


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


class Elastic(RoundState):
    """The round's give-back and grow steps (a mixin of `round.Round`)."""

    def _lenders(self) -> list[RunningJob]:
        """Running jobs holding learners above their target, least important first."""
        if self._lenders_cache is None:
            self._lenders_cache = sorted(
                # (no target_learners: nothing lent; the cheap test first, a round asks
                # it of every running job)
                (
                    r
                    for r in self.snapshot.running
                    if r.target_learners is not None and r.lent and r.allocations
                ),
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

    def _loan_stands(self, r: RunningJob, j: QueuedJob) -> bool:
        """Whether r keeps its lent learners from j: r was resized (or (re)started) less than
        `resize_interval_s` ago, and j neither has a higher priority nor fits its team's
        guarantee (those take a loan back at once). A give-back is a restart too: a loan that
        went back seconds after its grow cost two restarts for nothing."""
        since = max(r.start_time, r.last_resize_time or r.start_time)
        return (
            self.now - since < self.cfg.resize_interval_s
            and j.priority <= r.priority
            and not self.in_guarantee
        )

    def try_give_back(self, j: QueuedJob, below_min: bool) -> bool:
        """Start j on learners other jobs hold above their target: lent capacity goes back
        before j waits for it, unless the loan is younger than the resize interval
        (`_loan_stands`). First for j's whole size; for its minimum too if nothing of it fits
        otherwise (`below_min`)."""
        lenders = [r for r in self._lenders() if r.job_id not in self.touched]
        lenders = [r for r in lenders if self._frees_for(r, j) and not self._loan_stands(r, j)]
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
    def _idle_s(self) -> float | None:
        """How long idle capacity should stay unwanted: until the next arrival and, while a
        gang waits for more than is idle, until the next finish frees room for it (then lent
        learners would be given back). None if neither pace is known."""
        cfg = self.cfg
        gaps = [cfg.arrival_gap_s]
        if any(j.gpus_per_learner for j in self.waiting_jobs()):
            gaps.append(cfg.finish_gap_s)
        known = [g for g in gaps if g is not None]
        return min(known) if known else None

    def grow(self) -> None:
        if not self.cfg.grow:
            return
        # (only a job with a max may grow: the cheap test first, a round asks every running job)
        if not any(
            r.max_learners is not None and r.learners < r.grow_limit for r in self.snapshot.running
        ):
            return
        for j in self.waiting_jobs():
            # A waiting job that could use idle GPUs has them first.
            if (
                j.gpus_per_learner == 0
                or self.idx.upper_capacity(j.gpus_per_learner, j.gpu_type) >= j.min_gang
            ):
                return
        now, interval = self.now, self.cfg.resize_interval_s
        elastic = [
            r
            for r in self.snapshot.running
            if r.job_id not in self.touched
            and r.learners < r.grow_limit
            and r.allocations
            # thrash guard: at most one grow per interval (counted from a restart too)
            and now - max(r.start_time, r.last_resize_time or r.start_time) >= interval
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
        idle_s: float | None = None
        idle_known = False
        for r in elastic:
            base = max(r.learners, r.target)  # growth past this is a loan
            min_lent = 0.0
            if r.grow_limit > base:
                if not idle_known:
                    idle_s, idle_known = self._idle_s(), True
                min_lent = min_lent_that_pays(r, idle_s, self.cfg)
            g, c, m = r.per_learner()
            gtype = r.gpu_type
            if not gtype:
                nf = self.idx.nodes.get(r.allocations[0].node)
                gtype = nf.node.gpu_type if nf is not None else ""
            # no loan it could get pays: its own learners only (none if it is at its target)
            add = (base if min_lent > r.grow_limit - base else r.grow_limit) - r.learners
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
                if 0 < r.learners + add - base < min_lent:
                    add = base - r.learners  # a loan this small does not pay: its own part only
            if allocs:
                self.idx.take(allocs)
                self.touched.add(r.job_id)
                self.decisions.append(
                    Decision(r.job_id, "grow", grow_cause(r, len(allocs)), allocs)
                )
