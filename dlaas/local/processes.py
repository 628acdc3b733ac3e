"""Processes and ports of the local platform: spawn a server, wait for it, stop it by PID.

Every server (dlaas.local.etcd, .seaweedfs, .redis, .dockerd) is a child process on free
ports with its log in a given directory; a start waits until the server answers and stops
the process again if it never does. A stop is by PID: SIGTERM, a grace period, then
SIGKILL. Processes run in their own session so that a Ctrl-C in the terminal that started
them does not kill them halfway (the platform stops them with `dlaas down`; the tests stop
them in fixture teardown). The /proc readers at the end find what a killed engine left
behind (dlaas.local.swarm).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


class ServerError(RuntimeError):
    """A server could not be found, started or reached; the message says which and why."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS considers free right now (bind to 0, read it, release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """`n` distinct free ports; all sockets are held until every port is chosen."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def pid_alive(pid: int) -> bool:
    """True if `pid` names a live (not zombie) process."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        # A zombie still answers kill(0); /proc tells it apart.
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def pid_cmdline(pid: int) -> list[str]:
    """The command line of `pid`, or [] if it is gone or unreadable."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [p.decode(errors="replace") for p in raw.split(b"\0") if p]


def pid_matches(pid: int, token: str) -> bool:
    """True if `pid` is alive and its command line contains `token`.

    Guards against a stale pid file whose number the OS has since given to another process.
    """
    return pid_alive(pid) and any(token in part for part in pid_cmdline(pid))


def stop_pid(pid: int, timeout: float = 10.0, proc: subprocess.Popen | None = None) -> None:
    """SIGTERM `pid`, wait up to `timeout`, then SIGKILL. Silent if it is already gone."""
    if pid <= 0:
        return

    def gone() -> bool:
        if proc is not None:
            return proc.poll() is not None
        return not pid_alive(pid)

    if gone():
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if gone():
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not gone():
        time.sleep(0.05)


def wait_until(
    check: Callable[[], bool],
    timeout: float,
    what: str,
    alive: Callable[[], bool] | None = None,
    log: Path | None = None,
    interval: float = 0.1,
) -> None:
    """Poll `check` until it returns True; raise ServerError after `timeout` or if `alive` fails."""
    deadline = time.monotonic() + timeout
    last = ""  # why the last check failed, for the error
    while True:
        try:
            if check():
                return
        # Broad: the checks are any callables (a socket, an HTTP GET, an etcd or boto3 or
        # Docker call), and "not answering yet" takes as many forms; the last one is named
        # in the error if the server never answers.
        except Exception as exc:  # noqa: BLE001 - broad: any check's failure means "not yet"; named
            last = f" (last check: {type(exc).__name__}: {exc})"
        if alive is not None and not alive():
            raise ServerError(f"{what} exited before it answered{last}{_log_hint(log)}")
        if time.monotonic() >= deadline:
            raise ServerError(f"{what} did not answer within {timeout:.0f}s{last}{_log_hint(log)}")
        time.sleep(interval)


def _log_hint(log: Path | None) -> str:
    if log is None:
        return ""
    tail = ""
    try:
        lines = log.read_text(errors="replace").splitlines()[-5:]
        tail = "; last lines: " + " | ".join(line.strip() for line in lines) if lines else ""
    except OSError:
        pass
    return f" (log: {log}{tail})"


@dataclass
class ManagedProcess:
    """A server process this code started: its PID, its log, and how to stop it."""

    name: str
    pid: int
    log: Path
    proc: subprocess.Popen | None = field(default=None, repr=False)

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return pid_alive(self.pid)

    def stop(self, timeout: float = 10.0) -> None:
        stop_pid(self.pid, timeout, self.proc)


def spawn(
    name: str,
    argv: Sequence[str],
    log: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> ManagedProcess:
    """Start `argv` detached from the terminal (own session), stdout+stderr appended to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=cwd,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as e:
            raise ServerError(f"cannot start {name} ({argv[0]}): {e}") from e
    return ManagedProcess(name=name, pid=proc.pid, log=log, proc=proc)


def started(
    mp: ManagedProcess, check: Callable[[], bool], timeout: float, what: str
) -> ManagedProcess:
    """Wait for `mp` to answer; stop it (by PID) if it does not, then re-raise."""
    try:
        wait_until(check, timeout, what, alive=mp.alive, log=mp.log)
    except BaseException:  # broad: Ctrl-C too must not leave it running; re-raised
        mp.stop()
        raise
    return mp


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def venv_bin(name: str) -> str | None:
    """`name` next to the running interpreter (the venv's bin), else on PATH."""
    local = Path(sys.executable).parent / name
    if local.exists() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which(name)


def _port_free(port: int | None) -> bool:
    if not port:
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As the servers bind (Go, gRPC and uvicorn all set SO_REUSEADDR): connections of
        # a just-stopped server in TIME_WAIT do not make its port unusable.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))  # noqa: S104 - where the servers bind: free there?
        except OSError:
            return False
    return True


def keep_or_new_port(previous: int | None) -> int:
    """The port used last time if it is still free (clients keep working), else a new one."""
    return previous if previous and _port_free(previous) else free_port()


def pids_with_token(token: str) -> list[int]:
    """Live processes whose command line contains `token` (a path unique to one engine)."""
    pids = []
    for entry in Path("/proc").iterdir():
        pid = int(entry.name) if entry.name.isdigit() else 0
        if pid and pid != os.getpid() and pid_matches(pid, token):
            pids.append(pid)
    return pids


def descendants(roots: Sequence[int]) -> list[int]:
    """Every live descendant of `roots` (not the roots), deepest last."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out: list[int] = []
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out
