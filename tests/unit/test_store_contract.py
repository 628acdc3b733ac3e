"""One contract for every JobStore backend.

Each test that takes `store` (or `listed`) runs against:
- SQLite in memory (always; the real embedded database and the store's own SQL, one
  connection as in every process). The file's own behaviour (WAL, reopening, threads, a
  file from before a migration, its mode) is tested on real files below: a file per
  contract test cost a few fsyncs each, 0.3 s to seconds of tests/unit on a busy disk;
- mongomock, an in-process fake standing in for MongoDB because no MongoDB server can
  run on this machine. It checks the query and update logic, not the server.
The same tests run against a real MongoDB in tests/integration/test_store_mongo.py (when
DLAAS_TEST_MONGO_URL names one): a server is no unit test's business.
"""

from __future__ import annotations

import sqlite3
import threading

import pytest

from dlaas.adapters.store import open_store
from dlaas.adapters.store.base import JobRecord, JobStore
from dlaas.adapters.store.sqlite import SqliteJobStore
from dlaas.domain.accounts import Quota, Team, TokenRecord, User, audit_entry, token_hash
from dlaas.domain.errors import JobNotFound
from dlaas.domain.hooks import Delivery, Hook
from dlaas.domain.status import Status, Transition

MONGOMOCK_LABEL = "mongomock: in-process fake, no real server available here"


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("mongomock", id="mongomock-fake"),
    ]
)
def store(request):
    kind = request.param
    if kind == "sqlite":
        s: JobStore = SqliteJobStore(":memory:")
        yield s
        s.close()
        return
    from dlaas.adapters.store.mongo import MongoJobStore

    mongomock = pytest.importorskip("mongomock", reason=f"{MONGOMOCK_LABEL}; not installed")
    request.node.user_properties.append(("backend", MONGOMOCK_LABEL))
    s = MongoJobStore("mongodb://fake/dlaas", client=mongomock.MongoClient())
    yield s
    s.close()


def job(job_id: str = "j1", user: str = "alice", created_at: float = 100.0, **kw) -> JobRecord:
    return JobRecord(
        job_id=job_id,
        user=user,
        name=kw.pop("name", f"name-{job_id}"),
        manifest_yaml=kw.pop("manifest_yaml", "name: x\n"),
        created_at=created_at,
        history=kw.pop("history", [Transition(Status.QUEUED, created_at, "submitted")]),
        **kw,
    )


def t(status: Status, at: float, reason: str = "r", **kw) -> Transition:
    return Transition(status, at, reason, **kw)


# -- create / get ----------------------------------------------------------------------


def test_create_then_get_returns_every_field(store):
    assert store.create(job(code_key="code/j1.tgz", info={"node": "n1"})) is True
    got = store.get("j1")
    assert (got.job_id, got.user, got.name, got.manifest_yaml) == (
        "j1",
        "alice",
        "name-j1",
        "name: x\n",
    )
    assert got.created_at == 100.0
    assert got.updated_at == 100.0
    assert got.code_key == "code/j1.tgz"
    assert got.status is Status.QUEUED
    assert got.reason == "submitted"
    assert got.history == [Transition(Status.QUEUED, 100.0, "submitted")]
    assert got.last_seq == 0
    assert got.info == {"node": "n1"}


def test_create_duplicate_is_refused_and_keeps_the_first(store):
    assert store.create(job(name="first")) is True
    assert store.create(job(name="second", user="mallory")) is False
    got = store.get("j1")
    assert (got.name, got.user) == ("first", "alice")
    assert len(got.history) == 1


def test_create_without_history_records_a_first_entry(store):
    store.create(job(history=[]))
    got = store.get("j1")
    assert got.history == [Transition(Status.QUEUED, 100.0, "submitted")]
    # ... so the mirror of seq 0 is a replay.
    assert store.record_transition("j1", 0, t(Status.QUEUED, 100.0, "submitted")) is False


def test_get_unknown_raises_job_not_found(store):
    with pytest.raises(JobNotFound) as err:
        store.get("nope")
    assert err.value.job_id == "nope"


# -- list ------------------------------------------------------------------------------


