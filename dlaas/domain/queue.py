"""A queued job as the scheduler reports it: position, pending reason and ETA range.

Pure data. The scheduler's queue report (services/scheduler/policy/eta.py) makes it, the SDK
(dlaas/clients/sdk.py) returns it from the scheduler's Queue call, and the API serves it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """Position, pending reason and ETA range (seconds from now) of one queued job."""

    job_id: str
    position: int
    reason: str
    eta_low_s: float
    eta_high_s: float

    def __iter__(self):  # lets callers unpack it like the tuple the service expects
        return iter((self.job_id, self.position, self.reason, self.eta_low_s, self.eta_high_s))
