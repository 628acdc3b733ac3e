"""Live job status in etcd, changed only by compare-and-swap, mirrored to the job store.

The adapter between the pure state machine (dlaas.domain.status) and etcd. A transition reads
the current state with its mod revision, asks the state machine for the next state, and
writes it in a transaction that succeeds only if nobody wrote in between; the winner
then mirrors the transition (with its sequence number, so a replay is harmless) into
the job store. A mirror lost to a crash or a store error is replayed by `repair_mirrors`,
which the LCM leader runs when elected and periodically.

Whoever first records a transition in the store (a replay finds it there and records
nothing) tells the notifier, which queues the users' webhooks (dlaas.adapters.notify) without
ever holding the transition up.

Errors: etcd not answering or failing over (pyetcd's errors, gRPC's) leaves every method
of `StatusKeeper` as the domain's TemporaryError, as the job store's outages do.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyetcd
import pyetcd.events

from dlaas.adapters.grpc_channel import CHANNEL_OPTIONS
from dlaas.adapters.leader import ETCD_ERRORS
from dlaas.adapters.notify import NoNotifier, Notifier
from dlaas.adapters.store.base import JobStore
from dlaas.domain.errors import InvalidTransition, JobNotFound, temporary_on_all
from dlaas.domain.keys import EtcdKeys
from dlaas.domain.ports import StatusRepo
from dlaas.domain.status import JobState, Status, advance, initial

log = logging.getLogger(__name__)

MAX_CAS_ATTEMPTS = 20


# How long the client sets an endpoint aside after a call to it failed (unreachable, timed
# out). pyetcd's default is 300 s, and its single-endpoint client then raises ValueError
# ("Trying to use a failed node") for all that time: a service that started before etcd
# answered (a stack's services start together) or saw one etcd blip was cut off from it
# for five minutes, every call an internal error. Set aside briefly, a failed endpoint is
# tried again soon, and meanwhile the call fails as NoServerAvailableError, an etcd error
# the callers retry like any other.
ENDPOINT_RETRY_S = 1.0


def connect(endpoints: list[tuple[str, int]], timeout: float = 5.0) -> pyetcd.Etcd3Client:
    eps = [
        pyetcd.Endpoint(host, port, secure=False, time_retry=ENDPOINT_RETRY_S, opts=CHANNEL_OPTIONS)
        for host, port in endpoints
    ]
    return pyetcd.MultiEndpointEtcd3Client(eps, timeout=timeout, failover=True)


@temporary_on_all(ETCD_ERRORS, "etcd")
class StatusKeeper(StatusRepo):
    """The etcd adapter of StatusRepo (dlaas.domain.ports): every key the LCM reads is spelled here."""

    def __init__(
        self,
        etcd: pyetcd.Etcd3Client,
        store: JobStore,
        prefix: str = "/dlaas",
        clock: Callable[[], float] = time.time,
        notifier: Notifier | None = None,
    ):
        self.etcd = etcd
        self.store = store
        self.keys = EtcdKeys(prefix)
        self.prefix = self.keys.prefix
        self.clock = clock
        self.notifier = notifier or NoNotifier()

    def key(self, job_id: str) -> str:
        return self.keys.status(job_id)

    @property
    def jobs_prefix(self) -> str:
        return self.keys.jobs

    def _read(self, job_id: str) -> tuple[JobState | None, int]:
        value, meta = self.etcd.get(self.key(job_id))
        if value is None:
            return None, 0
        return JobState.from_dict(json.loads(value)), meta.mod_revision

    def get(self, job_id: str) -> JobState | None:
        return self._read(job_id)[0]

    def create(self, job_id: str, reason: str = "submitted") -> JobState:
        """Put the QUEUED state if the job has none yet; return the job's state either way."""
        state = initial(self.clock(), reason)
        tx = self.etcd.transactions
        ok, _ = self.etcd.transaction(
            compare=[tx.version(self.key(job_id)) == 0],
            success=[tx.put(self.key(job_id), json.dumps(state.to_dict()))],
            failure=[],
        )
        if not ok:
            current = self.get(job_id)
            if current is None:  # there a moment ago, deleted (purged) since
                raise JobNotFound(job_id)
            return current
        # The job's record comes with its QUEUED entry already (store.create), so there is
        # nothing to mirror (a write that inserted nothing cost every submit a turn at the
        # store's write lock): winning the etcd create is what makes this the one
        # submission to tell of.
        self._notify(job_id, None, state)
        return state

    def transition(
        self,
        job_id: str,
        target: Status,
        reason: str,
        *,
        error_code: str = "",
        exit_code: int | None = None,
    ) -> JobState:
        """Move the job to `target` with compare-and-swap; raise InvalidTransition if not allowed."""
        tx = self.etcd.transactions
        for _ in range(MAX_CAS_ATTEMPTS):
            current, rev = self._read(job_id)
            if current is None:
                raise JobNotFound(job_id)
            new = advance(
                current, target, self.clock(), reason, error_code=error_code, exit_code=exit_code
            )
            ok, _ = self.etcd.transaction(
                compare=[tx.mod(self.key(job_id)) == rev],
                success=[tx.put(self.key(job_id), json.dumps(new.to_dict()))],
                failure=[],
            )
            if ok:
                # The state this replaces may never have reached the store (its writer died
                # between etcd and the mirror): it goes first, so the history has no hole.
                try:
                    self._mirror_if_behind(job_id, current)
                # Broad: any store error (SQLite, MongoDB) must not fail a transition that
                # etcd holds already; the leader's repair_mirrors is the net, and it is logged.
                except Exception as exc:  # noqa: BLE001 - broad: any store's error; etcd has it
                    log.warning("job %s: mirroring its previous state failed: %r", job_id, exc)
                self._record(job_id, current.status, new)
                return new
        raise InvalidTransition(f"job {job_id}: status kept changing, gave up after retries")

    def repair_mirrors(self, since: float | None = None) -> list[str]:
        """Mirror again every job whose store record lacks its live state; the jobs repaired.

        A transition is written to etcd first and mirrored after, so a crash (or a store
        error) in between leaves the store behind etcd until this replays it. `since`: only
        active jobs and those whose state changed at or after `since` (a periodic check);
        None: every job etcd holds, ended ones included (a new leader's first round).
        """
        repaired = []
        for value, meta in self.etcd.get_prefix(self.jobs_prefix):
            key = meta.key.decode()
            if not self.keys.is_status(key):
                continue
            state = JobState.from_dict(json.loads(value))
            if since is not None and state.final and state.at < since:
                continue
            job_id = self.keys.job_of(key)
            if self._mirror(job_id, state):
                repaired.append(job_id)
        return repaired

    def _mirror(self, job_id: str, state: JobState) -> bool:
        """Record `state` in the store unless it is the store's latest entry already."""
        try:
            record = self.store.get(job_id)
        except JobNotFound:  # being submitted (the record comes first) or deleted: no mirror
            return False
        if record.history and record.history[-1] == state.transition():
            return False
        previous = record.history[-1].status if record.history and state.seq > 0 else None
        return self._record(job_id, previous, state)

    def _mirror_if_behind(self, job_id: str, state: JobState) -> None:
        """Record `state` if the store has no entry of its seq yet."""
        try:
            record = self.store.get(job_id)
        except JobNotFound:
            return
        if record.last_seq < state.seq:
            previous = record.history[-1].status if record.history else None
            self._record(job_id, previous, state)

    def _record(self, job_id: str, previous: Status | None, state: JobState) -> bool:
        """Mirror `state` into the store; the first to record it tells the notifier."""
        recorded = self.store.record_transition(job_id, state.seq, state.transition())
        if recorded:
            self._notify(job_id, previous, state)
        return recorded

    def _notify(self, job_id: str, previous: Status | None, state: JobState) -> None:
        try:
            self.notifier.transition(job_id, previous, state.seq, state.transition())
        except Exception:  # broad: a webhook must never undo or fail a transition
            log.warning("notifier failed on job %s", job_id, exc_info=True)

    def delete(self, job_id: str) -> None:
        self.etcd.delete_prefix(self.keys.job(job_id))

    def active_jobs(self) -> dict[str, JobState]:
        out = {}
        for value, meta in self.etcd.get_prefix(self.jobs_prefix):
            key = meta.key.decode()
            if not self.keys.is_status(key):
                continue
            state = JobState.from_dict(json.loads(value))
            if not state.final:
                out[self.keys.job_of(key)] = state
        return out

    # ---- next to a job's status, and the cluster's facts (see StatusRepo) -------------

    def placement(self, job_id: str) -> list[dict]:
        value, _ = self.etcd.get(self.keys.placement(job_id))
        return json.loads(value) if value else []

    def set_placement(self, job_id: str, placement: list[dict]) -> None:
        self.etcd.put(self.keys.placement(job_id), json.dumps(placement))

    def set_node_health(self, name: str, health: dict[str, Any]) -> None:
        self.etcd.put(self.keys.node(name), json.dumps(health))

    def unhealthy_nodes(self) -> set[str]:
        prefix = self.keys.nodes
        return {
            meta.key.decode()[len(prefix) :]
            for value, meta in self.etcd.get_prefix(prefix)
            if not json.loads(value).get("healthy", True)
        }

    def held_allocation(self, job_id: str) -> list[dict]:
        # The scheduler's running entry (services/scheduler writes it).
        value, _ = self.etcd.get(self.keys.running(job_id))
        if not value:
            return []
        return [
            {"learner": a["learner"], "node": a["node"], "gpu_indices": list(a["gpu_indices"])}
            for a in json.loads(value)["running"]["allocations"]
        ]

    def watch_scheduler(self, callback: Callable[[object], None]) -> object:
        return self.etcd.add_watch_prefix_callback(self.keys.sched, callback)

    def cancel_watch(self, handle: object) -> None:
        self.etcd.cancel_watch(handle)

    def watch_jobs(self) -> tuple[Iterator[tuple[str, bool]], Callable[[], None]]:
        """Every change under the jobs' keys as it happens: (job id, whether it was the
        job's status key that went), and the watch's cancel. The iterator raises what the
        etcd client raises when the watch breaks."""
        events, cancel = self.etcd.watch_prefix(self.keys.jobs)

        def changes() -> Iterator[tuple[str, bool]]:
            for event in events:
                key = event.key.decode()
                job_id = self.keys.job_of(key)
                if job_id:
                    deleted = isinstance(event, pyetcd.events.DeleteEvent)
                    yield job_id, deleted and self.keys.is_status(key)

        return changes(), cancel