@pytest.fixture
def listed(store):
    # j0..j5, created one second apart; alice owns the even ones, bob the odd ones.
    for i in range(6):
        store.create(job(f"j{i}", user="alice" if i % 2 == 0 else "bob", created_at=100.0 + i))
    store.record_transition("j1", 1, t(Status.PENDING, 200.0))
    store.record_transition("j4", 1, t(Status.HALTED, 201.0))
    store.record_transition("j5", 1, t(Status.PENDING, 202.0))
    return store


def ids(records: list[JobRecord]) -> list[str]:
    return [r.job_id for r in records]


def test_list_is_newest_first_with_total(listed):
    jobs, total = listed.list()
    assert ids(jobs) == ["j5", "j4", "j3", "j2", "j1", "j0"]
    assert total == 6


def test_list_ties_on_created_at_are_stable(store):
    for jid in ("b", "a", "c"):
        store.create(job(jid, created_at=5.0))
    first, _ = store.list()
    again, _ = store.list()
    assert ids(first) == ids(again) == ["c", "b", "a"]


def test_list_filters_by_user_and_status(listed):
    jobs, total = listed.list(user="alice")
    assert (ids(jobs), total) == (["j4", "j2", "j0"], 3)
    jobs, total = listed.list(status=Status.PENDING)
    assert (ids(jobs), total) == (["j5", "j1"], 2)
    jobs, total = listed.list(user="bob", status=Status.QUEUED)
    assert (ids(jobs), total) == (["j3"], 1)
    jobs, total = listed.list(user="carol")
    assert (jobs, total) == ([], 0)


def test_list_filters_by_the_last_transitions_label(listed):
    # j1 and j3 failed with gpu_oom, j5 with disk_full; j0 was requeued after a collective
    # timeout (its last error code) and then went on: only the last transition's code counts.
    listed.record_transition("j1", 2, t(Status.FAILED, 300.0, error_code="gpu_oom"))
    listed.record_transition("j3", 1, t(Status.FAILED, 301.0, error_code="gpu_oom"))
    listed.record_transition("j5", 2, t(Status.FAILED, 302.0, error_code="disk_full"))
    listed.record_transition("j0", 1, t(Status.PENDING, 303.0, error_code="peer_reset"))
    listed.record_transition("j0", 2, t(Status.DOWNLOADING, 304.0))
    jobs, total = listed.list(label="gpu_oom")
    assert (ids(jobs), total) == (["j3", "j1"], 2)
    jobs, total = listed.list(user="bob", status=Status.FAILED, label="disk_full")
    assert (ids(jobs), total) == (["j5"], 1)
    jobs, total = listed.list(user="alice", label="gpu_oom")
    assert (jobs, total) == ([], 0)
    assert listed.list(label="peer_reset") == ([], 0)


def test_list_pages_and_total_ignores_paging(listed):
    pages = [listed.list(offset=o, limit=2) for o in (0, 2, 4, 6)]
    assert [ids(p) for p, _ in pages] == [["j5", "j4"], ["j3", "j2"], ["j1", "j0"], []]
    assert {total for _, total in pages} == {6}
    jobs, total = listed.list(user="alice", offset=1, limit=1)
    assert (ids(jobs), total) == (["j2"], 3)
    jobs, total = listed.list(limit=0)
    assert (jobs, total) == ([], 6)


def test_list_refuses_negative_paging(store):
    with pytest.raises(ValueError, match="offset"):
        store.list(offset=-1)
    with pytest.raises(ValueError, match="limit"):
        store.list(limit=-1)


def test_list_records_carry_history_and_info(listed):
    listed.update_info("j1", {"node": "n2"})
    (j1,), _ = listed.list(user="bob", status=Status.PENDING, offset=1)
    assert j1.job_id == "j1"
    assert [h.status for h in j1.history] == [Status.QUEUED, Status.PENDING]
    assert j1.info == {"node": "n2"}


# -- record_transition -----------------------------------------------------------------


