"""The scheduling round: `schedule(snapshot, now, policy) -> [Decision]`, pure and deterministic.

One round walks the queue in the policy's order and, for each gang:
  1. places it whole (elastic jobs: as many learners as fit, never below min) or not at all;
  2. if it does not fit and the policy lets it preempt: first SHRINKS elastic lower-ranked jobs
     (never below their min), else PREEMPTS a minimal set of whole lower-ranked jobs, preferring
     those that lose the least work (recent checkpoint) and skipping any job that (re)started less
     than `min_run_s` ago (the thrash guard);
  3. otherwise the first blocked gang gets a RESERVATION: the nodes it will drain are hidden from
     later (smaller) jobs for the rest of the round, so a stream of small jobs can backfill the rest
     of the cluster but never starve the big gang.
Leftover idle GPUs then GROW elastic jobs back toward their target (the size the user asked for),
and past it toward their max only with `auto_grow`, if nobody waiting could use them.

Elastic capacity is LENT, not owned: learners above a job's target are given back (the job
SHRINKS toward its target; the LCM checkpoints it and restarts it smaller) before any queued job
waits for them, under every policy, whatever the two jobs' classes and the thrash guard. This
comes before preemption: a lent learner costs its job one restart, a preemption the whole run.

Team quotas (only when the snapshot carries some; without them nothing below happens and every
decision is as it was): the queue is walked twice in the policy's order. First the jobs that
fit in what is left of their team's guarantee (policy.quota); such a job that does not fit may
RECLAIM, under any policy: preempt whole borrowed jobs of other teams (lowest priority, least
work lost since their last checkpoint, least progress first; the thrash guard does not protect
borrowed work). Then every other job, borrowing what is idle; it may preempt by class as the
policy does, but only borrowed work or its own team's: a guaranteed job is never the victim of
another team.

Policies (all duration-blind; the policy never sees how long a job will run):
  fifo     - submit order, non-blocking (a job that does not fit lets later ones try);
             no preemption; reservation only if configured (PolicyConfig.reserve_policies).
  priority - priority class, then submit order; preempts strictly lower classes.
  las      - Tiresias discretized 2D-LAS: class = (priority, queue level of attained GPU-seconds);
             FIFO inside a level; preempts worse levels; starving jobs promoted to level 0.
  tiresias-las - 2D-LAS as Tiresias' own simulator runs it (`run_sim.py --schedule dlas-gpu`):
             thresholds 3,250 / 7,200 GPU-s, no starvation promotion, no reservation, no thrash
             guard, no cap on victims; a job that does not fit lets later ones try. Where it
             still differs from that simulator (placement, preemption cost, order inside a
             level) is said at PolicyConfig.tiresias_thresholds.
  fair     - DRF across users: the user with the smallest dominant share goes next.
  default  - priority classes over 2D-LAS with few, high levels (2e4/2e5 GPU-s), small gangs
             first at equal level, starvation promotion, reservation + backfill for a blocked
             gang, MOVES of a few small jobs when a gang's free GPUs are scattered over nodes,
             a thrash guard and caps on victims per preemption and per round. See PolicyConfig.
"""

from __future__ import annotations

import gc
import heapq
import itertools
import threading
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from operator import itemgetter

from . import quota as qt
from .model import Allocation, Decision, Node, QueuedJob, RunningJob, Snapshot
from .placement import FreeIndex

POLICIES: tuple[str, ...] = ("fifo", "priority", "las", "tiresias-las", "fair", "default")
# Policies whose preemption class is (priority, level of attained GPU-seconds).
LEVELED: tuple[str, ...] = ("las", "tiresias-las", "default")
# The one default: the live scheduler (DLAAS_SCHEDULER_POLICY unset, hence `dlaas up`), the
# simulator, the benchmarks and `schedule()` itself all use it, with DEFAULT_CONFIG. It is the
# policy whose figures the README reports.
DEFAULT_POLICY = "default"


def policy_problem(policy: str) -> str:
    """Why `policy` is not a policy name ("" if it is); the message names the field."""
    if policy in POLICIES:
        return ""
    return f"policy: unknown policy {policy!r}; expected one of {', '.join(POLICIES)}"


