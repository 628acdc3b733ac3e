"""Checkpoints and log streams survive a restart of a job's gang: real learner image, real
SeaweedFS, a job network and volume laid out by hand the way the LCM does.

Run 1 trains the digits example with slow epochs; the helper mirrors CHECKPOINT_DIR to
S3 every second; a SIGTERM to the learner (it checkpoints and exits 143) and SIGUSR1 to
the helper (last sync, results, logs) stop it mid-way. Everything of run 1 is removed,
volume included. Run 2 (new containers with the same names, a new volume) must find the
checkpoint in place before its command starts and resume from it, and the learner's
log object must then hold both runs' lines in order. A LogReader follows the learner
from run 1's first line to run 2's last, across the restart, and must hand out exactly
that log: no line lost, none twice.

The last test runs the helper as a plain process: a finish signal in the middle of the
checkpoint restore must not delete the checkpoints it had no time to fetch.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

import docker.errors
import pytest

from dlaas.adapters.engines.docker_engine import Deployer
from dlaas.adapters.logs import LogReader
from dlaas.clients.client import pack_code
from dlaas.domain import jobspec, launch
from dlaas.domain.locations import S3Location
from dlaas.learner.paths import RUN_START_META

REPO = Path(__file__).resolve().parents[2]
LABEL = "test-checkpoint-resume"  # our own LABEL_MANAGED value: we only ever touch these


def digits_npz() -> bytes:
    spec = importlib.util.spec_from_file_location("prepare", REPO / "examples/digits/prepare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.digits_npz()


def tar_dir(path: Path) -> bytes:
    """The example's code archive, packed the way `dlaas submit --code` packs it."""
    return pack_code(path)[0]


def events(logs: str) -> list[dict]:
    return [e for e in map(jobspec.parse_event, logs.splitlines()) if e is not None]


