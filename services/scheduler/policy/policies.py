"""One object per policy name: how a policy orders the queue and who may preempt whom.

Every policy is a small class registered in one table (`policy_for(name)`); the round
(`round.py`) asks the policy object instead of testing its name. All are duration-blind: a
policy never sees how long a job will run.

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
  default  - priority classes over 2D-LAS with few, high levels (the first learned from finished
             jobs, eta.learned_config; 2e4 before 50 ended; then 2e5 GPU-s), small gangs
             first at equal level, starvation promotion, reservation + backfill for a blocked
             gang, MOVES of a few small jobs when a gang's free GPUs are scattered over nodes,
             a thrash guard and caps on victims per preemption and per round; victims in the
             reverse of the queue's order, sparing long waiters (victim_key); a job that waited
             `evict_after_s` (6 h) evicts the fewest jobs off the nodes cheapest to clear
             (try_evict). See PolicyConfig.

A class is a tuple compared as tuples are: smaller is more important; a queued job may preempt
a running one only if its class is strictly smaller.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

from .config import PolicyConfig
from .model import QueuedJob, RunningJob

# "No cap": tiresias-las preempts whatever the walk leaves out (Tiresias' simulator has no
# storm guard and no victim cap).
_UNCAPPED = 1 << 30

# (running job, its GPUs) -> where it ranks among the victims of its class
VictimKey = Callable[[RunningJob, int], tuple]


def las_level(attained: float, thresholds: Sequence[float]) -> int:
    lvl = 0
    for t in thresholds:
        if attained >= t:
            lvl += 1
        else:
            break
    return lvl


def wait_since(j: QueuedJob) -> float:
    """When the job's current wait began: its last preemption, else its submit."""
    return j.last_preempted_time if j.last_preempted_time is not None else j.submit_time


def _executed_s(j: QueuedJob) -> float:
    return j.attained_service / max(j.gpus_per_learner * j.learners, 1)


class Policy:
    """A policy's answers to the round's questions; the base is a policy that never preempts."""

    name: ClassVar[str] = ""
    # the preemption class is (priority, level of attained GPU-seconds)
    leveled: ClassVar[bool] = False
    # a queued job may preempt running jobs of a worse class
    preempts: ClassVar[bool] = False
    # the queue order is DRF's, which depends on the starts made so far in the round
    drf: ClassVar[bool] = False
    # a head that does not fit may hold back every later job (PolicyConfig.fifo_blocking)
    blocks_head_of_line: ClassVar[bool] = False

    def thresholds(self, cfg: PolicyConfig) -> tuple[float, ...]:
        """The level thresholds in attained GPU-seconds (ascending); () if not leveled."""
        return ()

    def service(self, attained: float, gpus: int, cfg: PolicyConfig) -> float:
        """What a job's level is computed from (see PolicyConfig.level_gpu_exponent)."""
        return attained

    def scales_service(self, cfg: PolicyConfig) -> bool:
        """Whether `service` differs from the attained GPU-seconds under this configuration."""
        return False

    def queued_class(self, j: QueuedJob, now: float, cfg: PolicyConfig) -> tuple:
        """The class used to decide who may preempt whom (smaller = more important)."""
        return ()

    def running_class(self, r: RunningJob, cfg: PolicyConfig) -> tuple:
        return ()

    def order_key(self, now: float, cfg: PolicyConfig) -> Callable[[QueuedJob], tuple]:
        """The order a round considers queued jobs in (the queue position shown to users)."""
        return lambda j: (*self.queued_class(j, now, cfg), j.submit_time, j.job_id)

    def promoted(self, key: tuple) -> bool:
        """Whether the sort key put the job ahead of its preemption class (starvation)."""
        return False

    def class_of(self, key: tuple, j: QueuedJob, now: float, cfg: PolicyConfig) -> tuple:
        """The preemption class of a queued job, given its sort key (`order_key`)."""
        return self.queued_class(j, now, cfg)

    def victim_key(self, now: float, cfg: PolicyConfig) -> VictimKey:
        """How running jobs of one class are ranked as victims, given (job, its GPUs): the
        first is preempted first. Here: the least work lost since the job's last
        checkpoint (or start), then the latest (re)started."""

        def key(r: RunningJob, gpus: int) -> tuple:
            start = r.start_time
            ck = r.last_checkpoint_time
            lost = now - (start if ck is None or ck < start else ck)
            return (lost * max(gpus, 1), -start, r.job_id)

        return key

    def min_run_s(self, cfg: PolicyConfig) -> float:
        """The thrash guard: a job that (re)started or was resized less than this ago is safe."""
        return cfg.min_run_s

    def max_preemptions(self, cfg: PolicyConfig) -> int:
        """The storm guard: at most this many preemptions per round."""
        return cfg.max_preemptions_per_round

    def max_victims(self, cfg: PolicyConfig) -> int:
        """At most this many whole jobs are preempted for one waiting job."""
        return cfg.max_victims

    def preempt_margin(self, cfg: PolicyConfig) -> float:
        """A victim must have attained this many GPU-seconds more than the waiting job."""
        return 0.0

    def evict_after(self, cfg: PolicyConfig) -> float | None:
        """How long a job waits before it may evict jobs of any class off the nodes cheapest
        to clear (`Preemption.try_evict`); None: never."""
        return None

    def reserves(self, cfg: PolicyConfig) -> bool:
        """Whether a blocked gang gets a reservation under this policy."""
        return self.name in cfg.reserve_policies

    def moves(self, cfg: PolicyConfig) -> bool:
        """Whether a gang may move small jobs off the nodes it needs (defragmentation)."""
        return self.name in cfg.move_policies