@dataclass(frozen=True)
class PolicyConfig:
    """Knobs of the policies. One configuration is used for every trace window."""

    # las: Tiresias' discretized 2D-LAS queue thresholds, in attained GPU-seconds.
    las_thresholds: tuple[float, ...] = (1_000.0, 10_000.0, 100_000.0)
    # las: promote a waiting job to level 0 once it waited this many times its executed time.
    starve_factor: float = 2.0
    # tiresias-las: the thresholds of Tiresias' simulator for dlas-gpu (jobs.py: num_queue 3,
    # queue_limit [3250, 7200, 18000]: three queues, so the last limit is never used). What
    # `tiresias-las` takes from that simulator's dlas_sim_jobs(gputime=True): levels by attained
    # GPU-seconds, FIFO inside a level, any job of a better level preempts, no starvation
    # promotion (solve_starvation=0 for dlas-gpu), no reservation, no thrash guard, no victim
    # cap, non-blocking (a job that does not fit is skipped). Where it differs, on purpose:
    #  - placement: that simulator COUNTS GPUs (a 16-GPU job starts on any 16 free GPUs,
    #    scattered over nodes); here a gang's learners are placed whole on nodes (16 GPUs on
    #    8-GPU nodes: two whole nodes), the same constraint every policy here lives with;
    #  - preemption cost: free there; the simulator here charges a checkpoint save and a restore;
    #  - order inside a level: there, the order jobs entered the level (a demoted job goes to
    #    the back of its new level, a preempted one to the front of the pending ones); here the
    #    submit order (the core keeps no entry time), and a running job is never preempted for a
    #    pending job of its own level (there, one that entered the level earlier may take it);
    #  - rounds: there at every event; here every 10 s and at level crossings (simulator).
    tiresias_thresholds: tuple[float, ...] = (3_250.0, 7_200.0)
    # default: few levels with a high first threshold (GPU-seconds). Most jobs finish inside
    # level 0 and run in arrival order; only the long tail is demoted behind them. Measured on
    # both Philly windows (see simulator.py): low first thresholds (Tiresias' 1e3) preempt
    # medium jobs over and over where durations are not heavy-tailed (window B: +30 % avg JCT).
    # With moves on, (5e3, 5e4, 5e5) gains 260 s on A (12,413) but costs B 7,000 s (30,836);
    # scaling the thresholds up with the queue's depth, or preempting only while the queue
    # holds fewer than 2x the cluster's GPUs, still costs B 700-1,200 s and p99 > 127k s.
    # Thresholds must ascend (the level is a bisection).
    default_thresholds: tuple[float, ...] = (20_000.0, 200_000.0)
    # default: the level is computed from attained GPU-seconds / gpus ** (1 - exponent): 1 is
    # Tiresias' GPU-time (a big gang drops levels as many times faster), 0 is wall time.
    level_gpu_exponent: float = 1.0
    # default: at equal level, smaller gangs first (gang size is known at submit; on Philly-like
    # traces small gangs are also the short ones, a Gittins-index-like bet).
    small_first: bool = True
    # default: inside a demoted level, the least attained service goes first (true LAS: the
    # least-served demoted job is the likeliest to finish soon) instead of arrival order.
    # Measured with moves on: arrival order is better on window A (avg JCT 12,675 -> 12,494 s,
    # p99 153,925 -> 133,715 s: the demoted job that waited longest gets back first) and the
    # same on B (23,640 s), so it is off.
    level_order_by_attained: bool = False
    # A Gittins-index order instead of levels was measured and is NOT here: the index of
    # attained GPU-seconds, learned from the last 1,000 finished jobs (per gang size when 50+ of
    # that size), rebuilt every 10 finishes, on a log scale of base b as the preemption class,
    # with this policy's moves, reservations, thrash guard and starvation bound. Window A avg JCT
    # 12,831 / 12,920 / 12,847 / 12,716 / 12,941 s for b = 1.5 / 2 / 4 / 8 / 16 (p99 132k-162k);
    # b=2 without small_first 12,979; window 3,000 jobs 12,778, 300 jobs 12,912. All worse than
    # 12,494: 1-GPU jobs of 1e3-1e4 s pass the index's peak near 1e3 GPU-s and are preempted by
    # fresh jobs (their mean excess 1,206 -> 2,051 s). B was not measured.
    # default: a demoted job that waited `starve_after_s` (or, if the factor is > 0, this many
    # times its executed time, whichever is first) moves back to the front of the order. It
    # does NOT preempt anyone on the strength of that promotion: promoted-then-preempting-the-
    # next-promoted is the thrash loop this guard exists to break. A relative factor (Tiresias'
    # STARVE_LIMIT) measured worse on both windows, so only the absolute bound is on.
    default_starve_factor: float = 0.0
    starve_after_s: float = 172_800.0
    # Thrash guard: a job that (re)started or was resized less than this ago is not a victim.
    min_run_s: float = 300.0
    # default: preempt only a victim that attained at least this many times the GPU-seconds
    # of the waiting job plus `preempt_margin_gpu_s` (a demoted job is not preempted for a
    # job that is almost as old as it).
    preempt_margin_gpu_s: float = 0.0
    # At most this many jobs are preempted in one round (a preemption storm guard: each one
    # costs a checkpoint and a restart the LCM must carry out; the next round, seconds later,
    # goes on). It also bounds a round's cost on a huge queue behind a full cluster.
    max_preemptions_per_round: int = 64
    # Reserve nodes for the first blocked gang once it waited this long, under these policies.
    # On window A with moves on they neither cost nor save (avg JCT 12,497 s without, 12,494
    # with); they stay because they are what keeps a big gang from starving behind a stream
    # of small jobs under fifo/priority/las/fair.
    reserve_after_s: float = 0.0
    reserve_policies: tuple[str, ...] = ("priority", "las", "fair", "default")
    # Only gangs at least this many GPUs get reservations (small ones will find a gap anyway).
    reserve_min_gpus: int = 2
    # A preemption that needs more victims than this is not worth its disruption: the gang
    # waits (and gets a reservation) instead. Also bounds the cost of one attempt. (1 or 4
    # measure within 100 s of 16 on A.) Never preempting a gang for a job that needs under
    # half its GPUs was measured too: A's avg JCT rose to 17,500 s (short jobs queue behind
    # the long gangs), so gangs stay victims and moves bring them back.
    max_victims: int = 16
    # Measured on 8-GPU nodes and NOT here: at equal level, smaller victims first (a preempted
    # 8-GPU gang must find a whole empty node to come back): Philly VC ee9e8c on 14 x 8 (C8)
    # 108,748 -> 104,491 s, its October weeks 219,738 -> 210,765, but window A's jobs on 8 x 8
    # 13,832 -> 14,039 and A 12,492 -> 12,513. Nor a bigger victim cap (64 or 1,000: A8x8
    # 13,824, C8 unchanged) nor no reservation for default (C8 107,895, A8x8 13,923).
    # fifo: when the first job that does not fit blocks the ones behind it.
    #   "count" - while fewer GPUs (of its type) are free than it needs in total; when enough
    #             are free but fragmented, later jobs may start (the peer simulators' FIFO,
    #             Tiresias `--schedule fifo`, which blocks on the GPU count; see simulator.py);
    #   "gang"  - always (strict head-of-line blocking, no backfill at all);
    #   "none"  - never (every job that fits starts, in arrival order).
    fifo_blocking: str = "count"
    # Let elastic jobs grow into idle GPUs.
    grow: bool = True
    # Moves (defragmentation): a gang that does not fit although enough GPUs are free in total
    # may move up to this many single-node jobs of no higher priority off the nodes it needs;
    # each moved job is preempted and restarted elsewhere in the same round (it pays a
    # checkpoint and a restore, ~50 s in the simulator, and nothing else). Why: on window A a
    # demoted 2x4-GPU gang preempted for one 1-GPU job waited ~1 day for two WHOLE nodes while
    # 7 of its 8 GPUs sat free or went to other small jobs; 14 such gangs waited 240k-725k s
    # each. Moves cut window A's avg JCT 13,305 -> 12,681 s (B unchanged, 23,640 s); 2 moves
    # measured 12,756, 8 the same as 4. One attempt per round (its cost is O(nodes)), and moves
    # count toward `max_preemptions_per_round`. Only under `default`: fifo stays calibrated.
    # 8, not 4: the cap was set on 4-GPU nodes, where clearing a node for a node-sized learner
    # moves at most 3 jobs. An 8-GPU node holds up to 8 one-GPU jobs, so with a cap of 4 a
    # preempted 8-GPU job could never have a node cleared for it and waited for one to drain
    # (window A's jobs on 8 x 8 GPUs: 14,032 -> 13,832 s; on 16 x 4 12,494 -> 12,492 s).
    max_moves: int = 8
    move_policies: tuple[str, ...] = ("default",)


