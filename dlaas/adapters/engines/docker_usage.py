"""The Docker adapter of dlaas.domain.ports.UsageSource, which the LCM's utilization
sampler reads: a node's running job containers and their CPU and memory counters, from the
engine's container stats (`docker stats`).

One read lists the platform's running containers (its `dlaas.managed` label) and asks
each for one set of counters (`one_shot`: the engine answers at once instead of waiting a
second for a second reading; the rate is computed from our own two samples). Pure
helpers turn the engine's stats document into ContainerStats, so the cgroup v1 and v2
spellings are tested without an engine.
"""

from __future__ import annotations

from typing import Any

import docker

from dlaas.adapters.docker_calls import ENGINE_UNREACHABLE, quiet
from dlaas.adapters.engines.reports import epoch
from dlaas.domain import jobspec
from dlaas.domain.ports import ContainerStats, EngineUnreachable, UsageSource


def memory_in_use(memory_stats: dict[str, Any]) -> int | None:
    """Bytes in use less the page cache (docker stats' MEM USAGE); None if not reported.

    cgroup v1 names the reclaimable cache `total_inactive_file`, v2 `inactive_file`.
    """
    usage = memory_stats.get("usage")
    if not isinstance(usage, int):
        return None
    stats = memory_stats.get("stats") or {}
    for key in ("total_inactive_file", "inactive_file"):
        cache = stats.get(key)
        if isinstance(cache, int) and 0 <= cache < usage:
            return usage - cache
    return usage


def container_stats(container_id: str, doc: dict[str, Any]) -> ContainerStats | None:
    """One stats document as ContainerStats; None when it lacks the CPU counter or the read
    time (a container that stopped between the listing and the read)."""
    cpu = ((doc.get("cpu_stats") or {}).get("cpu_usage") or {}).get("total_usage")
    read_at = epoch(doc.get("read") or "")
    if not isinstance(cpu, int) or read_at is None or read_at <= 0:
        return None
    return ContainerStats(container_id, cpu, read_at, memory_in_use(doc.get("memory_stats") or {}))


class DockerUsage(UsageSource):
    """The running containers of platform `platform_id` on one engine, with their counters."""

    def __init__(self, client: docker.DockerClient, platform_id: str, node: str = ""):
        self.client = client
        self.platform_id = platform_id
        self.node = node

    def read(self) -> list[ContainerStats]:
        managed = {"label": f"{jobspec.LABEL_MANAGED}={self.platform_id}", "status": "running"}
        try:
            found = self.client.containers.list(filters=managed, sparse=True)
            out = []
            for c in found:
                # Gone since the listing: left out (quiet answers None).
                doc = quiet(self.client.api.stats, c.id, stream=False, one_shot=True)
                stats = container_stats(c.id, doc) if isinstance(doc, dict) else None
                if stats is not None:
                    out.append(stats)
            return out
        except ENGINE_UNREACHABLE as exc:
            raise EngineUnreachable(self.node or "?", str(exc)) from None
