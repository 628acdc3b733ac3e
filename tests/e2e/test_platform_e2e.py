"""End to end: REST -> gRPC -> LCM -> Docker containers -> status, logs and results.

The whole platform is brought up once for this module with `dlaas.local.platform.up` in a
temporary state dir (real Docker engine, etcd, SeaweedFS, SQLite and the four services as
processes) and taken down afterwards. Jobs go in over REST as a user would send them;
a running one's progress shows in REST and the CLI.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import tarfile
import threading
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from dlaas.clients.cli import app
from dlaas.clients.client import DlaasClient, pack_code
from dlaas.domain import jobspec
from dlaas.domain.accounts import DEFAULT_TEAM
from dlaas.domain.namespace import team_bucket
from dlaas.domain.status import FINAL, HAPPY_PATH
from dlaas.local import components, platform
from dlaas.local.state import StateDir

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

REPO = Path(__file__).resolve().parents[2]


# The FfDL example's store is the platform's S3 through the Docker bridge's gateway, a
# private address: users' stores there are refused unless the operator allows it.
SETTINGS = {"DLAAS_EGRESS_ALLOW_NETWORKS": "172.16.0.0/12"}


def up_again(home) -> None:
    """`up` as the supervisor runs it: with the settings the platform started with (an `up`
    with other settings is refused while the platform runs)."""
    with pytest.MonkeyPatch.context() as env:
        for name, value in SETTINGS.items():
            env.setenv(name, value)
        platform.up(home, progress=lambda line: None)


@pytest.fixture(scope="module")
def home(tmp_path_factory, docker_client):
    """The platform's state dir: up for the whole module, down afterwards."""
    home = tmp_path_factory.mktemp("platform")
    up_again(home)
    try:
        yield home
    finally:
        platform.down(home, progress=lambda line: None)


@pytest.fixture(scope="module")
def live(home, docker_client):
    cfg = json.loads((home / "client.json").read_text())
    http = httpx.Client(
        base_url=cfg["url"], headers={"Authorization": f"Bearer {cfg['token']}"}, timeout=30
    )
    s3 = platform.platform_s3(home)
    _upload_digits(http)
    yield http, s3, docker_client
    http.close()


def _upload_digits(http) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("prepare", REPO / "examples/digits/prepare.py")
    prepare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prepare)
    # As a user does (`dlaas data upload`): through the API, into the team's namespace.
    r = http.put("/v1/data/digits-data/digits.npz", content=prepare.digits_npz())
    assert r.status_code == 200, r.text


# The user `dlaas up` makes is in team "default": its buckets are "default--NAME".
RESULTS = team_bucket(DEFAULT_TEAM, "digits-results")


def submit(http, manifest: str, code_dir: Path | None = None) -> str:
    files = {"manifest": ("manifest.yaml", manifest.encode(), "application/yaml")}
    if code_dir is not None:
        data, name = pack_code(code_dir)
        files["code"] = (name, data, "application/gzip")
    reply = http.post("/v1/jobs", files=files)
    assert reply.status_code == 201, reply.text
    return reply.json()["job_id"]


def wait_final(http, job_id: str, timeout: float = 90) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        job = http.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in FINAL:
            return job
        time.sleep(0.2)
    raise AssertionError(f"{job_id} still {job['status']} after {timeout} s")


def wait_cleaned(docker_client, job_id: str, timeout: float = 30) -> None:
    label = f"{jobspec.LABEL_JOB}={job_id}"
    deadline = time.time() + timeout
    while time.time() < deadline:
        left = docker_client.containers.list(
            all=True, filters={"label": label}, ignore_removed=True
        )
        nets = docker_client.networks.list(filters={"label": label})
        vols = docker_client.volumes.list(filters={"label": label})
        if not (left or nets or vols):
            return
        time.sleep(0.2)
    raise AssertionError(f"{job_id}: containers/networks/volumes left: {left} {nets} {vols}")


