"""The embedded job store: one SQLite file shared by the API, the LCM and the monitor.

The single-machine default backend of `JobStore`. Several processes open the same file,
so the database runs in WAL mode (readers never block the one writer) with a busy
timeout, and every write is a short `BEGIN IMMEDIATE` transaction: taking the write lock
up front means two writers queue on the busy timeout instead of failing on a lock
upgrade. History lives in its own table whose primary key (job_id, seq) makes
`record_transition` idempotent: a replayed mirror inserts nothing.

Threads share one connection behind a lock; a forked child notices the new pid and
opens its own connection (an SQLite connection must never cross a fork).
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

from dlaas.errors import JobNotFound
from dlaas.status import Status, Transition
from dlaas.store.base import JobRecord, JobStore

BUSY_TIMEOUT_MS = 30_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id        TEXT PRIMARY KEY,
    user          TEXT NOT NULL,
    name          TEXT NOT NULL,
    manifest_yaml TEXT NOT NULL,
    created_at    REAL NOT NULL,
    status        TEXT NOT NULL,
    updated_at    REAL NOT NULL,
    code_key      TEXT NOT NULL DEFAULT '',
    reason        TEXT NOT NULL DEFAULT '',
    error_code    TEXT NOT NULL DEFAULT '',
    exit_code     INTEGER,
    last_seq      INTEGER NOT NULL DEFAULT 0,
    info          TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS jobs_user_created ON jobs (user, created_at);
CREATE INDEX IF NOT EXISTS jobs_status_created ON jobs (status, created_at);
CREATE TABLE IF NOT EXISTS history (
    job_id     TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    status     TEXT NOT NULL,
    at         REAL NOT NULL,
    reason     TEXT NOT NULL,
    error_code TEXT NOT NULL DEFAULT '',
    exit_code  INTEGER,
    PRIMARY KEY (job_id, seq)
);
"""

_JOB_COLUMNS = (
    "job_id, user, name, manifest_yaml, created_at, status, updated_at, code_key, reason,"
    " error_code, exit_code, last_seq, info"
)


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
            conn.executescript(_SCHEMA)

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
            except BaseException:
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
                f"INSERT OR IGNORE INTO jobs ({_JOB_COLUMNS})"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
            row = conn.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE job_id = ?", (job_id,)
            ).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            history = self._history(conn, [job_id])
        return _record(row, history.get(job_id, []))

    def list(
        self,
        *,
        user: str | None = None,
        status: Status | None = None,
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
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        with self._read() as conn:
            total = conn.execute(f"SELECT COUNT(*) FROM jobs{clause}", args).fetchone()[0]
            rows = conn.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs{clause}"
                " ORDER BY created_at DESC, job_id DESC LIMIT ? OFFSET ?",
                [*args, limit, offset],
            ).fetchall()
            history = self._history(conn, [r["job_id"] for r in rows])
        return [_record(r, history.get(r["job_id"], [])) for r in rows], total

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

    # -- helpers ------------------------------------------------------------------------

    @staticmethod
    def _history(conn: sqlite3.Connection, job_ids: list[str]) -> dict[str, list[Transition]]:
        out: dict[str, list[Transition]] = {}
        # In chunks: SQLite caps the number of parameters in one statement.
        for i in range(0, len(job_ids), 500):
            chunk = job_ids[i : i + 500]
            marks = ",".join("?" * len(chunk))
            for r in conn.execute(
                "SELECT job_id, status, at, reason, error_code, exit_code FROM history"
                f" WHERE job_id IN ({marks}) ORDER BY job_id, seq",
                chunk,
            ):
                out.setdefault(r["job_id"], []).append(
                    Transition(
                        Status(r["status"]), r["at"], r["reason"], r["error_code"], r["exit_code"]
                    )
                )
        return out


def _record(row: sqlite3.Row, history: list[Transition]) -> JobRecord:
    return JobRecord(
        job_id=row["job_id"],
        user=row["user"],
        name=row["name"],
        manifest_yaml=row["manifest_yaml"],
        created_at=row["created_at"],
        status=Status(row["status"]),
        updated_at=row["updated_at"],
        code_key=row["code_key"],
        reason=row["reason"],
        error_code=row["error_code"],
        exit_code=row["exit_code"],
        history=history,
        info=json.loads(row["info"]),
    )
