"""What wakes the job monitor up: each engine's event stream, the etcd watch of the job keys,
and which engines answer.

One thread per node follows that node's `JobContainers.events()` (Docker's event stream of
the platform's containers, or whatever the node's engine reports); one thread watches the
job keys in etcd. They only mark jobs dirty (the work queue) and never decide anything.
An engine whose stream breaks or that does not answer is marked down in `Reachability`
and its stream reconnects with backoff; a successful reconnection marks it up and asks
for a resync of every job, since events were missed meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from dlaas.adapters.etcd_status import StatusKeeper
from dlaas.domain.ports import EngineUnreachable, JobContainers

log = logging.getLogger("dlaas.jobmonitor")

T = TypeVar("T")

# Longest wait between two attempts to reach an engine that stopped answering (or to watch
# etcd again). Short: while a node's stream is down the monitor judges none of its jobs, so
# a node back after a 10 s outage (a swarm manager's restart) must be seen within moments,
# not after a backoff grown to 10 s (chaos: a helper killed then waited 3.7 s for a restart).
RECONNECT_MAX_S = 2.0


class Reachability:
    """Which nodes' engines answer, and when each was last lost (decide() reads that to
    tell a container that died with its engine from one that failed on its own)."""

    def __init__(self, clock: Callable[[], float]):
        self.clock = clock
        self._lock = threading.Lock()
        self._down: set[str] = set()
        self._lost_at: dict[str, float] = {}
        # Called with the node when it goes down: its watcher's stream is closed, so the
        # watcher reconnects, and only a reconnection marks the node back.
        self.on_lost: Callable[[str], None] | None = None

    def down(self) -> set[str]:
        with self._lock:
            return set(self._down)

    def lost(self, node: str) -> None:
        """The node's engine does not answer."""
        with self._lock:
            if node in self._down:
                return
            self._down.add(node)
            self._lost_at[node] = self.clock()
        log.warning("the container engine of node %s does not answer", node)
        if self.on_lost is not None:
            self.on_lost(node)

    def back(self, node: str) -> bool:
        """The node's engine answers; True when it was down."""
        with self._lock:
            if node not in self._down:
                return False
            self._down.discard(node)
        log.info("the container engine of node %s answers again", node)
        return True

    def stream_ended(self, node: str) -> None:
        """The node's event stream ended (its engine went away or restarted)."""
        with self._lock:
            self._lost_at[node] = self.clock()

    def lost_at(self, nodes: set[str]) -> float | None:
        with self._lock:
            return max((self._lost_at[n] for n in nodes if n in self._lost_at), default=None)

    def call(self, node: str, fn: Callable[..., T], *args, **kwargs) -> T:
        """`fn(*args, **kwargs)`, a call to the node's engine; marks the node down (and
        raises on) when the engine does not answer."""
        try:
            return fn(*args, **kwargs)
        except EngineUnreachable:
            self.lost(node)
            raise


class Watchers:
    """The watcher threads of one monitor: `start()` them, `close()` their streams."""

    def __init__(
        self,
        engines: Mapping[str, JobContainers],
        reach: Reachability,
        keeper: StatusKeeper,
        *,
        on_job: Callable[[str], None],
        on_status_deleted: Callable[[str], None],
        resync: Callable[[], None],
        stop: threading.Event,
        reconnect_max_s: float,
    ):
        self.engines = engines
        self.reach = reach
        self.keeper = keeper
        self.on_job = on_job
        self.on_status_deleted = on_status_deleted
        self.resync = resync
        self.stop = stop
        self.reconnect_max_s = reconnect_max_s
        self._closers: dict[str, Callable[[], None]] = {}  # stream -> how to close it
        self._threads: list[threading.Thread] = []
        # A call that found the node down (a timeout under load, say) ends its stream too:
        # an open stream would never reconnect, and the node would stay down for good.
        reach.on_lost = self._end_stream

    def start(self) -> None:
        self._threads = [
            threading.Thread(target=self._watch_engine, args=(node,), name=f"events-{node}",
                             daemon=True)
            for node in sorted(self.engines)
        ]  # fmt: skip
        self._threads.append(
            threading.Thread(target=self._watch_etcd, name="etcd-watch", daemon=True)
        )
        for t in self._threads:
            t.start()

    def close(self) -> None:
        for name, close in list(self._closers.items()):
            try:
                close()
            # Broad: a stream that already broke may raise whatever its transport does
            # on close; the monitor is stopping either way.
            except Exception as exc:  # noqa: BLE001 - broad: a broken stream's close raises any
                log.debug("closing %s: %s", name, exc)
        for t in self._threads:
            t.join(timeout=5)

    def _end_stream(self, node: str) -> None:
        close = self._closers.pop(f"events-{node}", None)
        if close is None:
            return
        try:
            close()
        # Broad: as in close(): a broken stream's transport raises what it raises.
        except Exception as exc:  # noqa: BLE001 - broad: a broken stream's close raises any
            log.debug("closing the event stream of node %s: %s", node, exc)

    def _watch_engine(self, node: str) -> None:
        """Follow one engine's event stream; reconnect with backoff when it breaks.

        A successful (re)connection also tells the monitor that the engine answers again:
        every job is looked at, since events were missed while it was away.
        """
        engine = self.engines[node]
        since: int | None = None  # time of the last event: a reconnection replays from it
        delay = 0.5
        first = True
        while not self.stop.is_set():
            try:
                stream = engine.events(since=since)
                self._closers[f"events-{node}"] = stream.close
                if self.reach.back(node) or not first:
                    self.resync()
                first = False
                delay = 0.5
                for job_id in stream:
                    if self.stop.is_set():
                        break
                    since = int(time.time())
                    self.on_job(job_id)
                if self.stop.is_set():
                    break
                # The stream ended: the engine went away or restarted. Probe it next.
                self.reach.stream_ended(node)
                log.warning("event stream of node %s ended; reconnecting", node)
            except EngineUnreachable as exc:
                if self.stop.is_set():
                    break
                self.reach.lost(node)
                log.debug("node %s: %s; next try in %.1f s", node, exc, delay)
                first = False
            # Broad: a stream may break in ways its adapter does not name (a protocol
            # error mid-event); whatever it was, the cure is to reconnect, and it is logged.
            except Exception as exc:  # noqa: BLE001 - broad: any break is cured by reconnecting
                if self.stop.is_set():
                    break
                log.warning("event stream of node %s broke (%r); reconnecting", node, exc)
                first = False
            self.stop.wait(delay)
            delay = min(delay * 2, self.reconnect_max_s)

    def _watch_etcd(self) -> None:
        """Watch the job keys; reconnect when the watch breaks."""
        delay = 0.5
        while not self.stop.is_set():
            try:
                changes, cancel = self.keeper.watch_jobs()
                self._closers["etcd"] = cancel
                for job_id, status_deleted in changes:
                    delay = 0.5
                    if self.stop.is_set():
                        break
                    if status_deleted:
                        self.on_status_deleted(job_id)
                    self.on_job(job_id)
            # Broad: the etcd client raises its own errors and gRPC's (unavailable, stream
            # reset, cancelled); any broken watch is cured by watching again, and logged.
            except Exception as exc:  # noqa: BLE001 - broad: any broken watch: watch again
                if self.stop.is_set():
                    break
                log.warning("etcd watch broke (%r); reconnecting", exc)
            self.stop.wait(delay)
            delay = min(delay * 2, self.reconnect_max_s)