DEFAULT_CONFIG = PolicyConfig()


# ---------------------------------------------------------------------------------------------
# ranking


def las_level(attained: float, thresholds: Sequence[float]) -> int:
    lvl = 0
    for t in thresholds:
        if attained >= t:
            lvl += 1
        else:
            break
    return lvl


def _wait_since(j: QueuedJob) -> float:
    return j.last_preempted_time if j.last_preempted_time is not None else j.submit_time


def _executed_s(j: QueuedJob) -> float:
    return j.attained_service / max(j.gpus_per_learner * j.learners, 1)


def _service(attained: float, gpus: int, policy: str, cfg: PolicyConfig) -> float:
    """What a job's level is computed from (see PolicyConfig.level_gpu_exponent)."""
    if policy != "default" or cfg.level_gpu_exponent == 1.0 or gpus <= 1:
        return attained
    return attained / gpus ** (1.0 - cfg.level_gpu_exponent)


def _thresholds(policy: str, cfg: PolicyConfig) -> tuple[float, ...]:
    if policy == "tiresias-las":
        return cfg.tiresias_thresholds
    return cfg.default_thresholds if policy == "default" else cfg.las_thresholds


def _min_run_s(policy: str, cfg: PolicyConfig) -> float:
    """The thrash guard (Tiresias' simulator has none: a job may be preempted at any event)."""
    return 0.0 if policy == "tiresias-las" else cfg.min_run_s


def _starving(j: QueuedJob, now: float, policy: str, cfg: PolicyConfig) -> bool:
    """A demoted job that waited long enough for its executed time goes back to the front."""
    waited = now - _wait_since(j)
    if policy == "default":
        if cfg.default_starve_factor > 0:
            rel = cfg.default_starve_factor * max(_executed_s(j), 1.0)
            return waited >= min(rel, cfg.starve_after_s)
        return waited >= cfg.starve_after_s
    return waited >= cfg.starve_factor * max(_executed_s(j), 1.0)  # Tiresias' STARVE_LIMIT


def queued_class(j: QueuedJob, now: float, policy: str, cfg: PolicyConfig) -> tuple:
    """The class used to decide who may preempt whom (smaller = more important)."""
    if policy in LEVELED:
        lvl = las_level(_service(j.attained_service, j.gpus, policy, cfg), _thresholds(policy, cfg))
        if lvl and policy == "las" and _starving(j, now, policy, cfg):
            lvl = 0  # las: starvation promotion also lets it preempt (as in Tiresias)
        return (-j.priority, lvl)
    if policy == "priority":
        return (-j.priority,)
    return ()


def running_class(r: RunningJob, policy: str, cfg: PolicyConfig) -> tuple:
    if policy in LEVELED:
        service = r.attained_service
        if policy == "default" and cfg.level_gpu_exponent != 1.0:
            service = _service(service, r.gpus, policy, cfg)
        return (-r.priority, las_level(service, _thresholds(policy, cfg)))
    if policy == "priority":
        return (-r.priority,)
    return ()


