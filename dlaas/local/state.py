"""The state directory of a local platform ($DLAAS_HOME or ~/.dlaas): its files and pid records.

What it holds is listed in dlaas.local.platform's docstring. Files that may hold secrets
are written owner-only and atomically; a pid record counts as alive only while its process
still runs the program it names (a pid the OS reused does not).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dlaas.domain import secretbox
from dlaas.local.processes import pid_matches


def default_state_dir() -> Path:
    return Path(os.environ.get("DLAAS_HOME") or Path.home() / ".dlaas")


def write_private(path: Path, data: dict) -> None:
    """Write JSON readable by the owner only (it may hold secrets); atomic by rename."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


@dataclass
class StateDir:
    root: Path

    @property
    def pids(self) -> Path:
        return self.root / "pids"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def pid_file(self, name: str) -> Path:
        return self.pids / f"{name}.json"

    def read_pid(self, name: str) -> dict:
        return read_json(self.pid_file(name))

    def write_pid(self, name: str, record: dict) -> None:
        write_private(self.pid_file(name), record)

    def forget(self, name: str) -> None:
        self.pid_file(name).unlink(missing_ok=True)

    def prepare(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        # The directory holds credentials: owner only.
        os.chmod(self.root, 0o700)
        self.pids.mkdir(exist_ok=True)
        self.logs.mkdir(exist_ok=True)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Serialise up/down on this state dir (two `dlaas up` at once would race)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def secrets(self) -> dict:
        """The platform's generated credentials, created on first use and kept."""
        path = self.root / "secrets.json"
        data = read_json(path)
        wanted = {
            "s3_access_key": lambda: "dlaas" + secrets.token_hex(8),
            "s3_secret_key": lambda: secrets.token_urlsafe(32),
            "admin_token": lambda: secrets.token_urlsafe(32),
            "user_token": lambda: secrets.token_urlsafe(32),
            "secrets_key": secretbox.new_key,
            "redis_password": lambda: secrets.token_hex(24),
        }
        missing = [k for k in wanted if not data.get(k)]
        for key in missing:
            data[key] = wanted[key]()
        if missing or not path.exists():
            write_private(path, data)
        return data


def record_alive(record: dict) -> bool:
    pid = int(record.get("pid") or 0)
    return bool(pid) and pid_matches(pid, record.get("match", ""))
