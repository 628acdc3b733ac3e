"""The scheduler's pure data model: what a scheduling round sees and what it decides.

Everything here is an immutable value object with no I/O. The live scheduler service builds a
`Snapshot` from etcd and the simulator builds one from its event queue; both hand it to the same
`schedule()` function (rule 7 of the house style) and get `Decision`s back.

`Allocation` and `Decision` are immutable by convention only (nothing assigns to one after it is
made), not frozen dataclasses: a round makes thousands, and a frozen dataclass's `__init__` sets
each field through `object.__setattr__`, several times the cost of a plain one; that was a tenth
of a 10,000-job round (benchmarks/scheduler_round.py). They still compare, and an Allocation
hashes, by value.

Units: GPUs are whole devices addressed by index (a node with `gpus=4` has GPUs 0..3), CPUs are
fractional cores, memory is MiB, times are seconds on whatever clock the caller uses (unix time
live, seconds since the trace start in the simulator). Attained service is GPU-seconds (for
CPU-only jobs, learner-seconds), the quantity Tiresias' 2D-LAS discretizes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

# pack: fewest nodes; spread: as many nodes as it can; topology: the smallest rack, then area,
# that holds the gang; node: one node only (the live platform runs a gang on one Docker engine).
Placement = Literal["pack", "spread", "topology", "node"]
Action = Literal["start", "preempt", "shrink", "grow", "wait"]

PLACEMENTS: tuple[str, ...] = ("pack", "spread", "topology", "node")
ACTIONS: tuple[str, ...] = ("start", "preempt", "shrink", "grow", "wait")


@dataclass(frozen=True, slots=True)
class Node:
    """A machine learners can be placed on. `labels` carries topology ("rack", "area")."""

    name: str
    gpus: int
    cpus: float
    memory_mb: int
    gpu_type: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    healthy: bool = True

    @property
    def rack(self) -> str:
        return self.labels.get("rack", "")

    @property
    def area(self) -> str:
        return self.labels.get("area", "")


@dataclass(slots=True, unsafe_hash=True)  # (not frozen: see the module docstring)
class Allocation:
    """One learner's share of one node."""

    learner: int
    node: str
    gpu_indices: tuple[int, ...]
    cpus: float
    memory_mb: int


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """A gang waiting for resources. Every learner asks for the same per-learner resources.

    `learners` is the size the user asked for (its TARGET: the manifest's learners, or the last
    `dlaas scale N`); an elastic job (`min_learners < max_learners`) may be started with any
    count in [min_learners, learners]. Growth above the target, toward `max_learners`, happens
    only with `auto_grow` (the manifest's `elastic: {auto_grow: true}`). `submit_time` is the
    ORIGINAL
    submission time, kept when a preempted job is requeued, so it gets its old position back.
    `attained_service` and `preemptions` carry the history of a requeued job. `team` names the
    team whose quota it counts against ("" = no team: it never has a guarantee, only borrows).
    `name` is the manifest's (""; unknown): the queue's ETA expects a job to run about as long
    as its user's finished jobs of that name (eta.DurationModel); no decision reads it.
    """

    job_id: str
    user: str
    learners: int
    gpus_per_learner: int
    cpus_per_learner: float
    memory_mb_per_learner: int
    priority: int = 0
    submit_time: float = 0.0
    gpu_type: str = ""
    min_learners: int | None = None
    max_learners: int | None = None
    placement: str = "pack"
    attained_service: float = 0.0
    preemptions: int = 0
    last_preempted_time: float | None = None
    team: str = ""
    auto_grow: bool = False
    name: str = ""

    @property
    def min_gang(self) -> int:
        return self.min_learners if self.min_learners is not None else self.learners

    @property
    def max_gang(self) -> int:
        return self.max_learners if self.max_learners is not None else self.learners

    @property
    def gpus(self) -> int:
        return self.learners * self.gpus_per_learner


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A gang that holds resources now. `start_time` is when its current run (re)started;
    `team` as in QueuedJob.

    `target_learners` is the size the job asked for (QueuedJob.learners; None: its current
    size). Learners up to the target are the job's own: a job shrunk below it grows back into
    idle resources. Learners ABOVE the target are LENT: only a job with `auto_grow` grows past
    its target (toward max_learners), and it gives them back (a shrink toward the target) as
    soon as a queued job needs them, whatever the classes of the two jobs; within
    `resize_interval_s` of its grow only to a job of higher priority or one inside its team's
    guarantee (elastic.py).
    """

    job_id: str
    user: str
    allocations: tuple[Allocation, ...] | list[Allocation]
    priority: int = 0
    start_time: float = 0.0
    attained_service: float = 0.0
    last_checkpoint_time: float | None = None
    min_learners: int | None = None
    max_learners: int | None = None
    submit_time: float = 0.0
    gpu_type: str = ""
    gpus_per_learner: int | None = None
    cpus_per_learner: float | None = None
    memory_mb_per_learner: int | None = None
    placement: str = "pack"
    last_resize_time: float | None = None
    team: str = ""
    target_learners: int | None = None
    auto_grow: bool = False
    # Seconds the job is expected to run still, read off its progress (dlaas.domain.progress;
    # the simulator knows it from the trace); None: unknown, the ETA's DurationModel guesses.
    remaining_s: float | None = None
    name: str = ""  # as QueuedJob.name
    # Seconds one resize of THIS job pauses it, measured from its earlier resizes
    # (policy.restarts); None: never measured, the grow rule reads PolicyConfig.restart_s.
    restart_s: float | None = None

    @property
    def learners(self) -> int:
        return len(self.allocations)

    @property
    def target(self) -> int:
        return self.target_learners if self.target_learners is not None else self.learners

    @property
    def lent(self) -> int:
        """Learners above the target: held only until a queued job needs them."""
        return max(0, self.learners - self.target)

    @property
    def grow_limit(self) -> int:
        """The most learners growth into idle resources may give it (never past max)."""
        return self.max_gang if self.auto_grow else min(self.target, self.max_gang)

    @property
    def gpus(self) -> int:
        return sum(len(a.gpu_indices) for a in self.allocations)

    @property
    def min_gang(self) -> int:
        return self.min_learners if self.min_learners is not None else self.learners

    @property
    def max_gang(self) -> int:
        return self.max_learners if self.max_learners is not None else self.learners

    def per_learner(self) -> tuple[int, float, int]:
        """(gpus, cpus, memory_mb) one learner of this job takes."""
        first = self.allocations[0] if self.allocations else None
        g = self.gpus_per_learner
        if g is None:
            g = len(first.gpu_indices) if first else 0
        c = self.cpus_per_learner
        if c is None:
            c = first.cpus if first else 0.0
        m = self.memory_mb_per_learner
        if m is None:
            m = first.memory_mb if first else 0
        return g, c, m


@dataclass(frozen=True, slots=True)
class TeamQuota:
    """A team's guaranteed share of the cluster. A team may use more (it BORROWS idle capacity),
    but what it borrows is taken back when another team needs its own guarantee (policy.quota).
    A zero in a dimension guarantees nothing of it: every job that needs some is borrowed."""

    gpus: int = 0
    cpus: float = 0.0
    memory_mb: int = 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one round may look at. `queue` order does not matter; the policy orders it.

    `quotas` maps team name -> TeamQuota. Empty (the default): no team has a guarantee and every
    decision is exactly what it would be without teams (`team` on jobs is then ignored).
    """

    nodes: tuple[Node, ...] | list[Node]
    running: tuple[RunningJob, ...] | list[RunningJob] = ()
    queue: tuple[QueuedJob, ...] | list[QueuedJob] = ()
    quotas: Mapping[str, TeamQuota] = field(default_factory=dict)


@dataclass(slots=True)  # (not frozen: see the module docstring)
class Decision:
    """One thing the caller must carry out, with the reason why.

    allocations by action:
      start   - every learner of the gang (its size may be below `learners` for an elastic job);
      preempt - the allocations to free (always the WHOLE job: never half a gang);
      shrink  - the learners to remove (the job keeps the rest, never fewer than min_learners;
                a job giving back LENT learners keeps at least its target);
      grow    - the learners to add (up to the job's target, or max_learners with auto_grow);
      wait    - empty.
    """

    job_id: str
    action: str
    cause: str
    allocations: list[Allocation] = field(default_factory=list)
