"""The scheduling round: `schedule(snapshot, now, policy) -> [Decision]`, pure and deterministic.

One round walks the queue in the policy's order and, for each gang:
  1. places it whole (elastic jobs: as many learners as fit, never below min) or not at all;
  2. if it does not fit, gives back learners other elastic jobs hold above their target
     (`elastic.py`), then, if the policy lets it preempt, shrinks or preempts lower-ranked
     jobs, or moves a few small ones out of its way, or, once it has waited the policy's
     `evict_after`, evicts the fewest jobs off the nodes cheapest to clear (`preemption.py`);
  3. otherwise the first blocked gang gets a RESERVATION (`reservation.py`).
Leftover idle GPUs then GROW elastic jobs (`elastic.py`). With team quotas the queue is walked
twice, guaranteed jobs first (`fairshare.py`).

What differs between policies is asked of the policy object (`policies.py`: order, classes,
caps, which steps apply); the knobs are in `config.py`. Nothing here reads a clock or does I/O:
the live scheduler service and the trace-driven simulator both call `schedule()`.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from operator import attrgetter, itemgetter

from . import quota as qt
from .config import DEFAULT_CONFIG, PolicyConfig
from .elastic import Elastic
from .fairshare import FairShare
from .feasibility import gang_shape, placed_shape
from .model import Allocation, Decision, QueuedJob, Snapshot
from .policies import DEFAULT_POLICY, Policy, policy_for, wait_since
from .preemption import Preemption
from .reservation import Reservation


@dataclass
class Round(FairShare, Elastic, Preemption, Reservation):
    """One scheduling round over a snapshot; `run()` returns its decisions.

    `policy` may be given by name; it is the policy object once the round is built. The
    mixins hold the steps by concern (fair share, elastic, preemption, reservation); the
    state they share, and the primitives every step uses, are `state.RoundState`'s.
    """

    def try_start(self, j: QueuedJob) -> list[Allocation] | None:
        allocs = self.place(j, j.learners)
        if allocs is None and j.min_gang < j.learners:
            # Elastic: the largest count that fits now, never below min (it grows back later).
            for n in range(j.learners - 1, j.min_gang - 1, -1):
                allocs = self.place(j, n)
                if allocs is not None:
                    break
        return allocs

    def wait(self, j: QueuedJob, why: str) -> None:
        self.waiting.append(j)
        if self.include_waits:
            self.decisions.append(Decision(j.job_id, "wait", why or self.why_not(j)))

    def why_not(self, j: QueuedJob) -> str:
        free = self.idx.total_free_gpus(j.gpu_type)
        if j.gpus_per_learner:
            why = (
                f"needs {gang_shape(j)}s at once; {free} free outside reservations, largest free "
                f"block {self.idx.largest_free_block(j.gpu_type)}"
            )
        else:
            why = f"needs {gang_shape(j)} with {j.memory_mb_per_learner} MiB each; not enough free"
        if self.reserved_for is not None and self.reserved_for != j.job_id:
            why += f"; behind {self.reserved_for}, which holds a reservation"
        if self.quotas:
            why = f"{self._quota_note(j)}; {why}"
        return why

    # -- main loop ------------------------------------------------------------------------
    def ordered(self):
        """(sort key, job) in policy order; the policy's `class_of` turns a pair into the
        preemption class, only for the jobs a round really looks at (a long queue behind a full
        cluster is not).

        With team quotas: first the jobs inside their team's guarantee (`in_guarantee` is set
        while they are considered; a job's status is decided when its turn comes, after the
        starts and preemptions before it), then the rest in the same order."""
        if not self.quotas:
            yield from self._policy_order(self.snapshot.queue)
            return
        deferred = []
        # whether j fits what is left of its team's guarantee, inlined (a round asks it of
        # every queued job); `used` changes as the round starts and preempts jobs, so it is
        # read at each job's turn
        eps = qt.EPS
        limits = {t: (g + eps, c + eps, m + eps) for t, (g, c, m) in self._limits.items()}
        used_by, zero = self.used, qt.ZERO
        for pair in self._policy_order(self.snapshot.queue):  # (the pair is passed on as is)
            j = pair[1]
            lim = limits.get(j.team)
            if lim is not None:
                used = used_by.get(j.team, zero)
                n = j.learners
                if (
                    used[0] + n * j.gpus_per_learner <= lim[0]
                    and used[1] + n * j.cpus_per_learner <= lim[1]
                    and used[2] + n * j.memory_mb_per_learner <= lim[2]
                ):
                    self.in_guarantee = True
                    yield pair
                    continue
            deferred.append(pair)
        self.in_guarantee = False
        if self.policy.drf:  # DRF's order depends on the starts so far: build it again
            yield from self._policy_order([j for _, j in deferred])
        else:
            yield from deferred

    def _policy_order(self, queue) -> Iterable[tuple[tuple, QueuedJob]]:
        if self.policy.drf:
            return (((), j) for j in self._drf_order(queue))
        key = self.policy.order_key(self.now, self.cfg)
        # a list, not a generator: a round walks every queued job, resuming one per job
        return sorted(zip(map(key, queue), queue, strict=True), key=itemgetter(0))

    def run(self) -> list[Decision]:
        can_preempt = self.policy.preempts and bool(self.snapshot.running)
        # a team below its guarantee takes borrowed work back under every policy
        can_reclaim = bool(self.quotas) and bool(self.borrowed)
        # "a job of this shape and class did not fit (nor preempt) at index version v with n
        # learners": a later job of the same shape needing >= n cannot do better. This keeps a
        # long queue behind a full cluster O(queue), not O(queue x nodes).
        failed: dict[tuple, tuple[int, int]] = {}
        fits_now: dict[tuple, str] = {}
        gpu_less = 0 in map(attrgetter("gpus_per_learner"), self.snapshot.queue)
        preempted = 0
        move_tries = 1
        evict_tries = self.cfg.evict_attempts_per_round
        evict_after = self.policy.evict_after(self.cfg)
        if evict_after is None:
            evict_tries = 0
        max_pre = self.policy.max_preemptions(self.cfg)
        promoted, class_of, now, cfg = (
            self.policy.promoted,
            self.policy.class_of,
            self.now,
            self.cfg,
        )
        queue = self.ordered()
        for k, j in queue:
            if promoted(k):
                self.promoted.add(j.job_id)
            cls = class_of(k, j, now, cfg)
            guaranteed = self.in_guarantee
            # (nodes held by a reservation do not count as free: the job holding it came earlier)
            if (
                not gpu_less
                and self.idx.free_total == 0
                and not self._may_preempt(cls, can_preempt)
                and not (guaranteed and can_reclaim and self._may_reclaim(j))
                and not self._lent_left()
            ):
                if j.job_id in self.promoted or guaranteed:
                    # sorted ahead of its class (promoted), or before the borrowers (guaranteed):
                    # a later job may still preempt or reclaim
                    self.wait(j, "")
                    continue
                # Full cluster and nobody left to preempt for this class or any later (the
                # queue is sorted by class): every remaining job waits. Keeps long queues cheap.
                self.wait(j, "")
                break
            if not can_preempt:
                cls = ()
            shape: tuple = (
                cls,
                j.gpus_per_learner,
                j.cpus_per_learner,
                j.memory_mb_per_learner,
                j.gpu_type,
                j.placement,
            )
            if self.quotas:  # who it may take from depends on its team and its guarantee
                shape += (j.team, guaranteed)
            f = failed.get(shape)
            if (
                f is not None
                and f[0] == self.idx.version
                and j.min_gang >= f[1]
                and self.reserved_for != j.job_id
            ):
                self.wait(j, "")
                continue
            # (a gang whose GPUs cannot fit is answered at once, by FreeIndex.place's bound)
            allocs = self.try_start(j)
            if (
                (allocs is None or len(allocs) < j.learners)
                and self._lenders()
                and self.try_give_back(j, allocs is None)
            ):
                continue
            if allocs is not None:
                # the same few shapes start again and again: their words are made once
                n = len(allocs)
                at = (j.gpus_per_learner, j.cpus_per_learner, j.gpu_type, j.learners, n)
                cause = fits_now.get(at)
                if cause is None:
                    cause = fits_now[at] = f"fits now ({placed_shape(j, n)})"
                if self.reserved_for is not None and self.reserved_for != j.job_id:
                    cause += f"; backfilled outside nodes reserved for {self.reserved_for}"
                self.start(j, allocs, cause)
                continue
            n_before = len(self.decisions)
            reclaim = guaranteed and can_reclaim
            made_room = (can_preempt or reclaim) and self.try_preempt(j, can_preempt, reclaim)
            if (
                not made_room
                and move_tries
                and self.policy.moves(self.cfg)
                and preempted < max_pre
                and j.gpus_per_learner
                and self.idx.total_free_gpus(j.gpu_type) >= j.min_gang * j.gpus_per_learner
            ):
                # one O(nodes) attempt per round at most: a long queue stays O(queue)
                move_tries -= 1
                made_room = self.try_move(j)
            # waited long enough to evict jobs of any class (policy.evict_after). Not when the
            # whole cluster is busy with jobs it may not preempt (the full-cluster stop above):
            # evicting there too measured worse (ten-window geometric mean 0.919 vs 0.910).
            if (
                not made_room
                and evict_tries > 0
                and evict_after is not None
                and can_preempt
                and j.gpus_per_learner > 0
                and self.now - wait_since(j) >= evict_after
            ):
                # each attempt is O(running + nodes): a few per round keep a long queue O(queue)
                evict_tries -= 1
                made_room = self.try_evict(j)
            if made_room:
                preempted += sum(d.action == "preempt" for d in self.decisions[n_before:])
                if preempted >= max_pre:
                    # storm guard: the rest waits for the next round
                    can_preempt = can_reclaim = False
                continue
            why = self.why_not(j) if self.include_waits else ""
            if self.reserved_for is None:
                self.try_reserve(j)
                if self.reserved_for == j.job_id:
                    why += "; nodes reserved for it so smaller jobs cannot starve it"
            failed[shape] = (self.idx.version, j.min_gang)
            self.wait(j, why)
            if self.policy.blocks_head_of_line and not guaranteed and self._fifo_blocks(j):
                break  # head-of-line blocking: see PolicyConfig.fifo_blocking
        # after a stop above, every job not yet looked at waits, in the queue's order
        if self.include_waits:
            for _, j in queue:
                self.wait(j, "")
        else:
            # only grow() asks who waits, and only when a job may grow: listed then
            self._unseen = queue
        self.grow()
        # the walk's generator refers back to the round: left here, the round and its index
        # would wait for the cyclic collector instead of going when the caller drops them
        self._unseen = None
        return self.decisions


def schedule(
    snapshot: Snapshot,
    now: float,
    policy: str | Policy = DEFAULT_POLICY,
    config: PolicyConfig | None = None,
    include_waits: bool = True,
) -> list[Decision]:
    """One scheduling round. Pure: same snapshot and `now` give the same decisions.

    Decisions come in the order the caller must carry them out (a preempt/shrink before the
    start it makes room for). `include_waits=False` skips the per-job "wait" decisions (the
    simulator does not need them; `queue_report` explains waiting jobs on demand).
    """
    policy = policy_for(policy)  # ValueError naming the field for an unknown name
    with gc_paused():
        return Round(snapshot, now, policy, config or DEFAULT_CONFIG, include_waits).run()


# A round allocates many small objects (allocations, decisions, keys) and makes no reference
# cycles, yet each allocation burst lets the cyclic collector walk every job and node of the
# snapshot: 40 % of a 10,000-node round, growing faster than the round. So the collector is
# paused for the round. It is the whole process's switch and the scheduler serves on many
# threads (a Schedule round beside a Queue report), so pauses are counted: the first round in
# turns it off, the last one out puts it back as the first found it. A round ending never
# cuts another's pause short, and overlapping rounds never leave it off.
_gc_lock = threading.Lock()
_gc_rounds = 0  # rounds in a pause now
_gc_was_enabled = False  # the collector's state when the first of them began


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for the block (nests and overlaps across threads).

    Code that needs the collector off while rounds may run pauses it through here too: a
    plain gc.disable() during a round is undone when the round ends.
    """
    global _gc_rounds, _gc_was_enabled
    with _gc_lock:
        if _gc_rounds == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_rounds += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_rounds -= 1
            if _gc_rounds == 0 and _gc_was_enabled:
                gc.enable()
