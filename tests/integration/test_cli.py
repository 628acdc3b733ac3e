"""The `dlaas` CLI against a real API server (uvicorn on a free port).

Behind the API: a real SQLite store and real S3; the LCM and scheduler are the FAKES of
test_api.py (in-process gRPC). The CLI reads its address and token from client.json
in a temporary --home, as after `dlaas up`. What needs no server (validate, the queue
wording, the code archive) is in tests/unit/test_cli_offline.py.
"""

from __future__ import annotations

import json
import re
import threading
import time

import pytest
import uvicorn
from test_api import ADMIN, ALICE, MANIFEST, make_settings, put_log, scaled, seed_users, start_fakes
from typer.testing import CliRunner

from dlaas.clients.cli import app
from dlaas.clients.sdk import LcmClient, SchedulerClient
from dlaas.domain.status import Status
from dlaas.local.processes import free_port
from dlaas.v1 import scheduler_pb2
from services.api.app import create_app

runner = CliRunner()


class Server:
    def __init__(self, url, store, s3, results, home, lcm, sched):
        self.url, self.store, self.s3, self.results, self.home = url, store, s3, results, home
        self.lcm, self.sched = lcm, sched  # the real LCM on fakes, the FAKE scheduler (test_api.py)

    def cli(self, *args: str):
        return runner.invoke(app, ["--home", str(self.home), *args])

    def finish(self, job_id: str, status: Status = Status.COMPLETED, **kw) -> None:
        """What the job monitor would write: the job walks to `status` in the LCM's status."""
        self.lcm.keeper.walk_to(job_id, status, kw.pop("reason", "done"), **kw)


