"""The job store: durable job records and their status history.

An abstract interface with two backends: embedded SQLite (the single-machine default)
and MongoDB through pymongo (selected by a `mongodb://` URL). The live status is in
etcd; the store mirrors every transition, idempotently by its sequence number, so a
replayed mirror after a crash never duplicates history.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

from dlaas.status import Status, Transition


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

    @property
    def last_seq(self) -> int:
        return len(self.history) - 1


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
        offset: int = 0,
        limit: int = 50,
    ) -> tuple[list[JobRecord], int]:
        """Jobs newest first, filtered by owner (None: all) and status; with the total count."""

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

    def close(self) -> None:
        """Release connections."""


def open_store(url: str) -> JobStore:
    """A store for `url`: `mongodb://...` selects MongoDB, `sqlite:///path` or a path SQLite."""
    if url.startswith(("mongodb://", "mongodb+srv://")):
        from dlaas.store.mongo import MongoJobStore

        return MongoJobStore(url)
    from dlaas.store.sqlite import SqliteJobStore

    path = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else url
    return SqliteJobStore(path)
