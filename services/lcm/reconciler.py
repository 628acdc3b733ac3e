"""The LCM leader's loop: place what the scheduler decided, and repair what was left half done.

Only the leader (dlaas.adapters.leader, an etcd lease) runs it, so there is one writer of
deployments at a time. Status changes are written BEFORE their side effects, so a crash
in between is repaired by `reconcile()` when a leader is elected: it redeploys whatever is
PENDING, finishes the teardown of whatever was requeued, and queues at the scheduler
whatever etcd says is QUEUED. Periodic steps: restarts whose backoff is over, deploys cut
short (`redeploy_stale`), transitions the job store missed (`repair_mirrors`).
"""

from __future__ import annotations

import logging
import threading
import time

from dlaas.domain import errors
from dlaas.domain.status import REQUEUEABLE, Status
from dlaas.domain.steps import run_step
from services.lcm.restart_policy import MAX_BACKOFF_S

log = logging.getLogger(__name__)

# A job PENDING this long had its deploy cut short (a crash, an engine or etcd error after
# PENDING was written): the leader deploys it again (idempotent). Checked this often.
PENDING_STALE_S = 20.0
PENDING_CHECK_S = 5.0
# How often the leader mirrors into the job store transitions it missed (see repair_mirrors).
MIRROR_CHECK_S = 30.0
# Rounds woken by events (submits, ends) run at most this often; see Reconciler._loop.
BURST_ROUND_GAP_S = 0.1
# A requeue whose teardown failed is tried again after this long, doubling up to MAX_BACKOFF_S.
TEARDOWN_RETRY_S = 1.0