@pytest.fixture
def server(s3_server, s3_client, job_store, tmp_path):
    grpc_server, addr, lcm, sched = start_fakes(job_store)
    settings, api = make_settings(s3_server, tmp_path / "jobs.db", addr)
    seed_users(job_store)
    application = create_app(
        settings, api, store=job_store, lcm=LcmClient(addr), s3=s3_client, docker=False,
        scheduler=SchedulerClient(addr), log_poll_s=0.05,
    )  # fmt: skip
    port = free_port()
    uv = uvicorn.Server(
        uvicorn.Config(application, host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not uv.started and time.monotonic() < deadline:
        time.sleep(0.02)
    home = tmp_path / "home"
    home.mkdir()
    url = f"http://127.0.0.1:{port}"
    (home / "client.json").write_text(
        json.dumps({"url": url, "token": ALICE, "admin_token": ADMIN})
    )
    results = f"res-cli-{port}"
    s3_client.create_bucket(Bucket=results)
    try:
        yield Server(url, job_store, s3_client, results, home, lcm, sched)
    finally:
        uv.should_exit = True
        thread.join(10)
        grpc_server.stop(0)


@pytest.fixture
def manifest_file(server, tmp_path):
    path = tmp_path / "manifest.yml"
    path.write_text(MANIFEST.format(learners=1, results=server.results))
    return path


# --------------------------------------------------------------------------- jobs


def test_submit_list_show(server, manifest_file, tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    (code / "__pycache__").mkdir()
    (code / "__pycache__" / "x.pyc").write_bytes(b"junk")
    r = server.cli("submit", str(manifest_file), "--code", str(code))
    assert r.exit_code == 0, r.output
    job_id = r.stdout.strip().splitlines()[0]
    assert job_id.startswith("job-")
    stored = server.store.get(job_id)
    assert stored.user == "alice" and stored.code_key == f"code/{job_id}.tar.gz"

    r = server.cli("list")
    assert r.exit_code == 0 and job_id in r.output and "QUEUED" in r.output
    assert "since" in r.output and "alice" not in r.output  # one user's page: no user column
    r = server.cli("list", "--json")
    page = json.loads(r.stdout)
    assert page["total"] == 1 and page["jobs"][0]["job_id"] == job_id

    r = server.cli("show", job_id)
    assert r.exit_code == 0 and "history" in r.output and "memory_mb: 512" in r.output
    r = server.cli("show", job_id, "--json")
    assert json.loads(r.stdout)["history"][0]["status"] == "QUEUED"


def test_submit_follow_streams_logs_then_exits_by_final_status(server, manifest_file):
    r = server.cli("submit", str(manifest_file))
    first = r.stdout.strip()

    put_log(server, first, 0, ["epoch 1 acc 0.5", "epoch 2 acc 0.9"])
    server.finish(first)
    r = server.cli("logs", first)
    assert r.stdout.splitlines() == ["epoch 1 acc 0.5", "epoch 2 acc 0.9"]

    def finish_later(status, **kw):
        def run():
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                jobs, _ = server.store.list(status=Status.QUEUED)
                if jobs:
                    put_log(server, jobs[0].job_id, 0, ["training ..."])
                    server.finish(jobs[0].job_id, status, **kw)
                    return
                time.sleep(0.05)

        threading.Thread(target=run).start()

    finish_later(Status.COMPLETED)
    r = server.cli("submit", str(manifest_file), "--follow")
    assert r.exit_code == 0, r.output
    assert "training ..." in r.output and "COMPLETED" in r.output

    finish_later(Status.FAILED, reason="learner 0 exited 3", exit_code=3)
    r = server.cli("submit", str(manifest_file), "--follow")
    assert r.exit_code == 1
    assert "FAILED" in r.output and "exit code 3" in r.output


def _finish_when_queued(server, logs: dict[int, list[str]], status: Status, **kw):
    """In a thread: once a job is QUEUED, store its learners' logs and end it in `status`."""

    def run():
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            jobs, _ = server.store.list(status=Status.QUEUED)
            if jobs:
                for learner, lines in logs.items():
                    put_log(server, jobs[0].job_id, learner, lines)
                server.finish(jobs[0].job_id, status, **kw)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_submit_follow_streams_every_learner_prefixed(server, tmp_path):
    path = tmp_path / "two.yml"
    path.write_text(MANIFEST.format(learners=2, results=server.results))
    logs = {0: ["epoch 1 acc 0.5", "epoch 2 acc 0.9"], 1: ["epoch 1 acc 0.4", "epoch 2 acc 0.8"]}
    finisher = _finish_when_queued(server, logs, Status.COMPLETED)
    r = server.cli("submit", str(path), "--follow")
    finisher.join(10)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    for learner, own in logs.items():
        prefix = f"[{learner}] "
        assert [line[len(prefix) :] for line in lines if line.startswith(prefix)] == own
    assert "COMPLETED" in lines[-1]

    finisher = _finish_when_queued(server, {0: ["ok"], 1: ["boom"]}, Status.FAILED, exit_code=3)
    r = server.cli("submit", str(path), "--follow")
    finisher.join(10)
    assert r.exit_code == 1
    assert "[0] ok" in r.stdout and "[1] boom" in r.stdout
    assert "FAILED" in r.output and "exit code 3" in r.output


def test_halt_delete_and_errors(server, manifest_file):
    job_id = server.cli("submit", str(manifest_file)).stdout.strip()
    r = server.cli("halt", job_id)
    assert r.exit_code == 0 and "HALTED" in r.output
    r = server.cli("halt", job_id)
    assert r.exit_code == 1 and "invalid_transition" in r.output and "HTTP 409" in r.output
    r = server.cli("delete", job_id)
    assert r.exit_code == 0
    assert f"{job_id}: deleted; results kept in bucket {server.results} under prefix {job_id}/" in (
        r.output.replace("\n", "")
    )
    r = server.cli("show", job_id)
    assert r.exit_code == 1 and "not found" in r.output and "Traceback" not in r.output


def test_resume_and_scale(server, manifest_file, tmp_path):
    job_id = server.cli("submit", str(manifest_file)).stdout.strip()
    r = server.cli("resume", job_id)
    assert (
        r.exit_code == 1
        and "only a HALTED job can be resumed" in r.output
        and "HTTP 409" in r.output
    )
    server.cli("halt", job_id)
    r = server.cli("resume", job_id)
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == f"{job_id}: QUEUED"

    r = server.cli("scale", job_id, "3")
    assert r.exit_code == 1
    assert "learners: job" in r.output and "is not elastic" in r.output and "HTTP 422" in r.output
    elastic = tmp_path / "elastic.yml"
    elastic.write_text(manifest_file.read_text() + "min_learners: 1\nmax_learners: 4\n")
    job_id = server.cli("submit", str(elastic)).stdout.strip()
    r = server.cli("scale", job_id, "3")
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == f"{job_id}: QUEUED, target 3 learners"
    assert scaled(server.lcm) == [(job_id, 3, "alice")]
    r = server.cli("scale", job_id, "9")
    assert r.exit_code == 1 and "allowed 1 to 4" in r.output
    r = server.cli("--token", "tok-bob", "scale", job_id, "2")
    assert r.exit_code == 1 and "not found" in r.output


REASON = (
    "needs 8 GPUs on one node; largest free block is 4; expected to start in 20 min-40 min; "
    "would start now as 2x4 GPUs"
)


def test_show_and_queue_print_position_eta_and_reason(server, manifest_file):
    first = server.cli("submit", str(manifest_file)).stdout.strip()
    job_id = server.cli("submit", str(manifest_file)).stdout.strip()
    r = server.cli("show", job_id)
    assert "queued: not in the scheduler's queue yet" in r.output
    server.sched.entries = [
        scheduler_pb2.QueueEntry(job_id=first, position=1, reason="starts in this round"),
        scheduler_pb2.QueueEntry(
            job_id=job_id, position=2, reason=REASON, eta_low_s=1200, eta_high_s=2400
        ),
    ]
    r = server.cli("show", job_id)
    assert r.exit_code == 0, r.output
    assert (
        "queued: position 2, expected to start in 20–40 min; needs 8 GPUs on one node; "
        "largest free block is 4; would start now as 2x4 GPUs"
    ) in " ".join(r.output.split())  # rich may wrap the line

    r = server.cli("queue")
    assert r.exit_code == 0, r.output
    rows = [line for line in r.output.splitlines() if job_id in line or first in line]
    assert len(rows) == 2
    assert "now" in rows[0] and "starts in this round" in rows[0]
    assert "20–40 min" in rows[1] and "needs 8 GPUs" in rows[1]
    assert "20 min-40 min" not in r.output  # the ETA is shown once, from the numbers
    data = json.loads(server.cli("queue", "--json").stdout)
    assert [e["job_id"] for e in data["entries"]] == [first, job_id]

    server.cli("halt", job_id)
    assert "queued:" not in server.cli("show", job_id).output


def test_queue_says_when_it_is_empty(server):
    r = server.cli("queue")
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == "the queue is empty: no job is waiting to start"
    assert json.loads(server.cli("queue", "--json").stdout) == {"entries": []}


@pytest.fixture
def narrow(monkeypatch):
    """The CLI's console as on a 60-column terminal."""
    from dlaas.clients import cli

    monkeypatch.setattr(cli.console, "_width", 60)


def test_list_never_cuts_a_status_short_on_a_narrow_terminal(server, manifest_file, narrow):
    ids = [server.cli("submit", str(manifest_file)).stdout.strip() for _ in range(2)]
    server.finish(ids[0], Status.DOWNLOADING, reason="placed on node local")
    server.finish(ids[1], Status.PROCESSING, reason="learners running")
    r = server.cli("list")
    assert r.exit_code == 0, r.output
    rows = {i: next(line for line in r.output.splitlines() if i in line) for i in ids}
    assert "DOWNLOADING" in rows[ids[0]] and "PROCESSING" in rows[ids[1]]
    r = server.cli("show", ids[1])
    assert r.output.count("PROCESSING") == 2  # the header line and the history table


def test_show_of_a_failed_job_names_its_error_without_an_empty_exit_code(
    server, manifest_file, narrow
):
    job_id = server.cli("submit", str(manifest_file)).stdout.strip()
    server.finish(
        job_id, Status.FAILED, reason="training data not found", error_code="data_not_found"
    )
    r = server.cli("show", job_id)
    assert r.exit_code == 0, r.output
    assert "error: data_not_found\n" in r.output and "None" not in r.output
    # At 60 columns each history row still keeps its time on its first line.
    rows = [line for line in r.output.splitlines() if "QUEUED" in line or "FAILED" in line]
    assert all(re.search(r"\d\d:\d\d", line) for line in rows[1:]), rows


def test_an_id_is_one_path_segment_and_never_reaches_another_route(server):
    # Unescaped, `../users` went to the administrators' route and `?y=1` became a query.
    r = server.cli("show", "../users")
    assert r.exit_code == 1 and "HTTP 404" in r.output and "administrators" not in r.output
    r = server.cli("show", "job-x?y=1")
    assert r.exit_code == 1 and "job job-x?y=1 not found" in r.output
    r = server.cli("halt", "..")
    assert r.exit_code == 1 and "HTTP 404" in r.output


LEARNERS = [
    {"id": 0, "node": "local", "container": "job-x-learner-0", "state": "running"},
    {"id": 1, "node": "node-2", "container": "job-x-learner-1", "state": "exited",
     "exit_code": 137, "oom_killed": True},
]  # fmt: skip


def test_show_prints_the_learners_as_a_table(server, manifest_file):
    job_id = server.cli("submit", str(manifest_file)).stdout.strip()
    made = {"at": time.time(), "reason": "restart 1/3 in place from the learners' last checkpoint"}
    server.store.update_info(job_id, {"learners": LEARNERS, "learner_restarts": [made]})
    r = server.cli("show", job_id)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    header = next(line for line in lines if "learner" in line and "container" in line)
    assert header.split() == ["┃", "learner", "┃", "node", "┃", "state", "┃", "exit", "┃",
                              "container", "┃"]  # fmt: skip
    rows = [line.replace("│", " ").split() for line in lines if "job-x-learner" in line]
    assert rows == [
        ["0", "local", "running", "job-x-learner-0"],
        ["1", "node-2", "exited", "137", "(out", "of", "memory)", "job-x-learner-1"],
    ]
    assert "'id'" not in r.output and "{" not in r.output.split("manifest:")[0]
    assert "restarted in place: restart 1/3 in place from the learners' last checkpoint" in (
        r.output
    )


def test_submit_refused_prints_the_problems(server, tmp_path):
    path = tmp_path / "bad.yml"
    path.write_text(MANIFEST.format(learners=1, results="r").replace("cpus: 1", "cpus: 0"))
    r = server.cli("submit", str(path))
    assert r.exit_code == 1
    assert "cpus:" in r.output and "HTTP 422" in r.output
    # The problem is listed once, under the one-line verdict.
    assert r.output.count("cpus:") == 1, r.output
    assert r.output.startswith("error: invalid manifest (invalid_manifest, HTTP 422)\n  - cpus:")


def test_admin_flag_uses_the_admin_token(server, manifest_file):
    job_id = server.cli("submit", str(manifest_file)).stdout.strip()
    other = server.cli("--token", "tok-bob", "show", job_id)
    assert other.exit_code == 1 and "not found" in other.output
    assert server.cli("--admin", "show", job_id).exit_code == 0


def test_download_extracts_the_results(server, manifest_file, tmp_path):
    job_id = server.cli("submit", str(manifest_file)).stdout.strip()
    server.s3.put_object(Bucket=server.results, Key=f"{job_id}/model.txt", Body=b"weights")
    out = tmp_path / "out"
    r = server.cli("download", job_id, "-o", str(out))
    assert r.exit_code == 0, r.output
    assert (out / "model.txt").read_bytes() == b"weights"


def test_follow_learners_interleaves_every_stream_and_raises_a_streams_error():
    from dlaas.clients.client import DlaasClient, Unreachable

    class Streams(DlaasClient):
        """FAKE log streams: two lines per learner; learner `broken` then loses its connection."""

        broken = -1

        def logs(self, job_id, learner=0, offset=0, follow=False):
            yield from (f"{job_id} {learner} a", f"{job_id} {learner} b")
            if learner == self.broken:
                raise Unreachable("lost the connection")

    client = Streams("http://unused", "t", http=object())
    got = list(client.follow_learners("j", [0, 1, 2]))
    for learner in (0, 1, 2):
        assert [line for i, line in got if i == learner] == [f"j {learner} a", f"j {learner} b"]
    assert len(got) == 6
    client.broken = 1
    with pytest.raises(Unreachable, match="lost the connection"):
        list(client.follow_learners("j", [0, 1, 2]))


def test_status_reports_whether_each_running_component_answers(tmp_path):
    """`dlaas status` over pid records as `up` writes them: one process stands in for the
    services (its command line names their modules); the LCM's address is a real gRPC
    server with health checking, the scheduler's a port where nothing listens."""
    import subprocess
    import sys

    from dlaas.adapters.grpc_server import start_server

    modules = ["services.lcm.main", "services.scheduler.main", "services.jobmonitor.main"]
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *modules])
    lcm_addr = f"127.0.0.1:{free_port()}"
    grpc_server = start_server(lcm_addr, lambda server: None, [])
    try:
        pids = tmp_path / "pids"
        pids.mkdir()
        records = {
            "lcm-0": ("services.lcm.main", lcm_addr),
            "scheduler": ("services.scheduler.main", f"127.0.0.1:{free_port()}"),
            "jobmonitor": ("services.jobmonitor.main", ""),
        }
        for name, (match, address) in records.items():
            record = {"pid": stand_in.pid, "match": match, "address": address}
            (pids / f"{name}.json").write_text(json.dumps(record))
        r = runner.invoke(app, ["--home", str(tmp_path), "status", "--json"])
        assert r.exit_code == 1  # not everything runs, and the scheduler does not answer
        comps = {c["name"]: c for c in json.loads(r.stdout)}
        assert comps["lcm-0"]["running"] and comps["lcm-0"]["healthy"] is True
        assert comps["lcm-0"]["detail"] == "answers (gRPC health: SERVING)"
        assert comps["scheduler"]["running"] and comps["scheduler"]["healthy"] is False
        assert comps["scheduler"]["detail"] == "running, but does not answer (gRPC health: SERVING)"
        assert comps["jobmonitor"]["running"] and comps["jobmonitor"]["healthy"] is None
        assert comps["lcm-1"] == {
            "name": "lcm-1", "running": False, "pid": None, "address": "",
            "detail": "not started", "healthy": None,
        }  # fmt: skip

        r = runner.invoke(app, ["--home", str(tmp_path), "status"])
        assert r.exit_code == 1
        header = next(line for line in r.output.splitlines() if "component" in line)
        assert header.replace("┃", " ").split()[:3] == ["component", "running", "healthy"]
        rows = {
            cells[0]: cells[1:3]
            for cells in (line.replace("│", " ").split() for line in r.output.splitlines())
            if cells and cells[0] in records
        }
        assert rows == {
            "lcm-0": ["yes", "yes"],
            "scheduler": ["yes", "no"],
            "jobmonitor": ["yes", "-"],
        }
    finally:
        grpc_server.stop(0)
        stand_in.kill()
        stand_in.wait()


def test_deleting_a_job_that_has_not_ended_asks_or_needs_force(server, manifest_file, monkeypatch):
    from dlaas.clients import cli

    job_id = server.cli("submit", str(manifest_file)).stdout.strip()
    r = server.cli("delete", job_id)  # no terminal to ask on
    assert r.exit_code == 1 and "--force" in r.output and "QUEUED" in r.output
    assert "takes it out of the queue" in r.output and "learners" not in r.output
    assert server.cli("show", job_id).exit_code == 0  # still there

    monkeypatch.setattr(cli, "_interactive", lambda: True)
    r = runner.invoke(app, ["--home", str(server.home), "delete", job_id], input="n\n")
    assert r.exit_code == 1 and "not deleted" in r.output
    assert server.cli("show", job_id).exit_code == 0
    r = runner.invoke(app, ["--home", str(server.home), "delete", job_id], input="y\n")
    assert r.exit_code == 0 and f"{job_id}: deleted" in r.output
    assert server.cli("show", job_id).exit_code == 1

    other = server.cli("submit", str(manifest_file)).stdout.strip()
    monkeypatch.setattr(cli, "_interactive", lambda: False)
    r = server.cli("delete", "--force", other)
    assert r.exit_code == 0 and f"{other}: deleted" in r.output


def test_delete_help_says_what_it_does():
    r = runner.invoke(app, ["delete", "--help"])
    text = " ".join(r.output.split())
    assert "halted first" in text and "--force" in text and "--purge" in text
    assert "stay in its results bucket" in text
