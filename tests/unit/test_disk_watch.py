"""Disk limits while a job runs: the REAL job monitor (observe -> decide -> act) over the
FAKES of its ports (tests/lcm_fakes.py) and a fake clock, and the helper's volume walk
(services/learner_helper/diskwatch.py) on a real directory.

A learner whose writable layer grows past its disk size, or whose node's helper reports the
job volume full, ends its job FAILED `disk_full` with the learner's last log lines, within
one measure (`disk_poll_s`); a neighbour job on the same engine runs on."""

from __future__ import annotations

import threading
import time

from lcm_fakes import FakeEngine, InMemoryStatusRepo

from dlaas.adapters.store.base import JobRecord
from dlaas.domain import jobspec
from dlaas.domain.locations import S3Location
from dlaas.domain.manifest import parse_manifest
from dlaas.domain.plan import deployment_plan
from dlaas.domain.status import Status
from services.jobmonitor.activity import Limits
from services.jobmonitor.monitor import JobMonitor
from services.learner_helper import diskwatch

T0 = 1_000_000.0
GIB = 2**30
POLL_S = 10.0


class Cluster:
    """Jobs on one fake engine, watched by the real monitor on a fake clock."""

    def __init__(self, store):
        self.now = T0
        self.store = store
        self.repo = InMemoryStatusRepo(store, clock=lambda: self.now)
        self.engine = FakeEngine()
        self.monitor = JobMonitor(
            {"local": self.engine}, self.repo, store, lambda job_id, ended: None,
            clock=lambda: self.now, requeue=lambda *a, **k: None,
            limits=Limits(learner_disk_mb=4096, disk_poll_s=POLL_S),
        )  # fmt: skip
        self.learners: dict[str, list] = {}
        self.helpers: dict = {}

    def job(self, job_id: str, extra: str = "", learners: int = 1) -> None:
        text = (
            f"name: {job_id}\nlearners: {learners}\n{extra}"
            "framework: {name: python, version: '3', command: python3 train.py}\n"
        )
        self.store.create(JobRecord(job_id, "alice", job_id, text, self.now))
        self.repo.create(job_id)
        self.repo.transition(job_id, Status.PENDING, "placed")
        self.helpers[job_id] = self.engine.add(job_id, jobspec.ROLE_HELPER)
        self.learners[job_id] = [
            self.engine.add(job_id, jobspec.ROLE_LEARNER, i) for i in range(learners)
        ]
        self.repo.transition(job_id, Status.DOWNLOADING, "started")
        self.repo.transition(job_id, Status.PROCESSING, "data ready")

    def reconcile(self, *jobs: str) -> None:
        for job_id in jobs:
            self.monitor.reconcile_job(job_id)

    def status(self, job_id: str) -> Status:
        return self.repo.get(job_id).status


def test_a_learner_over_its_disk_fails_its_job_disk_full_and_a_neighbour_runs_on(job_store):
    c = Cluster(job_store)
    c.job("full", "disk: 1GiB\n")
    c.job("neighbour")  # the platform's default disk: 4 GiB here
    (learner,) = c.learners["full"]
    c.engine.print(learner, "epoch 1\nwriting shards\n")
    c.engine.layers[learner.id] = GIB // 2
    c.engine.layers[c.learners["neighbour"][0].id] = 3 * GIB  # within its 4 GiB
    c.reconcile("full", "neighbour")
    assert c.status("full") == c.status("neighbour") == Status.PROCESSING
    # It writes past 1 GiB: seen at the next measure, not before.
    c.engine.layers[learner.id] = GIB + GIB // 4
    c.now += POLL_S / 2
    c.reconcile("full")
    assert c.status("full") == Status.PROCESSING  # measured POLL_S / 2 ago
    c.now += POLL_S / 2
    c.reconcile("full", "neighbour")
    record = job_store.get("full")
    assert (record.status, record.error_code) == (Status.FAILED, "disk_full")
    assert record.reason.startswith(
        "disk_full: learner 0 wrote 1.25 GiB to its container's file system; its disk size "
        "is 1 GiB (the manifest's `disk`): the job was stopped"
    ), record.reason
    assert record.reason.endswith("last log lines of learner 0:\nepoch 1\nwriting shards")
    assert learner.name in c.engine.stopped_containers  # stopped like any failed job
    assert c.status("neighbour") == Status.PROCESSING
    assert c.learners["neighbour"][0].name not in c.engine.stopped_containers


