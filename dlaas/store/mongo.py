"""The MongoDB job store: one `jobs` collection, one document per job.

The multi-machine backend of `JobStore`, selected by a `mongodb://` store URL. A job's
history is an array inside its document; each entry carries its sequence number, and
`record_transition` pushes only where no entry with that number exists yet (a single
atomic update), so a replayed mirror never duplicates history. The job's current
status is then set only if this entry is newer than the one it shows, so a late replay
of an older step never moves the status backwards.

Indexes: unique `job_id`; (user, created_at) and (status, created_at) for the listings.
"""

from __future__ import annotations

import json
from typing import Any

import pymongo
from pymongo.errors import DuplicateKeyError

from dlaas.errors import JobNotFound
from dlaas.status import Status, Transition
from dlaas.store.base import JobRecord, JobStore

# Shared with the SQLite backend so both agree on the same edge cases.
from dlaas.store.sqlite import check_info_keys, first_history

_NEWEST_FIRST = [("created_at", pymongo.DESCENDING), ("job_id", pymongo.DESCENDING)]


class MongoJobStore(JobStore):
    """A store on MongoDB.

    `db` names the database; when None, the database in the URL path is used
    (`mongodb://host/dlaas`), else "dlaas". `client` injects a ready client (tests use
    mongomock, an in-process fake, where no real server is available).
    """

    def __init__(
        self,
        url: str,
        db: str | None = None,
        *,
        client: Any = None,
        server_selection_timeout_ms: int = 5000,
    ):
        self._owns_client = client is None
        self._client = client or pymongo.MongoClient(
            url, serverSelectionTimeoutMS=server_selection_timeout_ms
        )
        database = self._client[db] if db else self._client.get_default_database("dlaas")
        self.jobs = database["jobs"]
        self.jobs.create_index("job_id", unique=True)
        self.jobs.create_index([("user", pymongo.ASCENDING), ("created_at", pymongo.DESCENDING)])
        self.jobs.create_index([("status", pymongo.ASCENDING), ("created_at", pymongo.DESCENDING)])
        self.jobs.create_index(_NEWEST_FIRST)

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    def create(self, job: JobRecord) -> bool:
        history = first_history(job)
        last = history[-1]
        doc = {
            "job_id": job.job_id,
            "user": job.user,
            "name": job.name,
            "manifest_yaml": job.manifest_yaml,
            "created_at": job.created_at,
            "status": str(last.status),
            "updated_at": job.updated_at or last.at,
            "code_key": job.code_key,
            "reason": last.reason,
            "error_code": last.error_code,
            "exit_code": last.exit_code,
            "last_seq": len(history) - 1,
            "info": json.loads(json.dumps(job.info)),
            "history": [_entry(seq, t) for seq, t in enumerate(history)],
        }
        try:
            self.jobs.insert_one(doc)
        except DuplicateKeyError:
            return False
        return True

    def get(self, job_id: str) -> JobRecord:
        doc = self.jobs.find_one({"job_id": job_id}, {"_id": 0})
        if doc is None:
            raise JobNotFound(job_id)
        return _record(doc)

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
        query: dict[str, Any] = {}
        if user is not None:
            query["user"] = user
        if status is not None:
            query["status"] = str(Status(status))
        total = self.jobs.count_documents(query)
        if limit == 0:  # MongoDB reads limit 0 as "no limit"
            return [], total
        cursor = self.jobs.find(query, {"_id": 0}).sort(_NEWEST_FIRST).skip(offset).limit(limit)
        return [_record(d) for d in cursor], total

    def record_transition(self, job_id: str, seq: int, t: Transition) -> bool:
        if seq < 0:
            raise ValueError(f"seq {seq}: must not be negative")
        pushed = self.jobs.update_one(
            {"job_id": job_id, "history.seq": {"$ne": seq}},
            {"$push": {"history": {"$each": [_entry(seq, t)], "$sort": {"seq": 1}}}},
        )
        if pushed.matched_count == 0 and self.jobs.count_documents({"job_id": job_id}) == 0:
            raise JobNotFound(job_id)
        # Also run on a replay: it repairs a crash between the push and this update.
        self.jobs.update_one(
            {"job_id": job_id, "last_seq": {"$lt": seq}, "history.seq": seq},
            {
                "$set": {
                    "status": str(t.status),
                    "updated_at": t.at,
                    "reason": t.reason,
                    "error_code": t.error_code,
                    "exit_code": t.exit_code,
                    "last_seq": seq,
                }
            },
        )
        return pushed.modified_count > 0

    def update_info(self, job_id: str, info: dict[str, Any]) -> None:
        check_info_keys(info)
        plain = json.loads(json.dumps(info))  # the same values the SQLite backend would keep
        if not plain:
            if self.jobs.count_documents({"job_id": job_id}) == 0:
                raise JobNotFound(job_id)
            return
        res = self.jobs.update_one(
            {"job_id": job_id}, {"$set": {f"info.{k}": v for k, v in plain.items()}}
        )
        if res.matched_count == 0:
            raise JobNotFound(job_id)

    def delete(self, job_id: str) -> bool:
        return self.jobs.delete_one({"job_id": job_id}).deleted_count > 0


def _entry(seq: int, t: Transition) -> dict[str, Any]:
    return {
        "seq": seq,
        "status": str(t.status),
        "at": t.at,
        "reason": t.reason,
        "error_code": t.error_code,
        "exit_code": t.exit_code,
    }


def _record(doc: dict[str, Any]) -> JobRecord:
    history = [
        Transition(Status(h["status"]), h["at"], h["reason"], h["error_code"], h["exit_code"])
        for h in sorted(doc.get("history", []), key=lambda h: h["seq"])
    ]
    return JobRecord(
        job_id=doc["job_id"],
        user=doc["user"],
        name=doc["name"],
        manifest_yaml=doc["manifest_yaml"],
        created_at=doc["created_at"],
        status=Status(doc["status"]),
        updated_at=doc["updated_at"],
        code_key=doc["code_key"],
        reason=doc["reason"],
        error_code=doc["error_code"],
        exit_code=doc["exit_code"],
        history=history,
        info=doc.get("info", {}),
    )
