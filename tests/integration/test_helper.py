"""The helper and the learner wrapper in real containers, on a real job network and volume,
against a real SeaweedFS (reached from the containers through the Docker bridge gateway).

Each test lays out a job the way the LCM does (dlaas.domain.jobspec names and labels, the
volume at /job, init=True) and removes every container, network and volume it made.
The last tests run the helper as a plain process (DLAAS_JOB_DIR) for the cases that
need precise timing or no Docker: a finish signal mid-download and refused credentials.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import signal
import socket
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

import docker.errors
import pytest

from dlaas.clients.client import pack_code
from dlaas.domain import jobspec, launch
from dlaas.learner.paths import RUN_START_META
from dlaas.local import images

REPO = Path(__file__).resolve().parents[2]


def digits_npz() -> bytes:
    """The example's data set, made by the example's own prepare.py (examples/ is no package)."""
    spec = importlib.util.spec_from_file_location("prepare", REPO / "examples/digits/prepare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.digits_npz()


HELPER_CMD = ["python3", "-m", "services.learner_helper"]


def learner_cmd(command: str) -> list[str]:
    return ["python3", "-m", "dlaas.learner.run", "--", command]


def tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def tar_dir(path: Path) -> bytes:
    """The example's code archive, packed the way `dlaas submit --code` packs it."""
    return pack_code(path)[0]


def events(logs: str) -> list[dict]:
    return [e for e in map(jobspec.parse_event, logs.splitlines()) if e is not None]


def wait_exit(container, timeout: float = 60) -> int:
    return container.wait(timeout=timeout)["StatusCode"]


