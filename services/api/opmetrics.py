"""Operator metrics on `/metrics`: the platform's state, computed at scrape time.

Every API replica answers `/metrics` for the same platform, so what a scrape reports is
read from durable state when it is scraped, never counted in one replica's memory: the
job store (statuses and each job's status history) and the LCM's `Cluster` call (the
nodes). Two replicas therefore report the same platform series, and a scrape that lands
on either sees the same values. The request counters of app.Metrics are the one thing
a replica counts itself; every series carries `replica` (DLAAS_API_REPLICA, or the host
name when it runs alone) so two replicas' counters are two series, never one that
alternates between two counts.

`summarize()` is the pure part: job records -> counts, the durations the histograms hold
and the requeues by cause. Per-node allocation reuses the capacity page's own sum
(services.api.dashboard.nodes.allocation), so `/metrics` and GET /v1/nodes cannot
disagree; so does the measured use (`dlaas_node_used_*`, the LCM's last sample of the job
containers, in `Cluster`), whose series is absent for a node where it is unknown (a
swarm node, no sample yet): an absent series, never a made-up 0. GPU utilization is not
measured on these nodes, so it has no series. `PlatformCollector` is the adapter: it reads the store and the LCM and yields
Prometheus families.

The "_total" families are recomputed from the histories, so deleting a job makes them go
down; Prometheus takes that for a counter reset, which rate() and increase() tolerate.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from dlaas.adapters.store.base import JobRecord, JobStore
from dlaas.domain.hooks import event_for
from dlaas.domain.status import Status, between
from dlaas.domain.usage import UsageCache, totals
from services.api.dashboard.nodes import HOLDING, NodeUse, allocation, placed_job

log = logging.getLogger(__name__)

# Seconds a job waits in the queue, from a second to a day.
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)
# Seconds from placement (PENDING) to a running helper (DOWNLOADING) or training.
DEPLOY_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)
MIB = 2**20

# The names the endpoint exposes (the Grafana dashboard's test checks against these).
JOBS = "dlaas_jobs"
QUEUE_LENGTH = "dlaas_queue_length"
QUEUE_OLDEST = "dlaas_queue_oldest_wait_seconds"
QUEUE_WAIT = "dlaas_queue_wait_seconds"
DEPLOY = "dlaas_deploy_seconds"
REQUEUES = "dlaas_job_requeues"  # exposed as dlaas_job_requeues_total
FAILURES = "dlaas_job_failures"  # exposed as dlaas_job_failures_total
NODE_HEALTHY = "dlaas_node_healthy"
NODE_LEARNERS = "dlaas_node_learners"
NODE_USED_CPUS = "dlaas_node_used_cpus"
NODE_USED_MEMORY = "dlaas_node_used_memory_bytes"
NODE_CONTAINERS = "dlaas_node_job_containers"
SOURCE_UP = "dlaas_metrics_source_up"
# Resource-hours per team (dlaas.domain.usage), exposed with "_total": allocated, and the
# CPU used and peak memory where measured.
USAGE = {
    "gpu_hours": "dlaas_team_gpu_hours",
    "cpu_hours": "dlaas_team_cpu_hours",
    "memory_gib_hours": "dlaas_team_memory_gib_hours",
    "cpu_used_hours": "dlaas_team_cpu_used_hours",
    "memory_peak_gib_hours": "dlaas_team_memory_peak_gib_hours",
}
MEASURED = ("cpu_used_hours", "memory_peak_gib_hours")  # the rest are allocated
RESOURCES = ("cpus", "gpus", "memory_bytes")


@dataclass
class Summary:
    """What the job records say, for the platform's series."""

    by_status: Counter[Status] = field(default_factory=Counter)
    waits: list[float] = field(default_factory=list)  # each finished wait, QUEUED -> PENDING
    oldest_wait: float = 0.0  # the longest wait of a job still QUEUED
    deploys: list[float] = field(default_factory=list)  # PENDING -> DOWNLOADING/PROCESSING
    requeues: Counter[str] = field(default_factory=Counter)  # cause -> count
    failures: Counter[str] = field(default_factory=Counter)  # error code -> count


