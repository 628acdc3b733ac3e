"""The SQLite job store's schema, and how its rows become the domain's records.

`SCHEMA` is what dlaas/adapters/store/sqlite.py creates (and migrates) in a store's file;
the `to_*` functions turn a row of each table into its record (a job, a team, a user, a
token, a hook, a delivery).
"""

from __future__ import annotations

import json
import sqlite3

from dlaas.adapters.store.base import JobRecord, job_record
from dlaas.domain.accounts import Quota, Team, TokenRecord, User
from dlaas.domain.hooks import Delivery, Hook
from dlaas.domain.status import Transition

SCHEMA = """
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
CREATE TABLE IF NOT EXISTS teams (
    name       TEXT PRIMARY KEY,
    gpus       INTEGER NOT NULL DEFAULT 0,
    cpus       REAL NOT NULL DEFAULT 0,
    memory_mb  INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    max_priority INTEGER NOT NULL DEFAULT 100,
    storage_quota_bytes INTEGER NOT NULL DEFAULT 0,
    default_duration_s INTEGER NOT NULL DEFAULT 0,
    max_duration_s INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS users (
    name       TEXT PRIMARY KEY,
    team       TEXT NOT NULL,
    admin      INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS tokens (
    hash       TEXT PRIMARY KEY,
    user       TEXT NOT NULL,
    prefix     TEXT NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL DEFAULT 0,
    revoked_at REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS tokens_user ON tokens (user);
CREATE TABLE IF NOT EXISTS audit (
    seq    INTEGER PRIMARY KEY AUTOINCREMENT,
    at     REAL NOT NULL,
    actor  TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS hooks (
    hook_id    TEXT PRIMARY KEY,
    user       TEXT NOT NULL,
    url        TEXT NOT NULL,
    events     TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS hooks_user ON hooks (user, created_at);
CREATE TABLE IF NOT EXISTS deliveries (
    key         TEXT PRIMARY KEY,
    hook_id     TEXT NOT NULL,
    job_id      TEXT NOT NULL,
    event       TEXT NOT NULL,
    attempts    INTEGER NOT NULL,
    state       TEXT NOT NULL,
    last_status INTEGER,
    last_error  TEXT NOT NULL DEFAULT '',
    at          REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS deliveries_hook_at ON deliveries (hook_id, at);
-- Append-only: the audit log refuses changes at the database itself.
CREATE TRIGGER IF NOT EXISTS audit_no_update BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS audit_no_delete BEFORE DELETE ON audit
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
"""

JOB_COLUMNS = (
    "job_id, user, name, manifest_yaml, created_at, status, updated_at, code_key, reason,"
    " error_code, exit_code, last_seq, info, team"
)


def to_team(row: sqlite3.Row) -> Team:
    quota = Quota(row["gpus"], row["cpus"], row["memory_mb"])
    return Team(
        row["name"], quota, row["created_at"], row["max_priority"], row["storage_quota_bytes"],
        row["default_duration_s"], row["max_duration_s"],
    )  # fmt: skip


def to_user(row: sqlite3.Row) -> User:
    return User(row["name"], row["team"], bool(row["admin"]), row["created_at"])


def to_token(row: sqlite3.Row) -> TokenRecord:
    return TokenRecord(
        row["hash"], row["user"], row["prefix"], row["created_at"], row["expires_at"],
        row["revoked_at"],
    )  # fmt: skip


def to_hook(row: sqlite3.Row) -> Hook:
    return Hook(
        row["hook_id"], row["user"], row["url"], tuple(json.loads(row["events"])),
        row["created_at"],
    )  # fmt: skip


def to_delivery(row: sqlite3.Row) -> Delivery:
    return Delivery(
        row["key"], row["hook_id"], row["job_id"], row["event"], row["attempts"], row["state"],
        row["last_status"], row["last_error"], row["at"],
    )  # fmt: skip


def to_record(row: sqlite3.Row, history: list[Transition]) -> JobRecord:
    return job_record(row, history, json.loads(row["info"]))
