"""The nodes the platform deploys on: the swarm's, or the one local node.

With a swarm manager (DLAAS_SWARM_MANAGER): the swarm's nodes, read through the manager's
API, with the capacity and topology their node labels declare (`node_of`). Without one:
one node, the machine's Docker engine, with its capacity declared (DLAAS_NODE_*) or read
from the machine when left at zero. (The nodes file of the multi-engine mode, which gave
each node an engine socket of its own, is retired: DLAAS_NODES_FILE is refused.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from dlaas.adapters.engines.swarm_spec import LABEL_NODE
from dlaas.config import PlatformSettings

# Retired with the multi-engine mode; still named, so that a setting left behind is refused.
NODES_FILE_ENV = "DLAAS_NODES_FILE"


class NodesError(ValueError):
    """The platform's nodes cannot be known: the swarm manager does not answer, or a
    retired setting is set; the message names the setting."""


@dataclass(frozen=True)
class NodeSpec:
    name: str
    cpus: float
    memory_mb: int
    gpus: int = 0
    gpu_type: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    # How containers on this node reach the platform's S3 ("" = the platform's
    # DLAAS_S3_ENDPOINT_FOR_CONTAINERS, which every node shares now).
    s3_endpoint_for_containers: str = ""


def _machine_memory_mb() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 4096


def machine_capacity() -> tuple[float, int]:
    """This machine's CPUs and memory (MiB)."""
    return float(os.cpu_count() or 1), _machine_memory_mb()


def configured_nodes(settings: PlatformSettings) -> list[NodeSpec]:
    """The swarm's nodes on a swarm platform, else the one local node."""
    if os.environ.get(NODES_FILE_ENV):
        raise NodesError(
            f"{NODES_FILE_ENV}: nodes files are no longer read; several nodes run as a "
            "Docker Swarm (DLAAS_SWARM_MANAGER, or `dlaas up --nodes N` on one machine)"
        )
    if settings.swarm_manager:
        return swarm_nodes(settings.swarm_manager)
    cpus, memory_mb = machine_capacity()
    return [
        NodeSpec(
            name=settings.node_name,
            cpus=settings.node_cpus or cpus,
            memory_mb=settings.node_memory_mb or memory_mb,
            gpus=settings.node_gpus,
            gpu_type=settings.node_gpu_type,
        )
    ]


@dataclass(frozen=True)
class SwarmNode:
    """A swarm node as the platform sees it: its name, capacity, state and labels."""

    id: str
    name: str
    state: str  # ready, down, unknown, disconnected
    availability: str  # active, pause, drain
    cpus: float
    memory_mb: int
    gpus: int
    labels: dict[str, str] = field(default_factory=dict)
    manager: bool = False

    @property
    def ready(self) -> bool:
        return self.state == "ready"


def node_of(attrs: dict) -> SwarmNode:
    """A swarm node from the manager's node object. Capacity labels (dlaas.cpus,
    dlaas.memory_mb, dlaas.gpus) override what the node reports: nodes that share one
    machine (the local swarm) each report the whole machine."""
    spec = attrs.get("Spec") or {}
    labels = dict(spec.get("Labels") or {})
    desc = attrs.get("Description") or {}
    res = desc.get("Resources") or {}
    gpus = sum(
        int((g.get("DiscreteResourceSpec") or {}).get("Value", 0))
        for g in res.get("GenericResources") or []
        if str((g.get("DiscreteResourceSpec") or {}).get("Kind", "")).lower() in ("gpu", "nvidia.com/gpu")
    )  # fmt: skip

    def number(label: str, default: float) -> float:
        try:
            return float(labels.pop(label))
        except (KeyError, ValueError):
            return default

    return SwarmNode(
        id=attrs["ID"],
        name=labels.pop(LABEL_NODE, "") or desc.get("Hostname", attrs["ID"][:12]),
        state=(attrs.get("Status") or {}).get("State", "unknown"),
        availability=spec.get("Availability", "active"),
        cpus=number("dlaas.cpus", res.get("NanoCPUs", 0) / 1e9),
        memory_mb=int(number("dlaas.memory_mb", res.get("MemoryBytes", 0) / 2**20)),
        gpus=int(number("dlaas.gpus", gpus)),
        labels=labels,
        manager=spec.get("Role") == "manager",
    )


def swarm_nodes(manager: str) -> list[NodeSpec]:
    """The nodes of the swarm whose manager answers at `manager` (a Docker host URL)."""
    import docker  # local: only a swarm platform needs the client here

    try:
        client = docker.DockerClient(base_url=manager, timeout=10)
        found = [node_of(n) for n in client.api.nodes()]
    except docker.errors.DockerException as exc:
        raise NodesError(f"swarm_manager {manager}: {exc}") from None
    return [
        NodeSpec(name=n.name, cpus=n.cpus, memory_mb=n.memory_mb, gpus=n.gpus,
                 gpu_type=n.labels.get("gpu_type", ""), labels=n.labels)
        for n in sorted(found, key=lambda n: n.name)
    ]  # fmt: skip


def nodes_or_exit(settings: PlatformSettings, service: str) -> list[NodeSpec]:
    """configured_nodes() for a service's main: a bad setting ends it with one line."""
    try:
        return configured_nodes(settings)
    except NodesError as exc:
        raise SystemExit(f"{service}: bad configuration: {exc}") from None