def wait_for_log(container, needle: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        logs = container.logs().decode()
        if needle in logs:
            return logs
        container.reload()
        if container.status == "exited":
            break
        time.sleep(0.1)
    raise AssertionError(
        f"{needle!r} not in the logs of {container.name}:\n{container.logs().decode()}"
    )


class Job:
    """One job's network, volume and containers, laid out like the LCM does."""

    def __init__(self, client, image: str, s3_endpoint: str, s3_server):
        self.client, self.image = client, image
        self.id = "t" + uuid.uuid4().hex[:10]
        self.labels = {jobspec.LABEL_MANAGED: "true", jobspec.LABEL_JOB: self.id}
        self.network = client.networks.create(
            jobspec.network_name(self.id), driver="bridge", labels=self.labels
        )
        self.volume = client.volumes.create(jobspec.volume_name(self.id), labels=self.labels)
        self.s3_endpoint, self.s3 = s3_endpoint, s3_server
        self.containers = []

    def helper_env(self, **extra: str) -> dict[str, str]:
        return {
            "JOB_ID": self.id,
            "NUM_LEARNERS": "1",
            "DLAAS_S3_ENDPOINT": self.s3_endpoint,
            "AWS_ACCESS_KEY_ID": self.s3.access_key,
            "AWS_SECRET_ACCESS_KEY": self.s3.secret_key,
            **extra,
        }

    def start(self, name: str, command: list[str], env: dict[str, str], role: str, alias=None):
        container = self.client.containers.create(
            self.image,
            command,
            name=name,
            environment=env,
            labels={**self.labels, jobspec.LABEL_ROLE: role},
            volumes={self.volume.name: {"bind": jobspec.JOB_MOUNT, "mode": "rw"}},
            network=self.network.name,
            init=True,
        )
        if alias:  # the LCM gives learners their alias on the job network
            self.network.disconnect(container)
            self.network.connect(container, aliases=[alias])
        self.containers.append(container)
        container.start()
        return container

    def helper(self, **env: str):
        return self.start(
            jobspec.helper_name(self.id), HELPER_CMD, self.helper_env(**env), jobspec.ROLE_HELPER
        )

    def learner(self, index: int, command: str, num: int = 1):
        return self.start(
            jobspec.learner_name(self.id, index),
            learner_cmd(command),
            launch.learner_env(self.id, index, num),
            jobspec.ROLE_LEARNER,
            alias=jobspec.learner_alias(index),
        )

    def remove(self) -> None:
        for c in self.containers:
            with contextlib.suppress(docker.errors.APIError):  # cleanup goes on
                c.remove(force=True)
        self.network.remove()
        self.volume.remove(force=True)


@pytest.fixture(scope="module")
def image(docker_client) -> str:
    return images.ensure_images(docker_client, progress=lambda _line: None)


@pytest.fixture(scope="module")
def s3_from_containers(s3_server, docker_gateway) -> str:
    """The S3 endpoint as containers see it: the host's gateway address, same port."""
    return f"http://{docker_gateway}:{urlparse(s3_server.endpoint).port}"


@pytest.fixture
def job(docker_client, image, s3_from_containers, s3_server):
    j = Job(docker_client, image, s3_from_containers, s3_server)
    try:
        yield j
    finally:
        j.remove()


def _bucket(s3_client) -> str:
    name = f"t-{uuid.uuid4().hex[:16]}"
    s3_client.create_bucket(Bucket=name)
    return name


# --------------------------------------------------------------------------- in containers


@pytest.mark.docker
def test_data_and_code_in_learner_runs_results_and_logs_stored(job, s3_client, s3_server):
    data, code, results = _bucket(s3_client), _bucket(s3_client), f"r-{job.id}"
    s3_client.put_object(Bucket=data, Key="digits/digits.npz", Body=digits_npz())
    s3_client.put_object(Bucket=data, Key="other/ignored.txt", Body=b"not in the prefix")
    s3_client.put_object(Bucket=code, Key="code.tar.gz", Body=tar_dir(REPO / "examples" / "digits"))

    helper = job.helper(
        DLAAS_DATA_BUCKET=data,
        DLAAS_DATA_PREFIX="digits",
        DLAAS_CODE_BUCKET=code,
        DLAAS_CODE_KEY="code.tar.gz",
        DLAAS_RESULTS_BUCKET=results,
    )
    learner = job.learner(0, "ls $DATA_DIR && python3 train.py --epochs 5")
    assert wait_exit(learner) == 0, learner.logs().decode()
    out = learner.logs().decode()
    assert out.splitlines()[0] == "digits.npz"  # the data, without the other prefix
    assert "epoch 5/5 loss=" in out

    helper_logs = wait_for_log(helper, '"event": "data_ready"')
    helper.kill(signal=jobspec.HELPER_FINISH_SIGNAL)
    assert wait_exit(helper) == jobspec.HELPER_EXIT_OK, helper.logs().decode()
    helper_logs = helper.logs().decode()
    # the learner's checkpoints (the library keeps the last 3) are mirrored before the results,
    # and what its container used (its wrapper's cgroup reading) is reported before them
    assert [e["event"] for e in events(helper_logs)] == [
        "data_ready",
        "checkpoint_synced",
        "usage",
        "stored",
    ]
    assert events(helper_logs)[1]["files"] == 3
    used = events(helper_logs)[2]["learners"]
    assert list(used) == ["0"] and used["0"]["cpu_s"] > 0 and used["0"]["memory_peak_mib"] > 0
    assert s3_server.secret_key not in helper_logs

    keys = {o["Key"] for o in s3_client.list_objects_v2(Bucket=results).get("Contents", [])}
    prefix = jobspec.results_prefix(job.id)
    ckpts = jobspec.checkpoint_prefix(job.id)
    assert {
        ckpts + "ckpt-000000000005.pkl",
        ckpts + "ckpt-000000000003.pkl",
        prefix + "model.npz",
        prefix + "metrics.json",
        jobspec.log_object_key(job.id, 0),
    } <= keys
    log = s3_client.get_object(Bucket=results, Key=jobspec.log_object_key(job.id, 0))["Body"].read()
    assert log.decode() == out  # the log file is exactly what the container printed


@pytest.mark.docker
def test_missing_data_exits_10_with_an_error_event(job, s3_client):
    helper = job.helper(DLAAS_DATA_BUCKET=f"missing-{job.id}", DLAAS_RESULTS_BUCKET="r")
    assert wait_exit(helper) == jobspec.HELPER_EXIT_DATA_NOT_FOUND
    (event,) = events(helper.logs().decode())
    assert event["event"] == jobspec.EVENT_ERROR and event["code"] == "data_not_found"
    assert f"missing-{job.id}" in event["message"]

    empty = _bucket(s3_client)
    helper = job.start("empty-" + job.id, HELPER_CMD, job.helper_env(
        DLAAS_DATA_BUCKET=empty, DLAAS_RESULTS_BUCKET="r"), jobspec.ROLE_HELPER)  # fmt: skip
    assert wait_exit(helper) == jobspec.HELPER_EXIT_DATA_NOT_FOUND
    assert "holds no objects" in events(helper.logs().decode())[0]["message"]


@pytest.mark.docker
def test_an_archive_that_climbs_out_is_refused(job, s3_client):
    code = _bucket(s3_client)
    s3_client.put_object(
        Bucket=code,
        Key="evil.tar.gz",
        Body=tar_gz({"train.py": b"print(1)\n", "../escaped.txt": b"gotcha"}),
    )
    helper = job.helper(
        DLAAS_CODE_BUCKET=code, DLAAS_CODE_KEY="evil.tar.gz", DLAAS_RESULTS_BUCKET="r"
    )
    assert wait_exit(helper) == jobspec.HELPER_EXIT_BAD_ARCHIVE
    (event,) = events(helper.logs().decode())
    assert event["code"] == "bad_archive" and "'..'" in event["message"]
    # nothing landed next to the code dir, and the learners were never released
    probe = job.client.containers.run(
        job.image,
        ["sh", "-c", "ls -a /job; test ! -e /job/escaped.txt && test ! -e /job/.data_ready"],
        volumes={job.volume.name: {"bind": "/job", "mode": "ro"}},
        remove=True,
    )
    assert b"code" in probe


@pytest.mark.docker
def test_two_learners_exchange_gradients_over_the_job_network(job, s3_client):
    data, code, results = _bucket(s3_client), _bucket(s3_client), f"r-{job.id}"
    s3_client.put_object(Bucket=data, Key="digits.npz", Body=digits_npz())
    s3_client.put_object(
        Bucket=code,
        Key="c.tgz",
        Body=tar_dir(REPO / "tests" / "fixtures" / "jobs" / "numpy-allreduce"),
    )
    helper = job.helper(
        NUM_LEARNERS="2",
        DLAAS_DATA_BUCKET=data,
        DLAAS_CODE_BUCKET=code,
        DLAAS_CODE_KEY="c.tgz",
        DLAAS_RESULTS_BUCKET=results,
    )
    # learner 1 first: it must retry until learner 0 exists and listens
    learners = [job.learner(i, "python3 train.py --epochs 3", num=2) for i in (1, 0)]
    for c in learners:
        assert wait_exit(c, timeout=120) == 0, c.logs().decode()
    sums = {line.rsplit("=", 1)[1] for c in learners for line in c.logs().decode().splitlines()
            if "weights_sha256=" in line}  # fmt: skip
    assert len(sums) == 1
    helper.kill(signal=jobspec.HELPER_FINISH_SIGNAL)
    assert wait_exit(helper) == 0
    keys = {o["Key"] for o in s3_client.list_objects_v2(Bucket=results)["Contents"]}
    assert jobspec.log_object_key(job.id, 1) in keys
    assert jobspec.results_prefix(job.id) + "metrics.json" in keys


# --------------------------------------------------------------------------- as a process


def _helper_process(tmp_path: Path, s3_server, **env: str) -> subprocess.Popen:
    full = {
        "PATH": os.environ["PATH"],
        "DLAAS_JOB_DIR": str(tmp_path / "job"),
        "JOB_ID": "p" + uuid.uuid4().hex[:8],
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


def test_finish_signal_while_downloading_stores_logs_and_exits_0(tmp_path, s3_server, s3_client):
    data, results = _bucket(s3_client), _bucket(s3_client)
    for i in range(400):  # enough objects that the download takes a while
        s3_client.put_object(Bucket=data, Key=f"part-{i:04d}", Body=os.urandom(64 * 1024))
    logs = tmp_path / "job" / "logs"
    logs.mkdir(parents=True)
    (logs / "learner-0.log").write_text("learner 0 was here\n")
    proc = _helper_process(
        tmp_path, s3_server, DLAAS_DATA_BUCKET=data, DLAAS_RESULTS_BUCKET=results
    )
    try:
        first = proc.stdout.readline()
        assert "restored 1 log lines" in first  # the local log counts as the earlier runs'
        assert "downloading" in proc.stdout.readline()
        proc.send_signal(signal.SIGUSR1)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert [e["event"] for e in events(out)] == ["stored"]
    assert not (tmp_path / "job" / ".data_ready").exists()
    assert len(list((tmp_path / "job" / "data").iterdir())) < 400  # it really stopped early
    job_id = events(out)[0]["prefix"].rstrip("/")
    body = s3_client.get_object(Bucket=results, Key=jobspec.log_object_key(job_id, 0))["Body"]
    assert body.read() == b"learner 0 was here\n"


def test_a_wrong_secret_exits_11_without_printing_it(tmp_path, s3_server, s3_client):
    data = _bucket(s3_client)
    s3_client.put_object(Bucket=data, Key="x", Body=b"x")
    proc = _helper_process(
        tmp_path,
        s3_server,
        AWS_SECRET_ACCESS_KEY="wrong-secret-value",
        DLAAS_DATA_BUCKET=data,
        DLAAS_RESULTS_BUCKET="r",
    )
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == jobspec.HELPER_EXIT_STORE_REFUSED, out
    assert events(out)[-1]["code"] == "store_refused"
    assert "wrong-secret-value" not in out


def test_missing_env_is_named(tmp_path, s3_server):
    proc = _helper_process(tmp_path, s3_server, DLAAS_S3_ENDPOINT="")
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert "DLAAS_S3_ENDPOINT" in out and "DLAAS_RESULTS_BUCKET" in out


def test_metric_files_below_log_dir_are_stored_while_training_and_at_the_end(
    tmp_path, s3_server, s3_client
):
    results = _bucket(s3_client)
    logs = tmp_path / "job" / "logs"
    (logs / "tb").mkdir(parents=True)
    (logs / "learner-1").mkdir()
    (logs / "tb" / "events.out.tfevents.1.host").write_bytes(b"not parsed by the helper")
    (logs / "learner-1" / "m.jsonl").write_text('{"step": 1, "loss": 1}\n')  # another node's
    job_id = "m" + uuid.uuid4().hex[:8]
    proc = _helper_process(
        tmp_path,
        s3_server,
        JOB_ID=job_id,
        DLAAS_RESULTS_BUCKET=results,
        NUM_LEARNERS="2",
        **{jobspec.ENV_HELPER_LEARNERS: "0"},
    )

    def stored() -> set[str]:
        listing = s3_client.list_objects_v2(Bucket=results, Prefix=jobspec.metrics_prefix(job_id))
        return {
            o["Key"].removeprefix(jobspec.metrics_prefix(job_id))
            for o in listing.get("Contents", [])
        }

    try:
        out = ""
        while "data_ready" not in out:
            out += proc.stdout.readline()
        # Written while the learners train: uploaded without waiting for the end.
        (logs / "evaluation-metrics.txt").write_text('{"step": 1, "acc": 0.5}\n')
        # One scan uploads the files one after the other: wait for the whole set, not for
        # the file written last (it may be uploaded first).
        want = {"tb/events.out.tfevents.1.host", "evaluation-metrics.txt"}
        deadline = time.monotonic() + 30
        while not want <= stored() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert stored() == want
        (logs / "evaluation-metrics.txt").write_text(
            '{"step": 1, "acc": 0.5}\n{"step": 2, "acc": 0.6}\n'
        )
        proc.send_signal(signal.SIGUSR1)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    body = s3_client.get_object(
        Bucket=results, Key=jobspec.metrics_prefix(job_id) + "evaluation-metrics.txt"
    )["Body"].read()
    assert body.count(b"\n") == 2  # the last state, stored on the finish signal


def test_the_jobs_own_unreachable_store_exits_15_naming_host_and_field(tmp_path, s3_server):
    with socket.socket() as s:  # a port nobody listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = _helper_process(
        tmp_path,
        s3_server,
        DLAAS_S3_ENDPOINT=f"http://127.0.0.1:{port}",
        DLAAS_RESULTS_BUCKET="results",
        DLAAS_DATA_BUCKET="data",
        **{jobspec.ENV_STORE_FIELD: jobspec.STORE_ENDPOINT_FIELD},
    )
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == jobspec.HELPER_EXIT_CONNECTION_UNREACHABLE, out
    error = events(out)[-1]
    assert error["code"] == "store_unreachable"
    assert f"127.0.0.1:{port}" in error["message"]
    assert error["message"].startswith(jobspec.STORE_ENDPOINT_FIELD)
    assert not (tmp_path / "job" / ".data_ready").exists()


def _until_ready(proc: subprocess.Popen) -> str:
    out = ""
    while '"data_ready"' not in out:
        line = proc.stdout.readline()
        assert line, out  # it exited before data_ready
        out += line
    return out


def _stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGUSR1)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    return out