def test_record_transition_appends_and_sets_status(store):
    store.create(job())
    assert store.record_transition("j1", 1, t(Status.PENDING, 101.0, "placed")) is True
    assert store.record_transition("j1", 2, t(Status.DOWNLOADING, 102.0, "started")) is True
    failed = t(Status.FAILED, 103.0, "learner 0 exited 2", error_code="learner_failed", exit_code=2)
    assert store.record_transition("j1", 3, failed) is True
    got = store.get("j1")
    assert [h.status for h in got.history] == [
        Status.QUEUED,
        Status.PENDING,
        Status.DOWNLOADING,
        Status.FAILED,
    ]
    assert got.history[-1] == failed
    assert got.last_seq == 3
    assert (got.status, got.updated_at, got.reason) == (Status.FAILED, 103.0, "learner 0 exited 2")
    assert (got.error_code, got.exit_code) == ("learner_failed", 2)


def test_record_transition_is_idempotent_by_seq(store):
    store.create(job())
    assert store.record_transition("j1", 1, t(Status.PENDING, 101.0, "placed")) is True
    # The replay of seq 1 (even with other content) changes nothing.
    assert store.record_transition("j1", 1, t(Status.HALTED, 999.0, "replay")) is False
    assert store.record_transition("j1", 0, t(Status.QUEUED, 100.0, "submitted")) is False
    got = store.get("j1")
    assert [h.status for h in got.history] == [Status.QUEUED, Status.PENDING]
    assert (got.status, got.updated_at, got.reason) == (Status.PENDING, 101.0, "placed")


def test_late_older_seq_fills_history_but_keeps_newest_status(store):
    store.create(job())
    store.record_transition("j1", 2, t(Status.DOWNLOADING, 102.0, "helper started"))
    assert store.record_transition("j1", 1, t(Status.PENDING, 101.0, "placed")) is True
    got = store.get("j1")
    assert [h.status for h in got.history] == [Status.QUEUED, Status.PENDING, Status.DOWNLOADING]
    assert (got.status, got.reason) == (Status.DOWNLOADING, "helper started")


def test_record_transition_unknown_job_raises(store):
    with pytest.raises(JobNotFound):
        store.record_transition("nope", 1, t(Status.PENDING, 1.0))


def test_record_transition_refuses_negative_seq(store):
    store.create(job())
    with pytest.raises(ValueError, match="seq"):
        store.record_transition("j1", -1, t(Status.PENDING, 1.0))


# -- update_info -----------------------------------------------------------------------


def test_update_info_merges_top_level_keys(store):
    store.create(job(info={"a": 1, "b": {"x": 1}}))
    store.update_info("j1", {"b": {"y": 2}, "learners": ["c0", "c1"]})
    store.update_info("j1", {})
    assert store.get("j1").info == {"a": 1, "b": {"y": 2}, "learners": ["c0", "c1"]}


def test_update_info_unknown_job_raises(store):
    with pytest.raises(JobNotFound):
        store.update_info("nope", {"a": 1})
    with pytest.raises(JobNotFound):
        store.update_info("nope", {})


@pytest.mark.parametrize("key", ["a.b", "$set", ""])
def test_update_info_refuses_path_like_keys(store, key):
    store.create(job())
    with pytest.raises(ValueError, match="info key"):
        store.update_info("j1", {key: 1})
    assert store.get("j1").info == {}


def test_update_info_refuses_values_json_cannot_hold(store):
    store.create(job())
    with pytest.raises(TypeError):
        store.update_info("j1", {"a": object()})
    assert store.get("j1").info == {}


# -- delete ----------------------------------------------------------------------------


def test_delete(store):
    store.create(job())
    store.create(job("j2"))
    store.record_transition("j1", 1, t(Status.HALTED, 101.0))
    assert store.delete("j1") is True
    assert store.delete("j1") is False
    with pytest.raises(JobNotFound):
        store.get("j1")
    assert ids(store.list()[0]) == ["j2"]
    # The id can be used again, with a clean history.
    assert store.create(job()) is True
    assert [h.status for h in store.get("j1").history] == [Status.QUEUED]


# -- SQLite specifics: files, processes, threads ---------------------------------------


def test_open_store_selects_sqlite_for_paths_and_urls(tmp_path):
    a = open_store(f"sqlite:///{tmp_path}/a.db")
    b = open_store(str(tmp_path / "sub" / "b.db"))
    try:
        assert isinstance(a, SqliteJobStore) and a.path == f"{tmp_path}/a.db"
        assert isinstance(b, SqliteJobStore) and (tmp_path / "sub" / "b.db").exists()
    finally:
        a.close()
        b.close()