def logs(http, job_id: str, learner: int = 0, offset: int = 0) -> list[str]:
    reply = http.get(f"/v1/jobs/{job_id}/logs", params={"learner": learner, "offset": offset})
    assert reply.status_code == 200, reply.text
    return reply.text.splitlines()


def test_digits_example_completes_with_model_in_s3_and_logs_readable(live):
    http, s3, docker_client = live
    manifest = (REPO / "examples/digits/manifest.yaml").read_text()
    job_id = submit(http, manifest, REPO / "examples/digits")
    job = wait_final(http, job_id)
    assert job["status"] == "COMPLETED", [(h["status"], h["reason"]) for h in job["history"]]
    statuses = [h["status"] for h in job["history"]]
    assert statuses == [str(s) for s in HAPPY_PATH]
    assert all(h["reason"] for h in job["history"])
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=RESULTS)["Contents"]}
    assert {f"{job_id}/model.npz", f"{job_id}/metrics.json", f"{job_id}/logs/learner-0.log"} <= keys
    metrics = json.loads(s3.get_object(Bucket=RESULTS, Key=f"{job_id}/metrics.json")["Body"].read())
    assert metrics["test_accuracy"] > 0.9
    lines = logs(http, job_id)
    assert any(re.match(r"epoch 20/20 loss=", line) for line in lines)
    assert logs(http, job_id, offset=len(lines) - 2) == lines[-2:]  # resume from an offset
    results = http.get(f"/v1/jobs/{job_id}/results")
    with tarfile.open(fileobj=io.BytesIO(results.content)) as tar:
        assert "model.npz" in {Path(n).name for n in tar.getnames()}
    wait_cleaned(docker_client, job_id)


def test_two_learners_exchange_gradients_and_agree(live):
    http, _, docker_client = live
    manifest = (REPO / "tests/fixtures/jobs/numpy-allreduce/manifest.yaml").read_text()
    job_id = submit(http, manifest, REPO / "tests/fixtures/jobs/numpy-allreduce")
    job = wait_final(http, job_id)
    assert job["status"] == "COMPLETED", [(h["status"], h["reason"]) for h in job["history"]]
    sums = set()
    for learner in (0, 1):
        text = "\n".join(logs(http, job_id, learner))
        rounds = [int(x) for x in re.findall(r"allreduce_rounds=(\d+)", text)]
        assert rounds and rounds[-1] > 100, f"learner {learner}'s log:\n{text[-3000:]}"
        sums.update(re.findall(r"weights_sha256=([0-9a-f]{64})", text))
    assert len(sums) == 1  # both learners ended with the same weights
    wait_cleaned(docker_client, job_id)


