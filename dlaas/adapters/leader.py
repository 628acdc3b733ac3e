"""Leadership through an etcd lease: one replica leads, the others stand by.

The leader holds a key bound to a short lease and refreshes the lease; a replica that
dies (even by SIGKILL) stops refreshing, the lease expires after `ttl` seconds and the
key vanishes, and a standby that looks every `poll_s` takes it with a
create-if-absent transaction. A standby campaigns only when it finds the key gone: a
campaign writes (a lease granted, the transaction, the lease revoked when it lost), and two
standbys campaigning five times a second were 30 etcd requests a second, 20 of them raft
writes, for as long as the platform ran. A leader that cannot refresh in time steps down at once
(it may have lost the key), so two replicas never both believe they lead for longer
than one refresh interval.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import grpc
import pyetcd
import pyetcd.exceptions

log = logging.getLogger(__name__)

# What a pyetcd call raises when etcd does not answer or refuses: its own exceptions for
# the gRPC codes it knows, the gRPC error itself for the rest.
ETCD_ERRORS = (pyetcd.exceptions.Etcd3Exception, grpc.RpcError)


class LeaderElection:
    def __init__(
        self,
        etcd: pyetcd.Etcd3Client,
        key: str,
        identity: str,
        *,
        ttl: int = 2,
        poll_s: float = 0.2,
        on_elected: Callable[[], None] = lambda: None,
        on_lost: Callable[[], None] = lambda: None,
    ):
        self.etcd = etcd
        self.key = key
        self.identity = identity
        self.ttl = ttl
        self.poll_s = poll_s
        self.on_elected = on_elected
        self.on_lost = on_lost
        self._leading = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lease = None

    @property
    def leading(self) -> bool:
        return self._leading.is_set()

    def leader(self) -> str | None:
        value, _ = self.etcd.get(self.key)
        return value.decode() if value else None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="election", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Step down and give the key up at once, so a standby takes over without waiting."""
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        if self._leading.is_set():
            self._step_down()
        if self._lease is not None:
            try:
                self._lease.revoke()
            except ETCD_ERRORS as exc:  # best effort: the lease expires anyway
                log.info("could not revoke the leadership lease: %s", exc)

    def _campaign(self) -> bool:
        # A read first: while someone leads (nearly always), looking costs no write.
        if self.etcd.get(self.key)[0] is not None:
            return False
        self._lease = self.etcd.lease(self.ttl)
        tx = self.etcd.transactions
        ok, _ = self.etcd.transaction(
            compare=[tx.version(self.key) == 0],
            success=[tx.put(self.key, self.identity, lease=self._lease)],
            failure=[],
        )
        if not ok:
            self._lease.revoke()
            self._lease = None
        return ok

    def _step_down(self) -> None:
        self._leading.clear()
        log.warning("%s is no longer the leader", self.identity)
        try:
            self.on_lost()
        # Broad: the callback is the service's, and whatever it raises, the election
        # thread must go on (the trace is logged).
        except Exception:  # broad: the service's callback; the election goes on
            log.exception("on_lost failed")

    def _run(self) -> None:
        refresh_every = self.ttl / 3
        last_refresh = 0.0
        while not self._stop.is_set():
            try:
                if not self._leading.is_set():
                    if self._campaign():
                        last_refresh = time.monotonic()
                        self._leading.set()
                        log.info("%s is the leader", self.identity)
                        try:
                            self.on_elected()
                        except Exception:  # broad, as for on_lost in _step_down
                            log.exception("on_elected failed")
                    else:
                        self._stop.wait(self.poll_s)
                    continue
                self._stop.wait(refresh_every)
                self._lease.refresh()
                value, _ = self.etcd.get(self.key)
                if value is None or value.decode() != self.identity:
                    self._step_down()
                    continue
                last_refresh = time.monotonic()
            except ETCD_ERRORS as exc:  # etcd unreachable: retry, step down if late
                log.warning("election: etcd: %s", exc)
                self._after_failure(last_refresh, refresh_every)
            # Broad: this thread must not die. A dead one would leave `_leading` set with
            # nobody refreshing the lease, so this replica would go on leading after its key
            # expired and a standby took over. Anything else is a bug: logged with its trace.
            except Exception:  # broad: this thread must not die (see above)
                log.exception("election step failed")
                self._after_failure(last_refresh, refresh_every)

    def _after_failure(self, last_refresh: float, refresh_every: float) -> None:
        """Step down once the lease may have lapsed, then wait before trying again."""
        if self._leading.is_set() and time.monotonic() - last_refresh > refresh_every * 2:
            self._step_down()
        self._stop.wait(self.poll_s)
