"""What a learner container used: its CPU-seconds and its peak memory, read from its cgroup.

The learner wrapper (run.py) writes it once the command has ended, as JSON in
`LOG_DIR/.learner-<id>.usage` (beside its exit code); the helper reports its node's
learners' in a `usage` event before `stored` (services/learner_helper/main.py), the job
monitor records that in the job's info (services/jobmonitor/measured.py), and usage
accounting reads it there (dlaas.domain.usage). Not in the learner's log: that is the
user's. The CPU figure is the cgroup's cumulative counter, so one reading at
the end is the whole run's (every process of the container: the wrapper, the command,
its children, sshd); the memory figure is the cgroup's high-water mark.

The container sees its own cgroup at /sys/fs/cgroup (Docker mounts it there on cgroup v1
and v2 alike): v2 `cpu.stat` usage_usec and `memory.peak` (kernels from 5.19), v1
`cpuacct/cpuacct.usage` (ns) and `memory/memory.max_usage_in_bytes`. Where none is
readable, the wrapper's own and its waited-for children's rusage stands in (CPU exact
for what the command ran; memory the largest single process's peak).

Stdlib only: this runs on Debian's python3.11 inside the job image.
"""

from __future__ import annotations

import json
import resource
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
MIB = 1 << 20


def _read_int(path: Path, key: str = "") -> int | None:
    """The file's number, or the value of `key` in a flat-keyed file; None if absent."""
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        words = line.split()
        if not key and len(words) == 1:
            value = words[0]
        elif key and len(words) == 2 and words[0] == key:
            value = words[1]
        else:
            continue
        try:
            return int(value)
        except ValueError:  # "max" and the like: not a reading
            return None
    return None


def cgroup_usage(root: Path = CGROUP) -> tuple[float | None, int | None]:
    """(CPU-seconds, peak memory in bytes) of the cgroup at `root`; None where unreadable."""
    usec = _read_int(root / "cpu.stat", "usage_usec")
    if usec is not None:
        return usec / 1e6, _read_int(root / "memory.peak")
    nsec = _read_int(root / "cpuacct" / "cpuacct.usage")
    if nsec is None:
        nsec = _read_int(root / "cpu,cpuacct" / "cpuacct.usage")
    peak = _read_int(root / "memory" / "memory.max_usage_in_bytes")
    return (None if nsec is None else nsec / 1e9), peak


def rusage() -> tuple[float, int]:
    """(CPU-seconds, peak memory in bytes) of this process and its waited-for children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    return cpu, max(own.ru_maxrss, kids.ru_maxrss) * 1024  # Linux: KiB


def measured(root: Path = CGROUP) -> dict[str, float | int]:
    """The usage event's fields: `cpu_s` (3 decimals) and `memory_peak_mib` (rounded up)."""
    cpu, peak = cgroup_usage(root)
    if cpu is None:
        cpu, fallback_peak = rusage()
        peak = peak if peak is not None else fallback_peak
    elif peak is None:
        peak = rusage()[1]
    return {"cpu_s": round(cpu, 3), "memory_peak_mib": -(-peak // MIB)}


def record(path: Path) -> None:
    """Write `measured()` to `path` as JSON (OSError if the volume refuses)."""
    path.write_text(json.dumps(measured(), sort_keys=True) + "\n")


def read(path: Path) -> dict[str, float | int] | None:
    """What `record` wrote; None if the file is missing or not a usage record."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    cpu, peak = data.get("cpu_s"), data.get("memory_peak_mib")
    if not isinstance(cpu, (int, float)) or not isinstance(peak, int) or cpu < 0 or peak < 0:
        return None
    return {"cpu_s": float(cpu), "memory_peak_mib": peak}
