"""Where the machine's CPU went during one benchmark run, by process kind (Linux /proc only).

    watch = CpuWatch(nodes=lab["nodes"])   # the swarm lab's node records, or none
    watch.start(); ...the run...; used = watch.stop(containers, training_from=t)
    used["run"], used["training"]          # {"label": seconds}

A thread reads utime+stime of every process (/proc/<pid>/stat) once every `every_s`
seconds; a process's share of a window is its last reading in it less its last reading
before it (a process that started within: all of its time). A process that lives less than
one look is missed, and one that ends loses the time since its last look: the figures are a
floor. Two windows: "run", the whole watch, and "training", from the first look at or after
`training_from` (time.monotonic: the job's first line) to the last look that saw one of the
job's learner processes (without containers, the end): the CPU spent while the learners
train, which is what can slow them (a submit's or a teardown's work does not). Each process
gets a label once, when first seen:
- a process in a Docker container (its cpuacct cgroup /docker/<id>): the role that
  `containers` (id -> role, given at stop) names, else "other containers";
- dockerd, containerd and containerd-shim: "<name> (node-K)" when the command line names a
  lab node's exec root or socket, else "<name> (host)" (the machine's engine, which other
  work shares);
- this script's descendants: "platform <service>" for `python -m services.<service>.main`
  (and other `python -m` modules: the supervisor),
  "bare learners" for the bare runs' `train.py`, else the program's name (etcd, weed, ...);
- "benchmark" for this script itself, "kernel threads", and "other (<name>)" for the rest
  of the machine (other people's work: it takes CPU from both sides alike).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Mapping
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
CONTAINER = re.compile(r"^\d+:[^:]*cpuacct[^:]*:/docker/([0-9a-f]{64})", re.MULTILINE)
MODULE = re.compile(r"-m ([\w.]+)")
# The shim first: its name (containerd-shim-runc-v2, cut to 15 characters) starts like
# containerd's.
ENGINE = ("containerd-shim", "dockerd", "containerd")


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
        # (time.monotonic, process -> CPU seconds) of each look
        self.looks: list[tuple[float, dict[tuple[str, int], float]]] = []
        self.labels: dict[tuple[str, int], str] = {}
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.look()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stopping.wait(self.every_s):
            self.look()

    def stop(
        self, containers: Mapping[str, str] = {}, training_from: float | None = None
    ) -> dict[str, dict[str, float]]:
        """CPU seconds by label in each window; `containers`: container id -> its role."""
        self.stopping.set()
        if self.thread is not None:
            self.thread.join()
        self.look()

        def name(key: tuple[str, int]) -> str:
            label = self.labels[key]
            if label.startswith("container "):
                return containers.get(label.split()[1], "other containers")
            return label

        last = len(self.looks) - 1
        begin = 0
        if training_from is not None:
            begin = next((k for k, (t, _) in enumerate(self.looks) if t >= training_from), last)
        learning = [
            k for k, (_, cpu) in enumerate(self.looks) if any(name(p) == "learner" for p in cpu)
        ]
        end = learning[-1] if learning else last
        return {
            "run": self.used(self.upto(0), self.upto(last), name),
            "training": self.used(self.upto(begin), self.upto(max(begin, end)), name),
        }

    def upto(self, index: int) -> dict[tuple[str, int], float]:
        """Each process's last reading in the looks up to `index` (one gone since keeps it)."""
        merged: dict[tuple[str, int], float] = {}
        for _, cpu in self.looks[: index + 1]:
            merged.update(cpu)
        return merged

    def used(self, before: dict, after: dict, name) -> dict[str, float]:
        found: dict[str, float] = {}
        for key, cpu in after.items():
            found[name(key)] = found.get(name(key), 0.0) + cpu - before.get(key, 0.0)
        return {k: round(v, 2) for k, v in sorted(found.items(), key=lambda kv: -kv[1]) if v > 0}

    def look(self) -> None:
        stats = {}
        for pid in os.listdir("/proc"):
            if pid.isdigit() and (st := read_stat(pid)) is not None:
                stats[pid] = st
        parents = {int(pid): st[0] for pid, st in stats.items()}
        now: dict[tuple[str, int], float] = {}
        for pid, (ppid, start, name, cpu) in stats.items():
            key = (pid, start)
            if key not in self.labels:
                self.labels[key] = self.label(int(pid), ppid, name, parents)
            now[key] = cpu
        self.looks.append((time.monotonic(), now))

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
            return f"other ({name})"
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
