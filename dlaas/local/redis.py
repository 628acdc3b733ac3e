"""redis-server as a child process: the worker's broker (queued purges)."""

from __future__ import annotations

import os
import shutil
import socket
from dataclasses import dataclass, field
from pathlib import Path

from dlaas.local.processes import ManagedProcess, ServerError, free_port, spawn, started


@dataclass
class RedisServer:
    host: str
    port: int
    process: ManagedProcess
    password: str = field(default="", repr=False)

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}{self.host}:{self.port}/0"

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        self.process.stop()


def start_redis(
    dir: Path | str,
    timeout: float = 15.0,
    port: int | None = None,
    log: Path | None = None,
    persist: bool = False,
    password: str = "",
) -> RedisServer:
    """redis-server in the foreground (so the PID is ours) on 127.0.0.1, data dir `dir`.

    `persist`: an append-only file in `dir` (fsync every second), so that queued work
    survives a restart of Redis; off, nothing is written (the tests' throwaway brokers).
    `password`: required of every client; it goes in a config file readable by the owner
    only, never on the command line (which any local user can read).
    """
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not os.access(binary, os.X_OK):
        raise ServerError("redis-server not found: `apt-get install -y redis-server`")
    root = Path(dir)
    root.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    config = root / "redis.conf"
    fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f'requirepass "{password}"\n' if password else "")
    argv = [
        binary, str(config), "--bind", "127.0.0.1", "--port", str(port), "--save", "",
        "--appendonly", "yes" if persist else "no", "--appendfsync", "everysec",
        "--dir", str(root), "--daemonize", "no",
    ]  # fmt: skip
    mp = spawn("redis", argv, log or root / "redis.log")

    def ready() -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            if password:
                s.sendall(f"AUTH {password}\r\n".encode())
                if not s.recv(16).startswith(b"+OK"):
                    return False
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")

    started(mp, ready, timeout, f"redis on 127.0.0.1:{port}")
    return RedisServer("127.0.0.1", port, mp, password)
