"""Several Docker engines as nodes on one machine: servers.start_engine, copy_image, nodes files.

One extra engine for the module (it starts in well under a second; copying the job image
to it takes most of this module's time, ~8 s for 300 MB). The tests check that it
answers and is reused, runs the job image after the copy, allocates user networks that
overlap nothing of the machine engine's, lets a container reach a host service through
its gateway (as a helper reaches S3), and leaves no process behind when stopped, also
after its dockerd was SIGKILLed with a container running (a node's engine dying). The
nodes file tests are pure: parse good files, refuse bad ones naming the field.
"""

from __future__ import annotations

import http.server
import ipaddress
import json
import os
import shutil
import signal
import threading
import time

import docker
import pytest

from dlaas import servers
from dlaas.nodes import (
    NodesFileError,
    NodeSpec,
    configured_nodes,
    dump_nodes,
    load_nodes_file,
    parse_nodes,
)

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("dockerd") is None, reason="extra engines need root+dockerd"
)
LABELS = {"dlaas.test": "test_nodes"}


@pytest.fixture(scope="module")
def engine(tmp_path_factory, docker_client):
    state_dir = tmp_path_factory.mktemp("engines")
    started = time.monotonic()
    engine = servers.start_engine("node-t", state_dir)
    engine.start_s = time.monotonic() - started  # type: ignore[attr-defined]
    try:
        yield engine
    finally:
        engine.stop()
        # The data root holds a copy of the job image (300 MB): not worth keeping.
        shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def engine_client(engine):
    client = docker.DockerClient(base_url=engine.docker_host, timeout=120)
    yield client
    client.close()


@pytest.fixture(scope="module")
def copied(engine_client, docker_client, learner_image):
    started = time.monotonic()
    assert servers.copy_image(docker_client, engine_client, learner_image) is True
    return time.monotonic() - started


@pytest.fixture
def host_service():
    """An HTTP server on 0.0.0.0 (as S3 listens): its port; stopped after the test."""
    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@needs_root
@pytest.mark.docker
def test_engine_starts_answers_and_is_reused(engine, engine_client):
    assert engine.start_s < 10, f"engine took {engine.start_s:.1f}s to answer"
    info = engine_client.info()
    assert "dlaas.node=node-t" in info["Labels"]
    assert info["DockerRootDir"] == str(engine.data_root)
    again = servers.start_engine("node-t", engine.data_root.parent.parent)
    assert (again.pid, again.started, again.pool) == (engine.pid, False, engine.pool)
    # Its default bridge is its own (the machine engine's docker0 is left alone).
    assert servers.docker_gateway_ip(engine_client) == engine.gateway
    assert os.path.exists("/sys/class/net/" + engine.bridge)


@needs_root
@pytest.mark.docker
def test_copied_image_runs_and_a_second_copy_is_skipped(
    engine_client, docker_client, learner_image, copied
):
    assert copied < 40, f"image copy took {copied:.1f}s"
    source_id = docker_client.images.get(learner_image).id
    assert engine_client.images.get(learner_image).id == source_id
    started = time.monotonic()
    assert servers.copy_image(docker_client, engine_client, learner_image) is False
    assert time.monotonic() - started < 2
    out = engine_client.containers.run(
        learner_image, ["python3", "-c", "import numpy, boto3; print('ok')"],
        remove=True, labels=LABELS,
    )  # fmt: skip
    assert out.strip() == b"ok"


@needs_root
@pytest.mark.docker
def test_user_networks_of_two_engines_never_overlap(engine, engine_client, docker_client):
    name = f"dlaas-test-nodes-{os.getpid()}"
    mine = engine_client.networks.create(name, driver="bridge", labels=LABELS)
    theirs = docker_client.networks.create(name, driver="bridge", labels=LABELS)
    try:
        subnet = ipaddress.ip_network(mine.attrs["IPAM"]["Config"][0]["Subnet"])
        other = ipaddress.ip_network(theirs.attrs["IPAM"]["Config"][0]["Subnet"])
        assert subnet.subnet_of(ipaddress.ip_network(engine.pool))
        assert not subnet.overlaps(other)
        for net in docker_client.networks.list():
            for cfg in net.attrs["IPAM"]["Config"] or []:
                if "." in cfg.get("Subnet", ""):
                    assert not ipaddress.ip_network(engine.pool).overlaps(
                        ipaddress.ip_network(cfg["Subnet"])
                    ), net.name
    finally:
        mine.remove()
        theirs.remove()


