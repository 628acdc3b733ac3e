"""Measured node utilization: what the platform's job containers on each node use now.

The capacity page (GET /v1/nodes), `/metrics` and `dlaas nodes` show what jobs hold of
a node (their allocation, from their manifests); this is what they really use. The LCM
reads each node's container counters through a `UsageSource` (dlaas.domain.ports; the
Docker adapter is dlaas.adapters.engines.docker_usage) every few seconds in a thread of its
own, and its `Cluster` call hands out the last result (grpc_api.py): a listing never waits
for the engine, and no HTTP request causes an engine call.

CPU is a rate: cumulative CPU time between two reads of the same container, over the
time between the reads (the engine's timestamps). So a node's CPU use is known from its
second sample on, and unknown while one of its running containers has no earlier read
(it just started) or its counter went back (it restarted). Memory is the engine's usage
less its page cache, as `docker stats` shows it. GPU utilization is unknown: nothing
here reads GPU telemetry. Unknown is None, never 0; an engine that does not answer, a
node without a source (a swarm node: the manager's API has no container stats) and a
sample too old (nobody asked for a while, so the sampler rested) are unknown.

`node_utilization` is the pure part; `UtilizationSampler` keeps the samples and runs the
thread. It samples only while someone asks (within `idle_after_s` of the last `Cluster`
call), so an idle platform makes no engine calls for it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from dlaas.domain.ports import ContainerStats, EngineUnreachable, UsageSource

log = logging.getLogger(__name__)

MIB = 2**20


@dataclass(frozen=True)
class NodeSample:
    """Every running job container of one node at one read; `at` is this host's clock."""

    at: float
    containers: tuple[ContainerStats, ...]


@dataclass(frozen=True)
class Utilization:
    """A node's measured use; None: unknown (never a guessed 0)."""

    cpus_used: float | None = None
    memory_mb_used: int | None = None
    gpu_percent: float | None = None  # no GPU telemetry is read: always unknown here
    containers: int = 0
    sampled_at: float = 0.0  # 0: never sampled


UNKNOWN = Utilization()


def node_utilization(previous: NodeSample | None, current: NodeSample) -> Utilization:
    """A node's use from its last two samples. Pure.

    No container running: nothing is used (0, known). Otherwise CPU is the sum of each
    container's rate since `previous`, unknown if any container has no usable earlier
    read; memory the sum of their usage, unknown if any did not say.
    """
    now = current.containers
    memory = [c.memory_bytes for c in now]
    memory_mb = None if None in memory else round(sum(m or 0 for m in memory) / MIB)
    before = {c.id: c for c in previous.containers} if previous is not None else {}
    cpus: float | None = 0.0
    for c in now:
        earlier = before.get(c.id)
        if earlier is None or c.read_at <= earlier.read_at or c.cpu_ns < earlier.cpu_ns:
            cpus = None  # new, read twice at once, or restarted: its rate is not known yet
            break
        cpus += (c.cpu_ns - earlier.cpu_ns) / 1e9 / (c.read_at - earlier.read_at)
    return Utilization(
        cpus_used=None if cpus is None else round(cpus, 3),
        memory_mb_used=memory_mb,
        containers=len(now),
        sampled_at=current.at,
    )


class UtilizationSampler:
    """Samples every node with a source every `interval_s` while asked, keeps the result.

    `sources`: node name -> its UsageSource, or None where use cannot be measured (the
    node is listed as unknown). A result older than `max_age_s` (3 intervals unless
    given) is unknown again: the sampler rested or the engine stopped answering.
    """

    def __init__(
        self,
        sources: Mapping[str, UsageSource | None],
        interval_s: float = 5.0,
        *,
        idle_after_s: float = 300.0,
        max_age_s: float | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.sources = dict(sources)
        self.interval_s = interval_s
        self.idle_after_s = idle_after_s
        self.max_age_s = max_age_s if max_age_s is not None else 3 * interval_s
        self.clock = clock
        self._samples: dict[str, NodeSample] = {}
        self._results: dict[str, Utilization] = {}
        self._asked_at: float | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def utilization(self, node: str) -> Utilization:
        """The node's last measured use (UNKNOWN if none is fresh); wakes a resting sampler."""
        now = self.clock()
        with self._lock:
            resting = self._asked_at is None or now - self._asked_at > self.idle_after_s
            self._asked_at = now
            result = self._results.get(node, UNKNOWN)
        if resting:
            self._wake.set()
        if result.sampled_at and now - result.sampled_at > self.max_age_s:
            return UNKNOWN
        return result

    def sample(self) -> None:
        """Read every node's source once and update its result (one round of the thread)."""
        for node, source in self.sources.items():
            if source is None:
                continue
            try:
                current = NodeSample(self.clock(), tuple(source.read()))
            except EngineUnreachable as exc:
                log.info("utilization of node %s unknown: %s", node, exc)
                with self._lock:
                    self._samples.pop(node, None)
                    self._results.pop(node, None)
                continue
            with self._lock:
                result = node_utilization(self._samples.get(node), current)
                self._samples[node] = current
                self._results[node] = result

    def _wanted(self) -> bool:
        with self._lock:
            asked = self._asked_at
        return asked is not None and self.clock() - asked <= self.idle_after_s

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._wanted():
                try:
                    self.sample()
                # The nodes keep their last result until it is too old (then unknown).
                except Exception:  # broad: the sampler must outlive any one bad read; logged
                    log.exception("utilization sampling failed")
                self._stop.wait(self.interval_s)
            else:
                self._wake.wait(self.interval_s)
                self._wake.clear()

    def start(self) -> None:
        if self._thread is None and any(s is not None for s in self.sources.values()):
            self._thread = threading.Thread(target=self._run, name="utilization", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
