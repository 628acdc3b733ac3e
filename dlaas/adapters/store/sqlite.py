"""The embedded job store: one SQLite file shared by the API, the LCM and the monitor.

The single-machine default backend of `JobStore`. Several processes open the same file,
so the database runs in WAL mode (readers never block the one writer) with a busy
timeout, and every write is a short `BEGIN IMMEDIATE` transaction: taking the write lock
up front means two writers queue on the busy timeout instead of failing on a lock
upgrade. History lives in its own table whose primary key (job_id, seq) makes
`record_transition` idempotent: a replayed mirror inserts nothing.

Threads share one connection behind a lock; a forked child notices the new pid and
opens its own connection (an SQLite connection must never cross a fork).

Errors: the file locked past the busy timeout, unreadable or on a full disk
(sqlite3.OperationalError) leaves every method as the domain's TemporaryError.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dlaas.adapters.store.base import JobRecord, JobStore
from dlaas.adapters.store.sqlite_rows import (
    JOB_COLUMNS,
    SCHEMA,
    to_delivery,
    to_hook,
    to_record,
    to_team,
    to_token,
    to_user,
)
from dlaas.domain.accounts import DEFAULT_MAX_PRIORITY, AuditEntry, Quota, Team, TokenRecord, User
from dlaas.domain.errors import JobNotFound, temporary_on_all
from dlaas.domain.hooks import Delivery, Hook
from dlaas.domain.status import Status, Transition

BUSY_TIMEOUT_MS = 30_000
# The queries put together with f-strings (the `noqa: S608`s) join only constants (the
# column lists of sqlite_rows) and fixed clauses; every value goes as a ? parameter.


def first_history(job: JobRecord) -> list[Transition]:
    """The history to store for a new job: its own, or one entry made from its fields."""
    if job.history:
        return list(job.history)
    return [
        Transition(
            job.status, job.created_at, job.reason or "submitted", job.error_code, job.exit_code
        )
    ]


def check_info_keys(info: dict[str, Any]) -> None:
    """Refuse keys that a document store would read as a path; both backends agree on this."""
    for key in info:
        if not isinstance(key, str) or not key or "." in key or key.startswith("$"):
            raise ValueError(f"info key {key!r}: must be a non-empty string without '.' or '$'")


@temporary_on_all((sqlite3.OperationalError,), "the job store")
class SqliteJobStore(JobStore):
    def __init__(self, path: str | os.PathLike[str]):
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        with self._lock:
            conn = self._connection()
            conn.executescript(SCHEMA)
            # A store made before jobs had teams gains the column (every job: no team).
            columns = {r["name"] for r in conn.execute("PRAGMA table_info(jobs)")}
            if "team" not in columns:
                conn.execute("ALTER TABLE jobs ADD COLUMN team TEXT NOT NULL DEFAULT ''")
            # ... and teams made before priority ceilings gain the default one.
            columns = {r["name"] for r in conn.execute("PRAGMA table_info(teams)")}
            if "max_priority" not in columns:
                conn.execute(
                    "ALTER TABLE teams ADD COLUMN max_priority INTEGER NOT NULL DEFAULT "
                    f"{DEFAULT_MAX_PRIORITY}"
                )
            if "storage_quota_bytes" not in columns:  # ... and no storage quota
                conn.execute(
                    "ALTER TABLE teams ADD COLUMN storage_quota_bytes INTEGER NOT NULL DEFAULT 0"
                )
            for column in ("default_duration_s", "max_duration_s"):  # ... and no run times
                if column not in columns:
                    conn.execute(
                        f"ALTER TABLE teams ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0"
                    )
        if self.path != ":memory:":
            # It holds manifests and token hashes: the owner's only.
            os.chmod(self.path, 0o600)

    # -- connection handling ------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():
            # After a fork the parent's connection is left alone (closing it here could
            # disturb the parent's locks); the child simply opens its own.
            conn = sqlite3.connect(
                self.path,
                timeout=BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,  # explicit BEGIN/COMMIT below
                check_same_thread=False,  # guarded by self._lock
            )
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")  # durable across app crashes in WAL
            conn.row_factory = sqlite3.Row
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:  # broad: whatever ends the block early undoes it; re-raised
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        # One deferred transaction so a job row and its history come from one snapshot.
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    # -- JobStore -----------------------------------------------------------------------

    def create(self, job: JobRecord) -> bool:
        history = first_history(job)
        last = history[-1]
        with self._write() as conn:
            cur = conn.execute(
                f"INSERT OR IGNORE INTO jobs ({JOB_COLUMNS})"  # noqa: S608 - constants only
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    job.job_id,
                    job.user,
                    job.name,
                    job.manifest_yaml,
                    job.created_at,
                    str(last.status),
                    job.updated_at or last.at,
                    job.code_key,
                    last.reason,
                    last.error_code,
                    last.exit_code,
                    len(history) - 1,
                    json.dumps(job.info),
                    job.team,
                ),
            )
            if cur.rowcount == 0:
                return False
            # A job created anew may reuse the id of one deleted earlier: start clean.
            conn.execute("DELETE FROM history WHERE job_id = ?", (job.job_id,))
            conn.executemany(
                "INSERT INTO history (job_id, seq, status, at, reason, error_code, exit_code)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (job.job_id, seq, str(t.status), t.at, t.reason, t.error_code, t.exit_code)
                    for seq, t in enumerate(history)
                ],
            )
        return True

    def get(self, job_id: str) -> JobRecord:
        with self._read() as conn:
            sql = f"SELECT {JOB_COLUMNS} FROM jobs WHERE job_id = ?"  # noqa: S608 - constants only
            row = conn.execute(sql, (job_id,)).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            history = self._history(conn, [job_id])
        return to_record(row, history.get(job_id, []))

    def list(
        self,
        *,
        user: str | None = None,
        status: Status | None = None,
        label: str | None = None,
        offset: int = 0,
        limit: int = 50,
    ) -> tuple[list[JobRecord], int]:
        if offset < 0 or limit < 0:
            raise ValueError("offset and limit must not be negative")
        where, args = [], []
        if user is not None:
            where.append("user = ?")
            args.append(user)
        if status is not None:
            where.append("status = ?")
            args.append(str(Status(status)))
        if label is not None:
            where.append("error_code = ?")
            args.append(label)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        with self._read() as conn:
            count = f"SELECT COUNT(*) FROM jobs{clause}"  # noqa: S608 - constants only
            total = conn.execute(count, args).fetchone()[0]
            rows = conn.execute(
                f"SELECT {JOB_COLUMNS} FROM jobs{clause}"  # noqa: S608 - constants only
                " ORDER BY created_at DESC, job_id DESC LIMIT ? OFFSET ?",
                [*args, limit, offset],
            ).fetchall()
            history = self._history(conn, [r["job_id"] for r in rows])
        return [to_record(r, history.get(r["job_id"], [])) for r in rows], total

    def record_transition(self, job_id: str, seq: int, t: Transition) -> bool:
        if seq < 0:
            raise ValueError(f"seq {seq}: must not be negative")
        with self._write() as conn:
            row = conn.execute("SELECT last_seq FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            cur = conn.execute(
                "INSERT OR IGNORE INTO history"
                " (job_id, seq, status, at, reason, error_code, exit_code)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (job_id, seq, str(t.status), t.at, t.reason, t.error_code, t.exit_code),
            )
            if cur.rowcount == 0:
                return False
            # A late replay of an older step fills the history but must not move the
            # job's current status backwards.
            if seq >= row["last_seq"]:
                conn.execute(
                    "UPDATE jobs SET status = ?, updated_at = ?, reason = ?, error_code = ?,"
                    " exit_code = ?, last_seq = ? WHERE job_id = ?",
                    (str(t.status), t.at, t.reason, t.error_code, t.exit_code, seq, job_id),
                )
        return True

    def update_info(self, job_id: str, info: dict[str, Any]) -> None:
        check_info_keys(info)
        encoded = json.dumps(info)  # fail on a value JSON cannot hold, before writing
        with self._write() as conn:
            row = conn.execute("SELECT info FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            merged = {**json.loads(row["info"]), **json.loads(encoded)}
            conn.execute("UPDATE jobs SET info = ? WHERE job_id = ?", (json.dumps(merged), job_id))

    def delete(self, job_id: str) -> bool:
        with self._write() as conn:
            cur = conn.execute("DELETE FROM jobs WHERE job_id = ?", (job_id,))
            conn.execute("DELETE FROM history WHERE job_id = ?", (job_id,))
        return cur.rowcount > 0

    # -- accounts -----------------------------------------------------------------------

    def add_team(self, team: Team) -> bool:
        q = team.quota
        with self._write() as conn:
            cur = conn.execute(
                "INSERT OR IGNORE INTO teams (name, gpus, cpus, memory_mb, created_at,"
                " max_priority, storage_quota_bytes, default_duration_s, max_duration_s)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    team.name,
                    q.gpus,
                    q.cpus,
                    q.memory_mb,
                    team.created_at,
                    team.max_priority,
                    team.storage_quota_bytes,
                    team.default_duration_s,
                    team.max_duration_s,
                ),
            )
        return cur.rowcount > 0

    def get_team(self, name: str) -> Team | None:
        with self._read() as conn:
            row = conn.execute("SELECT * FROM teams WHERE name = ?", (name,)).fetchone()
        return to_team(row) if row else None

    def list_teams(self) -> list[Team]:
        with self._read() as conn:
            return [to_team(r) for r in conn.execute("SELECT * FROM teams ORDER BY name")]

    def set_quota(self, name: str, quota: Quota) -> bool:
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE teams SET gpus = ?, cpus = ?, memory_mb = ? WHERE name = ?",
                (quota.gpus, quota.cpus, quota.memory_mb, name),
            )
        return cur.rowcount > 0

    def set_max_priority(self, name: str, ceiling: int) -> bool:
        with self._write() as conn:
            cur = conn.execute("UPDATE teams SET max_priority = ? WHERE name = ?", (ceiling, name))
        return cur.rowcount > 0

    def set_storage_quota(self, name: str, quota_bytes: int) -> bool:
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE teams SET storage_quota_bytes = ? WHERE name = ?", (quota_bytes, name)
            )
        return cur.rowcount > 0

    def set_durations(self, name: str, default_s: int, max_s: int) -> bool:
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE teams SET default_duration_s = ?, max_duration_s = ? WHERE name = ?",
                (default_s, max_s, name),
            )
        return cur.rowcount > 0

    def add_user(self, user: User) -> bool:
        with self._write() as conn:
            cur = conn.execute(
                "INSERT OR IGNORE INTO users (name, team, admin, created_at) VALUES (?, ?, ?, ?)",
                (user.name, user.team, int(user.admin), user.created_at),
            )
        return cur.rowcount > 0

    def get_user(self, name: str) -> User | None:
        with self._read() as conn:
            row = conn.execute("SELECT * FROM users WHERE name = ?", (name,)).fetchone()
        return to_user(row) if row else None

    def list_users(self) -> list[User]:
        with self._read() as conn:
            return [to_user(r) for r in conn.execute("SELECT * FROM users ORDER BY name")]

    def add_token(self, token: TokenRecord) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO tokens (hash, user, prefix, created_at, expires_at, revoked_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (token.hash, token.user, token.prefix, token.created_at, token.expires_at,
                 token.revoked_at),
            )  # fmt: skip

    def find_token(self, token_hash: str) -> TokenRecord | None:
        with self._read() as conn:
            row = conn.execute("SELECT * FROM tokens WHERE hash = ?", (token_hash,)).fetchone()
        return to_token(row) if row else None

    def list_tokens(self, user: str | None = None) -> list[TokenRecord]:
        clause, args = ("WHERE user = ?", [user]) if user is not None else ("", [])
        with self._read() as conn:
            sql = f"SELECT * FROM tokens {clause} ORDER BY created_at"  # noqa: S608 - constants only
            rows = conn.execute(sql, args)
            return [to_token(r) for r in rows]

    def revoke_tokens(
        self, *, user: str | None = None, token_hash: str | None = None, at: float
    ) -> int:
        if (user is None) == (token_hash is None):
            raise ValueError("revoke_tokens: give exactly one of user and token_hash")
        column, value = ("user", user) if user is not None else ("hash", token_hash)
        with self._write() as conn:
            cur = conn.execute(
                f"UPDATE tokens SET revoked_at = ? WHERE {column} = ? AND revoked_at = 0",  # noqa: S608
                (at, value),
            )
        return cur.rowcount

    def append_audit(self, entry: AuditEntry) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO audit (at, actor, action, target, detail) VALUES (?, ?, ?, ?, ?)",
                (entry.at, entry.actor, entry.action, entry.target, entry.detail),
            )

    def list_audit(self, *, offset: int = 0, limit: int = 100) -> tuple[list[AuditEntry], int]:
        if offset < 0 or limit < 0:
            raise ValueError("offset and limit must not be negative")
        with self._read() as conn:
            total = conn.execute("SELECT COUNT(*) FROM audit").fetchone()[0]
            rows = conn.execute(
                "SELECT * FROM audit ORDER BY seq DESC LIMIT ? OFFSET ?", (limit, offset)
            ).fetchall()
        return [
            AuditEntry(r["at"], r["actor"], r["action"], r["target"], r["detail"], r["seq"])
            for r in rows
        ], total

    # -- webhooks -----------------------------------------------------------------------

    def add_hook(self, hook: Hook) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO hooks (hook_id, user, url, events, created_at) VALUES (?, ?, ?, ?, ?)",
                (hook.hook_id, hook.user, hook.url, json.dumps(list(hook.events)),
                 hook.created_at),
            )  # fmt: skip

    def get_hook(self, hook_id: str) -> Hook | None:
        with self._read() as conn:
            row = conn.execute("SELECT * FROM hooks WHERE hook_id = ?", (hook_id,)).fetchone()
        return to_hook(row) if row else None

    def list_hooks(self, user: str | None = None) -> list[Hook]:
        clause, args = ("WHERE user = ?", [user]) if user is not None else ("", [])
        with self._read() as conn:
            sql = f"SELECT * FROM hooks {clause} ORDER BY created_at, hook_id"  # noqa: S608 - constants only
            rows = conn.execute(sql, args)
            return [to_hook(r) for r in rows]

    def delete_hook(self, hook_id: str) -> bool:
        with self._write() as conn:
            cur = conn.execute("DELETE FROM hooks WHERE hook_id = ?", (hook_id,))
            conn.execute("DELETE FROM deliveries WHERE hook_id = ?", (hook_id,))
        return cur.rowcount > 0

    def record_delivery(self, delivery: Delivery) -> None:
        d = delivery
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO deliveries (key, hook_id, job_id, event, attempts, state,"
                " last_status, last_error, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (d.key, d.hook_id, d.job_id, d.event, d.attempts, d.state, d.last_status,
                 d.last_error, d.at),
            )  # fmt: skip

    def get_delivery(self, key: str) -> Delivery | None:
        with self._read() as conn:
            row = conn.execute("SELECT * FROM deliveries WHERE key = ?", (key,)).fetchone()
        return to_delivery(row) if row else None

    def list_deliveries(
        self, hook_id: str, *, offset: int = 0, limit: int = 50
    ) -> tuple[list[Delivery], int]:
        if offset < 0 or limit < 0:
            raise ValueError("offset and limit must not be negative")
        with self._read() as conn:
            total = conn.execute(
                "SELECT COUNT(*) FROM deliveries WHERE hook_id = ?", (hook_id,)
            ).fetchone()[0]
            rows = conn.execute(
                "SELECT * FROM deliveries WHERE hook_id = ? ORDER BY at DESC, key DESC"
                " LIMIT ? OFFSET ?",
                (hook_id, limit, offset),
            ).fetchall()
        return [to_delivery(r) for r in rows], total

    # -- helpers ------------------------------------------------------------------------

    @staticmethod
    def _history(conn: sqlite3.Connection, job_ids: list[str]) -> dict[str, list[Transition]]:
        out: dict[str, list[Transition]] = {}
        # In chunks: SQLite caps the number of parameters in one statement.
        for i in range(0, len(job_ids), 500):
            chunk = job_ids[i : i + 500]
            marks = ",".join("?" * len(chunk))
            for r in conn.execute(
                "SELECT job_id, status, at, reason, error_code, exit_code FROM history"  # noqa: S608
                f" WHERE job_id IN ({marks}) ORDER BY job_id, seq",
                chunk,
            ):
                out.setdefault(r["job_id"], []).append(
                    Transition(
                        Status(r["status"]), r["at"], r["reason"], r["error_code"], r["exit_code"]
                    )
                )
        return out