def test_engine_pools_skip_what_is_taken():
    assert servers.choose_engine_pool([]) == "10.200.0.0/16"
    taken = ["172.17.0.0/16", "10.200.3.0/24", "10.201.0.0/16", "10.0.0.0/9"]
    assert servers.choose_engine_pool(taken) == "10.202.0.0/16"
    with pytest.raises(servers.ServerError, match="no free address pool"):
        servers.choose_engine_pool(["10.0.0.0/8"])
    # A restarted engine goes back to its own pool while that is free, else the first free.
    assert servers.choose_engine_pool(taken, prefer="10.205.0.0/16") == "10.205.0.0/16"
    assert servers.choose_engine_pool(taken, prefer="10.201.0.0/16") == "10.202.0.0/16"
    assert servers.engine_bridge_name("10.202.0.0/16") == "dlaas-br202"
    assert servers.engine_gateway("10.202.0.0/16") == "10.202.0.1"


@needs_root
@pytest.mark.docker
def test_container_reaches_a_host_service_through_its_gateway(
    engine, engine_client, learner_image, copied, host_service
):
    """As the helper reaches S3: a job network's container, the node's gateway, a host port."""
    network = engine_client.networks.create(
        f"dlaas-test-nodes-gw-{os.getpid()}", driver="bridge", labels=LABELS
    )
    url = f"http://{engine.gateway}:{host_service}/"
    try:
        out = engine_client.containers.run(
            learner_image,
            ["python3", "-c", f"import urllib.request as u; print(u.urlopen({url!r}, timeout=5).status)"],
            network=network.name, remove=True, labels=LABELS,
        )  # fmt: skip
    finally:
        network.remove()
    assert out.strip() == b"200"


@needs_root
@pytest.mark.docker
def test_stop_after_the_engine_was_killed_leaves_no_process(
    engine, engine_client, learner_image, copied
):
    """A node's dockerd SIGKILLed with a container running: stop() cleans up all of it, and
    the engine starts again on its own pool."""
    network = engine_client.networks.create("dlaas-t-net", driver="bridge", labels=LABELS)
    container = engine_client.containers.run(
        learner_image, ["sleep", "300"], detach=True, init=True, labels=LABELS, network=network.name
    )
    assert servers._bridges_in(engine.pool), "a user network has a bridge in the pool"
    container.reload()
    container_pid = container.attrs["State"]["Pid"]
    assert servers.pid_alive(container_pid)
    os.kill(engine.pid, signal.SIGKILL)
    servers.wait_until(lambda: not servers.pid_alive(engine.pid), 5, "dockerd to die")
    assert engine.processes(), "containerd and the shim outlive a SIGKILLed dockerd"
    assert servers.find_engine("node-t", engine.data_root.parent.parent) is not None

    started = time.monotonic()
    engine.stop()
    assert time.monotonic() - started < 15
    assert engine.processes() == []
    assert not servers.pid_alive(container_pid)
    assert not os.path.exists("/sys/class/net/" + engine.bridge)
    assert servers._bridges_in(engine.pool) == []
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split()[4] for line in f]
    roots = (str(engine.exec_root), str(engine.data_root))
    assert not [m for m in mounts if m.startswith(roots)], "mounts left behind"
    assert not engine.exec_root.exists()
    assert servers.find_engine("node-t", engine.data_root.parent.parent) is None
    again = servers.start_engine("node-t", engine.data_root.parent.parent)
    try:
        assert again.pool == engine.pool
    finally:
        again.stop()


# --------------------------------------------------------------------------- nodes files

GOOD_YAML = """
nodes:
  - name: local
    docker_host: unix:///var/run/docker.sock
    cpus: 2
    memory_mb: 8000
    labels: {rack: r1, area: a}
  - name: node-2
    docker_host: unix:///run/dlaas-engines/node-2-0123abcd/docker.sock
    cpus: 1.5
    memory_mb: 4000
    gpus: 2
    gpu_type: v100
    labels: {rack: r2, area: a}
    s3_endpoint_for_containers: http://10.201.0.1:8333
"""