class Fifo(Policy):
    name = "fifo"
    blocks_head_of_line = True

    def order_key(self, now: float, cfg: PolicyConfig) -> Callable[[QueuedJob], tuple]:
        return lambda j: (j.submit_time, j.job_id)


class Priority(Policy):
    name = "priority"
    preempts = True

    def queued_class(self, j: QueuedJob, now: float, cfg: PolicyConfig) -> tuple:
        return (-j.priority,)

    def running_class(self, r: RunningJob, cfg: PolicyConfig) -> tuple:
        return (-r.priority,)

    def order_key(self, now: float, cfg: PolicyConfig) -> Callable[[QueuedJob], tuple]:
        return lambda j: (-j.priority, j.submit_time, j.job_id)


class Fair(Policy):
    name = "fair"
    drf = True


class _Leveled(Policy):
    """2D-LAS: class = (priority, level of attained GPU-seconds); preempts worse levels."""

    leveled = True
    preempts = True

    def starving(self, j: QueuedJob, now: float, cfg: PolicyConfig) -> bool:
        """A demoted job that waited long enough for its executed time goes back to the front."""
        waited = now - wait_since(j)
        return waited >= cfg.starve_factor * max(_executed_s(j), 1.0)  # Tiresias' STARVE_LIMIT

    def queued_class(self, j: QueuedJob, now: float, cfg: PolicyConfig) -> tuple:
        lvl = las_level(self.service(j.attained_service, j.gpus, cfg), self.thresholds(cfg))
        return (-j.priority, lvl)

    def running_class(self, r: RunningJob, cfg: PolicyConfig) -> tuple:
        service = self.service(r.attained_service, r.gpus, cfg)
        return (-r.priority, las_level(service, self.thresholds(cfg)))


class Las(_Leveled):
    name = "las"

    def thresholds(self, cfg: PolicyConfig) -> tuple[float, ...]:
        return cfg.las_thresholds

    def queued_class(self, j: QueuedJob, now: float, cfg: PolicyConfig) -> tuple:
        lvl = las_level(self.service(j.attained_service, j.gpus, cfg), self.thresholds(cfg))
        if lvl and self.starving(j, now, cfg):
            lvl = 0  # las: starvation promotion also lets it preempt (as in Tiresias)
        return (-j.priority, lvl)


class TiresiasLas(_Leveled):
    name = "tiresias-las"

    def thresholds(self, cfg: PolicyConfig) -> tuple[float, ...]:
        return cfg.tiresias_thresholds

    def min_run_s(self, cfg: PolicyConfig) -> float:
        return 0.0  # Tiresias' simulator has no thrash guard: a job may be preempted at any event

    def max_preemptions(self, cfg: PolicyConfig) -> int:
        return _UNCAPPED

    def max_victims(self, cfg: PolicyConfig) -> int:
        return _UNCAPPED