def _first_run(tmp_path, s3_server, s3_client) -> tuple[dict, str]:
    """One run of a job: its helper prepares, the 'learner' prints and checkpoints, the
    helper stores. Returns the helper env and the log as stored."""
    data, results = _bucket(s3_client), _bucket(s3_client)
    s3_client.put_object(Bucket=data, Key="d.bin", Body=b"data")
    env = {
        "JOB_ID": "f" + uuid.uuid4().hex[:8],
        "DLAAS_DATA_BUCKET": data,
        "DLAAS_RESULTS_BUCKET": results,
        jobspec.ENV_HELPER_FINISH_ON_EXIT: "0",
    }
    proc = _helper_process(tmp_path, s3_server, **env)
    try:
        _until_ready(proc)
        job = tmp_path / "job"
        (job / "logs" / "learner-0.log").write_text("epoch 1/3\nepoch 2/3\n")
        (job / "checkpoints" / "ckpt-2.pkl").write_bytes(b"two")
        out = _stop(proc)
    finally:
        proc.kill()
    assert "fast start" not in out
    return env, "epoch 1/3\nepoch 2/3\n"


def test_a_restart_on_the_volume_its_last_run_stored_starts_without_restoring(
    tmp_path, s3_server, s3_client
):
    env, log = _first_run(tmp_path, s3_server, s3_client)
    s3_client.delete_object(Bucket=env["DLAAS_DATA_BUCKET"], Key="d.bin")  # not fetched again
    proc = _helper_process(tmp_path, s3_server, **env)
    try:
        out = _until_ready(proc)
        assert "fast start" in out and "downloading" not in out, out
        key = jobspec.log_object_key(env["JOB_ID"], 0)
        head = s3_client.head_object(Bucket=env["DLAAS_RESULTS_BUCKET"], Key=key)
        # This run's start is in S3 before its learner may print (the log reader's contract).
        assert head["Metadata"][RUN_START_META] == "2"
        with open(tmp_path / "job" / "logs" / "learner-0.log", "a") as f:
            f.write("resuming from the checkpoint of epoch 2\nepoch 3/3\n")
        out = _stop(proc)
    finally:
        proc.kill()
    assert [e["event"] for e in events(out)] == ["stored"]  # data_ready was printed above
    stored = s3_client.get_object(Bucket=env["DLAAS_RESULTS_BUCKET"], Key=key)
    assert (
        stored["Body"].read().decode()
        == log + "resuming from the checkpoint of epoch 2\nepoch 3/3\n"
    )
    assert stored["Metadata"][RUN_START_META] == "2"


