"""The MongoDB job store: one `jobs` collection, one document per job.

The multi-machine backend of `JobStore`, selected by a `mongodb://` store URL. A job's
history is an array inside its document; each entry carries its sequence number, and
`record_transition` pushes only where no entry with that number exists yet (a single
atomic update), so a replayed mirror never duplicates history. The job's current
status is then set only if this entry is newer than the one it shows, so a late replay
of an older step never moves the status backwards.

Indexes: unique `job_id`; (user, created_at) and (status, created_at) for the listings.

Errors: pymongo's own (the server not answering, failing over, refusing) leave every
method as the domain's TemporaryError.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import pymongo
from pymongo.errors import DuplicateKeyError, PyMongoError

from dlaas.adapters.store.base import JobRecord, JobStore, job_record

# Shared with the SQLite backend so both agree on the same edge cases.
from dlaas.adapters.store.sqlite import check_info_keys, first_history
from dlaas.domain.accounts import DEFAULT_MAX_PRIORITY, AuditEntry, Quota, Team, TokenRecord, User
from dlaas.domain.errors import JobNotFound, temporary_on_all
from dlaas.domain.hooks import Delivery, Hook
from dlaas.domain.status import Status, Transition

_NEWEST_FIRST = [("created_at", pymongo.DESCENDING), ("job_id", pymongo.DESCENDING)]


@temporary_on_all((PyMongoError,), "the job store")
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
        self.teams = database["teams"]
        self.teams.create_index("name", unique=True)
        self.users = database["users"]
        self.users.create_index("name", unique=True)
        self.tokens = database["tokens"]
        self.tokens.create_index("hash", unique=True)
        self.tokens.create_index("user")
        self.audit = database["audit"]
        self.audit.create_index("seq", unique=True)
        self.counters = database["counters"]
        self.hooks = database["hooks"]
        self.hooks.create_index("hook_id", unique=True)
        self.hooks.create_index([("user", pymongo.ASCENDING), ("created_at", pymongo.ASCENDING)])
        self.deliveries = database["deliveries"]
        self.deliveries.create_index("key", unique=True)
        self.deliveries.create_index([("hook_id", pymongo.ASCENDING), ("at", pymongo.DESCENDING)])

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
            "team": job.team,
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
        label: str | None = None,
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
        if label is not None:
            query["error_code"] = label
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

    # -- accounts -----------------------------------------------------------------------

    def _insert(self, collection, doc: dict[str, Any]) -> bool:
        try:
            collection.insert_one(doc)
        except DuplicateKeyError:
            return False
        return True

    def add_team(self, team: Team) -> bool:
        q = team.quota
        return self._insert(
            self.teams,
            {"name": team.name, "gpus": q.gpus, "cpus": q.cpus, "memory_mb": q.memory_mb,
             "created_at": team.created_at, "max_priority": team.max_priority,
             "storage_quota_bytes": team.storage_quota_bytes,
             "default_duration_s": team.default_duration_s,
             "max_duration_s": team.max_duration_s},
        )  # fmt: skip

    def get_team(self, name: str) -> Team | None:
        doc = self.teams.find_one({"name": name}, {"_id": 0})
        return _team(doc) if doc else None

    def list_teams(self) -> list[Team]:
        return [_team(d) for d in self.teams.find({}, {"_id": 0}).sort("name", 1)]

    def set_quota(self, name: str, quota: Quota) -> bool:
        res = self.teams.update_one(
            {"name": name},
            {"$set": {"gpus": quota.gpus, "cpus": quota.cpus, "memory_mb": quota.memory_mb}},
        )
        return res.matched_count > 0

    def set_max_priority(self, name: str, ceiling: int) -> bool:
        res = self.teams.update_one({"name": name}, {"$set": {"max_priority": ceiling}})
        return res.matched_count > 0

    def set_storage_quota(self, name: str, quota_bytes: int) -> bool:
        res = self.teams.update_one({"name": name}, {"$set": {"storage_quota_bytes": quota_bytes}})
        return res.matched_count > 0

    def set_durations(self, name: str, default_s: int, max_s: int) -> bool:
        res = self.teams.update_one(
            {"name": name}, {"$set": {"default_duration_s": default_s, "max_duration_s": max_s}}
        )
        return res.matched_count > 0

    def add_user(self, user: User) -> bool:
        return self._insert(
            self.users,
            {"name": user.name, "team": user.team, "admin": user.admin,
             "created_at": user.created_at},
        )  # fmt: skip

    def get_user(self, name: str) -> User | None:
        doc = self.users.find_one({"name": name}, {"_id": 0})
        return _user(doc) if doc else None

    def list_users(self) -> list[User]:
        return [_user(d) for d in self.users.find({}, {"_id": 0}).sort("name", 1)]

    def add_token(self, token: TokenRecord) -> None:
        self.tokens.insert_one(
            {"hash": token.hash, "user": token.user, "prefix": token.prefix,
             "created_at": token.created_at, "expires_at": token.expires_at,
             "revoked_at": token.revoked_at}
        )  # fmt: skip

    def find_token(self, token_hash: str) -> TokenRecord | None:
        doc = self.tokens.find_one({"hash": token_hash}, {"_id": 0})
        return _token(doc) if doc else None

    def list_tokens(self, user: str | None = None) -> list[TokenRecord]:
        query = {"user": user} if user is not None else {}
        return [_token(d) for d in self.tokens.find(query, {"_id": 0}).sort("created_at", 1)]

    def revoke_tokens(
        self, *, user: str | None = None, token_hash: str | None = None, at: float
    ) -> int:
        if (user is None) == (token_hash is None):
            raise ValueError("revoke_tokens: give exactly one of user and token_hash")
        query: dict[str, Any] = {"user": user} if user is not None else {"hash": token_hash}
        res = self.tokens.update_many({**query, "revoked_at": 0}, {"$set": {"revoked_at": at}})
        return res.modified_count

    def append_audit(self, entry: AuditEntry) -> None:
        counter = self.counters.find_one_and_update(
            {"_id": "audit"}, {"$inc": {"seq": 1}}, upsert=True,
            return_document=pymongo.ReturnDocument.AFTER,
        )  # fmt: skip
        self.audit.insert_one(
            {"seq": counter["seq"], "at": entry.at, "actor": entry.actor,
             "action": entry.action, "target": entry.target, "detail": entry.detail}
        )  # fmt: skip

    def list_audit(self, *, offset: int = 0, limit: int = 100) -> tuple[list[AuditEntry], int]:
        if offset < 0 or limit < 0:
            raise ValueError("offset and limit must not be negative")
        total = self.audit.count_documents({})
        if limit == 0:
            return [], total
        docs = self.audit.find({}, {"_id": 0}).sort("seq", -1).skip(offset).limit(limit)
        return [
            AuditEntry(d["at"], d["actor"], d["action"], d["target"], d["detail"], d["seq"])
            for d in docs
        ], total

    # -- webhooks -----------------------------------------------------------------------

    def add_hook(self, hook: Hook) -> None:
        self.hooks.insert_one(
            {"hook_id": hook.hook_id, "user": hook.user, "url": hook.url,
             "events": list(hook.events), "created_at": hook.created_at}
        )  # fmt: skip

    def get_hook(self, hook_id: str) -> Hook | None:
        doc = self.hooks.find_one({"hook_id": hook_id}, {"_id": 0})
        return _hook(doc) if doc else None

    def list_hooks(self, user: str | None = None) -> list[Hook]:
        query = {"user": user} if user is not None else {}
        docs = self.hooks.find(query, {"_id": 0}).sort([("created_at", 1), ("hook_id", 1)])
        return [_hook(d) for d in docs]

    def delete_hook(self, hook_id: str) -> bool:
        gone = self.hooks.delete_one({"hook_id": hook_id}).deleted_count > 0
        self.deliveries.delete_many({"hook_id": hook_id})
        return gone

    def record_delivery(self, delivery: Delivery) -> None:
        doc = asdict(delivery)
        self.deliveries.replace_one({"key": delivery.key}, doc, upsert=True)

    def get_delivery(self, key: str) -> Delivery | None:
        doc = self.deliveries.find_one({"key": key}, {"_id": 0})
        return Delivery(**doc) if doc else None

    def list_deliveries(
        self, hook_id: str, *, offset: int = 0, limit: int = 50
    ) -> tuple[list[Delivery], int]:
        if offset < 0 or limit < 0:
            raise ValueError("offset and limit must not be negative")
        total = self.deliveries.count_documents({"hook_id": hook_id})
        if limit == 0:
            return [], total
        docs = (
            self.deliveries.find({"hook_id": hook_id}, {"_id": 0})
            .sort([("at", -1), ("key", -1)])
            .skip(offset)
            .limit(limit)
        )
        return [Delivery(**d) for d in docs], total


def _hook(d: dict[str, Any]) -> Hook:
    return Hook(d["hook_id"], d["user"], d["url"], tuple(d["events"]), d["created_at"])


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
    # A job stored before teams has none.
    return job_record({"team": "", **doc}, history, doc.get("info", {}))


def _team(d: dict[str, Any]) -> Team:
    # A team stored before priority ceilings has the default one (and no storage quota, no
    # run times).
    ceiling = d.get("max_priority", DEFAULT_MAX_PRIORITY)
    quota = Quota(d["gpus"], d["cpus"], d["memory_mb"])
    return Team(
        d["name"], quota, d["created_at"], ceiling, d.get("storage_quota_bytes", 0),
        d.get("default_duration_s", 0), d.get("max_duration_s", 0),
    )  # fmt: skip


def _user(d: dict[str, Any]) -> User:
    return User(d["name"], d["team"], bool(d["admin"]), d["created_at"])


def _token(d: dict[str, Any]) -> TokenRecord:
    return TokenRecord(
        d["hash"], d["user"], d["prefix"], d["created_at"], d["expires_at"], d["revoked_at"]
    )