class Default(_Leveled):
    name = "default"

    def thresholds(self, cfg: PolicyConfig) -> tuple[float, ...]:
        return cfg.default_thresholds

    def service(self, attained: float, gpus: int, cfg: PolicyConfig) -> float:
        if cfg.level_gpu_exponent == 1.0 or gpus <= 1:
            return attained
        return attained / gpus ** (1.0 - cfg.level_gpu_exponent)

    def scales_service(self, cfg: PolicyConfig) -> bool:
        return cfg.level_gpu_exponent != 1.0

    def starving(self, j: QueuedJob, now: float, cfg: PolicyConfig) -> bool:
        waited = now - wait_since(j)
        if cfg.default_starve_factor > 0:
            rel = cfg.default_starve_factor * max(_executed_s(j), 1.0)
            return waited >= min(rel, cfg.starve_after_s)
        return waited >= cfg.starve_after_s

    def order_key(self, now: float, cfg: PolicyConfig) -> Callable[[QueuedJob], tuple]:
        th = cfg.default_thresholds
        small = cfg.small_first
        by_att = cfg.level_order_by_attained

        def key(j: QueuedJob) -> tuple:
            # the last item is the job's real level (its preemption class), after the unique id
            # so it never changes the order
            if not j.attained_service:  # a fresh job: level 0 (the common case, kept cheap)
                gpus = j.learners * j.gpus_per_learner if small else 0
                return (-j.priority, 0, gpus, 0.0, j.submit_time, j.job_id, 0)
            real = lvl = las_level(self.service(j.attained_service, j.gpus, cfg), th)
            if lvl and self.starving(j, now, cfg):
                lvl = 0
            att = j.attained_service if lvl and by_att else 0.0
            return (-j.priority, lvl, j.gpus if small else 0, att, j.submit_time, j.job_id, real)

        return key

    def promoted(self, key: tuple) -> bool:
        # the key carries the real level last; a smaller sort level means it was promoted
        return key[1] < key[-1]

    def class_of(self, key: tuple, j: QueuedJob, now: float, cfg: PolicyConfig) -> tuple:
        return (key[0], key[-1])

    def preempt_margin(self, cfg: PolicyConfig) -> float:
        return cfg.preempt_margin_gpu_s

    def victim_key(self, now: float, cfg: PolicyConfig) -> VictimKey:
        """Victims in the reverse of the queue's order, jobs that waited long spared: inside a
        class, a job that has waited `starve_after_s` in all (since submit, not counting its
        runs) comes last, then the biggest gang first (the queue puts it behind smaller ones),
        then the latest submitted (the queue is FIFO inside a level).

        Why not the least work lost (the base order): with checkpoint-on-preempt no work is
        lost, and "lost since the last (re)start" makes the job that has just resumed the next
        victim. On 8-GPU nodes the oldest demoted gangs were preempted 10-14 times each while
        younger ones ran on: Philly VC ee9e8c on 14 x 8 (C8), avg JCT 108,239 -> 94,373 s,
        p99 1,017,086 -> 794,185 s (see PolicyConfig.starve_after_s)."""
        bound = cfg.starve_after_s

        def key(r: RunningJob, gpus: int) -> tuple:
            size = gpus or r.learners or 1
            waited = now - r.submit_time - r.attained_service / size
            return (waited >= bound, -size, -r.submit_time, r.job_id)

        return key

    def max_victims(self, cfg: PolicyConfig) -> int:
        return cfg.default_max_victims

    def evict_after(self, cfg: PolicyConfig) -> float | None:
        return cfg.evict_after_s or None


# The one table of policies, in the order `dlaas simulate --policy` lists them.
_TABLE: dict[str, Policy] = {
    p.name: p for p in (Fifo(), Priority(), Las(), TiresiasLas(), Fair(), Default())
}
POLICIES: tuple[str, ...] = tuple(_TABLE)
# The one default: the live scheduler (DLAAS_SCHEDULER_POLICY unset, hence `dlaas up`), the
# simulator, the benchmarks and `schedule()` itself all use it, with DEFAULT_CONFIG. It is the
# policy whose figures the README reports.
DEFAULT_POLICY = "default"


def policy_problem(policy: str) -> str:
    """Why `policy` is not a policy name ("" if it is); the message names the field."""
    if policy in POLICIES:
        return ""
    return f"policy: unknown policy {policy!r}; expected one of {', '.join(POLICIES)}"


def policy_for(policy: str | Policy) -> Policy:
    """The policy object for a name (a `Policy` is its own); ValueError naming the field."""
    if isinstance(policy, Policy):
        return policy
    found = _TABLE.get(policy)
    if found is None:
        raise ValueError(policy_problem(policy))
    return found


def order_key(policy: str | Policy, now: float, cfg: PolicyConfig) -> Callable[[QueuedJob], tuple]:
    """The order a round considers queued jobs in (the queue position shown to users)."""
    return policy_for(policy).order_key(now, cfg)