def test_nodes_file_parses_yaml_and_json_and_round_trips(tmp_path, monkeypatch):
    path = tmp_path / "nodes.yaml"
    path.write_text(GOOD_YAML)
    nodes = load_nodes_file(path)
    assert [n.name for n in nodes] == ["local", "node-2"]
    assert nodes[1] == NodeSpec(
        name="node-2", cpus=1.5, memory_mb=4000, gpus=2, gpu_type="v100",
        docker_host="unix:///run/dlaas-engines/node-2-0123abcd/docker.sock",
        labels={"rack": "r2", "area": "a"},
        s3_endpoint_for_containers="http://10.201.0.1:8333",
    )  # fmt: skip
    assert nodes[0].gpus == 0 and nodes[0].s3_endpoint_for_containers == ""

    as_json = tmp_path / "nodes.json"
    as_json.write_text(dump_nodes(nodes))
    assert load_nodes_file(as_json) == nodes
    # A bare list is accepted too.
    assert parse_nodes(json.loads(dump_nodes(nodes))["nodes"]) == nodes

    from dlaas.config import PlatformSettings

    monkeypatch.setenv("DLAAS_NODES_FILE", str(path))
    settings = PlatformSettings(s3_access_key="k", s3_secret_key="s")
    assert configured_nodes(settings) == nodes
    monkeypatch.delenv("DLAAS_NODES_FILE")
    (single,) = configured_nodes(PlatformSettings(s3_access_key="k", s3_secret_key="s"))
    assert single.name == "local" and single.cpus > 0


def _node(**changes) -> dict:
    node = {"name": "n1", "docker_host": "unix:///x.sock", "cpus": 1, "memory_mb": 100}
    node.update(changes)
    return {k: v for k, v in node.items() if v is not None}


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"nodes": []}, "nodes: must be a non-empty list"),
        ({"nodes": [_node()], "extra": 1}, "unknown top-level field(s) extra"),
        ([_node(name="Bad Name")], "nodes[0].name"),
        ([_node(name=None)], "nodes[0].name"),
        ([_node(docker_host="/var/run/docker.sock")], "nodes[0] (n1).docker_host"),
        ([_node(cpus=None)], "nodes[0] (n1).cpus: is required"),
        ([_node(cpus=0)], "nodes[0] (n1).cpus: must be > 0"),
        ([_node(cpus="two")], "nodes[0] (n1).cpus: must be a number"),
        ([_node(memory_mb=1.5)], "nodes[0] (n1).memory_mb: must be a whole number"),
        ([_node(memory_mb=-1)], "nodes[0] (n1).memory_mb: must be > 0"),
        ([_node(gpus=-1)], "nodes[0] (n1).gpus: must be >= 0"),
        ([_node(gpus=True)], "nodes[0] (n1).gpus: must be a number"),
        ([_node(labels=["r1"])], "nodes[0] (n1).labels: must be a mapping"),
        ([_node(labels={"rack": {"x": 1}})], "nodes[0] (n1).labels.rack"),
        ([_node(s3_endpoint_for_containers="10.0.0.1:8333")], "s3_endpoint_for_containers"),
        ([_node(memory=100)], "nodes[0].memory: unknown field"),
        ([_node(), _node()], "nodes[1].name: 'n1' is listed twice"),
        (["n1"], "nodes[0]: must be a mapping"),
    ],
)
def test_bad_nodes_files_are_refused_naming_the_field(document, field):
    with pytest.raises(NodesFileError) as caught:
        parse_nodes(document, source="nodes file f.yaml")
    assert field in str(caught.value)
    assert str(caught.value).startswith("nodes file f.yaml: ")


def test_unreadable_or_broken_nodes_files_are_refused(tmp_path):
    with pytest.raises(NodesFileError, match="cannot read it"):
        load_nodes_file(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("nodes: [ {name: a,")
    with pytest.raises(NodesFileError, match="not YAML or JSON"):
        load_nodes_file(broken)