@pytest.mark.timeout(900)  # a new machine builds the PyTorch image first (a few minutes)
def test_an_ffdl_pytorch_model_runs_to_completed_on_the_pytorch_image(
    live, home, pytorch_image, docker_gateway
):
    """FfDL's pytorch-model shape as written (a folded `python` command, a mount_cos store
    with a connection block, framework pytorch "latest"), on Debian's torch.

    As in FfDL's examples, the connection names the platform's own object store with its
    keys (FfDL's `auth_url: http://s3.default.svc.cluster.local`, `test`/`test`): job
    containers reach no other store here (dlaas.local.firewall lets them reach only that port).
    """
    import importlib.util

    http, s3, docker_client = live
    spec = importlib.util.spec_from_file_location("prepare", REPO / "examples/digits/prepare.py")
    prepare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prepare)
    suffix = os.urandom(4).hex()
    data_bucket, model_bucket = f"pytorch-digits-data-{suffix}", f"pytorch-digits-model-{suffix}"
    for bucket in (data_bucket, model_bucket):
        s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=data_bucket, Key="digits.npz", Body=prepare.digits_npz())
    port = json.loads((home / "platform.json").read_text())["s3_port"]
    keys = json.loads((home / "secrets.json").read_text())
    manifest = (
        (REPO / "tests/fixtures/manifests/ffdl-pytorch-digits.yml")
        .read_text()
        .replace("http://s3.lab.example:9000", f"http://{docker_gateway}:{port}")
        .replace("user_name: test", f"user_name: {keys['s3_access_key']}")
        .replace("password: test", f"password: {keys['s3_secret_key']}")
        .replace("container: pytorch-digits-data", f"container: {data_bucket}")
        .replace("container: pytorch-digits-model", f"container: {model_bucket}")
    )
    job_id = submit(http, manifest, REPO / "examples/pytorch")
    job = wait_final(http, job_id, timeout=240)
    assert job["status"] == "COMPLETED", [(h["status"], h["reason"]) for h in job["history"]]
    lines = logs(http, job_id)
    assert any(line.startswith("torch 2.13.0") for line in lines), lines[-20:]
    assert any(line.startswith("epoch 8/8 loss=") for line in lines), lines[-20:]
    stored = {o["Key"] for o in s3.list_objects_v2(Bucket=model_bucket)["Contents"]}
    assert {f"{job_id}/model.pt", f"{job_id}/metrics.json"} <= stored
    body = s3.get_object(Bucket=model_bucket, Key=f"{job_id}/metrics.json")["Body"].read()
    metrics = json.loads(body)
    assert metrics["framework"].startswith("torch 2.13.0") and metrics["test_accuracy"] > 0.9
    model = s3.get_object(Bucket=model_bucket, Key=f"{job_id}/model.pt")["Body"].read()
    assert model[:2] == b"PK"  # torch.save's zip format
    wait_cleaned(docker_client, job_id)


def test_exit_code_3_fails_the_job_with_the_code_and_last_log_lines(live):
    http, _, docker_client = live
    job_id = submit(
        http,
        "name: exits-3\ncpus: 0.5\nmemory: 128MiB\n"
        'framework: {name: python, command: "echo preparing; echo something broke >&2; exit 3"}\n',
    )
    job = wait_final(http, job_id)
    assert job["status"] == "FAILED"
    last = job["history"][-1]
    assert last["exit_code"] == 3 and last["error_code"] == "exit_code"
    assert "something broke" in last["reason"]
    assert "something broke" in logs(http, job_id)
    wait_cleaned(docker_client, job_id)


def test_halted_job_ends_halted_and_leaves_no_containers(live):
    http, _, docker_client = live
    job_id = submit(
        http,
        "name: long\ncpus: 0.5\nmemory: 128MiB\n"
        'framework: {name: python, command: "echo started; sleep 300"}\n',
    )
    deadline = time.time() + 30
    while http.get(f"/v1/jobs/{job_id}").json()["status"] != "PROCESSING":
        assert time.time() < deadline
        time.sleep(0.1)
    reply = http.post(f"/v1/jobs/{job_id}/halt")
    assert reply.status_code == 200, reply.text
    job = wait_final(http, job_id, timeout=30)
    assert job["status"] == "HALTED"
    wait_cleaned(docker_client, job_id)
    assert http.post(f"/v1/jobs/{job_id}/halt").status_code == 409


def test_gang_bigger_than_the_cluster_is_refused_at_submit_not_queued(live):
    http, _, _ = live
    reply = http.post(
        "/v1/jobs",
        content="name: huge\nlearners: 500\ncpus: 1\nframework: {name: python, command: 'true'}\n",
        headers={"Content-Type": "application/yaml"},
    )
    assert reply.status_code == 422
    assert reply.json()["error"] == "capacity_exceeded"
    names = [j["name"] for j in http.get("/v1/jobs", params={"limit": 500}).json()["jobs"]]
    assert "huge" not in names


def test_framework_without_an_image_is_refused_naming_the_field(live):
    http, _, _ = live
    reply = http.post(
        "/v1/jobs",
        content="name: tf\nframework: {name: tensorflow, version: '1.5', command: 'python t.py'}\n",
        headers={"Content-Type": "application/yaml"},
    )
    assert reply.status_code == 422
    assert "framework" in reply.json()["message"]