def test_sqlite_file_is_wal_and_survives_reopen(tmp_path):
    path = tmp_path / "jobs.db"
    s = SqliteJobStore(path)
    s.create(job())
    s.record_transition("j1", 1, t(Status.PENDING, 101.0))
    s.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    again = SqliteJobStore(path)
    assert again.get("j1").status is Status.PENDING
    again.close()


def test_sqlite_threads_share_one_store(tmp_path):
    s = SqliteJobStore(tmp_path / "jobs.db")
    s.create(job("shared"))
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for seq in range(1 + k, 201, 4):
                s.record_transition("shared", seq, t(Status.PENDING, float(seq)))
                s.list(limit=5)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert len(s.get("shared").history) == 201
    s.close()


def test_mongo_replay_repairs_status_after_a_crash_between_updates():
    """mongomock (in-process fake): the entry was pushed, the status update was lost."""
    mongomock = pytest.importorskip("mongomock", reason=f"{MONGOMOCK_LABEL}; not installed")
    from dlaas.adapters.store.mongo import MongoJobStore

    s = MongoJobStore("mongodb://fake/dlaas", client=mongomock.MongoClient())
    s.create(job())
    entry = {"seq": 1, "status": "PENDING", "at": 101.0, "reason": "placed"}
    s.jobs.update_one(
        {"job_id": "j1"}, {"$push": {"history": entry | {"error_code": "", "exit_code": None}}}
    )
    assert s.get("j1").status is Status.QUEUED
    assert s.record_transition("j1", 1, t(Status.PENDING, 101.0, "placed")) is False
    got = s.get("j1")
    assert (got.status, got.reason, len(got.history)) == (Status.PENDING, "placed", 2)


# --------------------------------------------------------------------------- accounts


def test_teams_add_get_list_and_quota(store):
    assert store.add_team(Team("vision", Quota(8, 16.0, 4096), 1.0))
    assert not store.add_team(Team("vision", Quota(1, 1.0, 1), 2.0))  # name taken: kept
    assert store.add_team(Team("nlp", created_at=3.0))
    assert [t.name for t in store.list_teams()] == ["nlp", "vision"]
    assert store.get_team("vision") == Team("vision", Quota(8, 16.0, 4096), 1.0)
    assert store.get_team("nobody") is None
    assert store.set_quota("nlp", Quota(4, 8.0, 1024))
    assert store.get_team("nlp").quota == Quota(4, 8.0, 1024)
    assert not store.set_quota("nobody", Quota(1, 1.0, 1))


def test_users_add_get_list(store):
    assert store.add_user(User("alice", "vision", False, 1.0))
    assert not store.add_user(User("alice", "nlp", True, 2.0))
    assert store.add_user(User("root", "ops", True, 3.0))
    assert store.get_user("alice") == User("alice", "vision", False, 1.0)
    assert store.get_user("bob") is None
    assert [(u.name, u.admin) for u in store.list_users()] == [("alice", False), ("root", True)]


def test_tokens_are_found_by_hash_and_revoked_by_user_or_hash(store):
    a1 = TokenRecord(token_hash("t1"), "alice", "t1", 1.0)
    a2 = TokenRecord(token_hash("t2"), "alice", "t2", 2.0, expires_at=50.0)
    b1 = TokenRecord(token_hash("t3"), "bob", "t3", 3.0)
    for tok in (a1, a2, b1):
        store.add_token(tok)
    assert store.find_token(token_hash("t1")) == a1
    assert store.find_token(token_hash("nope")) is None
    assert [t.prefix for t in store.list_tokens("alice")] == ["t1", "t2"]
    assert len(store.list_tokens()) == 3
    assert store.revoke_tokens(token_hash=token_hash("t3"), at=10.0) == 1
    assert store.revoke_tokens(token_hash=token_hash("t3"), at=11.0) == 0  # already revoked
    assert store.find_token(token_hash("t3")).revoked_at == 10.0
    assert store.revoke_tokens(user="alice", at=12.0) == 2
    assert not store.find_token(token_hash("t1")).valid_at(13.0)
    assert a2.valid_at(49.0) and not a2.valid_at(50.0)


