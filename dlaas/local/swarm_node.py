"""One swarm lab node's plumbing on the host: its namespace and veth, its dockerd, its removal.

Root's work, done with `ip`, `nsenter` and `iptables` (`run`): dlaas/local/swarm.py builds
a lab node by node with `plug` and `start_dockerd`, copies images into every node at once
with `fan_out` and `load_images`, and removes a node with `remove_node`; the names and
addresses come from swarm_plan.py.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
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


def load_images(node: Mapping, data: Iterable[bytes], tags: Sequence[str]) -> None:
    """Load a `docker save` stream into `node`'s engine; SwarmLabError unless every tag is
    then there under its name."""
    import docker

    client = docker.DockerClient(base_url=f"unix://{node['socket']}", timeout=300)
    try:
        client.images.load(data)
        for tag in tags:
            try:
                client.images.get(tag)
            except docker.errors.ImageNotFound:
                raise SwarmLabError(f"{tag} did not load on {node['name']}") from None
    finally:
        client.close()


def fan_out(chunks: Iterable[bytes], consumers: Sequence[Callable[[Iterator[bytes]], None]],
            depth: int = 16) -> None:  # fmt: skip
    """Read `chunks` once and hand every chunk to each consumer, all running at once (a
    thread each): a `docker save` stream is loaded into every node while it is saved, with
    no file between. Bounded: a consumer is at most `depth` chunks behind the reader. A
    consumer that stops early (its load failed) is drained so that the others go on; the
    first error (the reader's or a consumer's) is raised once every consumer has ended."""
    queues: list[queue.Queue] = [queue.Queue(depth) for _ in consumers]
    errors: list[BaseException] = []

    def consume(consumer: Callable[[Iterator[bytes]], None], q: queue.Queue) -> None:
        ended = False

        def items() -> Iterator[bytes]:
            nonlocal ended
            while (chunk := q.get()) is not None:
                yield chunk
            ended = True

        try:
            consumer(items())
        except BaseException as e:  # noqa: BLE001 - broad: raised in the caller's thread below
            errors.append(e)
        finally:
            while not ended and q.get() is not None:  # what it left unread, to the end mark
                pass

    threads = [
        threading.Thread(target=consume, args=(c, q), daemon=True)
        for c, q in zip(consumers, queues, strict=True)
    ]
    for thread in threads:
        thread.start()
    try:
        for chunk in chunks:
            for q in queues:
                q.put(chunk)
    except BaseException as e:  # noqa: BLE001 - broad: Ctrl-C too; raised once all end
        errors.insert(0, e)
    finally:
        for q in queues:
            q.put(None)
        for thread in threads:
            thread.join()
    if errors:
        raise errors[0]


def remove_node(node: Mapping) -> None:
    """`stop_node`, then the node's directory (its data root, socket and log) from the disk."""
    stop_node(node)
    root = Path(node["data_root"]).parent
    if root.exists():
        # rm: about twice Python's rmtree's pace on image layers; --one-file-system: a
        # mount left below (unmounted lazily by stop_node) is never descended into.
        run("rm", "-rf", "--one-file-system", str(root), check=False)
        shutil.rmtree(root, ignore_errors=True)  # where rm is missing or left something


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