def order_key(policy: str, now: float, cfg: PolicyConfig) -> Callable[[QueuedJob], tuple]:
    """The order a round considers queued jobs in (the queue position shown to users)."""
    if policy == "fifo":
        return lambda j: (j.submit_time, j.job_id)
    if policy == "priority":
        return lambda j: (-j.priority, j.submit_time, j.job_id)
    if policy == "default":
        th = cfg.default_thresholds
        small = cfg.small_first
        by_att = cfg.level_order_by_attained

        def key(j: QueuedJob) -> tuple:
            # the last item is the job's real level (its preemption class), after the unique id
            # so it never changes the order
            if not j.attained_service:  # a fresh job: level 0 (the common case, kept cheap)
                gpus = j.learners * j.gpus_per_learner if small else 0
                return (-j.priority, 0, gpus, 0.0, j.submit_time, j.job_id, 0)
            real = lvl = las_level(_service(j.attained_service, j.gpus, policy, cfg), th)
            if lvl and _starving(j, now, policy, cfg):
                lvl = 0
            att = j.attained_service if lvl and by_att else 0.0
            return (-j.priority, lvl, j.gpus if small else 0, att, j.submit_time, j.job_id, real)

        return key
    return lambda j: (*queued_class(j, now, policy, cfg), j.submit_time, j.job_id)


def preempts(policy: str) -> bool:
    return policy in ("priority", *LEVELED)


# ---------------------------------------------------------------------------------------------
# feasibility


def can_ever_fit(job: QueuedJob, nodes: Sequence[Node]) -> tuple[bool, str]:
    """Whether the gang fits an EMPTY cluster (at its minimum size); else a reason naming why."""
    idx = FreeIndex(nodes, ())
    n = job.min_gang
    if job.gpus_per_learner < 0 or job.cpus_per_learner < 0 or job.memory_mb_per_learner < 0:
        return False, "resources per learner must not be negative"
    if n < 1:
        return False, "learners must be at least 1"
    if job.gpu_type and not any(nf.node.gpu_type == job.gpu_type for nf in idx.nodes.values()):
        return False, f"no healthy node has gpu_type {job.gpu_type!r}"
    plan = idx.place(
        job.job_id,
        n,
        job.gpus_per_learner,
        job.cpus_per_learner,
        job.memory_mb_per_learner,
        job.gpu_type,
        "node" if job.placement == "node" else "pack",
    )
    if plan is not None:
        return True, ""
    what = (
        f"{n} learner(s) x {job.gpus_per_learner} GPU, {job.cpus_per_learner:g} CPU, "
        f"{job.memory_mb_per_learner} MiB"
    )
    gpus = sum(
        nf.node.gpus
        for nf in idx.nodes.values()
        if not job.gpu_type or nf.node.gpu_type == job.gpu_type
    )
    biggest = max((nf.node for nf in idx.nodes.values()), key=lambda x: x.gpus, default=None)
    one = "; its learners must share one node" if job.placement == "node" else ""
    return False, (
        f"gang of {what} can never fit this cluster{one} ({len(idx.nodes)} healthy nodes, {gpus} "
        f"matching GPUs, largest node {biggest.gpus if biggest else 0} GPU / "
        f"{biggest.cpus if biggest else 0:g} CPU / {biggest.memory_mb if biggest else 0} MiB)"
    )


def _shape(j: QueuedJob) -> str:
    res = f"{j.gpus_per_learner} GPU" if j.gpus_per_learner else f"{j.cpus_per_learner:g} CPU"
    return f"{j.learners} x {res}" + (f" ({j.gpu_type})" if j.gpu_type else "")


def _grow_cause(r: RunningJob, added: int) -> str:
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


# ---------------------------------------------------------------------------------------------
# the round