def test_token_store_never_holds_the_token_itself(store):
    store.add_token(TokenRecord(token_hash("dlt_secret-token"), "alice", "dlt_secr", 1.0))
    assert all("dlt_secret-token" not in repr(t) for t in store.list_tokens())


def test_audit_is_newest_first_and_paged(store):
    for i in range(5):
        store.append_audit(audit_entry(float(i), "alice", "submit", f"job-{i}", "x" * 1000))
    entries, total = store.list_audit(offset=1, limit=2)
    assert total == 5
    assert [e.target for e in entries] == ["job-3", "job-2"]
    assert entries[0].seq > entries[1].seq
    assert len(entries[0].detail) == 300  # bounded


def test_job_records_keep_their_team(store):
    store.create(job("jt", team="vision"))
    assert store.get("jt").team == "vision"
    assert store.list(user="alice")[0][0].team == "vision"


def test_sqlite_audit_log_refuses_changes_and_file_is_private(tmp_path):
    import sqlite3

    path = tmp_path / "jobs.db"
    s = SqliteJobStore(path)
    s.append_audit(audit_entry(1.0, "admin", "add-user", "alice"))
    s.close()
    assert path.stat().st_mode & 0o077 == 0
    conn = sqlite3.connect(path)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("DELETE FROM audit")
    conn.close()


def test_sqlite_store_made_before_teams_gains_the_column(tmp_path):
    import sqlite3

    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE jobs (job_id TEXT PRIMARY KEY, user TEXT NOT NULL, name TEXT NOT NULL,"
        " manifest_yaml TEXT NOT NULL, created_at REAL NOT NULL, status TEXT NOT NULL,"
        " updated_at REAL NOT NULL, code_key TEXT NOT NULL DEFAULT '', reason TEXT NOT NULL"
        " DEFAULT '', error_code TEXT NOT NULL DEFAULT '', exit_code INTEGER, last_seq INTEGER"
        " NOT NULL DEFAULT 0, info TEXT NOT NULL DEFAULT '{}')"
    )
    conn.execute(
        "INSERT INTO jobs VALUES ('old', 'u', 'n', 'm', 1.0, 'COMPLETED', 1.0, '', '', '',"
        " NULL, 0, '{}')"
    )
    conn.commit()
    conn.close()
    s = SqliteJobStore(path)
    assert s.get("old").team == ""


# -- webhooks and their delivery log ---------------------------------------------------


def _hook(hook_id: str, user: str = "alice", at: float = 1.0, events=("completed",)) -> Hook:
    return Hook(hook_id, user, f"http://example.test/{hook_id}", tuple(events), at)


def _delivery(key: str, hook_id: str = "h1", at: float = 10.0, **kw) -> Delivery:
    fields = {"job_id": "j1", "event": "completed", "attempts": 1, "state": "pending",
              "last_status": 503, "last_error": "HTTP 503", **kw}  # fmt: skip
    return Delivery(key=key, hook_id=hook_id, at=at, **fields)


def test_hooks_add_get_list_by_user_and_delete(store):
    store.add_hook(_hook("h2", "alice", at=2.0, events=("failed", "completed")))
    store.add_hook(_hook("h1", "alice", at=1.0))
    store.add_hook(_hook("h3", "bob", at=3.0))
    assert store.get_hook("h2") == _hook("h2", "alice", 2.0, ("failed", "completed"))
    assert store.get_hook("nope") is None
    assert [h.hook_id for h in store.list_hooks("alice")] == ["h1", "h2"]
    assert [h.hook_id for h in store.list_hooks()] == ["h1", "h2", "h3"]
    assert [h.hook_id for h in store.hooks_for("alice", "failed")] == ["h2"]
    assert store.hooks_for("bob", "failed") == []
    assert store.delete_hook("h2") is True
    assert store.delete_hook("h2") is False
    assert [h.hook_id for h in store.list_hooks("alice")] == ["h1"]


