"""Pure scheduling policy core: model, gang placement, policies, queue report.

No I/O and no clock reads here: callers pass `now`. The live scheduler service and the
trace-driven simulator both call `schedule()`.
"""

from .core import (
    DEFAULT_CONFIG,
    DEFAULT_POLICY,
    POLICIES,
    PolicyConfig,
    can_ever_fit,
    policy_problem,
    schedule,
)
from .model import (
    Allocation,
    Decision,
    Node,
    QueuedJob,
    QueueEntry,
    RunningJob,
    Snapshot,
    TeamQuota,
)
from .quota import TeamUsage, team_usage

__all__ = [
    "DEFAULT_CONFIG",
    "DEFAULT_POLICY",
    "POLICIES",
    "Allocation",
    "Decision",
    "Node",
    "PolicyConfig",
    "QueueEntry",
    "QueuedJob",
    "RunningJob",
    "Snapshot",
    "TeamQuota",
    "TeamUsage",
    "can_ever_fit",
    "policy_problem",
    "schedule",
    "team_usage",
]

from .eta import DurationModel, forward_starts, predict_waiting, queue_report

__all__ += ["DurationModel", "forward_starts", "predict_waiting", "queue_report"]