def summarize(records: Iterable[JobRecord], now: float) -> Summary:
    """Counts and durations from every job's status history. Pure.

    A wait ends when the job is placed (PENDING); a deploy ends when the helper runs
    (DOWNLOADING) or, if that step was seen late, when training starts. A deploy that
    failed or was requeued before either ends no duration. A requeue is any return to
    QUEUED, by the cause dlaas.domain.hooks names for it (preempted, restarted, shrunk, grown,
    rescaled, resumed): the webhooks and these series classify alike.
    """
    s = Summary()
    for record in records:
        s.by_status[record.status] += 1
        history = record.history
        previous: Status | None = None
        for i, t in enumerate(history):
            following = history[i + 1] if i + 1 < len(history) else None
            if t.status == Status.QUEUED:
                if previous is not None:
                    s.requeues[event_for(previous, t) or "restarted"] += 1
                if following is not None and following.status == Status.PENDING:
                    s.waits.append(max(0.0, following.at - t.at))
                elif following is None and record.status == Status.QUEUED:
                    s.oldest_wait = max(s.oldest_wait, now - t.at)
            elif t.status == Status.PENDING and following is not None:
                if following.status in between(Status.DOWNLOADING, Status.PROCESSING):
                    s.deploys.append(max(0.0, following.at - t.at))
            elif t.status == Status.FAILED:
                s.failures[t.error_code or "unknown"] += 1
            previous = t.status
    return s


def buckets(values: list[float], bounds: tuple[float, ...]) -> list[tuple[str, float]]:
    """Cumulative (le, count) pairs ending with +Inf, as a Prometheus histogram has them."""
    out = [(_le(b), float(sum(1 for v in values if v <= b))) for b in bounds]
    out.append(("+Inf", float(len(values))))
    return out


def _le(bound: float) -> str:
    return str(float(bound)) if not math.isinf(bound) else "+Inf"


