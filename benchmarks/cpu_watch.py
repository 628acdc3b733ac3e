"""Where the machine's CPU went during one benchmark run, by process kind (Linux /proc only).

    watch = CpuWatch(nodes=lab["nodes"])   # the swarm lab's node records, or none
    watch.start(); ...the run...; used = watch.stop(containers)   # {"label": seconds}

A thread reads utime+stime of every process (/proc/<pid>/stat) once every `every_s`
seconds; a process's share of the run is its last reading less its first (a process that
started during the run: all of its time). A process that lives less than one look is missed,
and one that ends loses the time since its last look: the figures are a floor. Each process
gets a label once, when first seen:
- a process in a Docker container (its cpuacct cgroup /docker/<id>): the role that
  `containers` (id -> role, given at stop) names, else "other containers";
- dockerd, containerd and containerd-shim: "<name> (node-K)" when the command line names a
  lab node's exec root or socket, else "<name> (host)" (the machine's engine, which other
  work shares);
- this script's descendants: "platform <service>" for `python -m services.<service>.main`
  (and other `python -m` modules: the supervisor),
  "bare learners" for the bare runs' `train.py`, else the program's name (etcd, weed, ...);
- "benchmark" for this script itself, "kernel threads", and "other" for the rest of the
  machine (other people's work: it takes CPU from both sides alike).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
CONTAINER = re.compile(r"^\d+:[^:]*cpuacct[^:]*:/docker/([0-9a-f]{64})", re.MULTILINE)
MODULE = re.compile(r"-m ([\w.]+)")
ENGINE = ("dockerd", "containerd", "containerd-shim")


def read_stat(pid: str) -> tuple[int, int, str, float] | None:
    """(ppid, start time, name, CPU seconds) of a process, None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = raw[raw.index("(") + 1 : raw.rindex(")")]
    fields = raw[raw.rindex(")") + 2 :].split()
    # After the name: state ppid ... utime(12) stime(13) ... starttime(20), 0-based from state.
    return int(fields[1]), int(fields[19]), name, (int(fields[11]) + int(fields[12])) / TICK


def _read(path: str) -> str:
    with contextlib.suppress(OSError):
        return Path(path).read_text()
    return ""


class CpuWatch:
    def __init__(self, nodes: list[Mapping] = (), every_s: float = 1.0):
        self.marks = {n["name"]: (n["exec_root"], n["socket"]) for n in nodes}
        self.every_s = every_s
        self.me = os.getpid()
        self.first: dict[tuple[str, int], float] = {}
        self.last: dict[tuple[str, int], float] = {}
        self.labels: dict[tuple[str, int], str] = {}
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.look(first=True)
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stopping.wait(self.every_s):
            self.look()

    def stop(self, containers: Mapping[str, str] = {}) -> dict[str, float]:
        """CPU seconds by label over the run; `containers`: container id -> its role."""
        self.stopping.set()
        if self.thread is not None:
            self.thread.join()
        self.look()
        used: dict[str, float] = {}
        for key, cpu in self.last.items():
            label = self.labels[key]
            if label.startswith("container "):
                label = containers.get(label.split()[1], "other containers")
            used[label] = used.get(label, 0.0) + cpu - self.first.get(key, 0.0)
        return {k: round(v, 2) for k, v in sorted(used.items(), key=lambda kv: -kv[1]) if v > 0}

    def look(self, first: bool = False) -> None:
        stats = {}
        for pid in os.listdir("/proc"):
            if pid.isdigit() and (st := read_stat(pid)) is not None:
                stats[pid] = st
        parents = {int(pid): st[0] for pid, st in stats.items()}
        for pid, (ppid, start, name, cpu) in stats.items():
            key = (pid, start)
            if key not in self.labels:
                self.labels[key] = self.label(int(pid), ppid, name, parents)
            if first:
                self.first[key] = cpu
            self.last[key] = cpu

    def label(self, pid: int, ppid: int, name: str, parents: dict[int, int]) -> str:
        if pid == self.me:
            return "benchmark"
        if ppid == 2 or pid == 2:
            return "kernel threads"
        if found := CONTAINER.search(_read(f"/proc/{pid}/cgroup")):
            return f"container {found.group(1)}"
        cmdline = _read(f"/proc/{pid}/cmdline").replace("\0", " ")
        engine = next((e for e in ENGINE if name.startswith(e[:15])), None)
        if engine:
            node = next(
                (n for n, marks in self.marks.items() if any(m in cmdline for m in marks)), "host"
            )
            return f"{engine} ({node})"
        if not self.descends(pid, parents):
            return "other"
        if found := MODULE.search(cmdline):
            module = found.group(1)
            return "platform " + module.removeprefix("services.").removesuffix(".main")
        if "train.py" in cmdline:
            return "bare learners"
        return name

    def descends(self, pid: int, parents: dict[int, int]) -> bool:
        seen = 0
        while pid > 1 and seen < 64:
            pid, seen = parents.get(pid, 0), seen + 1
            if pid == self.me:
                return True
        return False