@dataclass
class _Round:
    snapshot: Snapshot
    now: float
    policy: str
    cfg: PolicyConfig
    include_waits: bool
    idx: FreeIndex = field(init=False)
    decisions: list[Decision] = field(default_factory=list)
    touched: set[str] = field(default_factory=set)  # running jobs already acted on
    reserved_for: str | None = None
    promoted: set[str] = field(default_factory=set)  # sorted ahead of their preemption class
    waiting: list[QueuedJob] = field(default_factory=list)
    _ranked_cache: list | None = None
    _elastic: list = field(default_factory=list)
    _ranked_start: int = 0
    _compacted_at: int = 0
    _movable: dict[str, list[RunningJob]] | None = None
    _lenders_cache: list[RunningJob] | None = None
    # team quotas (all empty/False without quotas)
    borrowed: set[str] = field(default_factory=set)  # running jobs on borrowed capacity
    used: dict[str, qt.Use] = field(default_factory=dict)  # per team, as the round goes
    used_borrowed: dict[str, qt.Use] = field(default_factory=dict)
    in_guarantee: bool = False  # the job being considered fits its team's guarantee
    _limits: dict[str, qt.Use] = field(default_factory=dict)
    _reclaim: list[RunningJob] | None = None
    _pools: dict[tuple, list] = field(default_factory=dict)  # see _class_victims

    def __post_init__(self) -> None:
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
    def _place(self, j: QueuedJob, learners: int) -> list[Allocation] | None:
        return self.idx.place(
            j.job_id,
            learners,
            j.gpus_per_learner,
            j.cpus_per_learner,
            j.memory_mb_per_learner,
            j.gpu_type,
            j.placement,
        )

    def try_start(self, j: QueuedJob) -> list[Allocation] | None:
        allocs = self._place(j, j.learners)
        if allocs is None and j.min_gang < j.learners:
            # Elastic: the largest count that fits now, never below min (it grows back later).
            for n in range(j.learners - 1, j.min_gang - 1, -1):
                allocs = self._place(j, n)
                if allocs is not None:
                    break
        return allocs

    def start(self, j: QueuedJob, allocs: list[Allocation], cause: str) -> None:
        self.idx.take(allocs)
        if self.reserved_for == j.job_id:
            self.idx.unreserve(j.job_id)
            self.reserved_for = None
        if self.quotas:
            self._account(j.team, allocs, 1.0, not self.in_guarantee)
        self.decisions.append(Decision(j.job_id, "start", cause, allocs))

    # -- team quotas ----------------------------------------------------------------------
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
            return (
                f"team {team} uses {used[0]:.0f}/{q.gpus} guaranteed GPUs and this job fits its "
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
            if g > qt._EPS:
                parts.append(f"{qt.amount(g, dim)} by {who} guaranteed jobs")
            if b > qt._EPS:
                parts.append(f"{qt.amount(b, dim)} by {who} borrowed jobs")
        if not parts:
            return head
        first, _, rest = parts[0].partition(" by ")
        parts[0] = f"{first} borrowable {qt.unit(dim)} are held by {rest}"
        return f"{head}; " + ", ".join(parts)

    # -- lent capacity --------------------------------------------------------------------
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
        shrinks: list[tuple[RunningJob, list[Allocation]]] = []
        allocs = None
        for r in lenders:
            lent = sorted(r.allocations, key=lambda a: -a.learner)[: r.lent]
            taken: list[Allocation] = []
            for a in lent:
                self.idx.give([a])
                taken.append(a)
                allocs = self._place(j, want)
                if allocs is not None:
                    break
            shrinks.append((r, taken))
            if allocs is not None:
                break
        if allocs is None:
            for _, taken in shrinks:
                self.idx.take(taken)
            return None
        # minimality: keep lent learners that were not needed (last given back first)
        for _, taken in reversed(shrinks):
            for a in list(reversed(taken)):
                self.idx.take([a])
                if self._place(j, want) is None:
                    self.idx.give([a])
                else:
                    taken.remove(a)
        allocs = self._place(j, want)
        return [(r, t) for r, t in shrinks if t], allocs

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
            for r, taken in shrinks:
                self.touched.add(r.job_id)
                if self.quotas:
                    self._account(r.team, taken, -1.0, r.job_id in self.borrowed)
                self.decisions.append(
                    Decision(
                        r.job_id,
                        "shrink",
                        f"gave back {len(taken)} lent learner(s) (to {r.learners - len(taken)}, "
                        f"its target {r.target}) for {j.job_id}: learners above the target are "
                        "lent, not owned",
                        taken,
                    )
                )
            self.start(
                j,
                allocs,
                f"started on learners given back by {', '.join(r.job_id for r, _ in shrinks)} "
                f"({_shape(j)}, {len(allocs)} learner(s))",
            )
            return True
        return False

    # -- preemption -----------------------------------------------------------------------
    def _ranked(self) -> list[tuple[tuple, RunningJob]]:
        """Running jobs, least important first, then least work lost; computed once a round."""
        if self._ranked_cache is None:
            now, min_run = self.now, _min_run_s(self.policy, self.cfg)
            leveled = self.policy in LEVELED
            th = _thresholds(self.policy, self.cfg) if leveled else ()
            by_service = self.policy == "default" and self.cfg.level_gpu_exponent != 1.0
            rows = []
            for r in self.snapshot.running:
                start = r.start_time
                if now - max(start, r.last_resize_time or start) < min_run:
                    continue  # thrash guard: never a victim
                allocs = r.allocations
                gpus = len(allocs[0].gpu_indices) if len(allocs) == 1 else r.gpus
                ck = r.last_checkpoint_time
                lost = now - (start if ck is None or ck < start else ck)  # since the last save
                if leveled:
                    service = r.attained_service
                    if by_service:
                        service = _service(service, gpus, self.policy, self.cfg)
                    lvl = bisect_right(th, service)  # = las_level (thresholds ascend)
                    cls: tuple = (-r.priority, lvl)
                    key = (r.priority, -lvl, lost * max(gpus, 1), -start, r.job_id)
                else:
                    cls = running_class(r, self.policy, self.cfg)
                    key = (*(-x for x in cls), lost * max(gpus, 1), -start, r.job_id)
                rows.append((key, cls, r))
            rows.sort(key=itemgetter(0))
            self._ranked_cache = [(cls, r) for _, cls, r in rows]
            self._elastic = [x for x in self._ranked_cache if x[1].learners > x[1].min_gang]
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
        cls = queued_class(j, self.now, self.policy, self.cfg)
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
        margin = self.cfg.preempt_margin_gpu_s if self.policy == "default" else 0.0
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
        margin = self.cfg.preempt_margin_gpu_s if self.policy == "default" else 0.0
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
        # 10,000-job round's quota overhead)
        team = j.team
        key = (team, elastic_only, reclaim)
        pool = self._pools.get(key)
        if pool is None:
            ranked = self._ranked()
            base = self._elastic if elastic_only else ranked
            if reclaim:
                pool = [x for x in base if team and x[1].team == team]
            else:
                borrowed = self.borrowed
                pool = [x for x in base if x[1].job_id in borrowed or (team and x[1].team == team)]
            if elastic_only:
                pool = [x for x in pool if x[1].learners > x[1].min_gang]
            self._pools[key] = pool
        return self._victims(j, elastic_only, pool)

    def try_preempt(self, j: QueuedJob, by_class: bool = True, reclaim: bool = False) -> bool:
        """Make room for j by shrinking or preempting lower-class jobs (`by_class`, as the policy
        ranks them) and, for a job inside its team's guarantee (`reclaim`), borrowed jobs of
        other teams first, whatever their class."""
        need = j.min_gang
        g = j.gpus_per_learner
        cause_cls = queued_class(j, self.now, self.policy, self.cfg)

        # 1. shrink-before-kill: remove learners of elastic victims, never below their min.
        shrinks: list[tuple[RunningJob, list[Allocation]]] = []
        allocs = None
        for r in self._class_victims(j, True, reclaim) if by_class else ():
            removable = sorted(r.allocations, key=lambda a: -a.learner)[: r.learners - r.min_gang]
            taken: list[Allocation] = []
            for a in removable:
                self.idx.give([a])
                taken.append(a)
                allocs = self._place(j, need)
                if allocs is not None:
                    break
            shrinks.append((r, taken))
            if allocs is not None:
                break
        if allocs is not None:
            # minimality: give back learners that were not needed (last removed first)
            for r, taken in reversed(shrinks):
                for a in list(reversed(taken)):
                    self.idx.take([a])
                    if self._place(j, need) is None:
                        self.idx.give([a])
                    else:
                        taken.remove(a)
            allocs = self._place(j, need)
            for r, taken in shrinks:
                if taken:
                    self.touched.add(r.job_id)
                    if self.quotas:
                        self._account(r.team, taken, -1.0, r.job_id in self.borrowed)
                    self.decisions.append(
                        Decision(
                            r.job_id,
                            "shrink",
                            f"shrunk by {len(taken)} learner(s) (to {r.learners - len(taken)}, min "
                            f"{r.min_gang}) to admit {j.job_id} (class {cause_cls} beats "
                            f"{running_class(r, self.policy, self.cfg)})",
                            taken,
                        )
                    )
            self.start(j, allocs, f"started after shrinking elastic jobs ({_shape(j)})")
            return True
        for _, taken in shrinks:
            self.idx.take(taken)

        # 2. preempt whole jobs, least important / least work lost first.
        chosen: list[RunningJob] = []
        victims: Iterable[RunningJob] = self._class_victims(j, False, reclaim) if by_class else ()
        if reclaim:
            victims = itertools.chain(self._reclaim_victims(j), victims)
        for r in victims:
            if len(chosen) >= self.cfg.max_victims and self.policy != "tiresias-las":
                break
            self.idx.give(r.allocations)
            chosen.append(r)
            if g > 0 and self.idx.upper_capacity(g, j.gpu_type) < need:
                continue
            allocs = self._place(j, need)
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
            if self._place(j, need) is None:
                self.idx.give(r.allocations)
            else:
                dropped.add(r.job_id)
        chosen = [r for r in chosen if r.job_id not in dropped]
        allocs = self._place(j, need)
        for r in chosen:
            self.touched.add(r.job_id)
            cause = (
                f"preempted for {j.job_id}: its class {cause_cls} beats "
                f"{running_class(r, self.policy, self.cfg)} "
                f"({len(chosen)} victim(s), the fewest that make room)"
            )
            if self.quotas:
                borrowed = r.job_id in self.borrowed
                if reclaim and borrowed and r.team != j.team:
                    q = self.quotas[j.team]
                    cause = (
                        f"reclaimed for {j.job_id}: team {j.team} is below its guarantee "
                        f"({self.used.get(j.team, qt.ZERO)[0]:.0f}/{q.gpus} GPUs) and this job "
                        f"of {f'team {r.team}' if r.team else 'no team'} runs on borrowed "
                        f"capacity ({len(chosen)} victim(s), the fewest that make room)"
                    )
                self._account(r.team, r.allocations, -1.0, borrowed)
            self.decisions.append(Decision(r.job_id, "preempt", cause, list(r.allocations)))
        self.start(j, allocs, f"started by preempting {', '.join(r.job_id for r in chosen)}")
        return True

    # -- moves (defragmentation) -----------------------------------------------------------
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

    def try_move(self, j: QueuedJob) -> bool:
        """Start a gang that the free GPUs could hold, were they not scattered over nodes, by
        moving a few small jobs off the nodes it needs (each restarts elsewhere at once).
        The caller checked that the gang needs GPUs and that enough are free in total."""
        g, need = j.gpus_per_learner, j.min_gang
        movable = self._movable_by_node()
        options = []  # (moves per learner slot, moves, slots, node name, jobs to move)
        for nf in self.idx.nodes.values():
            n = nf.node
            if nf.reserved_for not in (None, j.job_id) or n.gpus < g:
                continue
            if j.gpu_type and n.gpu_type != j.gpu_type:
                continue
            free = len(nf.free)
            movers = sorted(
                (
                    r
                    for r in movable.get(n.name, ())
                    if r.job_id not in self.touched and r.priority <= j.priority
                ),
                key=lambda r: (-r.gpus, r.job_id),
            )
            slots = min((free + sum(r.gpus for r in movers)) // g, need)
            if slots == 0:
                continue
            chosen = []
            while free < slots * g:
                r = movers[len(chosen)]
                chosen.append(r)
                free += r.gpus
            # fewest moves per learner slot first (nodes that need none lead)
            options.append((len(chosen) / slots, len(chosen), -slots, n.name, chosen))
        options.sort(key=lambda o: o[:4])
        movers, slots = [], 0
        for *_, neg_slots, _, chosen in options:
            if slots >= need:
                break
            movers += chosen
            slots -= neg_slots
        if slots < need or not movers or len(movers) > self.cfg.max_moves:
            return False
        for r in movers:
            self.idx.give(r.allocations)
        allocs = self._place(j, need)
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
                for x in moved:
                    self.idx.take(x.allocations)
                return False
            self.idx.take(new)
            placed.append(new)
        for r in moved:
            self.touched.add(r.job_id)
            self.decisions.append(
                Decision(
                    r.job_id,
                    "preempt",
                    f"moved to make room for {j.job_id} ({_shape(j)}); restarts elsewhere now",
                    list(r.allocations),
                )
            )
        self.idx.give(allocs)  # start() takes them again and drops the gang's reservation
        cause = f"fits now ({_shape(j)}, {len(allocs)} learner(s))"
        if moved:
            cause = (
                f"started after moving {', '.join(r.job_id for r in moved)} ({_shape(j)}; "
                "enough GPUs were free, but scattered over nodes)"
            )
        self.start(j, allocs, cause)
        for r, new in zip(moved, placed, strict=True):
            self.decisions.append(
                Decision(r.job_id, "start", f"restarted after a move for {j.job_id}", new)
            )
        return True

    # -- reservation ----------------------------------------------------------------------
    def try_reserve(self, j: QueuedJob) -> None:
        if (
            self.reserved_for is not None
            or j.gpus_per_learner * j.learners < self.cfg.reserve_min_gpus
        ):
            return
        if self.policy not in self.cfg.reserve_policies:
            return
        if self.now - _wait_since(j) < self.cfg.reserve_after_s:
            return
        g, c, m = j.gpus_per_learner, j.cpus_per_learner, j.memory_mb_per_learner
        nodes = [
            nf
            for nf in self.idx.nodes.values()
            if nf.reserved_for is None and (not j.gpu_type or nf.node.gpu_type == j.gpu_type)
        ]
        # Most free first: those drain soonest without knowing any job's duration.
        nodes.sort(key=lambda nf: (-len(nf.free), -nf.cpus, nf.node.name))
        chosen, have = [], 0
        for nf in nodes:
            n = nf.node
            cap = j.learners
            if g:
                cap = min(cap, n.gpus // g)
            if c > 0:
                cap = min(cap, int(n.cpus // c))
            if m:
                cap = min(cap, n.memory_mb // m)
            if cap <= 0:
                continue
            chosen.append(nf.node.name)
            have += cap
            if have >= j.min_gang:
                self.idx.reserve(chosen, j.job_id)
                self.reserved_for = j.job_id
                return

    def _fifo_blocks(self, j: QueuedJob) -> bool:
        """Whether a fifo head that did not fit holds back every later job (fifo_blocking)."""
        mode = self.cfg.fifo_blocking
        if self.reserved_for == j.job_id:
            return False  # nodes are held for it: the rest of the cluster may be backfilled
        if mode == "gang":
            return True
        if mode == "count":
            need = j.min_gang * j.gpus_per_learner
            return need == 0 or self.idx.total_free_gpus(j.gpu_type) < need
        return False

    def wait(self, j: QueuedJob, why: str) -> None:
        self.waiting.append(j)
        if self.include_waits:
            self.decisions.append(Decision(j.job_id, "wait", why or self.why_not(j)))

    def why_not(self, j: QueuedJob) -> str:
        free = self.idx.total_free_gpus(j.gpu_type)
        if j.gpus_per_learner:
            why = (
                f"needs {_shape(j)}s at once; {free} free outside reservations, largest free "
                f"block {self.idx.largest_free_block(j.gpu_type)}"
            )
        else:
            why = f"needs {_shape(j)} with {j.memory_mb_per_learner} MiB each; not enough free"
        if self.reserved_for is not None and self.reserved_for != j.job_id:
            why += f"; behind {self.reserved_for}, which holds a reservation"
        if self.quotas:
            why = f"{self._quota_note(j)}; {why}"
        return why

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
                    Decision(r.job_id, "grow", _grow_cause(r, len(allocs)), allocs)
                )

    # -- main loop ------------------------------------------------------------------------
    def ordered(self):
        """(sort key, job) in policy order; `class_of` turns a pair into the preemption class,
        only for the jobs a round really looks at (a long queue behind a full cluster is not).

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
        limits, used_by, zero, eps = self._limits, self.used, qt.ZERO, qt._EPS
        for k, j in self._policy_order(self.snapshot.queue):
            lim = limits.get(j.team)
            if lim is not None:
                used = used_by.get(j.team, zero)
                n = j.learners
                if (
                    used[0] + n * j.gpus_per_learner <= lim[0] + eps
                    and used[1] + n * j.cpus_per_learner <= lim[1] + eps
                    and used[2] + n * j.memory_mb_per_learner <= lim[2] + eps
                ):
                    self.in_guarantee = True
                    yield k, j
                    continue
            deferred.append((k, j))
        self.in_guarantee = False
        if self.policy == "fair":  # DRF's order depends on the starts so far: build it again
            yield from self._policy_order([j for _, j in deferred])
        else:
            yield from deferred

    def _policy_order(self, queue):
        if self.policy == "fair":
            for j in self._drf_order(queue):
                yield (), j
            return
        key = order_key(self.policy, self.now, self.cfg)
        yield from sorted(zip(map(key, queue), queue), key=itemgetter(0))

    def class_of(self, k: tuple, j: QueuedJob) -> tuple:
        if self.policy == "default":
            # the key carries the real level last; a smaller sort level means it was promoted
            if k[1] < k[-1]:
                self.promoted.add(j.job_id)
            return (k[0], k[-1])
        return queued_class(j, self.now, self.policy, self.cfg)

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

    def run(self) -> list[Decision]:
        can_preempt = preempts(self.policy) and bool(self.snapshot.running)
        # a team below its guarantee takes borrowed work back under every policy
        can_reclaim = bool(self.quotas) and bool(self.borrowed)
        # "a job of this shape and class did not fit (nor preempt) at index version v with n
        # learners": a later job of the same shape needing >= n cannot do better. This keeps a
        # long queue behind a full cluster O(queue), not O(queue x nodes).
        failed: dict[tuple, tuple[int, int]] = {}
        gpu_less = any(j.gpus_per_learner == 0 for j in self.snapshot.queue)
        rest = None
        preempted = 0
        move_tries = 1
        # tiresias-las: no storm guard (Tiresias' simulator preempts whatever the walk leaves out)
        max_pre = self.cfg.max_preemptions_per_round if self.policy != "tiresias-las" else 1 << 30
        for k, j in self.ordered():
            if rest is not None:
                self.wait(j, "")
                continue
            cls = self.class_of(k, j)
            guaranteed = self.in_guarantee
            # (nodes held by a reservation do not count as free: the job holding it came earlier)
            if (
                not gpu_less
                and self.idx.total_free_gpus() == 0
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
                rest = True
                self.wait(j, "")
                continue
            if not can_preempt:
                cls = ()
            shape = (
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
            g = j.gpus_per_learner
            fits_gpus = g == 0 or self.idx.upper_capacity(g, j.gpu_type) >= j.min_gang
            allocs = self.try_start(j) if fits_gpus or self.reserved_for == j.job_id else None
            if (
                (allocs is None or len(allocs) < j.learners)
                and self._lenders()
                and self.try_give_back(j, allocs is None)
            ):
                continue
            if allocs is not None:
                cause = f"fits now ({_shape(j)}, {len(allocs)} learner(s))"
                if self.reserved_for is not None and self.reserved_for != j.job_id:
                    cause += f"; backfilled outside nodes reserved for {self.reserved_for}"
                self.start(j, allocs, cause)
                continue
            n_before = len(self.decisions)
            reclaim = guaranteed and can_reclaim
            if (can_preempt or reclaim) and self.try_preempt(j, can_preempt, reclaim):
                preempted += sum(d.action == "preempt" for d in self.decisions[n_before:])
                if preempted >= max_pre:
                    # storm guard: the rest waits for the next round
                    can_preempt = can_reclaim = False
                continue
            if (
                move_tries
                and self.policy in self.cfg.move_policies
                and preempted < max_pre
                and j.gpus_per_learner
                and self.idx.total_free_gpus(j.gpu_type) >= j.min_gang * j.gpus_per_learner
            ):
                # one O(nodes) attempt per round at most: a long queue stays O(queue)
                move_tries -= 1
                if self.try_move(j):
                    preempted += sum(d.action == "preempt" for d in self.decisions[n_before:])
                    if preempted >= max_pre:
                        can_preempt = can_reclaim = False
                    continue
            why = self.why_not(j) if self.include_waits else ""
            if self.reserved_for is None:
                self.try_reserve(j)
                if self.reserved_for == j.job_id:
                    why += "; nodes reserved for it so smaller jobs cannot starve it"
            failed[shape] = (self.idx.version, j.min_gang)
            self.wait(j, why)
            if self.policy == "fifo" and not guaranteed and self._fifo_blocks(j):
                rest = True  # head-of-line blocking: see PolicyConfig.fifo_blocking
        self.grow()
        return self.decisions


def schedule(
    snapshot: Snapshot,
    now: float,
    policy: str = DEFAULT_POLICY,
    config: PolicyConfig | None = None,
    include_waits: bool = True,
) -> list[Decision]:
    """One scheduling round. Pure: same snapshot and `now` give the same decisions.

    Decisions come in the order the caller must carry them out (a preempt/shrink before the
    start it makes room for). `include_waits=False` skips the per-job "wait" decisions (the
    simulator does not need them; `queue_report` explains waiting jobs on demand).
    """
    problem = policy_problem(policy)
    if problem:
        raise ValueError(problem)
    with gc_paused():
        return _Round(snapshot, now, policy, config or DEFAULT_CONFIG, include_waits).run()


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
