"""The job monitor against the real Docker engine and the real etcd.

Each test deploys a job by hand the way the LCM does (jobspec names and labels, a network,
a volume, a helper and learners started together with init), using small `python3 -c`
scripts in the test base image as stand-ins for the helper and the learners, then lets a
JobMonitor running in a thread (or a process, to kill it with SIGKILL) carry the job to
its end and clean up. The LCM's part (requeue, teardown, redeploy) is played by the test:
its `requeue` is a recording stand-in.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import docker
import docker.errors
import pytest
from engine_proxy import EngineProxy

from dlaas.adapters.engines.docker_engine import Deployer
from dlaas.adapters.etcd_status import StatusKeeper
from dlaas.adapters.notify import NoNotifier
from dlaas.adapters.store.base import JobRecord
from dlaas.domain import jobspec
from dlaas.domain.status import Status
from services.jobmonitor.monitor import JobMonitor

pytestmark = pytest.mark.docker

PLATFORM = f"test-{uuid.uuid4().hex[:8]}"  # this run's containers only
SCOPE = "mon-"  # the monitor under test touches only these jobs (the engine is shared)

# The helper stand-in: data ready at once, then wait for the finish signal, store, exit 0.
HELPER_OK = """
import signal, sys, time
done = []
signal.signal(signal.SIGUSR1, lambda *a: done.append(1))
signal.signal(signal.SIGTERM, lambda *a: done.append(1))
print("fetching data", flush=True)
print('DLAAS-EVENT {"event": "data_ready"}', flush=True)
while not done:
    time.sleep(0.05)
print('DLAAS-EVENT {"event": "stored"}', flush=True)
"""

HELPER_NO_DATA = """
import sys
print('DLAAS-EVENT {"code": "data_not_found", "event": "error", '
      '"message": "bucket training-data has no objects"}', flush=True)
sys.exit(10)
"""


def learner_script(code: int, lines: int = 3, sleep: float = 1.0) -> str:
    return (
        "import sys, time\n"
        f"time.sleep({sleep})\n"
        f"for i in range({lines}): print(f'epoch {{i}} loss {{1.0 / (i + 1):.3f}}', flush=True)\n"
        f"sys.exit({code})\n"
    )


SLEEPER = "import time\ntime.sleep(60)\n"

OOM_LEARNER = "import time\ntime.sleep(0.5)\nx = b'x' * (256 << 20)\nprint('survived')\n"


# A monitor in its own process: argv = docker host, etcd host:port, prefix, store path,
# platform id, the jobs it owns. Its release and requeue only log (its stdout is dropped).
MONITOR_PROCESS = """
import sys, threading
import docker
from dlaas.adapters.etcd_status import StatusKeeper, connect
from dlaas.adapters.store import open_store
from services.jobmonitor.monitor import JobMonitor
from dlaas.adapters.engines.docker_engine import Deployer

