"""End to end on a swarm: a platform brought up on one node, then `dlaas up --nodes 2` grows it
to a 2-node Docker Swarm on this machine (dlaas.local.swarm), which the services reach only
through its manager's API; last, `up --nodes 1` takes the swarm down again.

Each node declares 0.6 CPUs, so the PyTorch DDP example's gang (2 learners of 0.5 CPUs)
cannot fit one node: the scheduler spans it over both, the LCM deploys it as services
pinned to the two nodes on the job's overlay network, and torch.distributed (gloo) all-reduces
across nodes.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import docker
import httpx
import listeners
import pytest

from dlaas.adapters.nodes import machine_capacity
from dlaas.domain.status import FINAL
from dlaas.local import components, dockerd, platform
from dlaas.local.images import LEARNER_IMAGE
from dlaas.local.swarm import SwarmLab, SwarmLabError, check_requirements

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Grown:
    """The module's platform: brought up on one node, then grown to two (`up --nodes 2`);
    the processes' pids before and after the growth."""

    home: Path
    before: dict[str, int]
    after: dict[str, int]


def _pids(home: Path) -> dict[str, int]:
    return {c.name: c.pid for c in components.status(home) if c.pid}


@pytest.fixture(scope="module")
def grown(ram_path, docker_client, pytorch_image, mpi_image):
    try:
        check_requirements()
    except SwarmLabError as e:
        pytest.skip(str(e))
    # In memory: the lab's nodes each load the images (conftest's RAM_ROOT says why).
    home = ram_path / "swarm-platform"
    home.mkdir()
    # Nodes of 0.6 CPUs: a gang of two 0.5-CPU learners spans both. The PyTorch and MPI
    # images go to the nodes for the DDP and MPI jobs (no registry: saved and loaded).
    settings = {"DLAAS_NODE_CPUS": "0.6", "DLAAS_NODE_IMAGES": f"{pytorch_image},{mpi_image}"}
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        platform.up(home, progress=lambda line: None)  # one node, as a platform starts
        before = _pids(home)
        platform.up(home, progress=lambda line: None, nodes=2)
        yield Grown(home, before, _pids(home))
    finally:
        platform.down(home, progress=lambda line: None)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    assert not (home / "swarm" / "lab.json").exists()


@pytest.fixture(scope="module")
def home(grown) -> Path:
    return grown.home


def test_up_grows_the_platform_to_a_two_node_swarm_restarting_only_its_services(
    grown, docker_client
):
    """`up(nodes=2)` on a running platform: a 2-node swarm with the job images on each node,
    each declaring its share, which the services (restarted) reach through its manager; the
    servers are left alone, and a later `up` without a count touches nothing."""
    lab = SwarmLab(grown.home / "swarm").info()
    assert lab.nodes == ["node-1", "node-2"]
    manager = docker.DockerClient(base_url=lab.manager_socket, timeout=60)
    try:
        nodes = {n.attrs["Description"]["Hostname"]: n.attrs for n in manager.nodes.list()}
    finally:
        manager.close()
    assert set(nodes) == {"node-1", "node-2"}
    _, memory_mb = machine_capacity()
    labels = nodes["node-2"]["Spec"]["Labels"]
    # Each node declares DLAAS_NODE_CPUS and half the machine's memory; its own rack, one area.
    assert float(labels["dlaas.cpus"]) == 0.6
    assert int(labels["dlaas.memory_mb"]) * 2 <= memory_mb
    assert (labels["rack"], labels["area"]) == ("rack-2", "local")
    worker = docker.DockerClient(base_url=lab.node_sockets["node-2"], timeout=60)
    try:
        for tag in (LEARNER_IMAGE, *os.environ["DLAAS_NODE_IMAGES"].split(",")):
            assert worker.images.get(tag).id == docker_client.images.get(tag).id, tag
    finally:
        worker.close()
    for name in components.SERVICES:
        assert grown.after[name] != grown.before[name], name
    for name in components.SERVERS:
        assert grown.after[name] == grown.before[name], name
    platform.up(grown.home, progress=lambda _: None)
    assert _pids(grown.home) == grown.after


@pytest.fixture(scope="module")
def http(home):
    from test_platform_e2e import _upload_digits

    cfg = json.loads((home / "client.json").read_text())
    client = httpx.Client(
        base_url=cfg["url"], headers={"Authorization": f"Bearer {cfg['token']}"}, timeout=30
    )
    _upload_digits(client)
    yield client
    client.close()