@pytest.mark.parametrize("elsewhere", ["log", "checkpoint"])
def test_a_restart_after_a_run_elsewhere_restores_from_the_store(
    tmp_path, s3_server, s3_client, elsewhere
):
    env, log = _first_run(tmp_path, s3_server, s3_client)
    results, job_id = env["DLAAS_RESULTS_BUCKET"], env["JOB_ID"]
    if elsewhere == "log":  # a run on another node printed a line and stored it
        s3_client.put_object(
            Bucket=results, Key=jobspec.log_object_key(job_id, 0), Body=log + "epoch 3/3\n"
        )
    else:  # ... or stored a checkpoint
        s3_client.put_object(
            Bucket=results, Key=jobspec.checkpoint_prefix(job_id) + "ckpt-3.pkl", Body=b"3"
        )
    proc = _helper_process(tmp_path, s3_server, **env)
    try:
        out = _until_ready(proc)
        assert "fast start" not in out and "downloading" in out, out
        job = tmp_path / "job"
        if elsewhere == "log":
            assert (job / "logs" / "learner-0.log").read_text().endswith("epoch 3/3\n")
        else:
            assert (job / "checkpoints" / "ckpt-3.pkl").read_bytes() == b"3"
        _stop(proc)
    finally:
        proc.kill()
