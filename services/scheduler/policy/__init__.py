"""Pure scheduling policy core: model, gang placement, policies, the round, queue report.

Modules: `model` (snapshot and decisions), `config` (PolicyConfig), `policies` (one object per
policy name), `feasibility`, `placement` (gang placement on nodes), `round` (`schedule()`) with
its steps in `preemption`, `elastic`, `reservation` and `fairshare` over the round's shared
`state`, `quota` (team quotas), `eta` (queue position, ETA and pending reason).

No I/O and no clock reads here: callers pass `now`. The live scheduler service and the
trace-driven simulator both call `schedule()`.
"""

from dlaas.domain.queue import QueueEntry

from .config import DEFAULT_CONFIG, PolicyConfig
from .feasibility import can_ever_fit
from .model import (
    Allocation,
    Decision,
    Node,
    QueuedJob,
    RunningJob,
    Snapshot,
    TeamQuota,
)
from .policies import DEFAULT_POLICY, POLICIES, Policy, policy_for, policy_problem
from .quota import TeamUsage, team_usage
from .round import schedule

__all__ = [
    "DEFAULT_CONFIG",
    "DEFAULT_POLICY",
    "POLICIES",
    "Allocation",
    "Decision",
    "Node",
    "Policy",
    "PolicyConfig",
    "QueueEntry",
    "QueuedJob",
    "RunningJob",
    "Snapshot",
    "TeamQuota",
    "TeamUsage",
    "can_ever_fit",
    "policy_for",
    "policy_problem",
    "schedule",
    "team_usage",
]

from .eta import (
    LEVEL_HISTORY,
    DurationModel,
    forward_starts,
    learned_config,
    predict_waiting,
    queue_report,
    run_key,
)

__all__ += [
    "LEVEL_HISTORY",
    "DurationModel",
    "forward_starts",
    "learned_config",
    "predict_waiting",
    "queue_report",
    "run_key",
]