def test_a_pytorch_ddp_gang_spans_two_nodes_and_its_ranks_agree(home, http):
    from test_platform_e2e import logs, submit, wait_final

    nodes = http.get("/v1/nodes").json()
    assert {n["name"] for n in nodes["nodes"]} == {"node-1", "node-2"}, nodes
    example = REPO / "examples/pytorch-ddp"
    manifest = (example / "manifest.yaml").read_text().replace("cpus: 1\n", "cpus: 0.5\n")
    started = time.monotonic()
    job_id = submit(http, manifest, example)
    job = wait_final(http, job_id, timeout=300)
    took = time.monotonic() - started
    texts = ["\n".join(logs(http, job_id, learner)) for learner in (0, 1)]
    assert job["status"] == "COMPLETED", ([(h["status"], h["reason"]) for h in job["history"]],
                                          [t[-2000:] for t in texts])  # fmt: skip
    placed = {e["id"]: e["node"] for e in job["learners"]}
    assert sorted(placed.values()) == ["node-1", "node-2"], placed  # one learner per node
    sums = [s for text in texts for s in re.findall(r"weights_sha256=([0-9a-f]{64})", text)]
    assert len(sums) == 2 and len(set(sums)) == 1  # gloo all-reduced across the overlay
    print(f"pytorch ddp across 2 swarm nodes: COMPLETED in {took:.1f}s")


# How soon after the job's end (its COMPLETED transition) a follow must have ended: the
# API polls every 0.5 s and the CLI reads the job again after its stream ends.
END_WITHIN_S = 5
# A follow still open this long after the job's end is the bug; the test stops waiting.
GIVE_UP_S = 60