def test_the_helper_reporting_the_volume_full_fails_the_job_disk_full(job_store):
    c = Cluster(job_store)
    c.job("vol", "disk: 1GiB\n", learners=2)
    c.engine.print(c.learners["vol"][0], "loading\n")
    line = jobspec.format_event(jobspec.EVENT_DISK_FULL, bytes=3 * GIB, limit=2 * GIB)
    c.engine.print(c.helpers["vol"], line + "\n")
    deadline = time.monotonic() + 5  # the helper's log is followed by a thread
    while c.status("vol") != Status.FAILED and time.monotonic() < deadline:
        c.reconcile("vol")
        time.sleep(0.02)
    record = job_store.get("vol")
    assert (record.status, record.error_code) == (Status.FAILED, "disk_full")
    assert "the job volume holds 3 GiB; its learners' disk sizes add up to 2 GiB" in record.reason
    assert record.reason.endswith("last log lines of learner 0:\nloading")


def test_a_job_within_its_disk_is_looked_at_again_within_the_poll(job_store):
    c = Cluster(job_store)
    c.job("ok", "disk: 1GiB\n")
    decision = c.monitor.reconcile_job("ok")
    assert decision is not None and decision.recheck_at <= c.now + POLL_S


def test_the_plan_gives_each_learner_its_disk_and_each_helper_its_nodes_share():
    m = parse_manifest(
        "name: p\nlearners: 3\ndisk: 2GiB\nframework: {name: python, command: python3 t.py}\n"
    )
    loc = S3Location("http://s3", "ak", "sk", "b", "")
    plan = deployment_plan(
        platform_id="p", job_id="j", user="u", manifest=m, learners=3, gpu_indices=[],
        image="i", helper_image="h", data=None, results=loc, code=None,
        nodes=["a", "a", "b"], learner_disk_mb=999,
    )  # fmt: skip
    assert [s.disk_mb for s in plan.learners] == [2048] * 3
    assert [h.env[jobspec.ENV_VOLUME_LIMIT_MB] for h in plan.helpers] == ["4096", "2048"]
    default = parse_manifest("name: p\nframework: {name: python, command: python3 t.py}\n")
    plan = deployment_plan(
        platform_id="p", job_id="j", user="u", manifest=default, learners=1, gpu_indices=[],
        image="i", helper_image="h", data=None, results=loc, code=None, learner_disk_mb=999,
    )  # fmt: skip
    assert plan.learners[0].disk_mb == 999 and plan.helper.env[jobspec.ENV_VOLUME_LIMIT_MB] == "999"


def test_the_helper_counts_allocated_blocks_and_stops_past_the_limit(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "data").write_bytes(b"x" * 3 * 2**20)
    with open(tmp_path / "sparse", "wb") as f:  # 1 GiB long, nothing in it
        f.truncate(GIB)
    used = diskwatch.used_bytes(tmp_path)
    assert 3 * 2**20 <= used < 4 * 2**20  # the sparse file holds no blocks
    assert diskwatch.used_bytes(tmp_path, stop_above=2**20) > 2**20


def test_the_helper_prints_disk_full_once_past_its_limit(tmp_path):
    printed: list[tuple] = []
    stop = threading.Event()
    env = {jobspec.ENV_VOLUME_LIMIT_MB: "1"}
    assert diskwatch.limit_from_env(env) == 2**20 and diskwatch.limit_from_env({}) == 0
    (tmp_path / "big").write_bytes(b"y" * 2 * 2**20)
    diskwatch.watch(
        tmp_path, diskwatch.limit_from_env(env), lambda e, **f: printed.append((e, f)), stop, 0.01
    )  # returns once it printed
    ((event, fields),) = printed
    assert event == jobspec.EVENT_DISK_FULL and fields["limit"] == 2**20
    assert fields["bytes"] > 2**20


def test_a_job_without_a_disk_size_is_not_measured(job_store):
    c = Cluster(job_store)
    c.monitor = JobMonitor(
        {"local": c.engine}, c.repo, job_store, lambda job_id, ended: None,
        clock=lambda: c.now, requeue=lambda *a, **k: None, limits=Limits(learner_disk_mb=0),
    )  # fmt: skip
    c.job("free")
    measured: list[str] = []
    real = c.engine.layer_bytes
    c.engine.layer_bytes = lambda job_id: measured.append(job_id) or real(job_id)
    c.engine.layers[c.learners["free"][0].id] = 100 * GIB
    c.reconcile("free")
    assert measured == [] and c.status("free") == Status.PROCESSING
