"""The job monitor's hands: carry out a Decision's actions for one job, in order.

Status changes go through StatusRepo (happy-path targets walked, each skipped step
recorded; failures a single step); a write that loses its compare-and-swap stops the
action list and marks the job for another look. Container actions go to the engine of
the node that reported the container (`JobContainers`); restarts and releases to the LCM
and the scheduler, retried on a deadline when those do not answer. Every action is
idempotent: a container or network already gone is fine.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from dlaas.adapters.notify import NoNotifier, Notifier
from dlaas.domain import hooks, jobspec
from dlaas.domain.ports import Container, EngineUnreachable, StatusRepo
from dlaas.domain.status import Status, Transition, between
from dlaas.domain.steps import Outcome, run_step
from services.jobmonitor import decide as d
from services.jobmonitor.observe import (
    INFO_CLEANED_UP,
    INFO_HELPER_RESTARTS,
    INFO_LEARNER_RESTARTS,
    INFO_LOGS_INCOMPLETE,
    INFO_LOGS_NOTE,
    INFO_RELEASED,
    INFO_REQUEUE,
    INFO_RESTARTS,
    INFO_RUN,
    INFO_SIGNALLED_AT,
    INFO_STALL,
    INFO_STALLS,
    Observer,
    RunInfo,
    Seen,
)
from services.jobmonitor.workqueue import WorkQueue

log = logging.getLogger("dlaas.jobmonitor")

# Happy-path targets are walked (skipped steps recorded); failures are a single step.
_WALKED = between(Status.PROCESSING, Status.COMPLETED)

# requeue(job_id, reason, is_restart=True) and release(job_id, ended): the LCM's and the
# scheduler's calls; they raise DlaasError (PermanentError: never retry) like dlaas.clients.sdk's.
Requeue = Callable[..., object]


# Stalls kept in a job's info (the oldest go first).
MAX_STALLS = 20

# Container states after which a learner is over (Docker's words); any other state a
# learner was last seen in is over too once the cleanup removed its container.
_ENDED = frozenset({"exited", "dead", "removed"})


def removed_learners(entries: object) -> list[dict] | None:
    """The job's mirrored learners as the cleanup leaves them: one last seen running (the
    job ended by its helper, or was stopped and removed in one pass) is now `removed`, not
    shown as running for ever. None when nothing changes."""
    if not isinstance(entries, list):
        return None
    out = [
        {**e, "state": "removed"} if isinstance(e, dict) and e.get("state") not in _ENDED else e
        for e in entries
    ]
    return out if out != entries else None


class Actor:
    """Applies decisions for one monitor."""

    def __init__(
        self,
        observer: Observer,
        queue: WorkQueue,
        keeper: StatusRepo,
        release: Callable[[str, bool], None],
        requeue: Requeue | None,
        clock: Callable[[], float],
        *,
        mark: Callable[[str], None],
        stop_grace_s: int,
        release_retry_s: float,
        notifier: Notifier | None = None,
    ):
        self.observer = observer
        self.queue = queue
        self.keeper = keeper
        self.release = release
        self.requeue = requeue
        self.clock = clock
        self.mark = mark
        self.stop_grace_s = stop_grace_s
        self.release_retry_s = release_retry_s
        self.notifier = notifier or NoNotifier()
        self._stopping: set[str] = set()  # learner container ids being stopped

    def apply(self, job_id: str, decision: d.Decision, seen: Seen) -> None:
        info = seen.run
        for action in decision.actions:
            log.info("job %s: %s", job_id, action)
            if isinstance(action, d.TransitionTo):
                if not self._transition(job_id, action):
                    # Someone else moved the job (a user halt): look again from scratch.
                    self.mark(job_id)
                    return
            elif isinstance(action, d.Requeue):
                self._requeue(job_id, action, info)
            elif isinstance(action, d.RestartHelper):
                for h in seen.helpers:
                    if h.exited:
                        self._on(seen, h, "restart")
                info.update(self._this_run(info, INFO_HELPER_RESTARTS, action.reason))
            elif isinstance(action, d.RestartLearners):
                self._restart_learners(job_id, action, seen)
            elif isinstance(action, d.SignalHelperFinish):
                for h in seen.helpers:
                    if h.running:
                        self._on(seen, h, "kill", signal=jobspec.HELPER_FINISH_SIGNAL)
                info.update({INFO_SIGNALLED_AT: self.clock()})
            elif isinstance(action, d.KillHelper):
                for h in seen.helpers:
                    if not h.exited:
                        self._on(seen, h, "kill")
            elif isinstance(action, d.MarkStalled):
                self._mark_stalled(job_id, action, seen)
            elif isinstance(action, d.StopLearners):
                self._stop_learners(seen)
            elif isinstance(action, d.ReleaseAllocation):
                self._release(job_id, info, action.ended)
            elif isinstance(action, d.Cleanup):
                self.remove_resources(job_id)
                facts: dict[str, Any] = {INFO_CLEANED_UP: True}
                removed = removed_learners(info.info.get("learners"))
                if removed is not None:
                    facts["learners"] = removed
                if action.logs_incomplete:
                    facts[INFO_LOGS_INCOMPLETE] = True
                    facts[INFO_LOGS_NOTE] = action.reason
                info.update(facts)
                # Only what was learned goes: a deadline still pending (a release to try
                # again) must outlive the cleanup, or no later pass would ever retry it.
                self.observer.forget(job_id)

    def remove_resources(self, job_id: str) -> None:
        """Remove the job's containers, networks and volumes on every engine that answers."""
        for node, engine in self.observer.reachable():
            # Unreachable: marked down; its engine's reconnection looks at every job again.
            with contextlib.suppress(EngineUnreachable):
                self.observer.reach.call(node, engine.remove_resources, job_id)

    def forget(self, job_id: str) -> None:
        """Drop everything about a job that is gone (deleted): what was learned, deadlines."""
        self.observer.forget(job_id)
        self.queue.forget(job_id)

    def _on(self, seen: Seen, c: Container, call: str, **kwargs) -> None:
        """`engine.<call>(c, **kwargs)` on the engine of the node that reported `c`."""
        node = seen.where[c.id]
        engine = self.observer.engines[node]
        self.observer.reach.call(node, getattr(engine, call), c, **kwargs)

    def _transition(self, job_id: str, action: d.TransitionTo) -> bool:
        if action.target in _WALKED:
            new = self.keeper.walk_to(job_id, action.target, action.reason)
        else:
            new = self.keeper.try_transition(
                job_id,
                action.target,
                action.reason,
                error_code=action.error_code,
                exit_code=action.exit_code,
            )
        return new is not None

    def _requeue(self, job_id: str, action: d.Requeue, info: RunInfo) -> None:
        """Ask the LCM to restart the gang; it checks max_restarts, records, tears down."""
        if self.requeue is None:
            log.error("job %s needs a restart (%s) but no LCM is configured", job_id, action)
            return
        # Permanent: the LCM refuses for good (the job moved on, was deleted): nothing to
        # retry before the usual long wait; a changed status brings the job back anyway.
        # Temporary (LCM down, failing over): ask again soon.
        step = run_step(
            f"restart of job {job_id}",
            lambda: self.requeue(job_id, action.reason, is_restart=True),
            log=log,
            on_temporary=lambda _exc: self._retry_soon(job_id),
        )
        if step.outcome is Outcome.TEMPORARY:
            return
        if step.done:
            log.info(
                "job %s: restart requested (%s); the LCM answered %s", job_id, action, step.value
            )
        info.update({INFO_REQUEUE: {"at": self.clock(), "reason": action.reason}})

    def _this_run(self, info: RunInfo, key: str, reason: str) -> dict[str, Any]:
        """`key`'s list of this run's restarts (at, reason), with one more made now."""
        same_run = info.info.get(INFO_RUN, 0) == info.run
        made = list(info.info.get(key) or []) if same_run else []
        return {key: [*made, {"at": self.clock(), "reason": reason}]}

    def _restart_learners(self, job_id: str, action: d.RestartLearners, seen: Seen) -> None:
        """Restart every learner of the gang in its container (one still running is killed
        first: its gang is broken). Recorded before it is made, so a monitor that dies in
        between never makes it twice uncounted: the job's `restarts` (which max_restarts
        bounds, the LCM's restarts too) and this run's list, which `dlaas show` and REST
        show; then the `restarted` event to the owner's hooks."""
        info = seen.run
        facts = self._this_run(info, INFO_LEARNER_RESTARTS, action.reason)
        info.update({**facts, INFO_RESTARTS: int(info.info.get(INFO_RESTARTS) or 0) + 1})
        for c in seen.containers:
            if c.role == jobspec.ROLE_LEARNER:
                self._on(seen, c, "restart")
        state = seen.view.state
        body = Transition(state.status, self.clock(), action.reason)
        made = len(facts[INFO_LEARNER_RESTARTS])
        self.notifier.event(job_id, hooks.RESTARTED, state.seq, body, f"in-place-{made}")

    def _mark_stalled(self, job_id: str, action: d.MarkStalled, seen: Seen) -> None:
        """The stall's evidence into the job's info (shown by `dlaas show` and REST), and
        the `stalled` event to the owner's hooks (its key: the stall's activity time)."""
        now = self.clock()
        stall = {
            "at": now,
            "since": action.since,
            "reason": action.reason,
            "learners": list(action.evidence),
        }
        stalls = [*(seen.run.info.get(INFO_STALLS) or []), stall][-MAX_STALLS:]
        seen.run.update({INFO_STALL: stall, INFO_STALLS: stalls})
        state = seen.view.state
        body = Transition(state.status, now, action.reason, jobspec.JobErrorCode.STALLED)
        self.notifier.event(job_id, hooks.STALLED, state.seq, body, f"stall-{action.since:.3f}")

    def _retry_soon(self, job_id: str) -> None:
        self.queue.due_at(job_id, self.clock() + self.release_retry_s)

    def _release(self, job_id: str, info: RunInfo, ended: bool) -> None:
        # Permanent: the scheduler holds nothing for this job (never placed, or released
        # already). Temporary (scheduler down, network): as for a requeue, release again soon.
        step = run_step(
            f"release of job {job_id}",
            lambda: self.release(job_id, ended),
            log=log,
            on_temporary=lambda _exc: self._retry_soon(job_id),
        )
        if step.outcome is Outcome.TEMPORARY:
            return
        info.update({INFO_RELEASED: True})

    def _stop_learners(self, seen: Seen) -> None:
        """Stop running learners in the background (SIGTERM, SIGKILL after the grace time)."""
        for c in seen.containers:
            if c.role != jobspec.ROLE_LEARNER or not c.running or c.id in self._stopping:
                continue
            self._stopping.add(c.id)

            def stop(c=c):
                try:
                    self._on(seen, c, "stop", timeout=self.stop_grace_s)
                except EngineUnreachable as exc:
                    log.warning("stopping container %s: %s", c.name, exc)
                # Broad: a thread of its own, so whatever the adapter raises would be lost
                # unless logged here; the next reconcile sees the learner still running.
                except Exception:  # broad: a thread of its own; logged here or lost
                    log.exception("stopping container %s", c.name)
                finally:
                    self._stopping.discard(c.id)

            threading.Thread(target=stop, name=f"stop-{c.name}", daemon=True).start()
