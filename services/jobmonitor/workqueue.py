"""The job monitor's work queue: which jobs to reconcile next, and when.

Watchers and helper log followers only mark a job dirty; decide() may ask for another look
at a given time (a deadline: a helper's store timeout, a retry). The single worker takes
the dirty and due jobs in batches, so no two reconciles of a job ever race inside one
monitor. Deadlines follow the monitor's (injectable) clock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class WorkQueue:
    """The dirty set and the due deadlines, behind one condition variable."""

    def __init__(self, clock: Callable[[], float]):
        self.clock = clock
        self._cond = threading.Condition()
        self._dirty: set[str] = set()
        self._due: dict[str, float] = {}  # job -> when decide() wants another look

    def mark(self, job_id: str) -> None:
        """Reconcile `job_id` soon."""
        with self._cond:
            self._dirty.add(job_id)
            self._cond.notify()

    def due_at(self, job_id: str, at: float) -> None:
        """Reconcile `job_id` at `at` at the latest (the earliest deadline asked wins)."""
        with self._cond:
            self._due[job_id] = min(self._due.get(job_id, at), at)

    def forget(self, job_id: str) -> None:
        """Drop the job's deadline (it was cleaned up; nothing is pending for it)."""
        with self._cond:
            self._due.pop(job_id, None)

    @property
    def dirty(self) -> set[str]:
        with self._cond:
            return set(self._dirty)

    def next_batch(self, next_resync: float, stop: threading.Event) -> set[str]:
        """Wait for dirty jobs, a due deadline, the resync time or stop; return the jobs."""
        with self._cond:
            while not stop.is_set():
                now = self.clock()
                due = {j for j, at in self._due.items() if at <= now}
                if self._dirty or due or now >= next_resync:
                    for j in due:
                        del self._due[j]
                    jobs, self._dirty = self._dirty | due, set()
                    return jobs
                # Short waits: deadlines follow the injected clock, and stop must be prompt.
                self._cond.wait(0.5)
        return set()
