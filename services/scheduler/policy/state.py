"""The state a scheduling round shares with its steps, and the primitives every step uses.

`round.Round` is this plus its steps, one mixin per concern (`fairshare`, `elastic`,
`preemption`, `reservation`), each a subclass of `RoundState`: what a step may use of
`self` is declared once, here, where the type checker sees it. The fair-share methods the
other steps call are declared at the end; `fairshare.FairShare` defines them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from . import quota as qt
from .config import PolicyConfig
from .model import Allocation, Decision, QueuedJob, RunningJob, Snapshot, TeamQuota
from .placement import FreeIndex
from .policies import Policy, policy_for


@dataclass
class RoundState:
    """The round's inputs, its free-capacity index, and what it decided so far."""

    snapshot: Snapshot
    now: float
    policy: Policy  # a name is accepted and turned into its object (see __post_init__)
    cfg: PolicyConfig
    include_waits: bool
    idx: FreeIndex = field(init=False)
    decisions: list[Decision] = field(default_factory=list)
    touched: set[str] = field(default_factory=set)  # running jobs already acted on
    reserved_for: str | None = None
    promoted: set[str] = field(default_factory=set)  # sorted ahead of their preemption class
    waiting: list[QueuedJob] = field(default_factory=list)  # see waiting_jobs()
    # (sort key, job) of the jobs the walk stopped before (without "wait" decisions only)
    _unseen: Iterator[tuple[tuple, QueuedJob]] | None = None
    _ranked_cache: list | None = None
    _elastic: list = field(default_factory=list)
    _ranked_start: int = 0
    _compacted_at: int = 0
    _movable: dict[str, list[RunningJob]] | None = None
    _lenders_cache: list[RunningJob] | None = None
    # team quotas (all empty/False without quotas)
    quotas: Mapping[str, TeamQuota] = field(init=False, repr=False, compare=False)
    borrowed: set[str] = field(default_factory=set)  # running jobs on borrowed capacity
    used: dict[str, qt.Use] = field(default_factory=dict)  # per team, as the round goes
    used_borrowed: dict[str, qt.Use] = field(default_factory=dict)
    in_guarantee: bool = False  # the job being considered fits its team's guarantee
    _limits: dict[str, qt.Use] = field(default_factory=dict)
    _reclaim: list[RunningJob] | None = None
    _pools: dict[tuple, list] = field(default_factory=dict)  # see _class_victims
    _by_team: dict[bool, tuple] = field(default_factory=dict)  # see _split_by_team

    def __post_init__(self) -> None:
        self.policy = policy_for(self.policy)
        self.idx = FreeIndex(
            self.snapshot.nodes, (a for r in self.snapshot.running for a in r.allocations)
        )
        self.quotas = self.snapshot.quotas
        if self.quotas:
            # "" is no team, whatever a caller put in the quotas
            self._limits = {t: qt.limits(q) for t, q in self.quotas.items() if t}
            self.borrowed, self.used, self.used_borrowed = qt.round_usage(
                self.snapshot.running, self.quotas
            )

    # -- helpers --------------------------------------------------------------------------
    def place(self, j: QueuedJob, learners: int) -> list[Allocation] | None:
        """Where j's `learners` would go now (nothing taken), or None."""
        return self.idx.place(
            j.job_id,
            learners,
            j.gpus_per_learner,
            j.cpus_per_learner,
            j.memory_mb_per_learner,
            j.gpu_type,
            j.placement,
        )

    _place = place  # eta.py's counterfactual still calls it by this name

    def must_place(self, j: QueuedJob, learners: int) -> list[Allocation]:
        """`place`, where the step has just made sure j fits (each resource taken back
        after that was checked to leave room): a None here is a bug of the round."""
        allocs = self.place(j, learners)
        if allocs is None:
            raise RuntimeError(f"{j.job_id} fitted a moment ago and does not now")
        return allocs

    def free_learners_for(
        self,
        j: QueuedJob,
        want: int,
        candidates: Iterable[tuple[RunningJob, list[Allocation]]],
    ) -> tuple[list[tuple[RunningJob, list[Allocation]]], list[Allocation]] | None:
        """Free learners of running jobs, one at a time in the order given (each candidate:
        a job and its removable allocations, first removed first), until `want` learners
        of j fit; then keep those that were not needed (last freed first). Returns
        (each job with what it gives up, j's allocations); None, the index untouched, if j
        does not fit even then. The shrink-before-kill of preemption and the give-back of
        lent learners are both this."""
        shrinks: list[tuple[RunningJob, list[Allocation]]] = []
        allocs = None
        for r, removable in candidates:
            taken: list[Allocation] = []
            for a in removable:
                self.idx.give([a])
                taken.append(a)
                allocs = self.place(j, want)
                if allocs is not None:
                    break
            shrinks.append((r, taken))
            if allocs is not None:
                break
        if allocs is None:
            for _, taken in shrinks:
                self.idx.take(taken)
            return None
        for _, taken in reversed(shrinks):
            for a in list(reversed(taken)):
                self.idx.take([a])
                if self.place(j, want) is None:
                    self.idx.give([a])
                else:
                    taken.remove(a)
        return [(r, t) for r, t in shrinks if t], self.must_place(j, want)

    def record_shrinks(
        self,
        shrinks: list[tuple[RunningJob, list[Allocation]]],
        reason: Callable[[RunningJob, list[Allocation]], str],
    ) -> None:
        """Book what `free_learners_for` took: each job touched, its team's use lowered, a
        "shrink" decision with `reason(job, taken)`."""
        for r, taken in shrinks:
            self.touched.add(r.job_id)
            if self.quotas:
                self._account(r.team, taken, -1.0, r.job_id in self.borrowed)
            self.decisions.append(Decision(r.job_id, "shrink", reason(r, taken), taken))

    def start(self, j: QueuedJob, allocs: list[Allocation], cause: str) -> None:
        self.idx.take(allocs)
        if self.reserved_for == j.job_id:
            self.idx.unreserve(j.job_id)
            self.reserved_for = None
        if self.quotas:
            self._account(j.team, allocs, 1.0, not self.in_guarantee)
        self.decisions.append(Decision(j.job_id, "start", cause, allocs))

    def waiting_jobs(self) -> list[QueuedJob]:
        """Every job that waits this round, in the order the round walked the queue; the jobs
        a stop left unlooked-at are listed on the first call."""
        if self._unseen is not None:
            self.waiting.extend(j for _, j in self._unseen)
            self._unseen = None
        return self.waiting

    # -- defined by fairshare.FairShare (first in Round's bases), used by the other steps --
    def _account(self, team: str, allocs: Iterable[Allocation], sign: float, borrowed: bool):
        raise NotImplementedError

    def _frees_for(self, r: RunningJob, j: QueuedJob) -> bool:
        raise NotImplementedError

    def _reclaim_victims(self, j: QueuedJob) -> Iterator[RunningJob]:
        raise NotImplementedError