def _cli_process(home: Path, *args: str) -> subprocess.Popen:
    """`dlaas --home HOME ARGS` as a user runs it: a process of its own (this checkout's code)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code = "from dlaas.clients.cli import app; app(prog_name='dlaas')"
    return subprocess.Popen(
        [sys.executable, "-c", code, "--home", str(home), *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_every_follow_ends_within_seconds_of_the_jobs_end_on_the_swarm(home, http, tmp_path):
    """`dlaas submit --follow`, `dlaas logs -f` and REST `logs?follow=true` end within seconds
    of the job's end. The bug: on the swarm the three never ended after the job COMPLETED
    (4 of 4; one hung 10 minutes), and the follow's tests ran only against a fake engine
    whose stream never ends. Here the learner is a swarm service, its log a task's log read
    through the manager; on 2026-11-26 the three ended 0.0-0.1 s after COMPLETED."""
    from test_platform_e2e import wait_final

    cfg = json.loads((home / "client.json").read_text())
    manifest = tmp_path / "digits.yaml"
    manifest.write_text(
        (REPO / "examples/digits/manifest.yaml")
        .read_text()
        .replace("cpus: 1", "cpus: 0.5")
        .replace("--epochs 20", "--epochs 6 --epoch-sleep 0.5")
    )
    ended: dict[str, float] = {}
    outputs: dict[str, str] = {}

    def waits(name: str, proc: subprocess.Popen) -> threading.Thread:
        def run() -> None:
            try:
                out, errs = proc.communicate(timeout=300)
                ended[name] = time.time()
                outputs[name] = out + errs
            except subprocess.TimeoutExpired:
                pass

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    submitted = _cli_process(
        home, "submit", str(manifest), "--code", str(REPO / "examples/digits"), "-f"
    )
    job_id = submitted.stdout.readline().strip()
    assert job_id.startswith("job-"), submitted.stderr.read() if submitted.poll() else job_id
    following = _cli_process(home, "logs", job_id, "-f")
    procs = [submitted, following]
    threads = [waits("submit --follow", submitted), waits("logs -f", following)]

    def rest() -> None:
        lines = []
        with httpx.Client(base_url=cfg["url"], headers=http.headers, timeout=GIVE_UP_S) as c:
            params = {"follow": "true"}
            with c.stream("GET", f"/v1/jobs/{job_id}/logs", params=params) as r:
                try:
                    lines.extend(r.iter_lines())
                except httpx.ReadTimeout:
                    return
        ended["REST logs?follow=true"] = time.time()
        outputs["REST logs?follow=true"] = "\n".join(lines)

    threads.append(threading.Thread(target=rest, daemon=True))
    threads[-1].start()
    try:
        job = wait_final(http, job_id, timeout=300)
        history = [(h["status"], h["reason"]) for h in job["history"]]
        assert job["status"] == "COMPLETED", history
        done_at = job["history"][-1]["at"]
        for thread in threads:
            thread.join(max(0.0, done_at + GIVE_UP_S - time.time()))
        late = {
            name: round(ended[name] - done_at, 1) if name in ended else f"open after {GIVE_UP_S} s"
            for name in ("submit --follow", "logs -f", "REST logs?follow=true")
        }
        print(f"follows ended after the job's end (s): {late}")
        assert all(isinstance(v, float) and v <= END_WITHIN_S for v in late.values()), late
        assert all("epoch 6/6" in outputs[name] for name in late), outputs
        assert "COMPLETED" in outputs["submit --follow"] and "COMPLETED" in outputs["logs -f"]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()


def test_an_mpi_job_spans_two_nodes_with_mpirun_over_ssh_and_its_key_as_a_swarm_secret(home, http):
    from test_platform_e2e import logs, submit, wait_final

    example = REPO / "examples/mpi"
    manifest = (example / "manifest.yaml").read_text().replace("cpus: 1\n", "cpus: 0.5\n")
    job_id = submit(http, manifest, example)
    job = wait_final(http, job_id, timeout=300)
    text = "\n".join(logs(http, job_id, 0))
    assert job["status"] == "COMPLETED", ([(h["status"], h["reason"]) for h in job["history"]],
                                          text[-2500:])  # fmt: skip
    assert sorted(e["node"] for e in job["learners"]) == ["node-1", "node-2"]
    sums = re.findall(r"weights_sha256=([0-9a-f]{64})", text)
    assert len(sums) == 2 and len(set(sums)) == 1  # both ranks, across the overlay

    # The job's services, overlay network and secret leave the swarm.
    manager = SwarmLab(home / "swarm").info().manager_socket
    client = docker.DockerClient(base_url=manager, timeout=30)
    try:
        label = {"label": f"dlaas.job={job_id}"}
        deadline = time.monotonic() + 60
        while client.api.services(filters=label) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert client.api.services(filters=label) == []
    finally:
        client.close()


# ---- node loss and maintenance (issue 12 item 3) -------------------------------------


@pytest.fixture(scope="module")
def admin(home):
    cfg = json.loads((home / "admin.json").read_text())
    client = httpx.Client(
        base_url=cfg["url"], headers={"Authorization": f"Bearer {cfg['admin_token']}"}, timeout=60
    )
    yield client
    client.close()


def _node(http, name: str) -> dict:
    return next(n for n in http.get("/v1/nodes").json()["nodes"] if n["name"] == name)


def _until(check, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(0.5)


def _availability(admin, name: str, availability: str) -> dict:
    reply = admin.put(f"/v1/nodes/{name}/availability", json={"availability": availability})
    assert reply.status_code == 200, reply.text
    return reply.json()


def _digits(epochs: int = 30) -> str:
    # Half a CPU (a node declares 0.6) and slow epochs: the job is still running when its
    # node goes; it checkpoints every epoch.
    return (
        (REPO / "examples/digits/manifest.yaml")
        .read_text()
        .replace("cpus: 1", "cpus: 0.5")
        .replace("--epochs 20", f"--epochs {epochs} --epoch-sleep 0.5")
    )


def _running_on(http, job_id: str, node: str, epoch: int) -> None:
    """Wait until the job runs on `node` and has logged `epoch` (checkpointed before it)."""
    from test_platform_e2e import logs

    def there() -> bool:
        job = http.get(f"/v1/jobs/{job_id}").json()
        assert job["status"] not in FINAL, job["history"]
        placed = [e["node"] for e in job.get("learners") or []]
        return placed == [node] and any(
            line.startswith(f"epoch {epoch}/") for line in logs(http, job_id)
        )

    _until(there, f"{job_id} running on {node} at epoch {epoch}")


def _resumed_on(http, job_id: str, node: str) -> dict:
    from test_platform_e2e import logs, wait_final

    job = wait_final(http, job_id, timeout=240)
    history = [(h["status"], h["reason"]) for h in job["history"]]
    assert job["status"] == "COMPLETED", history
    assert [e["node"] for e in job["learners"]] == [node], job["learners"]
    resumed = [x for x in logs(http, job_id) if x.startswith("resuming from the checkpoint")]
    assert resumed, history  # the second run started from the first one's checkpoint
    assert int(re.search(r"epoch (\d+)", resumed[-1]).group(1)) >= 2
    return job


def test_a_learner_killed_on_the_swarm_restarts_in_place_and_its_log_goes_on(home, http):
    # A stray `kill -9` on the node: the gang restarts there, in a new task, from the
    # learner's own last checkpoint on the volume, without a requeue or a new placement.
    from test_platform_e2e import logs, submit, wait_final

    from benchmarks import chaos_checks
    from dlaas.domain import jobspec

    manifest = _digits(12).rstrip("\n") + "\nmax_restarts: 2\n"
    job_id = submit(http, manifest, REPO / "examples/digits")
    _until(lambda: any(x.startswith("epoch 3/") for x in logs(http, job_id)), "epoch 3")
    [node] = [e["node"] for e in http.get(f"/v1/jobs/{job_id}").json()["learners"]]
    label = [f"{jobspec.LABEL_JOB}={job_id}", f"{jobspec.LABEL_ROLE}={jobspec.ROLE_LEARNER}"]
    [learner] = SwarmLab(home / "swarm").client(node).containers.list(filters={"label": label})
    learner.kill()
    resumed = "resuming from the checkpoint of epoch"
    _until(lambda: any(x.startswith(resumed) for x in logs(http, job_id)), "resumed", 60)
    live = logs(http, job_id)  # read from the new task's container while it trains

    job = wait_final(http, job_id, timeout=240)
    history = [(h["status"], h["reason"]) for h in job["history"]]
    assert job["status"] == "COMPLETED", history
    assert [s for s, _ in history].count("QUEUED") == 1, history  # never requeued
    [made] = job["info"]["learner_restarts"]
    assert made["reason"].startswith("restart 1/2 in place from the learners' last checkpoint: ")
    assert "learner 0 was killed from outside (SIGKILL" in made["reason"], made
    assert job["info"]["restarts"] == 1
    assert [e["node"] for e in job["learners"]] == [node]
    # One stream across both runs: the new run's lines after the old one's, none lost or
    # repeated, the second run resuming from the first one's checkpoint.
    lines = logs(http, job_id)
    check = chaos_checks.check_log(lines, 12)
    assert (check.lost, check.duplicated, check.runs) == (0, 0, 2), lines
    assert lines[: len(live)] == live, (live, lines)  # what was streamed live stays so


def test_a_job_on_a_killed_node_restarts_on_the_other_from_its_checkpoint_and_the_node_rejoins(
    home, http, admin
):
    from test_platform_e2e import submit

    lab = SwarmLab(home / "swarm")
    nodes = http.get("/v1/nodes").json()["nodes"]
    assert {(n["name"], n["state"], n["availability"], n["healthy"]) for n in nodes} == {
        ("node-1", "ready", "active", True),
        ("node-2", "ready", "active", True),
    }, nodes
    assert all(n["capacity"]["cpus"] == 0.6 for n in nodes), nodes  # fractional, as declared
    # node-1 drained while the job is placed, so that it lands on node-2.
    assert _availability(admin, "node-1", "drain")["healthy"] is False
    _until(lambda: _node(http, "node-1")["availability"] == "drain", "node-1 drained")
    job_id = submit(http, _digits(), REPO / "examples/digits")
    _running_on(http, job_id, "node-2", 3)
    assert _availability(admin, "node-1", "active")["healthy"] is True

    lab.kill_node("node-2")
    try:
        _until(lambda: _node(http, "node-2")["state"] == "down", "node-2 seen down")
        # ... and, a couple of probes later, no longer schedulable.
        _until(lambda: not _node(http, "node-2")["healthy"], "node-2 not schedulable")
        job = _resumed_on(http, job_id, "node-1")
        assert any("node node-2 lost" in h["reason"] for h in job["history"]), job["history"]
    finally:
        lab.restart_node("node-2")
    _until(lambda: _node(http, "node-2")["healthy"], "node-2 schedulable again")
    assert _node(http, "node-2")["state"] == "ready"


def test_drain_moves_a_job_from_its_checkpoint_and_activate_brings_the_node_back(home, http, admin):
    from test_platform_e2e import submit

    # Users may list nodes but not drain them.
    reply = http.put("/v1/nodes/node-2/availability", json={"availability": "drain"})
    assert reply.status_code == 403, reply.text
    reply = admin.put("/v1/nodes/node-2/availability", json={"availability": "off"})
    assert reply.status_code == 422 and "availability" in reply.text, reply.text

    # The job lands on node-2 (node-1 paused meanwhile), then node-2 is drained under it.
    _availability(admin, "node-1", "pause")
    job_id = submit(http, _digits(), REPO / "examples/digits")
    _running_on(http, job_id, "node-2", 3)
    _availability(admin, "node-1", "active")
    drained = _cli(home, "nodes", "drain", "node-2")  # the admin token of admin.json
    assert drained.exit_code == 0 and "node node-2 drained" in drained.output, drained.output
    try:
        job = _resumed_on(http, job_id, "node-1")
        moved = [h["reason"] for h in job["history"] if "node node-2 drained" in h["reason"]]
        assert moved and "moved from its checkpoint" in moved[0], job["history"]
        assert all(h["status"] != "FAILED" for h in job["history"])
        # The swarm drains the node once the gang is gone (its helper stored first).
        _until(lambda: _node(http, "node-2")["availability"] == "drain", "node-2 drained")
    finally:
        activated = _cli(home, "nodes", "activate", "node-2")
    assert activated.exit_code == 0 and "node node-2 active" in activated.output, activated.output

    # Each LCM replica reads the swarm's nodes at most 0.5 s old: the others follow at once.
    def listed() -> dict:
        reply = _cli(home, "nodes", "--json")
        assert reply.exit_code == 0, reply.output
        return next(n for n in json.loads(reply.stdout) if n["name"] == "node-2")

    _until(lambda: listed()["availability"] == "active", "node-2 listed active", 10)
    time.sleep(1)  # past every replica's cache: it stays active
    node = listed()
    assert (node["state"], node["availability"], node["healthy"]) == ("ready", "active", True)
    assert node["labels"].get("rack") and node["capacity"]["cpus"] == 0.6, node
    table = _cli(home, "nodes")
    assert table.exit_code == 0 and "node-1" in table.output and "ready" in table.output


def _cli(home, *args: str):
    from typer.testing import CliRunner

    from dlaas.clients.cli import app

    return CliRunner().invoke(app, ["--home", str(home), *args])


# Run by the learner: for each (label, host, port), "open" if a TCP connect succeeds.
PROBE_SCRIPT = (
    "import json, socket, sys\n"
    "out = {}\n"
    "for label, host, port in json.loads(sys.argv[1]):\n"
    "    s = socket.socket(); s.settimeout(3)\n"
    "    try:\n"
    "        s.connect((host, port)); out[label] = 'open'\n"
    "    except OSError as e:\n"
    "        out[label] = 'blocked: ' + type(e).__name__\n"
    "    finally:\n"
    "        s.close()\n"
    "print('PROBES ' + json.dumps(out), flush=True)\n"
)


@pytest.fixture
def host_listener():
    """A TCP listener on the host's 0.0.0.0 (any host service); its port."""
    with listeners.host_listener() as port:
        yield port


