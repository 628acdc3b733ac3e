"""The nodes the platform deploys on, as declared by configuration.

For now one local Docker engine; its capacity is declared (DLAAS_NODE_*) or read from
the machine when left at zero.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from dlaas.config import PlatformSettings


@dataclass(frozen=True)
class NodeSpec:
    name: str
    cpus: float
    memory_mb: int
    gpus: int = 0
    gpu_type: str = ""
    docker_host: str = ""
    labels: dict[str, str] = field(default_factory=dict)


def _machine_memory_mb() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 4096


def configured_nodes(settings: PlatformSettings) -> list[NodeSpec]:
    return [
        NodeSpec(
            name=settings.node_name,
            cpus=settings.node_cpus or float(os.cpu_count() or 1),
            memory_mb=settings.node_memory_mb or _machine_memory_mb(),
            gpus=settings.node_gpus,
            gpu_type=settings.node_gpu_type,
            docker_host=settings.docker_host,
        )
    ]