def test_halt_checkpoints_and_resume_continues_from_the_checkpoint(live):
    http, _, docker_client = live
    manifest = (
        (REPO / "examples/digits/manifest.yaml")
        .read_text()
        .replace("python3 train.py --epochs 20", "python3 train.py --epochs 20 --epoch-sleep 0.5")
    )
    job_id = submit(http, manifest, REPO / "examples/digits")
    deadline = time.time() + 60
    while not any(line.startswith("epoch 3/") for line in logs(http, job_id)):
        assert time.time() < deadline, "no third epoch within a minute"
        time.sleep(0.2)
    assert http.post(f"/v1/jobs/{job_id}/halt").status_code == 200
    assert wait_final(http, job_id, timeout=60)["status"] == "HALTED"
    wait_cleaned(docker_client, job_id)
    reply = http.post(f"/v1/jobs/{job_id}/resume")
    assert reply.status_code == 200, reply.text
    job = wait_final(http, job_id)
    assert job["status"] == "COMPLETED", [(h["status"], h["reason"]) for h in job["history"]]
    lines = logs(http, job_id)
    resumed = [line for line in lines if line.startswith("resuming from the checkpoint of epoch")]
    assert resumed, lines
    epoch = int(re.search(r"epoch (\d+)", resumed[0]).group(1))
    assert epoch >= 3  # the work before the halt was kept
    # Both runs' lines are in the one stream, the first run's before the second's.
    first_epoch = next(i for i, line in enumerate(lines) if line.startswith("epoch 1/20"))
    assert first_epoch < lines.index(resumed[0])
    statuses = [h["status"] for h in job["history"]]
    assert statuses.count("HALTED") == 1 and statuses[-1] == "COMPLETED"


def test_a_followed_log_stream_resumes_without_gaps_after_every_api_process_is_killed(live, home):
    http, _, _ = live
    manifest = (
        (REPO / "examples/digits/manifest.yaml")
        .read_text()
        .replace("python3 train.py --epochs 20", "python3 train.py --epochs 12 --epoch-sleep 0.4")
    )
    job_id = submit(http, manifest, REPO / "examples/digits")
    cfg = json.loads((home / "client.json").read_text())
    client = DlaasClient(cfg["url"], cfg["token"])
    followed: list[str] = []
    failure: list[BaseException] = []

    def follow() -> None:
        try:
            followed.extend(client.logs(job_id, follow=True))
        except Exception as exc:  # noqa: BLE001 - the assertion below shows it
            failure.append(exc)

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    deadline = time.time() + 60
    while not any(line.startswith("epoch 2/") for line in followed):
        assert time.time() < deadline and not failure, (followed, failure)
        time.sleep(0.05)
    # Both API replicas die at once: the stream's connection breaks and nothing answers
    # until `up` (what the supervisor runs) starts them again.
    state = StateDir(home)
    for name in components.API_NAMES:
        os.kill(state.read_pid(name)["pid"], signal.SIGKILL)
    up_again(home)
    follower.join(timeout=90)
    assert not follower.is_alive() and not failure, failure
    assert wait_final(http, job_id)["status"] == "COMPLETED"
    assert followed == logs(http, job_id)  # every line once, in order
    assert [int(m.group(1)) for line in followed if (m := re.match(r"epoch (\d+)/", line))] == list(
        range(1, 13)
    )
    client.close()


def _lcm_leader_pid(home: Path) -> int:
    """The pid of the LCM replica holding the leadership key."""
    from dlaas.adapters.etcd_status import connect

    state = StateDir(home)
    host, port = state.read_pid("etcd")["address"].rsplit(":", 1)
    etcd = connect([(host, int(port))])
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            value, _ = etcd.get("/dlaas/lcm/leader")
            holder = value.decode() if value else ""
            for name in components.LCM_NAMES:
                pid = state.read_pid(name).get("pid")
                if pid and f":{pid}@" in holder:
                    return pid
            time.sleep(0.1)
    finally:
        etcd.close()
    raise AssertionError("no LCM replica holds the leadership")


