"""Bugs found by reading the design, each pinned by a test on the real adapters.

etcd, the SQLite job store and SeaweedFS S3 are the real ones. The container engine is a
FAKE where a test needs no containers (`NoEngine`: every image is present, no job has
containers); the scheduler is the real service over gRPC, or an address nobody listens on.
"""

from __future__ import annotations

import io
import sqlite3
import tarfile
import time
import uuid

import pyetcd
import pytest
from fastapi.testclient import TestClient

from dlaas.adapters.etcd_status import StatusKeeper
from dlaas.adapters.grpc_server import start_server
from dlaas.adapters.nodes import NodeSpec
from dlaas.adapters.store.sqlite import SqliteJobStore
from dlaas.clients.sdk import LcmClient, SchedulerClient
from dlaas.config import ApiSettings, PlatformSettings
from dlaas.domain.accounts import TokenRecord, User, token_hash
from dlaas.domain.errors import DeployRefused, TemporaryError, temporary_on_all
from dlaas.domain.status import Status
from dlaas.local.processes import free_port
from dlaas.v1 import lcm_pb2_grpc, scheduler_pb2_grpc
from services.api.app import create_app
from services.lcm import reconciler as lcm_reconciler
from services.lcm.grpc_api import LcmServicer
from services.lcm.service import Lcm
from services.scheduler.service import SchedulerService, SchedulerState

ADMIN, ALICE = "tok-admin", "tok-alice"


class NoEngine:
    """FAKE container engine: every image is present, no job has containers."""

    def image_present(self, image: str) -> bool:
        return True

    def containers(self, job_id: str) -> list:
        return []

    def remove_job(self, job_id: str) -> None:
        pass

    def remove_run(self, job_id: str) -> None:  # as the port's default: the whole job
        self.remove_job(job_id)


@pytest.fixture
def etcd(etcd_server, etcd_prefix):
    client = pyetcd.client(host=etcd_server.host, port=etcd_server.port, timeout=5)
    yield client
    client.delete_prefix(etcd_prefix + "/")
    client.close()


MANIFEST = (
    "name: j\nframework: {name: python, version: '3.11', command: python3 train.py}\n"
    "data_stores:\n  - id: s\n    type: s3\n    training_data: {container: digits-data}\n"
    "    training_results: {container: digits-results}\n"
)


def platform_settings(etcd_prefix, s3_server) -> PlatformSettings:
    return PlatformSettings(
        s3_endpoint=s3_server.endpoint,
        s3_access_key=s3_server.access_key,
        s3_secret_key=s3_server.secret_key,
        s3_bucket=f"plat-{uuid.uuid4().hex[:12]}",
        etcd_prefix=etcd_prefix,
        platform_id=f"t{etcd_prefix}",
    )


@pytest.fixture
def make_lcm(etcd, etcd_prefix, job_store, s3_server):
    """An Lcm (the leader) over `engine` with the real scheduler service behind gRPC."""
    servers = []

    def make(engine, store=None) -> Lcm:
        store = store or job_store
        nodes = [NodeSpec(name="local", cpus=2, memory_mb=2048)]
        sched = SchedulerService(SchedulerState(etcd, etcd_prefix), nodes, "fifo")
        addr = f"127.0.0.1:{free_port()}"
        servers.append(
            start_server(
                addr,
                lambda s: scheduler_pb2_grpc.add_SchedulerServicer_to_server(sched, s),
                ["dlaas.v1.Scheduler"],
            )
        )
        settings = platform_settings(etcd_prefix, s3_server)
        lcm = Lcm(settings, StatusKeeper(etcd, store, etcd_prefix), store, {"local": engine},
                  SchedulerClient(addr), nodes)  # fmt: skip
        lcm._leading.set()  # the tests drive the leader's loop steps by hand
        return lcm

    yield make
    for server in servers:
        server.stop(0)


def running_job(lcm: Lcm, job_id: str = "job-1") -> str:
    """Submit `job_id`, let the scheduler place it, and record it as running there."""
    lcm.submit(job_id, "alice", MANIFEST, "")
    [decision] = lcm.scheduler.schedule()
    placement = [{"learner": a.learner, "node": a.node, "gpu_indices": []}
                 for a in decision.allocations]  # fmt: skip
    lcm.keeper.set_placement(job_id, placement)
    lcm.keeper.walk_to(job_id, Status.PROCESSING, "deployed")
    return job_id