docker_host, etcd, prefix, store_path, platform, jobs = sys.argv[1:7]
host, _, port = etcd.rpartition(":")
store = open_store(store_path)
keeper = StatusKeeper(connect([(host, int(port))]), store, prefix)
owned = set(jobs.split(","))
engine = Deployer(docker.DockerClient(base_url=docker_host), platform_id=platform, node="local")
monitor = JobMonitor(
    {"local": engine},
    keeper,
    store,
    lambda job_id, ended: print("released", job_id, flush=True),
    requeue=lambda job_id, reason, is_restart=False: print("requeue", job_id, reason),
    resync_s=1,
    stop_grace_s=1,
    owns_job=owned.__contains__,
)
monitor.run(threading.Event())
"""


def manifest(learners: int, cpus: float = 1.0, max_restarts: int = 0) -> str:
    return (
        f"name: monitor-test\nlearners: {learners}\ncpus: {cpus}\nmax_restarts: {max_restarts}\n"
        "framework: {name: python, version: '3', command: python3 train.py}\n"
    )


@pytest.fixture(scope="module")
def image(learner_image):
    return learner_image


@pytest.fixture
def second_node(docker_host, tmp_path_factory):
    if not docker_host.startswith("unix://"):
        pytest.skip(f"the engine proxy forwards to a Unix socket, not {docker_host}")
    # A short path: Unix socket paths are limited to about 100 bytes.
    path = Path(tempfile.mkdtemp(prefix="dlaas-n2-")) / "docker.sock"
    proxy = EngineProxy(path, docker_host.removeprefix("unix://"))
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
        path.parent.rmdir()


@pytest.fixture
def keeper(etcd_client, etcd_prefix, job_store):
    return StatusKeeper(etcd_client, job_store, prefix=etcd_prefix)


class Harness:
    """Deploys jobs like the LCM and runs monitors in threads; removes everything after."""

    def __init__(self, docker_client, keeper: StatusKeeper, store, image: str, etcd_endpoint: str):
        self.etcd_endpoint = etcd_endpoint
        self.docker = docker_client
        self.keeper = keeper
        self.store = store
        self.image = image
        self.released: list[str] = []
        self.requeued: list[tuple[str, str, bool]] = []
        self.jobs: list[str] = []
        self._runs: list[tuple[threading.Event, threading.Thread]] = []
        self._procs: list[subprocess.Popen] = []

    def requeue(self, job_id: str, reason: str, is_restart: bool = False) -> str:
        """The LCM's RequeueJob, recorded; the test plays what the LCM then does."""
        self.requeued.append((job_id, reason, is_restart))
        return "PROCESSING"

    def place(self, job_id: str, node: str, learners: int = 1) -> None:
        """Write the placement the way the LCM does."""
        placement = [{"learner": i, "node": node, "gpu_indices": []} for i in range(learners)]
        key = f"{self.keeper.prefix}/jobs/{job_id}/placement"
        self.keeper.etcd.put(key, json.dumps(placement))

    def status(self, job_id: str) -> Status:
        state = self.keeper.get(job_id)
        assert state is not None
        return state.status

    def new_job(self, learners: int, cpus: float = 1.0, max_restarts: int = 0) -> str:
        job_id = f"{SCOPE}{uuid.uuid4().hex[:10]}"
        self.jobs.append(job_id)
        text = manifest(learners, cpus, max_restarts)
        self.store.create(JobRecord(job_id, "alice", "monitor-test", text, time.time()))
        self.keeper.create(job_id)
        self.keeper.transition(job_id, Status.PENDING, "placed on local")
        return job_id

    def deploy(
        self,
        job_id: str,
        helper: str,
        learners: list[str] | list[list[str]],
        mem_limit: str | None = None,
        nano_cpus: int | None = None,
    ):
        """A learner is a script for `python3 -c`, or a whole command (the wrapper's, say);
        `nano_cpus` limits the learners as the LCM does (the manifest's cpus)."""
        labels = {jobspec.LABEL_MANAGED: PLATFORM, jobspec.LABEL_JOB: job_id}
        self.docker.networks.create(jobspec.network_name(job_id), labels=labels)
        self.docker.volumes.create(jobspec.volume_name(job_id), labels=labels)
        specs = [(jobspec.helper_name(job_id), jobspec.ROLE_HELPER, None, helper, None)]
        specs += [
            (jobspec.learner_name(job_id, i), jobspec.ROLE_LEARNER, i, script, mem_limit)
            for i, script in enumerate(learners)
        ]
        created = []
        for name, role, index, script, mem in specs:
            lab = {**labels, jobspec.LABEL_ROLE: role}
            if index is not None:
                lab[jobspec.LABEL_LEARNER] = str(index)
            created.append(
                self.docker.containers.create(
                    self.image,
                    script if isinstance(script, list) else ["python3", "-u", "-c", script],
                    name=name,
                    labels=lab,
                    init=True,
                    network=jobspec.network_name(job_id),
                    volumes={jobspec.volume_name(job_id): {"bind": jobspec.JOB_MOUNT}},
                    mem_limit=mem,
                    memswap_limit=mem,
                    nano_cpus=nano_cpus if role == jobspec.ROLE_LEARNER else None,
                    environment={"LEARNER_ID": str(index)} if index is not None else None,
                )
            )
        for c in created:
            c.start()
        self.keeper.transition(job_id, Status.DOWNLOADING, "helper and learners started")

    def start_monitor(self, engines=None, **kw) -> threading.Event:
        clients = engines or {"local": self.docker}
        monitor = JobMonitor(
            {n: Deployer(c, platform_id=PLATFORM, node=n) for n, c in clients.items()},
            self.keeper,
            self.store,
            lambda job_id, ended: self.released.append(job_id),
            requeue=self.requeue,
            helper_timeout_s=kw.pop("helper_timeout_s", 10),
            resync_s=kw.pop("resync_s", 3),
            stop_grace_s=kw.pop("stop_grace_s", 1),
            owns_job=lambda job_id: job_id in self.jobs,
            **kw,
        )
        stop = threading.Event()
        thread = threading.Thread(target=monitor.run, args=(stop,), daemon=True)
        thread.start()
        self._runs.append((stop, thread))
        return stop

    def spawn_monitor(self, docker_host: str) -> subprocess.Popen:
        """A monitor in its own process (owning this test's jobs), to be killed with SIGKILL."""
        args = [
            sys.executable,
            "-c",
            MONITOR_PROCESS,
            docker_host,
            self.etcd_endpoint,
            self.keeper.prefix,
            self.store.path,
            PLATFORM,
            ",".join(self.jobs),
        ]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._procs.append(proc)
        return proc

    def stop_monitors(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
        self._procs.clear()
        for stop, _thread in self._runs:
            stop.set()
        for _stop, thread in self._runs:
            thread.join(timeout=10)
            assert not thread.is_alive(), "the monitor did not stop"
        self._runs.clear()

    def wait_until(self, what, predicate, timeout: float = 30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}")

    def wait_cleaned(self, job_id: str, timeout: float = 30.0):
        self.wait_until(
            f"{job_id} cleaned up",
            lambda: self.store.get(job_id).info.get("cleaned_up"),
            timeout,
        )
        return self.store.get(job_id)

    def leftovers(self, job_id: str) -> list[str]:
        label = {"label": f"{jobspec.LABEL_JOB}={job_id}"}
        return (
            [
                c.name
                for c in self.docker.containers.list(all=True, filters=label, ignore_removed=True)
            ]
            + [n.name for n in self.docker.networks.list(filters=label)]
            + [v.name for v in self.docker.volumes.list(filters=label)]
        )

    def teardown(self, job_id: str) -> None:
        label = {"label": f"{jobspec.LABEL_JOB}={job_id}"}
        for c in self.docker.containers.list(all=True, filters=label, ignore_removed=True):
            c.remove(force=True)
        for n in self.docker.networks.list(filters=label):
            n.remove()
        for v in self.docker.volumes.list(filters=label):
            v.remove(force=True)

    def remove_all(self) -> None:
        for job_id in self.jobs:
            self.teardown(job_id)


@pytest.fixture
def harness(docker_client, keeper, job_store, image, etcd_server):
    h = Harness(docker_client, keeper, job_store, image, etcd_server.endpoint)
    try:
        yield h
    finally:
        h.stop_monitors()
        h.remove_all()


def statuses(record) -> list[str]:
    return [t.status.value for t in record.history]


def test_happy_path_completes_with_full_history_and_leaves_nothing(harness):
    job = harness.new_job(learners=2)
    harness.start_monitor()
    harness.deploy(job, HELPER_OK, [learner_script(0), learner_script(0, sleep=1.5)])

    record = harness.wait_cleaned(job)
    assert statuses(record) == [
        "QUEUED",
        "PENDING",
        "DOWNLOADING",
        "PROCESSING",
        "STORING",
        "COMPLETED",
    ]
    assert record.status == Status.COMPLETED and record.error_code == ""
    assert harness.leftovers(job) == []
    assert harness.released == [job]
    learners = record.info["learners"]
    assert [(e["id"], e["state"], e["exit_code"]) for e in learners] == [
        (0, "exited", 0),
        (1, "exited", 0),
    ]
    assert learners[1]["container"] == jobspec.learner_name(job, 1)
    assert record.info.get("logs_incomplete") is None


# The helper stand-in for measured use: data ready (the mark the wrapper waits for), then at
# the finish signal the real helper's report of what the learners' wrappers left, and stored.
HELPER_REPORTS_USAGE = """
import os, signal, time
from dlaas.learner.paths import JobPaths
from services.learner_helper.main import report_usage
paths = JobPaths.from_env(dict(os.environ))
done = []
signal.signal(signal.SIGUSR1, lambda *a: done.append(1))
signal.signal(signal.SIGTERM, lambda *a: done.append(1))
paths.ready_mark.parent.mkdir(parents=True, exist_ok=True)
paths.ready_mark.touch()
print('DLAAS-EVENT {"event": "data_ready"}', flush=True)
while not done:
    time.sleep(0.05)
report_usage(paths, (0, 1))
print('DLAAS-EVENT {"event": "stored"}', flush=True)
"""

# Burns CPU for 2 s of wall time (at most 1 CPU-s under a 0.5 CPU limit).
BUSY = "python3 -c 'import time; t = time.time(); any(time.time() - t > 2 for _ in iter(int, 1))'"


def test_what_the_learners_used_is_recorded_and_at_most_what_they_held(harness):
    from dlaas.domain.usage import MEASURED_INFO, job_usage

    job = harness.new_job(learners=2, cpus=0.5)
    harness.start_monitor()
    wrapper = ["python3", "-m", "dlaas.learner.run", "--", BUSY]
    harness.deploy(
        job, HELPER_REPORTS_USAGE, [wrapper, wrapper], nano_cpus=500_000_000
    )  # as the LCM limits them: the manifest's cpus

    record = harness.wait_cleaned(job)
    assert record.status == Status.COMPLETED
    used = record.info[MEASURED_INFO]["0"]  # the run queued at seq 0
    assert sorted(used) == ["0", "1"]
    for figures in used.values():
        # the container's own cgroup: the busy loop, under its 0.5 CPU limit for 2 s
        assert 0.1 < figures["cpu_s"] <= 1.5 and figures["memory_peak_mib"] >= 5
    (row,) = job_usage(record, now=time.time())
    assert 0 < row.usage.used_millicpu_ms <= row.usage.millicpu_ms
    assert row.usage.hours()["cpu_used_hours"] == pytest.approx(
        sum(f["cpu_s"] for f in used.values()) / 3600
    )
    print(
        "measured",
        {k: v["cpu_s"] for k, v in used.items()},
        "CPU-s used of",
        row.usage.millicpu_ms / 1e6,
        "held",
    )


def test_learner_exit_3_fails_with_its_code_and_last_log_lines(harness):
    job = harness.new_job(learners=2)
    harness.start_monitor()
    long_running = "import time\ntime.sleep(60)\n"
    harness.deploy(job, HELPER_OK, [long_running, learner_script(3, lines=15)])

    record = harness.wait_cleaned(job)
    assert record.status == Status.FAILED
    assert (record.error_code, record.exit_code) == ("exit_code", 3)
    assert record.reason.startswith("learner 1 exited with code 3; last log lines:")
    assert "epoch 14 loss 0.067" in record.reason  # the last line
    assert "epoch 4 loss" not in record.reason  # only the last ten
    # The other learner was stopped and the helper let go before cleanup.
    assert harness.leftovers(job) == []
    assert harness.released == [job]
    assert not record.info.get("logs_incomplete")
    # The program's own failure: no restart, although the other learner then exited 143.
    assert harness.requeued == []


def test_helper_exit_10_fails_data_not_found_with_its_message(harness):
    job = harness.new_job(learners=1)
    harness.start_monitor()
    harness.deploy(job, HELPER_NO_DATA, ["import time\ntime.sleep(60)\n"])

    record = harness.wait_cleaned(job)
    assert record.status == Status.FAILED and record.error_code == "data_not_found"
    assert record.reason == "training data not found: bucket training-data has no objects"
    assert statuses(record)[-2:] == ["DOWNLOADING", "FAILED"]
    assert harness.leftovers(job) == []
    assert harness.requeued == []


def test_oom_killed_learner_fails_oom_killed(harness):
    job = harness.new_job(learners=1)
    harness.start_monitor()
    harness.deploy(job, HELPER_OK, [OOM_LEARNER], mem_limit="64m")

    record = harness.wait_cleaned(job)
    assert record.status == Status.FAILED
    assert (record.error_code, record.exit_code) == ("oom_killed", 137)
    assert "out of memory" in record.reason
    assert record.info["learners"][0].get("oom_killed") is True
    assert harness.leftovers(job) == []
    assert harness.requeued == []  # exit 137 with OOMKilled is the job's own


def test_monitor_killed_at_any_moment_loses_no_status_change(harness, docker_host):
    job = harness.new_job(learners=1)
    first = harness.spawn_monitor(docker_host)
    harness.deploy(job, HELPER_OK, [learner_script(0, sleep=3)])
    harness.wait_until("PROCESSING", lambda: harness.status(job) == Status.PROCESSING, 15)
    first.send_signal(signal.SIGKILL)  # no chance to tidy up
    first.wait(timeout=5)
    harness.wait_until(
        "the learner to exit",
        lambda: harness.docker.containers.get(jobspec.learner_name(job, 0)).status == "exited",
        15,
    )
    assert harness.status(job) == Status.PROCESSING  # nobody noticed yet

    # The next one is killed right after it moved the job on (maybe before its signal).
    second = harness.spawn_monitor(docker_host)
    harness.wait_until(
        "STORING", lambda: harness.status(job) in (Status.STORING, Status.COMPLETED), 15
    )
    second.send_signal(signal.SIGKILL)
    second.wait(timeout=5)

    harness.spawn_monitor(docker_host)
    record = harness.wait_cleaned(job)
    assert statuses(record) == [
        "QUEUED",
        "PENDING",
        "DOWNLOADING",
        "PROCESSING",
        "STORING",
        "COMPLETED",
    ]
    assert harness.leftovers(job) == []


def test_learner_killed_from_outside_is_restarted_through_the_lcm_once(harness):
    job = harness.new_job(learners=2)
    harness.start_monitor(resync_s=0.5)
    harness.deploy(job, HELPER_OK, [SLEEPER, SLEEPER])
    harness.wait_until("PROCESSING", lambda: harness.status(job) == Status.PROCESSING, 15)

    harness.docker.containers.get(jobspec.learner_name(job, 1)).kill()  # SIGKILL, no OOM
    harness.wait_until("the restart request", lambda: harness.requeued, 10)
    time.sleep(1.5)  # several resyncs and Docker events later: still one request
    reason = "learner 1 was killed from outside (SIGKILL, exit code 137)"
    assert harness.requeued == [(job, reason, True)]
    assert harness.status(job) == Status.PROCESSING  # not FAILED: the LCM decides
    assert harness.store.get(job).info["restart_requested"]["reason"] == reason

    # The LCM requeues (its own status write) and tears down a while later: the monitor
    # leaves the old containers of a QUEUED job alone.
    harness.keeper.transition(job, Status.QUEUED, f"restart 1/3: {reason}")
    time.sleep(1.0)
    assert harness.status(job) == Status.QUEUED
    assert len(harness.leftovers(job)) == 5  # helper, 2 learners, network, volume
    harness.teardown(job)

    # The restarted gang runs to the end; the new run gets its own bookkeeping.
    harness.keeper.transition(job, Status.PENDING, "placed on local")
    harness.deploy(job, HELPER_OK, [learner_script(0), learner_script(0)])
    record = harness.wait_cleaned(job)
    assert statuses(record) == [
        "QUEUED",
        "PENDING",
        "DOWNLOADING",
        "PROCESSING",
        "QUEUED",
        "PENDING",
        "DOWNLOADING",
        "PROCESSING",
        "STORING",
        "COMPLETED",
    ]
    assert len(harness.requeued) == 1
    assert harness.released == [job]
    assert harness.leftovers(job) == []


# A learner that counts its runs on the job volume: the first sleeps (to be killed), the
# next one ends after a moment.
RUN_COUNTER = """
import os, sys, time
path = f"/job/runs-{os.environ['LEARNER_ID']}"
run = (int(open(path).read()) if os.path.exists(path) else 0) + 1
open(path, "w").write(str(run))
print(f"run {run}", flush=True)
time.sleep(60 if run == 1 else 2)
"""


class _Events(NoNotifier):
    """The events that are no transition, as the owner's hooks would get them."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str, str]] = []

    def event(self, job_id, event, seq, t, occurrence) -> None:
        self.sent.append((job_id, event, t.reason, occurrence))


def test_a_killed_learner_restarts_the_gang_in_place_without_the_lcm(harness):
    job = harness.new_job(learners=2, max_restarts=3)
    events = _Events()
    harness.start_monitor(resync_s=0.5, notifier=events)
    harness.deploy(job, HELPER_OK, [RUN_COUNTER, RUN_COUNTER])
    harness.wait_until("PROCESSING", lambda: harness.status(job) == Status.PROCESSING, 15)
    names = [jobspec.learner_name(job, i) for i in range(2)]
    ids = [harness.docker.containers.get(n).id for n in names]
    harness.wait_until(
        "both first runs", lambda: all(b"run 1" in harness.docker.containers.get(n).logs()
                                       for n in names), 15
    )  # fmt: skip

    harness.docker.containers.get(names[0]).kill()  # SIGKILL, no OOM
    for name, before in zip(names, ids, strict=True):
        again = harness.wait_until(
            f"{name}'s second run",
            lambda name=name: (
                (c := harness.docker.containers.get(name)).logs() == b"run 1\nrun 2\n" and c
            ),
            15,
        )
        assert again.id == before  # the same container, started again: its log goes on
    record = harness.wait_cleaned(job)
    # The same containers ran again, learner 1 killed with its broken gang: no requeue, no
    # new placement, one restart counted against max_restarts, with its reason.
    assert harness.requeued == []
    assert statuses(record) == [
        "QUEUED", "PENDING", "DOWNLOADING", "PROCESSING", "STORING", "COMPLETED",
    ]  # fmt: skip
    assert record.info["restarts"] == 1
    [made] = record.info["learner_restarts"]
    assert made["reason"] == (
        "restart 1/3 in place from the learners' last checkpoint: "
        "learner 0 was killed from outside (SIGKILL, exit code 137)"
    )
    assert events.sent == [(job, "restarted", made["reason"], "in-place-1")]
    assert harness.released == [job]
    assert harness.leftovers(job) == []


def test_resumed_job_is_released_and_cleaned_up_again(harness):
    # The first run's bookkeeping (released, helper signalled, cleaned up) must not carry
    # over to the run after a resume.
    job = harness.new_job(learners=1)
    harness.start_monitor()
    harness.deploy(job, HELPER_OK, [SLEEPER])
    harness.wait_until("PROCESSING", lambda: harness.status(job) == Status.PROCESSING, 15)
    harness.keeper.transition(job, Status.HALTED, "halted by the user")
    harness.wait_cleaned(job)
    assert harness.released == [job]

    harness.keeper.transition(job, Status.QUEUED, "resumed by the user")
    harness.keeper.transition(job, Status.PENDING, "placed on local")
    harness.deploy(job, HELPER_OK, [learner_script(0, sleep=0.5)])
    harness.wait_until("COMPLETED", lambda: harness.status(job) == Status.COMPLETED, 20)
    record = harness.wait_cleaned(job)
    assert statuses(record)[-5:] == ["PENDING", "DOWNLOADING", "PROCESSING", "STORING", "COMPLETED"]
    assert harness.released == [job, job]
    assert harness.leftovers(job) == []


def test_halted_job_with_a_stubborn_helper_is_killed_and_cleaned_up(harness):
    job = harness.new_job(learners=1)
    harness.start_monitor(helper_timeout_s=2)
    stubborn = (
        "import signal, time\nsignal.signal(signal.SIGUSR1, signal.SIG_IGN)\ntime.sleep(60)\n"
    )
    harness.deploy(job, stubborn, ["import time\ntime.sleep(60)\n"])
    harness.keeper.transition(job, Status.HALTED, "halted by the user")

    record = harness.wait_cleaned(job, timeout=20)
    assert record.status == Status.HALTED
    assert record.info["logs_incomplete"] is True
    assert "logs may be incomplete" in record.info["logs_note"]
    assert harness.released == [job]
    assert harness.leftovers(job) == []


def test_containers_of_a_deleted_job_are_removed(harness):
    job = harness.new_job(learners=1)
    harness.start_monitor()
    harness.deploy(job, "import time\ntime.sleep(60)\n", ["import time\ntime.sleep(60)\n"])
    harness.keeper.delete(job)  # the job is gone; its containers are leftovers
    harness.wait_until("leftovers removed", lambda: not harness.leftovers(job), 20)


def test_containers_with_no_status_it_never_saw_are_left_alone(harness):
    # They may belong to another platform sharing the engine.
    job = harness.new_job(learners=1)
    harness.deploy(job, "import time\ntime.sleep(60)\n", ["import time\ntime.sleep(60)\n"])
    harness.keeper.delete(job)
    harness.start_monitor(resync_s=0.5)
    time.sleep(2)
    assert len(harness.leftovers(job)) == 4  # helper, learner, network, volume


def test_a_down_node_leaves_its_job_to_the_lcm_while_other_nodes_go_on(harness, second_node):
    n2 = docker.DockerClient(base_url=second_node.url, version="1.41", timeout=5)
    a, b = harness.new_job(learners=1), harness.new_job(learners=1)
    harness.place(a, "n1")
    harness.place(b, "n2")
    harness.start_monitor(
        engines={"n1": harness.docker, "n2": n2}, resync_s=0.5, reconnect_max_s=0.5
    )
    harness.deploy(b, HELPER_OK, [learner_script(0, sleep=2)])
    harness.wait_until("b PROCESSING", lambda: harness.status(b) == Status.PROCESSING, 15)

    second_node.stop()  # n2's engine dies; b's learner finishes meanwhile
    harness.deploy(a, HELPER_OK, [learner_script(0, sleep=0.5)])
    assert harness.wait_cleaned(a).status == Status.COMPLETED  # n1's events still flow
    harness.wait_until(
        "b's learner to exit",
        lambda: harness.docker.containers.get(jobspec.learner_name(b, 0)).status == "exited",
        15,
    )
    time.sleep(1.5)  # resyncs and reconnect attempts: b is neither judged nor failed
    assert harness.status(b) == Status.PROCESSING
    assert harness.requeued == []

    second_node.start()  # the engine answers again: the monitor reconnects and catches up
    record = harness.wait_cleaned(b, timeout=20)
    assert statuses(record)[-3:] == ["PROCESSING", "STORING", "COMPLETED"]
    assert harness.leftovers(b) == []