def test_lcm_leader_killed_at_successive_moments_of_a_deployment_leaves_one_gang(live, home):
    """SIGKILL of the leader from the submit on through the deploy (PENDING, network, helper,
    learners): another replica adopts each job, which runs once, to the end."""
    http, _, docker_client = live
    manifest = (
        (REPO / "tests/fixtures/jobs/numpy-allreduce/manifest.yaml")
        .read_text()
        .replace("python3 train.py --epochs 20", "python3 train.py --epochs 3")
    )
    killed_in: list[str] = []
    for delay in (0.0, 0.15, 0.3, 0.6, 1.0):
        pid = _lcm_leader_pid(home)
        job_id = submit(http, manifest, REPO / "tests/fixtures/jobs/numpy-allreduce")
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
        killed_in.append(http.get(f"/v1/jobs/{job_id}").json()["status"])
        up_again(home)  # what the supervisor runs
        job = wait_final(http, job_id, timeout=120)
        assert job["status"] == "COMPLETED", (delay, killed_in, job["history"])
        statuses = [h["status"] for h in job["history"]]
        # Adopted, not restarted: one run, each status once.
        assert len(statuses) == len(set(statuses)), (delay, statuses)
        for learner in (0, 1):
            epochs = [
                int(m.group(1))
                for line in logs(http, job_id, learner)
                if (m := re.match(r"epoch (\d+)/", line))
            ]
            assert epochs == [1, 2, 3], (delay, learner, epochs)
        wait_cleaned(docker_client, job_id)
    print("status when the leader died:", killed_in)


PROGRESS_EPOCHS = 40


@pytest.mark.timeout(600)
def test_a_running_example_shows_its_progress_in_rest_and_the_cli(live, home):
    """A running example job (examples/digits, epochs made 1 s long) shows its progress with
    a total, a rate and an expected finish in REST's job view and in the CLI's `show` and
    `list`, read off its log."""
    http, _, _ = live
    manifest = (REPO / "examples/digits/manifest.yaml").read_text()
    manifest = manifest.replace("--epochs 20", f"--epochs {PROGRESS_EPOCHS} --epoch-sleep 1")
    job_id = submit(http, manifest, REPO / "examples/digits")
    deadline = time.time() + 300
    progress = None
    while time.time() < deadline:
        job = http.get(f"/v1/jobs/{job_id}").json()
        assert job["status"] not in ("COMPLETED", "FAILED"), job["history"]
        progress = job.get("progress")
        if job["status"] == "PROCESSING" and progress and progress.get("finish_at"):
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"no estimate in 300 s: {progress}")
    try:
        assert progress["unit"] == "epoch" and progress["total"] == PROGRESS_EPOCHS
        assert 0 < progress["percent"] < 100 and progress["rate_per_s"] > 0
        assert progress["finish_at"] > time.time() - 5
        listed = {j["job_id"]: j for j in http.get("/v1/jobs").json()["jobs"]}
        assert listed[job_id]["progress"]["total"] == PROGRESS_EPOCHS

        cli = CliRunner()
        # Each API replica estimates from its own look at the log tail, by the lines' stamps
        # (dlaas.adapters.job_progress): the CLI, on either replica, shows the finish at once;
        # the loop only rides out a replica's look in flight.
        for _ in range(20):
            shown = cli.invoke(app, ["--home", str(home), "show", job_id], env={"COLUMNS": "200"})
            assert shown.exit_code == 0, shown.output
            assert "progress: epoch " in shown.output and f"/{PROGRESS_EPOCHS} (" in shown.output
            rows = cli.invoke(app, ["--home", str(home), "list"], env={"COLUMNS": "200"})
            row = next(line for line in rows.output.splitlines() if job_id in line)
            if "expected to finish at" in shown.output and "% · ETA " in row:
                break
            time.sleep(0.5)
        assert "expected to finish at" in shown.output, shown.output
        assert "% · ETA " in row, rows.output
    finally:
        http.post(f"/v1/jobs/{job_id}/halt")
