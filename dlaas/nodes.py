"""The nodes the platform deploys on, as declared by configuration.

Without a nodes file: one node, the local Docker engine, with its capacity declared
(DLAAS_NODE_*) or read from the machine when left at zero. With a nodes file
(DLAAS_NODES_FILE, YAML or JSON; `dlaas up --nodes N` writes one): every node it lists,
each its own Docker engine with declared capacity and topology labels:

    nodes:
      - name: local
        docker_host: unix:///var/run/docker.sock
        cpus: 2
        memory_mb: 8000
        gpus: 0
        gpu_type: ""
        labels: {rack: r1, area: local}
        s3_endpoint_for_containers: http://172.17.0.1:8333   # optional

`parse_nodes` is pure (it validates a loaded document); `configured_nodes` reads the
file. A bad file is refused as a whole with a message naming the node and the field.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from dlaas.config import PlatformSettings

NODES_FILE_ENV = "DLAAS_NODES_FILE"
# A swarm node's platform name (a node label; else its hostname), and a service's node.
LABEL_NODE = "dlaas.node"
# A node name ends up in etcd keys, container labels and log lines.
NODE_NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,62})$")
DOCKER_HOST_SCHEMES = ("unix://", "tcp://", "ssh://", "http://", "https://", "npipe://")
FIELDS = (
    "name", "docker_host", "cpus", "memory_mb", "gpus", "gpu_type", "labels",
    "s3_endpoint_for_containers",
)  # fmt: skip


class NodesFileError(ValueError):
    """The nodes file is unreadable or invalid; the message names the node and field."""


@dataclass(frozen=True)
class NodeSpec:
    name: str
    cpus: float
    memory_mb: int
    gpus: int = 0
    gpu_type: str = ""
    docker_host: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    # How containers on this node's engine reach the platform's S3 ("" = the platform's
    # DLAAS_S3_ENDPOINT_FOR_CONTAINERS). Each engine has its own bridge, so its own
    # gateway address for the host.
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
    """The swarm's nodes on a swarm platform; else the nodes file's nodes if one is
    configured, else the one local node."""
    # `nodes_file` is a PlatformSettings field (DLAAS_NODES_FILE); the environment is
    # read directly as well for settings objects built without it.
    if settings.swarm_manager:
        return swarm_nodes(settings.swarm_manager)
    nodes_file = getattr(settings, "nodes_file", "") or os.environ.get(NODES_FILE_ENV, "")
    if nodes_file:
        return load_nodes_file(nodes_file)
    cpus, memory_mb = machine_capacity()
    return [
        NodeSpec(
            name=settings.node_name,
            cpus=settings.node_cpus or cpus,
            memory_mb=settings.node_memory_mb or memory_mb,
            gpus=settings.node_gpus,
            gpu_type=settings.node_gpu_type,
            docker_host=settings.docker_host,
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
        raise NodesFileError(f"swarm_manager {manager}: {exc}") from None
    return [
        NodeSpec(name=n.name, cpus=n.cpus, memory_mb=n.memory_mb, gpus=n.gpus,
                 gpu_type=n.labels.get("gpu_type", ""), labels=n.labels)
        for n in sorted(found, key=lambda n: n.name)
    ]  # fmt: skip


def load_nodes_file(path: str | Path) -> list[NodeSpec]:
    """Read and validate a nodes file (YAML, of which JSON is a subset)."""
    import yaml

    try:
        text = Path(path).read_text()
    except OSError as e:
        raise NodesFileError(f"nodes file {path}: cannot read it: {e.strerror or e}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise NodesFileError(f"nodes file {path}: not YAML or JSON: {e}") from None
    return parse_nodes(document, source=f"nodes file {path}")


def dump_nodes(nodes: list[NodeSpec]) -> str:
    """The nodes file text for `nodes` (JSON, which every YAML reader reads too)."""
    return json.dumps({"nodes": [_node_dict(n) for n in nodes]}, indent=2) + "\n"


def _node_dict(node: NodeSpec) -> dict:
    out = {
        "name": node.name,
        "docker_host": node.docker_host,
        "cpus": node.cpus,
        "memory_mb": node.memory_mb,
        "gpus": node.gpus,
        "gpu_type": node.gpu_type,
        "labels": dict(node.labels),
    }
    if node.s3_endpoint_for_containers:
        out["s3_endpoint_for_containers"] = node.s3_endpoint_for_containers
    return out


def parse_nodes(document: object, source: str = "nodes file") -> list[NodeSpec]:
    """Validate a loaded nodes document: {"nodes": [...]} or the bare list. Pure."""
    items = document.get("nodes") if isinstance(document, dict) else document
    if isinstance(document, dict) and set(document) - {"nodes"}:
        extra = ", ".join(sorted(str(k) for k in set(document) - {"nodes"}))
        raise NodesFileError(f"{source}: unknown top-level field(s) {extra} (expected 'nodes')")
    if not isinstance(items, list) or not items:
        raise NodesFileError(f"{source}: nodes: must be a non-empty list of nodes")
    nodes = [_parse_node(item, f"{source}: nodes[{i}]") for i, item in enumerate(items)]
    seen: set[str] = set()
    for i, node in enumerate(nodes):
        if node.name in seen:
            raise NodesFileError(f"{source}: nodes[{i}].name: {node.name!r} is listed twice")
        seen.add(node.name)
    return nodes


def _parse_node(item: object, where: str) -> NodeSpec:
    if not isinstance(item, dict):
        raise NodesFileError(f"{where}: must be a mapping with name, docker_host, cpus, ...")
    unknown = sorted(str(k) for k in item if k not in FIELDS)
    if unknown:
        raise NodesFileError(f"{where}.{unknown[0]}: unknown field (known: {', '.join(FIELDS)})")
    name = item.get("name")
    if not isinstance(name, str) or not NODE_NAME.match(name):
        raise NodesFileError(
            f"{where}.name: {name!r} must be 1-63 lowercase letters, digits, '.', '_' or '-'"
        )
    where = f"{where} ({name})"
    docker_host = item.get("docker_host")
    if not isinstance(docker_host, str) or not docker_host.startswith(DOCKER_HOST_SCHEMES):
        raise NodesFileError(
            f"{where}.docker_host: {docker_host!r} must be an engine address such as "
            "unix:///var/run/docker.sock or tcp://host:2375"
        )
    cpus = _number(item, "cpus", where, required=True)
    if cpus <= 0:
        raise NodesFileError(f"{where}.cpus: must be > 0, got {cpus}")
    memory_mb = _integer(item, "memory_mb", where, required=True)
    if memory_mb <= 0:
        raise NodesFileError(f"{where}.memory_mb: must be > 0, got {memory_mb}")
    gpus = _integer(item, "gpus", where, required=False)
    if gpus < 0:
        raise NodesFileError(f"{where}.gpus: must be >= 0, got {gpus}")
    gpu_type = item.get("gpu_type") or ""
    if not isinstance(gpu_type, str):
        raise NodesFileError(f"{where}.gpu_type: must be a string, got {gpu_type!r}")
    labels = item.get("labels") or {}
    if not isinstance(labels, dict):
        raise NodesFileError(f"{where}.labels: must be a mapping such as {{rack: r1, area: a}}")
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, (str, int)) or isinstance(value, bool):
            raise NodesFileError(f"{where}.labels.{key}: must be a string, got {value!r}")
    endpoint = item.get("s3_endpoint_for_containers") or ""
    if not isinstance(endpoint, str) or (
        endpoint and not endpoint.startswith(("http://", "https://"))
    ):
        raise NodesFileError(
            f"{where}.s3_endpoint_for_containers: {endpoint!r} must be an http(s):// URL"
        )
    return NodeSpec(
        name=name,
        cpus=float(cpus),
        memory_mb=memory_mb,
        gpus=gpus,
        gpu_type=gpu_type,
        docker_host=docker_host,
        labels={k: str(v) for k, v in labels.items()},
        s3_endpoint_for_containers=endpoint,
    )


def _number(item: dict, key: str, where: str, required: bool) -> float:
    value = item.get(key)
    if value is None:
        if required:
            raise NodesFileError(f"{where}.{key}: is required")
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NodesFileError(f"{where}.{key}: must be a number, got {value!r}")
    return value


def _integer(item: dict, key: str, where: str, required: bool) -> int:
    value = _number(item, key, where, required)
    if value != int(value):
        raise NodesFileError(f"{where}.{key}: must be a whole number, got {value!r}")
    return int(value)


def nodes_or_exit(settings: PlatformSettings, service: str) -> list[NodeSpec]:
    """configured_nodes() for a service's main: a bad nodes file ends it with one line."""
    try:
        return configured_nodes(settings)
    except NodesFileError as exc:
        raise SystemExit(f"{service}: bad configuration: {exc}") from None
