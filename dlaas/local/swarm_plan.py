"""The local swarm lab's layout, as pure functions: names, addresses, the dockerd command.

What dlaas/local/swarm.py records in a lab's state file (`lab_plan`) and starts
(`dockerd_argv`), the free subnet it takes (`choose_subnet`) and what a machine lacks to
run one (`missing_requirements`); no I/O, so the layout is tested without root.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dlaas.local import processes

RUN_DIR = Path("/run/dlaas-swarm")  # exec roots: short paths (containerd's unix sockets)
NETNS_DIR = Path("/var/run/netns")
SUBNET_POOL = "10.199.0.0/16"  # the lab bridges' /24s


class SwarmLabError(processes.ServerError):
    """The lab cannot be built, reached or removed here; the message says what is missing."""


@dataclass(frozen=True)
class SwarmInfo:
    """A running lab. Sockets are Docker base URLs ("unix:///.../docker.sock")."""

    manager_socket: str
    nodes: list[str]
    node_sockets: dict[str, str]
    node_addresses: dict[str, str]
    host_address: str  # the host on the lab bridge: how containers reach host servers
    subnet: str
    bridge: str
    state_dir: str
    manager_address: str = ""  # node 1's address, port 2377 for `swarm join`
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    gpus: dict[str, int] = field(default_factory=dict)


def choose_subnet(taken: Sequence[str], pool: str = SUBNET_POOL) -> str:
    """The first /24 of `pool` that overlaps none of `taken` (CIDRs). Pure."""
    used = [ipaddress.ip_network(t, strict=False) for t in taken]
    for candidate in ipaddress.ip_network(pool).subnets(new_prefix=24):
        if not any(candidate.overlaps(u) for u in used):
            return str(candidate)
    raise SwarmLabError(f"no free /24 left in {pool} for a swarm lab bridge")


def node_names(n: int) -> list[str]:
    return [f"node-{k}" for k in range(1, n + 1)]


def lab_plan(state_dir: Path, suffix: str, subnet: str, n: int, bridge: str = "") -> dict:
    """Every name and address of a lab with `n` nodes, as recorded in its state file. Pure.

    Interface names stay within Linux's 15 characters: the bridge "dsw<6 hex>" unless
    `bridge` names it (a platform names it so that its firewall fences the lab in), the
    veths "dsw<6 hex>v<k>" / "dsw<6 hex>p<k>".
    """
    if len(bridge) > 15:
        raise SwarmLabError(f"bridge name {bridge!r} is longer than Linux's 15 characters")
    net = ipaddress.ip_network(subnet)
    hosts = list(net.hosts())
    if n < 1 or n > len(hosts) - 1:
        raise SwarmLabError(f"nodes must be between 1 and {len(hosts) - 1}, got {n}")
    ifname = f"dsw{suffix}"
    bridge = bridge or ifname
    nodes = []
    for k, name in enumerate(node_names(n), start=1):
        root = state_dir / name
        nodes.append({
            "name": name,
            "netns": f"dlaas-swarm-{suffix}-{k}",
            "veth": f"{ifname}v{k}",
            "peer": f"{ifname}p{k}",
            "address": str(hosts[k]),
            "socket": str(root / "docker.sock"),
            "data_root": str(root / "data"),
            "exec_root": str(RUN_DIR / f"{suffix}-{k}"),
            "pidfile": str(RUN_DIR / f"{suffix}-{k}.pid"),
            "log": str(root / "dockerd.log"),
            "pid": 0,
        })  # fmt: skip
    return {
        "suffix": suffix,
        "subnet": str(net),
        "prefixlen": net.prefixlen,
        "bridge": bridge,
        "host_address": str(hosts[0]),
        "nodes": nodes,
    }


def dockerd_argv(node: Mapping, gpus: int = 0) -> list[str]:
    """The command that starts `node`'s dockerd in its namespaces (see the module docstring)."""
    argv = [
        "nsenter", f"--net={NETNS_DIR / node['netns']}",
        "unshare", "--uts",
        "sh", "-c", 'hostname "$0" && exec "$@"', node["name"],
        "dockerd",
        "--data-root", node["data_root"],
        "--exec-root", node["exec_root"],
        "-H", f"unix://{node['socket']}",
        "--pidfile", node["pidfile"],
        "--iptables=false",
        "--bridge=none",
        "--label", f"dlaas.lab.node={node['name']}",
    ]  # fmt: skip
    if gpus:
        argv += ["--node-generic-resource", f"gpu={gpus}"]
    return argv


def missing_requirements(euid: int, which: Callable[[str], str | None]) -> list[str]:
    """What this machine lacks to run a lab, each with how to get it. Pure (given `which`)."""
    missing = []
    if euid != 0:
        missing.append("root (network namespaces and dockerd need it)")
    hints = {
        "ip": "iproute2 (`apt-get install -y iproute2`)",
        "nsenter": "nsenter (`apt-get install -y util-linux`)",
        "unshare": "unshare (`apt-get install -y util-linux`)",
        "hostname": "hostname (`apt-get install -y hostname`)",
        "iptables": "iptables (`apt-get install -y iptables`)",
        "sysctl": "sysctl (`apt-get install -y procps`)",
        "dockerd": "dockerd (`apt-get install -y docker.io`)",
    }
    missing += [hint for binary, hint in hints.items() if which(binary) is None]
    return missing