class Reconciler:
    """The placement loop and the reconcile of `Lcm` (leader only, but for a requeue's end)."""

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="placement", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def on_elected(self) -> None:
        """Leadership won: repair what a previous leader left half done, then place."""
        self._leading.set()
        # Any replica may accept a submit or see a job end; the leader learns of it from
        # the scheduler's keys in etcd at once instead of waiting for its next poll.
        try:
            self._watch = self.keeper.watch_scheduler(lambda _event: self._wake.set())
        # Broad: etcd's client raises several kinds; the poll still places, only slower.
        except Exception:  # broad: etcd's client raises several kinds
            log.warning(
                "could not watch the scheduler's keys; placing on the poll only", exc_info=True
            )
        self._wake.set()

    def on_lost(self) -> None:
        self._leading.clear()
        watch, self._watch = getattr(self, "_watch", None), None
        if watch is not None:
            try:
                self.keeper.cancel_watch(watch)
            # Broad: etcd's client raises several kinds; the watch dies with the connection.
            except Exception:  # broad: etcd's client raises several kinds
                log.info("could not cancel the scheduler watch", exc_info=True)

    def _loop(self) -> None:
        reconciled = False
        burst_until = 0.0  # a round woken by an event ran: the next woken one waits till then
        while not self._stop.is_set():
            # A released allocation (a job ended) may let a queued job start: poll briefly.
            woken = self._wake.wait(0.5)
            # Every submit wakes the leader (and the scheduler's keys' watch once more), and a
            # round reads the whole queue: in a burst, rounds run at most every
            # BURST_ROUND_GAP_S, each placing whatever came meanwhile. A lone event after
            # a quiet spell is placed at once.
            if woken and self._stop.wait(max(0.0, burst_until - time.monotonic())):
                return
            burst_until = time.monotonic() + BURST_ROUND_GAP_S if woken else 0.0
            self._wake.clear()
            if self._stop.is_set():
                return
            if not self._leading.is_set():
                reconciled = False
                continue
            try:
                self.check_nodes()
                if not reconciled:
                    self.reconcile()
                    reconciled = True
                self._enqueue_due()
                self.redeploy_stale()
                self.repair_mirrors()
                self.place_round()
                self.sweep_identities()
            except errors.TemporaryError as exc:
                log.warning("placement round: %s", exc.message)
            # Broad: the leader's loop must outlive any one round's bug (the adapters raise
            # their own errors too); logged with its trace, the next round tries again.
            except Exception:  # broad: the leader's loop must outlive any round
                log.exception("placement round failed")

    def reconcile(self) -> None:
        """Finish what a crashed leader left half done; every step is idempotent.

        First the job store gets every transition etcd has and it missed, for every job.
        PENDING: redeploy. QUEUED: remove containers left from a requeue; after its backoff
        it restarts on the allocation the scheduler still holds for it (a restart, or a start
        granted just before a crash), or is queued again (enqueue keeps its position).
        """
        self._last_mirror_check = self.clock()
        try:
            for job_id in self.keeper.repair_mirrors():  # every job, ended ones included
                log.warning("job %s: the store missed its last transition; mirrored again", job_id)
        except Exception:  # broad on purpose: logged; the periodic check does it all again
            log.exception("reconcile: repairing the job store's mirror")
            self._last_mirror_check = 0.0  # the next periodic check looks at every job
        for job_id, state in self.keeper.active_jobs().items():
            try:
                if state.status == Status.PENDING:
                    self._redeploy(job_id, "resuming deployment of %s")
                elif state.status == Status.QUEUED:
                    record = self.store.get(job_id)
                    self._teardown(job_id)
                    self._due[job_id] = float(record.info.get("not_before", 0.0))
            # Broad: one job's trouble must not keep the others from being reconciled;
            # logged with its trace, the placement loop redeploys or requeues it later.
            except Exception:  # broad: one job must not stop the others
                log.exception("reconcile %s", job_id)

    def repair_mirrors(self) -> None:
        """Mirror into the job store what etcd has and it lacks (leader only, periodically):
        active jobs, and jobs that changed since the last check (a period of slack for the
        writers' clocks). The reconcile checked every job when this leader was elected."""
        now = self.clock()
        if now - self._last_mirror_check < MIRROR_CHECK_S:
            return
        since = self._last_mirror_check - MIRROR_CHECK_S
        self._last_mirror_check = now
        for job_id in self.keeper.repair_mirrors(since=since):
            log.warning("job %s: the store missed its last transition; mirrored again", job_id)

    def redeploy_stale(self) -> None:
        """Deploy again every job PENDING for longer than PENDING_STALE_S (leader only)."""
        now = self.clock()
        if now - self._last_pending_check < PENDING_CHECK_S:
            return
        self._last_pending_check = now
        for job_id, state in self.keeper.active_jobs().items():
            if state.status == Status.PENDING and now - state.at >= PENDING_STALE_S:
                self._redeploy(job_id, "deploying %s again: it stayed PENDING")

    def _redeploy(self, job_id: str, message: str) -> None:
        placement = self._placement(job_id)
        # A job on a lost node is requeued by `_node_lost`, not deployed there again.
        if placement and not {p["node"] for p in placement} & self._unhealthy:
            log.info(message, job_id)
            self.deploy(job_id, placement)

    def _enqueue_due(self) -> None:
        now = self.clock()
        for job_id, not_before in list(self._due.items()):
            if now >= not_before:
                self._due.pop(job_id, None)
                self._requeue_due(job_id)

    def _requeue_due(self, job_id: str) -> None:
        """A requeued job's backoff is over: restart it on the GPUs the scheduler still holds
        for it (a restart on healthy nodes), or queue it for the scheduler to place."""
        state = self.keeper.get(job_id)
        if state is None or state.status != Status.QUEUED:
            return
        held = self._held_allocation(job_id)
        if held and not {a["node"] for a in held} & self._unhealthy_nodes():
            self._start_placed(job_id, "restarted on the GPUs it held", held)
            return
        if held:  # its node was lost meanwhile: give the GPUs back and queue it
            self.scheduler.release(job_id)
        self._enqueue(self.store.get(job_id))

    def _requeue_finish(self, job_id: str, not_before: float, keep: bool) -> None:
        """Tear the gang down; after `not_before` it restarts (see `_requeue_due`).

        `keep`: a restart keeps the scheduler's allocation through its backoff, so the gang
        comes back on its own GPUs at once instead of queueing behind jobs that took them.

        A failure (the engine, etcd or the scheduler not answering) is retried with backoff
        until it succeeds, the job moves on (halted, deleted, placed) or the LCM stops: the
        leader's reconcile runs once per term, so it cannot be what finishes the requeue
        while this replica lives. Every step is idempotent; a crash leaves it to the next
        leader's reconcile.
        """
        delay, torn_down = TEARDOWN_RETRY_S, False
        while True:
            try:
                if not torn_down:  # once: a later release could free a new allocation
                    self._teardown(job_id)
                    if not keep:
                        self.scheduler.release(job_id)
                    torn_down = True
                if self._leading.is_set():
                    self._due[job_id] = not_before
                    self._wake.set()
                    return
                # A standby replica took the request: only the leader's loop reads `_due`, so
                # this replica waits out the backoff and finishes the requeue itself.
                if self._stop.wait(max(0.0, not_before - self.clock())):
                    return
                self._requeue_due(job_id)
                return
            except Exception:  # broad on purpose: whatever failed is logged and tried again
                log.exception("requeue of %s failed; trying again in %.0f s", job_id, delay)
            if self._stop.wait(delay) or not self._still_queued(job_id):
                return
            delay = min(MAX_BACKOFF_S, delay * 2)

    def _still_queued(self, job_id: str) -> bool:
        """Whether the job is QUEUED (True too if etcd cannot say: the caller tries again)."""
        try:
            state = self.keeper.get(job_id)
        except Exception:  # broad on purpose: etcd's client raises several kinds; logged
            log.warning("requeue of %s: its status cannot be read now", job_id, exc_info=True)
            return True
        return state is not None and state.status == Status.QUEUED

    def place_round(self) -> None:
        for decision in self.scheduler.schedule():
            # One decision refused (the job moved on) or failing now must not stop the rest;
            # the scheduler decides again next round.
            run_step(
                f"decision {decision.action} for {decision.job_id}",
                lambda decision=decision: self._carry_out(decision),
                log=log,
                then="the next round decides again",
            )

    def _carry_out(self, decision) -> None:
        job_id, cause = decision.job_id, decision.cause
        allocations = list(decision.allocations)
        if decision.action == "start":
            self.start_job(job_id, cause, allocations)
        elif decision.action == "preempt":
            # The scheduler has queued the job again itself (with its original position).
            if self._move(job_id, f"preempted: {cause}"):
                self._teardown_later(job_id)
        elif decision.action in ("shrink", "grow") and self._move(
            job_id, f"{decision.action}: {cause}"
        ):
            # `allocations` is the gang's whole new allocation: restart it with that size.
            self._teardown(job_id)
            self.start_job(job_id, cause, allocations)

    def _move(self, job_id: str, reason: str) -> bool:
        """Requeue a job the scheduler chose to move; False when it is not REQUEUEABLE (a
        STORING job's training is done: its edge to QUEUED is for a failure only)."""
        state = self.keeper.get(job_id)
        if state is None or state.status not in REQUEUEABLE:
            log.info("%s not moved (%s): %s", job_id, state and state.status, reason)
            return False
        return self.keeper.try_transition(job_id, Status.QUEUED, reason) is not None
