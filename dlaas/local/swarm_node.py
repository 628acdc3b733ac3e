"""One swarm lab node's plumbing on the host: its namespace and veth, its dockerd, its removal.

Root's work, done with `ip`, `nsenter` and `iptables` (`run`): dlaas/local/swarm.py builds
a lab node by node with `plug` and `start_dockerd`, copies images with `load_image` and
removes a node with `stop_node`; the names and addresses come from swarm_plan.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

from dlaas.local import processes

# The process and mount helpers (dlaas.local.processes, .host) find a node's leftovers by its
# exec root in their command lines and mounts.
from dlaas.local.host import unmount_under
from dlaas.local.processes import descendants, pids_with_token
from dlaas.local.swarm_plan import NETNS_DIR, SwarmLabError, dockerd_argv, missing_requirements


def plug(record: dict, node: dict, progress: Callable[[str], None]) -> None:
    """Namespace, veth into the bridge, address, default route via the host, masquerade,
    and no traffic between containers through docker_gwbridge."""
    ns, veth, peer = node["netns"], node["veth"], node["peer"]
    progress(f"{node['name']}: namespace {ns}, address {node['address']}")
    run("ip", "netns", "add", ns)
    run("ip", "link", "add", veth, "type", "veth", "peer", "name", peer)
    run("ip", "link", "set", veth, "master", record["bridge"])
    run("ip", "link", "set", veth, "up")
    run("ip", "link", "set", peer, "netns", ns)
    run("ip", "-n", ns, "link", "set", peer, "name", "eth0")
    run("ip", "-n", ns, "addr", "add", f"{node['address']}/{record['prefixlen']}",
        "dev", "eth0")  # fmt: skip
    run("ip", "-n", ns, "link", "set", "eth0", "up")
    run("ip", "-n", ns, "link", "set", "lo", "up")
    run("ip", "-n", ns, "route", "add", "default", "via", record["host_address"])
    run("nsenter", f"--net={NETNS_DIR / ns}", "iptables", "-t", "nat", "-A",
        "POSTROUTING", "-o", "eth0", "-j", "MASQUERADE")  # fmt: skip
    # Every swarm task also sits on the node's docker_gwbridge (its way out), so two
    # jobs' containers on one node would reach each other there. Docker creates that
    # bridge with inter-container traffic off, but enforces it with an iptables rule,
    # which `--iptables=false` leaves out: this is that rule (bridged frames pass
    # FORWARD through br_netfilter, on in every namespace here).
    run("nsenter", f"--net={NETNS_DIR / ns}", "iptables", "-A", "FORWARD",
        "-i", "docker_gwbridge", "-o", "docker_gwbridge", "-j", "DROP")  # fmt: skip
    done = run("nsenter", f"--net={NETNS_DIR / ns}", "sysctl", "-w",
               "net.bridge.bridge-nf-call-iptables=1", check=False)  # fmt: skip
    if done.returncode != 0:
        raise SwarmLabError(
            "bridged frames do not pass iptables (net.bridge.bridge-nf-call-iptables: "
            f"{done.stderr.strip()}); load the module: modprobe br_netfilter"
        )


def start_dockerd(record: dict, node: dict) -> None:
    Path(node["data_root"]).mkdir(parents=True, exist_ok=True)
    Path(node["exec_root"]).mkdir(parents=True, exist_ok=True)
    Path(node["socket"]).unlink(missing_ok=True)
    env = {
        **os.environ,
        "PATH": os.environ.get("PATH", "") + ":/usr/sbin:/sbin",
        # A swarm task pulls its image before it starts, even one the node has; with no
        # registry reachable that attempt hangs ~20 s per task. Local images only.
        "DOCKER_SERVICE_PREFER_OFFLINE_IMAGE": "1",
    }
    argv = dockerd_argv(node, int(record.get("gpus", {}).get(node["name"], 0)))
    mp = processes.spawn(f"dockerd {node['name']}", argv, Path(node["log"]), env=env)
    # nsenter, unshare and sh all exec: the child's pid is dockerd's.
    node["pid"] = mp.pid


def check_requirements() -> None:
    """Raise SwarmLabError naming everything this machine lacks to run a lab."""
    missing = missing_requirements(os.geteuid(), which)
    if missing:
        raise SwarmLabError("a swarm lab cannot run here: missing " + "; ".join(missing))


def which(binary: str) -> str | None:
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin:/usr/bin:/bin"
    return shutil.which(binary, path=path)


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    exe = which(argv[0]) or argv[0]
    done = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise SwarmLabError(f"`{' '.join(argv)}` failed: {done.stderr.strip()}")
    return done


def load_image(node: Mapping, tar: Path, tag: str) -> None:
    import docker

    client = docker.DockerClient(base_url=f"unix://{node['socket']}", timeout=300)
    try:
        with open(tar, "rb") as data:
            client.images.load(data)
        client.images.get(tag)  # loaded under its name, or this raises
    finally:
        client.close()


def stop_node(node: Mapping) -> None:
    """dockerd by its pid (SIGTERM: it stops its containers and containerd), then whatever
    outlived it, found by the exec root; mounts, namespace, exec root."""
    exec_root = node["exec_root"]
    pid = int(node.get("pid") or 0)
    # Matched by the pid file's path, which names this node alone ("<sfx>-1" is also the
    # start of "<sfx>-10"); its containerd and shims by paths inside its exec root.
    if pid and processes.pid_matches(pid, node["pidfile"]):
        processes.stop_pid(pid, timeout=20)
    leftovers = pids_with_token(exec_root + "/")
    # Container processes do not name the exec root: they are the shims' descendants.
    for victim in descendants(leftovers):
        processes.stop_pid(victim, 0)
    for victim in leftovers:
        processes.stop_pid(victim, 5)
    unmount_under(Path(exec_root), Path(node["data_root"]))
    if (NETNS_DIR / node["netns"]).exists():
        run("ip", "netns", "del", node["netns"], check=False)
    # The host end of the veth goes with the namespace (asynchronously); a veth whose peer
    # never reached the namespace is deleted here.
    if Path(f"/sys/class/net/{node['veth']}").exists():
        run("ip", "link", "del", node["veth"], check=False)
    shutil.rmtree(exec_root, ignore_errors=True)
    Path(node["pidfile"]).unlink(missing_ok=True)