def test_deliveries_are_one_entry_per_key_latest_first(store):
    store.add_hook(_hook("h1"))
    store.record_delivery(_delivery("k1", at=10.0))
    store.record_delivery(_delivery("k2", at=20.0, job_id="j2"))
    store.record_delivery(_delivery("k3", hook_id="h9", at=30.0))
    # A later attempt at k1 replaces its entry (the log shows the outcome so far).
    done = _delivery("k1", at=40.0, attempts=2, state="delivered", last_status=200, last_error="")
    store.record_delivery(done)
    assert store.get_delivery("k1") == done
    assert store.get_delivery("nope") is None
    entries, total = store.list_deliveries("h1")
    assert total == 2
    assert [d.key for d in entries] == ["k1", "k2"]
    page, total = store.list_deliveries("h1", offset=1, limit=1)
    assert ([d.key for d in page], total) == (["k2"], 2)
    assert store.list_deliveries("h1", limit=0) == ([], 2)
    with pytest.raises(ValueError):
        store.list_deliveries("h1", offset=-1)
    # A delivery that never got an answer has no status.
    store.record_delivery(_delivery("k4", at=50.0, last_status=None, last_error="refused"))
    assert store.get_delivery("k4").last_status is None


def test_deleting_a_hook_drops_its_delivery_log(store):
    store.add_hook(_hook("h1"))
    store.record_delivery(_delivery("k1"))
    store.record_delivery(_delivery("k9", hook_id="h2"))
    store.delete_hook("h1")
    assert store.list_deliveries("h1") == ([], 0)
    assert store.get_delivery("k9") is not None


def test_a_teams_priority_ceiling_is_stored_and_set(store):
    assert store.add_team(Team("nlp", Quota(1, 2.0, 3), 5.0))
    assert store.get_team("nlp").max_priority == 100  # the default ceiling ("high")
    assert store.add_team(Team("cv", Quota(), 6.0, max_priority=1000))
    assert store.set_max_priority("nlp", -7) and not store.set_max_priority("gone", 1)
    assert {t.name: t.max_priority for t in store.list_teams()} == {"cv": 1000, "nlp": -7}
    assert store.get_team("nlp").quota == Quota(1, 2.0, 3)  # the quota untouched


def test_a_teams_storage_quota_is_stored_and_set(store):
    assert store.add_team(Team("nlp", Quota(1, 2.0, 3), 5.0))
    assert store.get_team("nlp").storage_quota_bytes == 0  # none by default
    assert store.add_team(Team("cv", Quota(), 6.0, storage_quota_bytes=50 * 2**30))
    assert store.set_storage_quota("nlp", 2**40) and not store.set_storage_quota("gone", 1)
    assert {t.name: t.storage_quota_bytes for t in store.list_teams()} == {
        "cv": 50 * 2**30, "nlp": 2**40,
    }  # fmt: skip
    assert store.get_team("nlp").max_priority == 100  # the ceiling untouched


def test_a_teams_run_times_are_stored_and_set(store):
    assert store.add_team(Team("nlp", Quota(1, 2.0, 3), 5.0, storage_quota_bytes=7))
    nlp = store.get_team("nlp")
    assert (nlp.default_duration_s, nlp.max_duration_s) == (0, 0)  # none by default
    assert store.add_team(Team("cv", Quota(), 6.0, default_duration_s=7200, max_duration_s=28800))
    assert store.set_durations("nlp", 60, 0) and not store.set_durations("gone", 1, 2)
    assert {t.name: (t.default_duration_s, t.max_duration_s) for t in store.list_teams()} == {
        "cv": (7200, 28800), "nlp": (60, 0),
    }  # fmt: skip
    nlp = store.get_team("nlp")  # the rest untouched
    assert (nlp.quota, nlp.max_priority, nlp.storage_quota_bytes) == (Quota(1, 2.0, 3), 100, 7)


def test_a_sqlite_store_from_before_ceilings_gains_the_default(tmp_path):
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE teams (name TEXT PRIMARY KEY, gpus INTEGER NOT NULL DEFAULT 0,"
            " cpus REAL NOT NULL DEFAULT 0, memory_mb INTEGER NOT NULL DEFAULT 0,"
            " created_at REAL NOT NULL)"
        )
        conn.execute("INSERT INTO teams VALUES ('nlp', 1, 0, 0, 1.0)")
    store = SqliteJobStore(path)
    assert store.get_team("nlp") == Team("nlp", Quota(1, 0.0, 0), 1.0, 100)
    assert store.set_durations("nlp", 60, 120)  # the run-time columns were added too
    assert store.get_team("nlp").max_duration_s == 120
    store.close()
