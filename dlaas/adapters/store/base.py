"""The job store: durable job records and their status history.

An abstract interface with two backends: embedded SQLite (the single-machine default)
and MongoDB through pymongo (selected by a `mongodb://` URL). The live status is in
etcd; the store mirrors every transition, idempotently by its sequence number, so a
replayed mirror after a crash never duplicates history.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import Any

from dlaas.domain.accounts import AuditEntry, Quota, Team, TokenRecord, User
from dlaas.domain.hooks import Delivery, Hook
from dlaas.domain.status import Status, Transition


@dataclass
class JobRecord:
    job_id: str
    user: str
    name: str
    manifest_yaml: str  # as submitted; holds data-store credentials, never returned as is
    created_at: float
    status: Status = Status.QUEUED
    updated_at: float = 0.0
    code_key: str = ""
    reason: str = ""
    error_code: str = ""
    exit_code: int | None = None
    history: list[Transition] = field(default_factory=list)
    # Free-form facts the LCM learns while running the job (learner containers, node, ...).
    info: dict[str, Any] = field(default_factory=dict)
    # The submitter's team: its quota and its bucket namespace apply to the job.
    team: str = ""

    @property
    def last_seq(self) -> int:
        return len(self.history) - 1


# A record's fields a backend keeps otherwise than as a plain value under the field's name.
_NOT_PLAIN = frozenset({"status", "history", "info"})


def job_record(row: Any, history: list[Transition], info: dict[str, Any]) -> JobRecord:
    """A job's record from a backend's row of it (a SQLite row, a MongoDB document): every
    plain field read by its name, the status parsed; the history and the info as the
    backend keeps them."""
    plain = {f.name: row[f.name] for f in fields(JobRecord) if f.name not in _NOT_PLAIN}
    return JobRecord(**plain, status=Status(row["status"]), history=history, info=info)


class JobStore(abc.ABC):
    @abc.abstractmethod
    def create(self, job: JobRecord) -> bool:
        """Insert a new job with its first history entry; False if the id already exists."""

    @abc.abstractmethod
    def get(self, job_id: str) -> JobRecord:
        """The job; raise JobNotFound."""

    @abc.abstractmethod
    def list(
        self,
        *,
        user: str | None = None,
        status: Status | None = None,
        label: str | None = None,
        offset: int = 0,
        limit: int = 50,
    ) -> tuple[list[JobRecord], int]:
        """Jobs newest first, filtered by owner (None: all), status and label (the error code
        of the job's last transition: a FAILED job's triage label); with the total count."""

    def each(self, user: str | None = None, page: int = 500) -> Iterator[JobRecord]:
        """Every job of `user` (None: all), each once, read `page` at a time (pages can
        shift while jobs are submitted during the read)."""
        seen: set[str] = set()
        offset = 0
        while True:
            records, total = self.list(user=user, offset=offset, limit=page)
            for r in records:
                if r.job_id not in seen:
                    seen.add(r.job_id)
                    yield r
            offset += page
            if not records or offset >= total:
                return

    @abc.abstractmethod
    def record_transition(self, job_id: str, seq: int, t: Transition) -> bool:
        """Append transition number `seq` (0 is the QUEUED entry) and set the job's status.

        Idempotent: a seq already recorded is ignored (returns False). Raise JobNotFound.
        """

    @abc.abstractmethod
    def update_info(self, job_id: str, info: dict[str, Any]) -> None:
        """Merge `info` into the job's free-form facts. Raise JobNotFound."""

    @abc.abstractmethod
    def delete(self, job_id: str) -> bool:
        """Remove the job; False if it did not exist."""

    # -- accounts: teams, users, tokens (hashes only) and the audit log ----------------

    @abc.abstractmethod
    def add_team(self, team: Team) -> bool:
        """Create a team; False if the name is taken."""

    @abc.abstractmethod
    def get_team(self, name: str) -> Team | None:
        """The team, or None."""

    @abc.abstractmethod
    def list_teams(self) -> list[Team]:
        """Every team, by name."""

    @abc.abstractmethod
    def set_quota(self, name: str, quota: Quota) -> bool:
        """Set a team's guaranteed share; False if there is no such team."""

    @abc.abstractmethod
    def set_max_priority(self, name: str, ceiling: int) -> bool:
        """Set a team's priority ceiling; False if there is no such team."""

    @abc.abstractmethod
    def set_storage_quota(self, name: str, quota_bytes: int) -> bool:
        """Set the bytes a team's buckets may hold (0: no quota); False if no such team."""

    @abc.abstractmethod
    def set_durations(self, name: str, default_s: int, max_s: int) -> bool:
        """Set a team's default and maximum run time, seconds (0: none); False if no such
        team."""

    @abc.abstractmethod
    def add_user(self, user: User) -> bool:
        """Create a user; False if the name is taken."""

    @abc.abstractmethod
    def get_user(self, name: str) -> User | None:
        """The user, or None."""

    @abc.abstractmethod
    def list_users(self) -> list[User]:
        """Every user, by name."""

    @abc.abstractmethod
    def add_token(self, token: TokenRecord) -> None:
        """Store a token's hash for its user."""

    @abc.abstractmethod
    def find_token(self, token_hash: str) -> TokenRecord | None:
        """The token with this hash (valid or not), or None."""

    @abc.abstractmethod
    def list_tokens(self, user: str | None = None) -> list[TokenRecord]:
        """Tokens (their hashes and prefixes), of one user or all."""

    @abc.abstractmethod
    def revoke_tokens(
        self, *, user: str | None = None, token_hash: str | None = None, at: float
    ) -> int:
        """Revoke every token of `user`, or the one with `token_hash`; how many were valid."""

    @abc.abstractmethod
    def append_audit(self, entry: AuditEntry) -> None:
        """Append one entry to the audit log (append-only: nothing updates or deletes it)."""

    @abc.abstractmethod
    def list_audit(self, *, offset: int = 0, limit: int = 100) -> tuple[list[AuditEntry], int]:
        """Audit entries newest first, with the total count."""

    # -- webhooks and their delivery log (dlaas.domain.hooks) ----------------------------------

    @abc.abstractmethod
    def add_hook(self, hook: Hook) -> None:
        """Store a new hook (its id is new: dlaas.domain.hooks.new_hook_id)."""

    @abc.abstractmethod
    def get_hook(self, hook_id: str) -> Hook | None:
        """The hook, or None."""

    @abc.abstractmethod
    def list_hooks(self, user: str | None = None) -> list[Hook]:
        """Hooks oldest first, of one user or all."""

    @abc.abstractmethod
    def delete_hook(self, hook_id: str) -> bool:
        """Remove the hook and its delivery log; False if there was none."""

    @abc.abstractmethod
    def record_delivery(self, delivery: Delivery) -> None:
        """Insert or replace the log entry of `delivery.key` (one per event and hook)."""

    @abc.abstractmethod
    def get_delivery(self, key: str) -> Delivery | None:
        """The log entry of this idempotency key, or None."""

    @abc.abstractmethod
    def list_deliveries(
        self, hook_id: str, *, offset: int = 0, limit: int = 50
    ) -> tuple[list[Delivery], int]:
        """A hook's delivery log, latest attempt first, with the total count."""

    def hooks_for(self, user: str, event: str) -> list[Hook]:
        """The user's hooks that want `event`."""
        return [h for h in self.list_hooks(user) if event in h.events]

    def close(self) -> None:  # noqa: B027 - a default: without connections, nothing to do
        """Release connections."""