class PlatformCollector:
    """Yields the platform's series from the store and the LCM, at each scrape."""

    def __init__(
        self, store: JobStore, lcm: Any, replica: str, clock: Callable[[], float] = time.time
    ):
        self.store, self.lcm, self.replica, self.clock = store, lcm, replica, clock
        self.usage = UsageCache()

    def collect(self) -> Iterator[Metric]:
        r = self.replica
        up = GaugeMetricFamily(
            SOURCE_UP, "1 if this scrape could read the source", labels=["replica", "source"]
        )
        try:
            records = list(self.store.each())
            up.add_metric([r, "store"], 1)
        # Broad: a scrape must answer even with the store down; the other series still
        # say something, and dlaas_metrics_source_up says what is missing.
        except Exception:  # broad: a scrape must answer with the store down
            log.exception("metrics: the job store could not be read")
            records = None
            up.add_metric([r, "store"], 0)
        try:
            nodes = self.lcm.cluster()
            up.add_metric([r, "lcm"], 1)
        except Exception:  # broad for the same reason: the LCM may be down or electing
            log.warning("metrics: the LCM's cluster call failed", exc_info=True)
            nodes = None
            up.add_metric([r, "lcm"], 0)
        yield up
        if records is not None:
            yield from self._jobs(summarize(records, self.clock()))
            yield from self._usage(records)
        if nodes is not None:
            placed = [
                p
                for p in (
                    placed_job(rec, rec.manifest_yaml)
                    for rec in records or ()
                    if rec.status in HOLDING
                )
                if p is not None
            ]
            yield from self._nodes(nodes, allocation(placed))

    def _jobs(self, s: Summary) -> Iterator[Metric]:
        r = self.replica
        jobs = GaugeMetricFamily(JOBS, "Jobs by status", labels=["replica", "status"])
        for status in Status:
            jobs.add_metric([r, status.value], s.by_status.get(status, 0))
        yield jobs
        queued = GaugeMetricFamily(
            QUEUE_LENGTH, "Jobs waiting to be placed (QUEUED)", labels=["replica"]
        )
        queued.add_metric([r], s.by_status.get(Status.QUEUED, 0))
        yield queued
        oldest = GaugeMetricFamily(
            QUEUE_OLDEST, "How long the longest-waiting QUEUED job has waited", labels=["replica"]
        )
        oldest.add_metric([r], round(s.oldest_wait, 3))
        yield oldest
        wait = HistogramMetricFamily(
            QUEUE_WAIT, "Time from QUEUED to placed (PENDING), each wait", labels=["replica"]
        )
        wait.add_metric([r], buckets(s.waits, WAIT_BUCKETS), sum(s.waits))
        yield wait
        deploy = HistogramMetricFamily(
            DEPLOY,
            "Time from placed (PENDING) to running (DOWNLOADING, or PROCESSING)",
            labels=["replica"],
        )
        deploy.add_metric([r], buckets(s.deploys, DEPLOY_BUCKETS), sum(s.deploys))
        yield deploy
        requeues = CounterMetricFamily(
            REQUEUES,
            "Returns to QUEUED by cause: preempted, restarted, shrunk, grown, rescaled, resumed",
            labels=["replica", "cause"],
        )
        for cause, n in sorted(s.requeues.items()):
            requeues.add_metric([r, cause], n)
        yield requeues
        failures = CounterMetricFamily(
            FAILURES, "Jobs that ended FAILED, by error code", labels=["replica", "error_code"]
        )
        for code, n in sorted(s.failures.items()):
            failures.add_metric([r, code], n)
        yield failures

    def _usage(self, records: list[JobRecord]) -> Iterator[Metric]:
        """Each team's allocated hours so far, the sums `GET /v1/usage` answers with."""
        now = self.clock()
        by_team = totals((row for rec in records for row in self.usage.rows(rec, now)), "team")
        for what, name in USAGE.items():
            family = CounterMetricFamily(
                name,
                f"{what.replace('_', ' ')} of the team's jobs "
                f"({'measured' if what in MEASURED else 'allocated'})",
                labels=["replica", "team"],
            )
            for team, u in sorted(by_team.items()):
                family.add_metric([self.replica, team], u.hours()[what])
            yield family

    def _nodes(self, nodes: list[Any], use: dict[str, NodeUse]) -> Iterator[Metric]:
        r = self.replica
        labels = ["replica", "node"]
        healthy = GaugeMetricFamily(
            NODE_HEALTHY, "1 if the LCM can deploy to the node", labels=labels
        )
        learners = GaugeMetricFamily(NODE_LEARNERS, "Learners placed on the node", labels=labels)
        families = {
            (kind, res): GaugeMetricFamily(
                f"dlaas_node_{kind}_{res}", f"{res} {_MEANING[kind]}", labels=labels
            )
            for kind in ("capacity", "allocated", "free")
            for res in RESOURCES
        }
        used_cpus = GaugeMetricFamily(
            NODE_USED_CPUS,
            "CPU cores the job containers on the node use, as measured (absent: unknown)",
            labels=labels,
        )
        used_memory = GaugeMetricFamily(
            NODE_USED_MEMORY,
            "memory the job containers on the node use, page cache left out (absent: unknown)",
            labels=labels,
        )
        containers = GaugeMetricFamily(
            NODE_CONTAINERS,
            "running job containers on the node at the last sample (absent: not sampled)",
            labels=labels,
        )
        for n in nodes:
            u = use.get(n.name, NodeUse())
            healthy.add_metric([r, n.name], 1 if n.healthy else 0)
            measured = n.utilization
            if measured.cpus_used is not None:
                used_cpus.add_metric([r, n.name], measured.cpus_used)
            if measured.memory_mb_used is not None:
                used_memory.add_metric([r, n.name], measured.memory_mb_used * MIB)
            if measured.sampled_at is not None:
                containers.add_metric([r, n.name], measured.containers)
            learners.add_metric([r, n.name], u.learners)
            capacity = {"cpus": n.cpus, "gpus": n.gpus, "memory_bytes": n.memory_mb * MIB}
            held = {"cpus": u.cpus, "gpus": u.gpus, "memory_bytes": u.memory_mb * MIB}
            for res in RESOURCES:
                families["capacity", res].add_metric([r, n.name], capacity[res])
                families["allocated", res].add_metric([r, n.name], round(held[res], 3))
                # Over-committed (a node shrank under its jobs) shows as 0 free, not negative.
                free = max(0, capacity[res] - held[res])
                families["free", res].add_metric([r, n.name], round(free, 3))
        yield healthy
        yield learners
        yield from families.values()
        yield used_cpus
        yield used_memory
        yield containers


_MEANING = {
    "capacity": "the node offers",
    "allocated": "placed, unfinished jobs hold on the node",
    "free": "left on the node (capacity - allocated, at least 0)",
}


class ReplicaLabels:
    """Re-yields a registry's families with `replica` added to every sample's labels."""

    def __init__(self, registry: CollectorRegistry, replica: str):
        self.registry, self.replica = registry, replica

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            out = Metric(family.name, family.documentation, family.type, family.unit)
            out.samples = [
                s._replace(labels={"replica": self.replica, **s.labels}) for s in family.samples
            ]
            yield out