def wait_for(container, needle: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        logs = container.logs().decode()
        if needle in logs:
            return logs
        container.reload()
        if container.status == "exited":
            break
        time.sleep(0.1)
    raise AssertionError(f"{needle!r} not in the logs of {container.name}:\n{logs}")


class Gang:
    """One run of a job: its network, its volume, the helper and learner 0."""

    def __init__(self, client, image: str, job_id: str):
        self.client, self.image, self.job_id = client, image, job_id
        self.labels = {jobspec.LABEL_MANAGED: LABEL, jobspec.LABEL_JOB: job_id}
        self.network = client.networks.create(
            jobspec.network_name(job_id), driver="bridge", labels=self.labels
        )
        self.volume = client.volumes.create(jobspec.volume_name(job_id), labels=self.labels)
        self.containers = []

    def start(self, name: str, command: list[str], env: dict[str, str], role: str, **labels):
        container = self.client.containers.create(
            self.image,
            command,
            name=name,
            environment=env,
            labels={**self.labels, jobspec.LABEL_ROLE: role, **labels},
            volumes={self.volume.name: {"bind": jobspec.JOB_MOUNT, "mode": "rw"}},
            network=self.network.name,
            init=True,
        )
        self.containers.append(container)
        container.start()
        return container

    def helper(self, env: dict[str, str]):
        return self.start(
            jobspec.helper_name(self.job_id),
            ["python3", "-m", "services.learner_helper"],
            env,
            jobspec.ROLE_HELPER,
        )

    def learner(self, command: str):
        return self.start(
            jobspec.learner_name(self.job_id, 0),
            ["python3", "-m", "dlaas.learner.run", "--", command],
            launch.learner_env(self.job_id, 0, 1),
            jobspec.ROLE_LEARNER,
            **{jobspec.LABEL_LEARNER: "0"},  # as the LCM labels a learner
        )

    def remove(self) -> None:
        for c in self.containers:
            with contextlib.suppress(docker.errors.APIError):
                c.remove(force=True)
        with contextlib.suppress(docker.errors.APIError):
            self.network.remove()
        with contextlib.suppress(docker.errors.APIError):
            self.volume.remove(force=True)


@pytest.fixture
def gangs(docker_client, learner_image):
    made: list[Gang] = []

    def new(job_id: str) -> Gang:
        gang = Gang(docker_client, learner_image, job_id)
        made.append(gang)
        return gang

    try:
        yield new
    finally:
        for gang in made:
            gang.remove()


class FollowedReader(LogReader):
    """The real LogReader on the real engine and S3; only the job's status is the test's
    (no job store here): `done` stands for "the job reached a final status"."""

    def __init__(self, docker_client, s3_client):
        engine = Deployer(docker_client, platform_id=LABEL, node="local")
        super().__init__(None, None, {"local": engine}, lambda _loc: s3_client, poll_s=0.05)
        self.done = threading.Event()

    def _final(self, job_id: str, shared: bool = False) -> bool:
        return self.done.is_set()


def ckpt_keys(s3_client, bucket: str, job_id: str) -> list[str]:
    prefix = jobspec.checkpoint_prefix(job_id)
    listing = s3_client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return sorted(o["Key"][len(prefix) :] for o in listing)


@pytest.mark.docker
def test_a_restarted_gang_resumes_from_its_checkpoint_and_its_log_goes_on(
    gangs, docker_client, s3_client, s3_server, docker_gateway
):
    job_id = "c" + uuid.uuid4().hex[:10]
    data, code, results = f"d-{job_id}", f"k-{job_id}", f"r-{job_id}"
    for bucket in (data, code):
        s3_client.create_bucket(Bucket=bucket)
    s3_client.put_object(Bucket=data, Key="digits.npz", Body=digits_npz())
    s3_client.put_object(Bucket=code, Key="code.tgz", Body=tar_dir(REPO / "examples" / "digits"))
    helper_env = {
        "JOB_ID": job_id,
        "NUM_LEARNERS": "1",
        "DLAAS_S3_ENDPOINT": f"http://{docker_gateway}:{urlparse(s3_server.endpoint).port}",
        "AWS_ACCESS_KEY_ID": s3_server.access_key,
        "AWS_SECRET_ACCESS_KEY": s3_server.secret_key,
        "DLAAS_DATA_BUCKET": data,
        "DLAAS_CODE_BUCKET": code,
        "DLAAS_CODE_KEY": "code.tgz",
        "DLAAS_RESULTS_BUCKET": results,
        jobspec.ENV_CHECKPOINT_PREFIX: jobspec.checkpoint_prefix(job_id),
        jobspec.ENV_CHECKPOINT_INTERVAL: "1",
    }
    reader = FollowedReader(docker_client, s3_client)
    followed: list[str] = []
    follower = threading.Thread(
        target=lambda: followed.extend(
            reader.stream(S3Location("", "", "", results), job_id, 0, offset=0, follow=True)
        ),
        daemon=True,
    )

    # ---- run 1: slow epochs, periodic syncs, then halted with SIGTERM + SIGUSR1
    run1 = gangs(job_id)
    helper = run1.helper(helper_env)
    learner = run1.learner("python3 train.py --epochs 40 --epoch-sleep 0.4")
    follower.start()
    wait_for(learner, "epoch 4/40", timeout=60)
    helper_logs = wait_for(helper, '"event": "checkpoint_synced"', timeout=30)
    periodic = [e for e in events(helper_logs) if e["event"] == jobspec.EVENT_CHECKPOINT_SYNCED]
    assert periodic and periodic[0]["uploaded"] >= 1  # synced while the learner trains
    learner.kill(signal="SIGTERM")
    assert learner.wait(timeout=30)["StatusCode"] == 143
    helper.kill(signal=jobspec.HELPER_FINISH_SIGNAL)
    assert helper.wait(timeout=60)["StatusCode"] == 0, helper.logs().decode()
    out1 = learner.logs().decode()
    assert "SIGTERM: checkpoint saved at epoch" in out1
    last_epoch = max(int(line.split()[1].split("/")[0]) for line in out1.splitlines()
                     if line.startswith("epoch "))  # fmt: skip
    assert 4 <= last_epoch < 40
    # keep-K holds in S3 too: the library's last 3 checkpoints, no temporary file
    assert ckpt_keys(s3_client, results, job_id) == [
        f"ckpt-{e:012d}.pkl" for e in range(last_epoch - 2, last_epoch + 1)
    ]
    key = jobspec.log_object_key(job_id, 0)
    assert s3_client.get_object(Bucket=results, Key=key)["Body"].read().decode() == out1
    run1.remove()  # containers, network AND volume: nothing of run 1 is left locally

    # ---- run 2: a fresh gang, same names, new volume
    run2 = gangs(job_id)
    helper = run2.helper(helper_env)
    learner = run2.learner(f"python3 train.py --epochs {last_epoch + 2}")
    assert learner.wait(timeout=90)["StatusCode"] == 0, learner.logs().decode()
    out2 = learner.logs().decode()
    assert f"resuming from the checkpoint of epoch {last_epoch}" in out2
    epochs2 = [line.split()[1] for line in out2.splitlines() if line.startswith("epoch ")]
    assert epochs2 == [f"{last_epoch + 1}/{last_epoch + 2}", f"{last_epoch + 2}/{last_epoch + 2}"]
    helper.kill(signal=jobspec.HELPER_FINISH_SIGNAL)
    assert helper.wait(timeout=60)["StatusCode"] == 0, helper.logs().decode()
    assert "restored 3 checkpoint files" in helper.logs().decode()

    stored = s3_client.get_object(Bucket=results, Key=key)
    assert stored["Body"].read().decode() == out1 + out2  # one log, both runs, in order
    assert stored["Metadata"][RUN_START_META] == str(len(out1.splitlines()))
    assert ckpt_keys(s3_client, results, job_id)[-1] == f"ckpt-{last_epoch + 2:012d}.pkl"

    reader.done.set()  # the job is final: the follower ends after the last line
    follower.join(timeout=30)
    assert not follower.is_alive()
    assert followed == (out1 + out2).splitlines()


def _helper_process(tmp_path: Path, s3_server, **env: str) -> subprocess.Popen:
    full = {
        "PATH": os.environ["PATH"],
        "DLAAS_JOB_DIR": str(tmp_path / "job"),
        "DLAAS_S3_ENDPOINT": s3_server.endpoint,
        "AWS_ACCESS_KEY_ID": s3_server.access_key,
        "AWS_SECRET_ACCESS_KEY": s3_server.secret_key,
        **env,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "services.learner_helper"],
        env=full,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_a_finish_signal_mid_restore_keeps_the_checkpoints_not_fetched(
    tmp_path, s3_server, s3_client, s3_bucket
):
    job_id = "p" + uuid.uuid4().hex[:8]
    prefix = jobspec.checkpoint_prefix(job_id)
    names = [f"ckpt-{i:012d}.bin" for i in range(200)]  # enough that the restore takes a while
    for name in names:
        s3_client.put_object(Bucket=s3_bucket, Key=prefix + name, Body=os.urandom(32 * 1024))
    proc = _helper_process(tmp_path, s3_server, JOB_ID=job_id, DLAAS_RESULTS_BUCKET=s3_bucket)
    ckpt_dir = tmp_path / "job" / "checkpoints"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(list(ckpt_dir.glob("ckpt-*"))) < 3:
            time.sleep(0.01)
        proc.send_signal(signal.SIGUSR1)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert [e["event"] for e in events(out)] == ["stored"]  # nothing changed: no sync event
    fetched = list(ckpt_dir.glob("ckpt-*"))
    assert 3 <= len(fetched) < len(names)  # it really stopped early
    assert ckpt_keys(s3_client, s3_bucket, job_id) == names  # and deleted nothing


def test_a_new_checkpoint_is_uploaded_at_once_and_its_log_lines_first(
    tmp_path, s3_server, s3_client, s3_bucket
):
    job_id = "n" + uuid.uuid4().hex[:8]
    proc = _helper_process(
        tmp_path,
        s3_server,
        JOB_ID=job_id,
        DLAAS_RESULTS_BUCKET=s3_bucket,
        **{jobspec.ENV_CHECKPOINT_INTERVAL: "60"},
    )
    ready = tmp_path / "job" / "checkpoints"
    log_key = jobspec.log_object_key(job_id, 0)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not ready.is_dir():
            time.sleep(0.05)
        # The learner prints its epoch line, then saves that epoch's checkpoint.
        with open(tmp_path / "job" / "logs" / "learner-0.log", "a") as log:
            log.write("epoch 1/5 loss=0.5\n")
        (ready / "ckpt-000000000001.pkl").write_bytes(b"weights")
        written = time.monotonic()
        while time.monotonic() < written + 20 and not ckpt_keys(s3_client, s3_bucket, job_id):
            time.sleep(0.05)
        uploaded_after = time.monotonic() - written
        # Seen in S3 with the checkpoint, not an interval later: a restart from it has the line.
        line = s3_client.get_object(Bucket=s3_bucket, Key=log_key)["Body"].read().decode()
        proc.send_signal(signal.SIGUSR1)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert ckpt_keys(s3_client, s3_bucket, job_id) == ["ckpt-000000000001.pkl"]
    assert uploaded_after < 20, "not uploaded until the 60 s interval"
    assert line == "epoch 1/5 loss=0.5\n"
    synced = [e for e in events(out) if e["event"] == jobspec.EVENT_CHECKPOINT_SYNCED]
    assert synced and synced[0]["uploaded"] == 1  # by the running helper, before the finish