def test_a_job_on_the_swarm_reaches_the_hosts_s3_port_and_no_other_host_service(
    home, http, host_listener
):
    """Hostile code on a node: the lab's bridge is fenced like a job network. From a learner
    on the swarm, the host answers on the S3 port (the path the helpers use) and on no other
    port of the same address; S3's unauthenticated gRPC port stays shut too."""
    from test_platform_e2e import logs, submit, wait_final

    config = json.loads((home / "platform.json").read_text())
    host = SwarmLab(home / "swarm").info().host_address
    probes = [
        ["s3", host, int(config["s3_port"])],
        ["s3 grpc", host, int(config["s3_grpc_port"])],
        ["host service", host, host_listener],
    ]
    command = f"python3 -c {shlex.quote(PROBE_SCRIPT)} {shlex.quote(json.dumps(probes))}"
    manifest = "name: probe\ncpus: 0.5\nmemory: 128MiB\nframework:\n" + (
        f"  name: python\n  command: {json.dumps(command)}\n"
    )
    job_id = submit(http, manifest)
    job = wait_final(http, job_id, timeout=180)
    assert job["status"] == "COMPLETED", job["history"]
    assert {e["node"] for e in job["learners"]} <= {"node-1", "node-2"}, job["learners"]
    line = next(x for x in logs(http, job_id) if x.startswith("PROBES "))
    seen = json.loads(line.removeprefix("PROBES "))
    assert seen["s3"] == "open", seen
    assert seen["s3 grpc"].startswith("blocked"), seen
    assert seen["host service"].startswith("blocked"), seen


def test_up_with_one_node_takes_the_swarm_down(grown):
    """Last in the module: `up(nodes=1)` takes the lab down (the manager no longer answers)
    and the platform goes on on the machine's engine."""
    lab = SwarmLab(grown.home / "swarm").info()
    platform.up(grown.home, progress=lambda _: None, nodes=1)
    with pytest.raises(SwarmLabError):
        SwarmLab(grown.home / "swarm").info()  # no lab recorded any more
    assert not dockerd.docker_answers(lab.manager_socket, timeout=1)
