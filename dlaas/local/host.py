"""The machine's own network and mounts, as the local swarm reads and cleans them.

Read from the kernel (/proc, ioctl), no tool run: the IPv4 address of an interface, the
routing table's destinations, and a detach of every mount below a directory.
"""

from __future__ import annotations

import ctypes
import ipaddress
import re
import socket
from pathlib import Path


def interface_ipv4(name: str) -> str | None:
    """The IPv4 address of network interface `name` (SIOCGIFADDR), None if it has none."""
    import fcntl
    import struct

    SIOCGIFADDR = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def host_routes() -> list[str]:
    """IPv4 destinations of the host's routing table, except the default route."""
    out = []
    try:
        lines = Path("/proc/net/route").read_text().splitlines()[1:]
    except OSError:
        return out
    for line in lines:
        fields = line.split()
        if len(fields) < 8:
            continue
        dest = socket.inet_ntoa(int(fields[1], 16).to_bytes(4, "little"))
        mask = socket.inet_ntoa(int(fields[7], 16).to_bytes(4, "little"))
        if dest != "0.0.0.0":  # noqa: S104 - the default route, skipped; nothing binds
            out.append(str(ipaddress.ip_network(f"{dest}/{mask}", strict=False)))
    return out


def unmount_under(*roots: Path) -> None:
    """Detach every mount at or below `roots`, deepest first (umount -l: busy ones too)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return
    prefixes = [str(r.resolve()) for r in roots]
    points = []
    for line in lines:
        fields = line.split()
        if len(fields) < 5:
            continue
        # mountinfo escapes space, tab, newline and backslash as octal (\040 ...).
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        if any(point == p or point.startswith(p + "/") for p in prefixes):
            points.append(point)
    libc = ctypes.CDLL(None, use_errno=True)
    mnt_detach = 2
    for point in sorted(set(points), key=len, reverse=True):
        libc.umount2(point.encode(), mnt_detach)
