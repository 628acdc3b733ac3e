"""End to end on a swarm: `dlaas up --nodes 2` builds a 2-node Docker Swarm on this machine
(dlaas.local.swarm) and the services reach it only through its manager's API.

Each node declares 0.6 CPUs, so the ddp example's gang (2 learners of 0.5 CPUs) cannot fit
one node: the scheduler spans it over both, the LCM deploys it as services pinned to the
two nodes on the job's overlay network, and the learners exchange gradients across nodes.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import docker
import httpx
import pytest

from dlaas import platform
from dlaas.local.swarm import SwarmLab, SwarmLabError, check_requirements

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def home(tmp_path_factory, docker_client):
    try:
        check_requirements()
    except SwarmLabError as e:
        pytest.skip(str(e))
    home = tmp_path_factory.mktemp("swarm-platform")
    saved = os.environ.get("DLAAS_NODE_CPUS")
    os.environ["DLAAS_NODE_CPUS"] = "0.6"
    try:
        platform.up(home, progress=lambda line: None, nodes=2)
        yield home
    finally:
        if saved is None:
            os.environ.pop("DLAAS_NODE_CPUS", None)
        else:
            os.environ["DLAAS_NODE_CPUS"] = saved
        platform.down(home, progress=lambda line: None)
    assert not (home / "swarm" / "lab.json").exists()


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


def test_the_ddp_gang_spans_two_nodes_and_its_learners_agree(home, http):
    from test_platform_e2e import logs, submit, wait_final

    nodes = http.get("/v1/nodes").json()
    assert {n["name"] for n in nodes["nodes"]} == {"node-1", "node-2"}, nodes
    started = time.monotonic()
    job_id = submit(http, (REPO / "examples/ddp/manifest.yaml").read_text(), REPO / "examples/ddp")
    job = wait_final(http, job_id)
    took = time.monotonic() - started
    assert job["status"] == "COMPLETED", [(h["status"], h["reason"]) for h in job["history"]]
    placed = {e["id"]: e["node"] for e in job["learners"]}
    assert sorted(placed.values()) == ["node-1", "node-2"], placed  # one learner per node
    sums = set()
    for learner in (0, 1):
        text = "\n".join(logs(http, job_id, learner))
        rounds = [int(x) for x in re.findall(r"allreduce_rounds=(\d+)", text)]
        assert rounds and rounds[-1] > 100, f"learner {learner}'s log:\n{text[-3000:]}"
        sums.update(re.findall(r"weights_sha256=([0-9a-f]{64})", text))
    assert len(sums) == 1  # both learners ended with the same weights, across nodes
    print(f"ddp across 2 swarm nodes: COMPLETED in {took:.1f}s")

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