def tar_gz(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


# --------------------------------------------------------------- 2: submit, scheduler down


def test_a_submit_while_the_scheduler_is_down_is_a_503_and_leaves_nothing(
    etcd, etcd_prefix, job_store, s3_server, s3_client
):
    """API -> gRPC -> the real Lcm (real etcd, real store) -> a scheduler nobody runs."""
    settings = platform_settings(etcd_prefix, s3_server)
    down = SchedulerClient(f"127.0.0.1:{free_port()}", timeout=2)
    lcm = Lcm(settings, StatusKeeper(etcd, job_store, etcd_prefix), job_store,
              {"local": NoEngine()}, down, [])  # fmt: skip
    addr = f"127.0.0.1:{free_port()}"
    server = start_server(
        addr,
        lambda s: lcm_pb2_grpc.add_LifecycleManagerServicer_to_server(LcmServicer(lcm), s),
        ["dlaas.v1.LifecycleManager"],
    )
    job_store.add_user(User("alice", "", False, 1.0))
    job_store.add_token(TokenRecord(token_hash(ALICE), "alice", ALICE[:6], 1.0))
    app = create_app(settings, ApiSettings(admin_token=ADMIN), store=job_store,
                     lcm=LcmClient(addr, timeout=20), s3=s3_client, docker=False,
                     scheduler=down)  # fmt: skip
    files = {
        "manifest": ("m.yml", MANIFEST, "application/yaml"),
        "code": ("c.tar.gz", tar_gz({"train.py": b"print(1)\n"}), "application/gzip"),
    }
    try:
        with TestClient(app) as client:
            r = client.post("/v1/jobs", files=files, headers={"Authorization": f"Bearer {ALICE}"})
            listed = client.get("/v1/jobs", headers={"Authorization": f"Bearer {ALICE}"})
    finally:
        server.stop(0)
    assert r.status_code == 503, r.text
    assert r.json()["error"] == "unavailable" and "Retry-After" in r.headers
    # No job record, no status key in etcd, no code archive: nothing QUEUED without a queue.
    assert job_store.list(user="alice") == ([], 0)
    assert listed.json()["total"] == 0
    assert list(etcd.get_prefix(etcd_prefix + "/")) == []
    objects = s3_client.list_objects_v2(Bucket=settings.s3_bucket)
    assert objects.get("KeyCount", 0) == 0
    # The id the API made is nowhere either (the audit log has no submit of it).
    entries, _ = job_store.list_audit()
    assert not [e for e in entries if e.action == "submit"]


# --------------------------------------------------------------- 3: resize races a release


class WriteHook:
    """Passes every call to the real etcd client; runs `before_write` once, just before the
    first write (a put or a transaction): another replica's call landing in between."""

    def __init__(self, etcd, before_write):
        self._etcd, self._before = etcd, before_write

    def __getattr__(self, name):
        return getattr(self._etcd, name)

    def _hook(self):
        before, self._before = self._before, None
        if before is not None:
            before()

    def put(self, *args, **kw):
        self._hook()
        return self._etcd.put(*args, **kw)

    def transaction(self, *args, **kw):
        self._hook()
        return self._etcd.transaction(*args, **kw)


def test_a_release_between_the_read_and_the_write_of_a_resize_stays_released(etcd, etcd_prefix):
    from services.scheduler.policy import Allocation, QueuedJob
    from services.scheduler.service import SchedulerState

    other = SchedulerState(etcd, etcd_prefix)  # the LCM's release, through another replica
    job = QueuedJob(job_id="el", user="u", learners=2, gpus_per_learner=0, cpus_per_learner=1.0,
                    memory_mb_per_learner=256, min_learners=1, max_learners=2)  # fmt: skip
    allocs = [
        Allocation(learner=i, node="local", gpu_indices=(), cpus=1.0, memory_mb=256)
        for i in range(2)
    ]
    assert other.enqueue(job) and other.start(job, allocs, now=1.0)

    racing = SchedulerState(WriteHook(etcd, lambda: other.release("el")), etcd_prefix)
    assert racing.resize("el", tuple(allocs[:1]), now=2.0) is False
    assert other.running_job("el") is None  # not resurrected: its GPUs stay free
    assert other.running() == [] and other.queue() == []


def test_a_resize_with_no_race_writes_the_new_allocation(etcd, etcd_prefix):
    from services.scheduler.policy import Allocation, QueuedJob
    from services.scheduler.service import SchedulerState

    state = SchedulerState(etcd, etcd_prefix)
    job = QueuedJob(job_id="el", user="u", learners=2, gpus_per_learner=0, cpus_per_learner=1.0,
                    memory_mb_per_learner=256, min_learners=1, max_learners=2)  # fmt: skip
    allocs = [
        Allocation(learner=i, node="local", gpu_indices=(), cpus=1.0, memory_mb=256)
        for i in range(2)
    ]
    assert state.enqueue(job) and state.start(job, allocs, now=1.0)
    assert state.resize("el", (allocs[1],), now=2.0) is True
    resized = state.running_job("el")
    assert resized is not None and resized.learners == 1 and resized.last_resize_time == 2.0
    assert [a.learner for a in resized.allocations] == [0]
    assert state.running_entries()["el"][1] == job  # the original request is kept


# --------------------------------------------------------------- 4: a failed requeue teardown


class FlakyEngine(NoEngine):
    """FAKE container engine whose job removal fails `fails` times, then works; `on_fail`
    runs at each failure (another replica acting meanwhile)."""

    def __init__(self, fails: int, on_fail=lambda: None):
        self.fails, self.on_fail, self.removals = fails, on_fail, 0

    def remove_job(self, job_id: str) -> None:
        self.removals += 1
        if self.removals <= self.fails:
            self.on_fail()
            raise ConnectionError("the engine did not answer")


def test_a_requeue_whose_teardown_fails_is_retried_until_the_job_is_queued(make_lcm, monkeypatch):
    monkeypatch.setattr(lcm_reconciler, "TEARDOWN_RETRY_S", 0.01)
    engine = FlakyEngine(fails=2)
    lcm = make_lcm(engine)
    job_id = running_job(lcm)
    lcm.keeper.transition(job_id, Status.QUEUED, "its node is being drained")

    lcm._requeue_finish(job_id, not_before=0.0, keep=False)  # what requeue's thread runs

    assert engine.removals == 3  # failed, failed, removed
    assert lcm._due == {job_id: 0.0}  # the leader's loop queues it once its backoff is over
    lcm._enqueue_due()
    assert [e.job_id for e in lcm.scheduler.queue()] == [job_id]
    assert lcm._held_allocation(job_id) == []  # its old allocation was given back


def test_a_failing_requeue_stops_retrying_once_the_job_moved_on(make_lcm, monkeypatch):
    monkeypatch.setattr(lcm_reconciler, "TEARDOWN_RETRY_S", 0.01)
    holder = {}
    engine = FlakyEngine(
        fails=10**6,
        on_fail=lambda: (
            engine.removals == 2
            and holder["lcm"].keeper.transition("job-1", Status.HALTED, "halted by the user")
        ),
    )
    lcm = holder["lcm"] = make_lcm(engine)
    job_id = running_job(lcm)
    lcm.keeper.transition(job_id, Status.QUEUED, "its node is being drained")

    lcm._requeue_finish(job_id, not_before=0.0, keep=False)  # returns: the job was halted

    assert engine.removals == 2 and lcm._due == {}


# --------------------------------------------------------------- 5: deploy meets a locked store


class DeployingEngine(NoEngine):
    """FAKE container engine: deploys by naming the plan's containers, or raises `refuse`."""

    def __init__(self, refuse: Exception | None = None):
        self.refuse, self.deployed = refuse, 0

    def deploy(self, plan) -> list[str]:
        if self.refuse is not None:
            raise self.refuse
        self.deployed += 1
        return [c.name for c in plan.containers]


# The REAL store's mapping of SQLite's outages, for the methods the fakes below redefine.
sqlite_outage = temporary_on_all((sqlite3.OperationalError,), "the job store")


@sqlite_outage
class LockedOnceStore(SqliteJobStore):
    """The real SQLite store, whose read of a job fails while `locked` (after `skip` more
    reads) as a store held locked by another writer does (sqlite3.OperationalError, which
    the store raises as TemporaryError)."""

    locked = False
    skip = 0

    def get(self, job_id: str):
        if self.locked:
            if self.skip:
                self.skip -= 1
            else:
                self.locked = False
                raise sqlite3.OperationalError("database is locked")
        return super().get(job_id)


def placed(lcm: Lcm, job_id: str = "job-1") -> str:
    """Submit `job_id` and carry out the scheduler's start: PENDING, then deployed."""
    lcm.submit(job_id, "alice", MANIFEST, "")
    [decision] = lcm.scheduler.schedule()
    lcm._carry_out(decision)
    return job_id


def test_a_locked_store_during_deploy_leaves_the_job_pending_and_it_is_deployed_again(
    make_lcm, tmp_path
):
    store = LockedOnceStore(tmp_path / "locked.db")
    engine = DeployingEngine()
    lcm = make_lcm(engine, store=store)
    lcm.submit("job-1", "alice", MANIFEST, "")
    [decision] = lcm.scheduler.schedule()
    # The PENDING transition reads it first, then the placement's learner count is recorded
    # (usage accounting); the deploy's read of the job fails.
    store.locked, store.skip = True, 2
    lcm._carry_out(decision)

    assert lcm.keeper.get("job-1").status == Status.PENDING  # not FAILED
    assert engine.deployed == 0 and lcm._held_allocation("job-1")  # it keeps its GPUs

    # The leader's stale-PENDING check deploys it again, once PENDING_STALE_S has passed.
    lcm.clock = lambda: time.time() + lcm_reconciler.PENDING_STALE_S + 1
    lcm.redeploy_stale()
    assert engine.deployed == 1
    assert lcm.keeper.get("job-1").status == Status.DOWNLOADING
    assert store.get("job-1").status == Status.DOWNLOADING


def test_the_jobs_own_fault_during_deploy_still_fails_it(make_lcm):
    engine = DeployingEngine(refuse=DeployRefused("the container engine refused the job: x"))
    lcm = make_lcm(engine)
    job_id = placed(lcm)
    state = lcm.keeper.get(job_id)
    assert state.status == Status.FAILED and state.error_code == "deploy_refused"
    assert lcm._held_allocation(job_id) == []


# --------------------------------------------------------------- 7: the store's mirror repaired


@sqlite_outage
class MirrorLostStore(SqliteJobStore):
    """The real SQLite store, whose next status mirror fails while `lose` is set (as a crash,
    or a locked store, between etcd's write and the store's would)."""

    lose = False

    def record_transition(self, job_id, seq, t):
        if self.lose:
            self.lose = False
            raise sqlite3.OperationalError("database is locked")
        return super().record_transition(job_id, seq, t)


def lose_mirror(lcm: Lcm, job_id: str, target: Status, **kw) -> None:
    """Move the job in etcd while the store's mirror of it fails."""
    lcm.store.lose = True
    with pytest.raises(TemporaryError, match="OperationalError"):
        lcm.keeper.transition(job_id, target, f"to {target}", **kw)
    assert lcm.store.get(job_id).status != target  # the store is behind etcd now


def in_sync(lcm: Lcm, job_id: str) -> bool:
    record, state = lcm.store.get(job_id), lcm.keeper.get(job_id)
    return record.status == state.status and record.history[-1] == state.transition()


def test_a_new_leaders_reconcile_mirrors_what_the_store_missed(make_lcm, tmp_path):
    lcm = make_lcm(NoEngine(), store=MirrorLostStore(tmp_path / "m.db"))
    job_id = running_job(lcm)
    lose_mirror(lcm, job_id, Status.FAILED, error_code="learner_failed", exit_code=3)

    lcm.reconcile()

    assert in_sync(lcm, job_id)
    record = lcm.store.get(job_id)
    assert (record.status, record.error_code, record.exit_code) == (
        Status.FAILED,
        "learner_failed",
        3,
    )
    assert [t.status for t in record.history] == [
        Status.QUEUED, Status.PENDING, Status.DOWNLOADING, Status.PROCESSING, Status.FAILED
    ]  # fmt: skip


def test_the_leader_mirrors_what_the_store_missed_periodically(make_lcm, tmp_path):
    lcm = make_lcm(NoEngine(), store=MirrorLostStore(tmp_path / "m.db"))
    lcm.reconcile()  # elected: every job checked (none yet)
    for job_id in ("job-1", "job-2"):
        lcm.submit(job_id, "alice", MANIFEST, "")
    lose_mirror(lcm, "job-1", Status.PENDING)  # active
    lose_mirror(lcm, "job-2", Status.FAILED, error_code="capacity_exceeded")  # just ended
    assert not in_sync(lcm, "job-1") and not in_sync(lcm, "job-2")

    lcm.repair_mirrors()  # within MIRROR_CHECK_S of the reconcile: not yet
    assert not in_sync(lcm, "job-1")
    lcm.clock = lambda: time.time() + lcm_reconciler.MIRROR_CHECK_S + 1
    lcm.repair_mirrors()

    assert in_sync(lcm, "job-1") and in_sync(lcm, "job-2")
    assert lcm.keeper.repair_mirrors() == []  # nothing left behind; a replay adds nothing
    assert [t.status for t in lcm.store.get("job-1").history] == [Status.QUEUED, Status.PENDING]


def test_the_next_transition_mirrors_the_state_the_store_missed_first(make_lcm, tmp_path):
    """A writer killed between etcd and the store (the monitor, say) left STORING out of the
    store; the next transition, by anyone, records it before its own: no hole in history."""
    lcm = make_lcm(NoEngine(), store=MirrorLostStore(tmp_path / "m.db"))
    job_id = running_job(lcm)
    lose_mirror(lcm, job_id, Status.STORING)

    lcm.keeper.transition(job_id, Status.COMPLETED, "stored")

    assert in_sync(lcm, job_id)
    assert [t.status for t in lcm.store.get(job_id).history] == [
        Status.QUEUED, Status.PENDING, Status.DOWNLOADING, Status.PROCESSING, Status.STORING,
        Status.COMPLETED,
    ]  # fmt: skip
