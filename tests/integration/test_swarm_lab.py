"""The swarm lab (dlaas.local.swarm): N dockerds in network namespaces form a real swarm.

Against the real thing: the session's 2-node lab (`swarm_lab` in conftest) is asked through
the manager's API, runs services placed on each node, loses a node and gets it back; a
second, 1-node lab without images is built and removed to check that nothing is left.
"""

from __future__ import annotations

import http.server
import json
import secrets
import subprocess
import threading
import time
from pathlib import Path

import docker
import pytest

from dlaas.domain import jobspec
from dlaas.local import dockerd, processes
from dlaas.local import swarm_plan as swarm_mod
from dlaas.local.swarm import SwarmLab, SwarmLabError, choose_subnet, lab_plan

TASK_TIMEOUT = 90  # seconds a one-shot service may take to reach a final state


def _final_state(service, timeout: float = TASK_TIMEOUT) -> dict:
    """The first task of `service` once it is complete/failed/rejected (polled, bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        tasks = service.tasks()
        done = [t for t in tasks if t["Status"]["State"] in {"complete", "failed", "rejected"}]
        if done:
            return done[0]
        if time.monotonic() > deadline:
            pytest.fail(f"service {service.name} did not finish: {[t['Status'] for t in tasks]}")
        time.sleep(0.5)


def _one_shot(client, name, image, command, node, network):
    return client.services.create(
        image,
        command=["python3", "-c", command],
        name=name,
        networks=[network],
        constraints=[f"node.hostname=={node}"],
        restart_policy=docker.types.RestartPolicy(condition="none"),
        # The name resolves to the task's own address: a service's virtual IP does not
        # route on nodes whose engines run with --iptables=false (dlaas.local.swarm).
        endpoint_spec=docker.types.EndpointSpec(mode="dnsrr"),
    )


def _http_server(client, name, image, node, network):
    """A service serving HTTP on port 8000 until removed."""
    serve = (
        "import http.server as h; h.HTTPServer(('', 8000), h.SimpleHTTPRequestHandler)"
        ".serve_forever()"
    )
    return _one_shot(client, name, image, serve, node, network)


@pytest.fixture
def overlay(swarm_lab):
    """An attachable overlay network on the lab, and the services a test made on it,
    removed afterwards."""
    client = swarm_lab.client()
    name = f"lab-{secrets.token_hex(4)}"
    network = client.networks.create(name, driver="overlay", attachable=True)
    made: list = []
    try:
        yield client, name, made
    finally:
        for service in made:
            service.remove()
        # A removed service's tasks leave the network a moment later.
        processes.wait_until(lambda: _removed(network), 30, f"network {name} removal")
        client.close()


def _removed(network) -> bool:
    try:
        network.remove()
    except docker.errors.NotFound:
        return True
    except docker.errors.APIError:
        return False
    return True


# --------------------------------------------------------------------------- pure parts


def test_choose_subnet_skips_every_network_in_use():
    assert choose_subnet([]) == "10.199.0.0/24"
    assert choose_subnet(["10.199.0.0/24", "10.199.1.128/25"]) == "10.199.2.0/24"
    assert choose_subnet(["192.168.0.0/24"], pool="192.168.0.0/23") == "192.168.1.0/24"
    with pytest.raises(SwarmLabError, match="no free /24"):
        choose_subnet(["10.0.0.0/8"])


def test_plan_names_fit_linux_limits_and_nodes_are_addressed_in_order(tmp_path):
    plan = lab_plan(tmp_path, "a1b2c3", "10.199.7.0/24", 12)
    assert plan["host_address"] == "10.199.7.1"
    assert [n["address"] for n in plan["nodes"][:2]] == ["10.199.7.2", "10.199.7.3"]
    assert [n["name"] for n in plan["nodes"][:2]] == ["node-1", "node-2"]
    for node in plan["nodes"]:
        assert len(node["veth"]) <= 15 and len(node["peer"]) <= 15
    assert len({n["exec_root"] for n in plan["nodes"]}) == 12
    with pytest.raises(SwarmLabError, match="nodes must be between"):
        lab_plan(tmp_path, "a1b2c3", "10.199.7.0/24", 0)


def test_a_named_bridge_keeps_the_veth_names_short(tmp_path):
    """A platform names the lab's bridge like its job bridges (15 characters) so that its
    firewall fences the lab in; the veths keep their own short names."""
    bridge = jobspec.bridge_name("dlaas-1234abcd", "swarm-lab")
    plan = lab_plan(tmp_path, "a1b2c3", "10.199.7.0/24", 3, bridge)
    assert plan["bridge"] == bridge and len(bridge) == 15
    assert plan["bridge"].startswith(jobspec.bridge_prefix("dlaas-1234abcd"))
    assert [n["veth"] for n in plan["nodes"]] == ["dswa1b2c3v1", "dswa1b2c3v2", "dswa1b2c3v3"]
    assert lab_plan(tmp_path, "a1b2c3", "10.199.7.0/24", 1)["bridge"] == "dswa1b2c3"
    with pytest.raises(SwarmLabError, match="15 characters"):
        lab_plan(tmp_path, "a1b2c3", "10.199.7.0/24", 1, "x" * 16)


def test_missing_requirements_are_named():
    missing = swarm_mod.missing_requirements(1000, lambda b: None if b == "nsenter" else "/x")
    assert any("root" in m for m in missing)
    assert any("nsenter" in m for m in missing)
    assert swarm_mod.missing_requirements(0, lambda b: "/x") == []


def test_labels_for_unknown_nodes_are_refused(tmp_path):
    with pytest.raises(SwarmLabError, match="node-3"):
        SwarmLab(tmp_path, nodes=2, labels={"node-3": {"rack": "r3"}})


# --------------------------------------------------------------------------- the real lab


def test_manager_lists_ready_nodes_with_their_labels(swarm_lab):
    info = swarm_lab.info()
    assert info.nodes == ["node-1", "node-2"]
    client = docker.DockerClient(base_url=info.manager_socket, timeout=30)
    try:
        nodes = {n.attrs["Description"]["Hostname"]: n.attrs for n in client.nodes.list()}
    finally:
        client.close()
    assert set(nodes) == {"node-1", "node-2"}
    assert {name: a["Status"]["State"] for name, a in nodes.items()} == {
        "node-1": "ready",
        "node-2": "ready",
    }
    assert nodes["node-1"]["Spec"]["Labels"] == {"rack": "r1", "area": "a1"}
    assert nodes["node-2"]["Spec"]["Labels"] == {"rack": "r2", "area": "a1"}
    assert nodes["node-1"]["Spec"]["Role"] == "manager"
    assert nodes["node-2"]["Spec"]["Role"] == "worker"
    # Each node is reachable on its own socket too (the tests copy images that way).
    assert dockerd.docker_answers(info.node_sockets["node-2"])


def test_containers_on_two_nodes_reach_each_other_by_name(swarm_lab, overlay, learner_image):
    client, network, made = overlay
    server = f"srv-{secrets.token_hex(3)}"
    made.append(_http_server(client, server, learner_image, "node-1", network))
    fetch = (
        "import time, urllib.request\n"
        "for _ in range(60):\n"
        "    try:\n"
        f"        urllib.request.urlopen('http://{server}:8000/', timeout=2); break\n"
        "    except OSError: time.sleep(0.5)\n"
        "else: raise SystemExit(3)\n"
    )
    client_svc = _one_shot(client, f"cli-{server}", learner_image, fetch, "node-2", network)
    made.append(client_svc)
    task = _final_state(client_svc)
    assert task["Status"]["State"] == "complete", task["Status"]
    assert task["NodeID"] != made[0].tasks()[0]["NodeID"]  # really on two different nodes


def test_a_task_reaches_the_hosts_address(swarm_lab, overlay, learner_image):
    client, network, made = overlay
    info = swarm_lab.info()
    token = secrets.token_hex(8)
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.path)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer((info.host_address, 0), Handler)
    port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        svc = _one_shot(
            client, f"host-{token[:6]}", learner_image,
            f"import urllib.request; urllib.request.urlopen("
            f"'http://{info.host_address}:{port}/{token}', timeout=10)",
            "node-2", network,
        )  # fmt: skip
        made.append(svc)
        task = _final_state(svc)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert task["Status"]["State"] == "complete", task["Status"]
    assert seen == [f"/{token}"]


def test_a_killed_node_is_seen_down_and_rejoins_when_restarted(swarm_lab):
    assert swarm_lab.node_state("node-2") == "ready"
    swarm_lab.kill_node("node-2")
    try:
        swarm_lab.wait_node_state("node-2", "down", timeout=60)
    finally:
        swarm_lab.restart_node("node-2")  # waits until the manager sees it Ready
    assert swarm_lab.node_state("node-2") == "ready"
    assert swarm_lab.node_state("node-1") == "ready"


def test_down_leaves_nothing_behind(tmp_path, swarm_lab):
    # swarm_lab: only for its skip where no lab can run; this lab is a second, smaller one.
    lab = SwarmLab(tmp_path / "lab", nodes=1, images=[])
    try:
        info = lab.up()
        assert lab.up().bridge == info.bridge  # idempotent: the same lab, reused
        record = lab._read()
    finally:
        lab.down()
    node = record["nodes"][0]
    assert not Path(f"/sys/class/net/{info.bridge}").exists()
    assert not Path(f"/var/run/netns/{node['netns']}").exists()
    assert not processes.pid_alive(node["pid"])
    assert processes.pids_with_token(node["exec_root"] + "/") == []
    assert processes.pids_with_token(node["pidfile"]) == []
    assert not Path(node["exec_root"]).exists()
    assert not (tmp_path / "lab" / "lab.json").exists()
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(tmp_path / "lab") not in mounts and node["exec_root"] not in mounts
    # The host end of the veth goes with the namespace, asynchronously.
    processes.wait_until(
        lambda: not Path(f"/sys/class/net/{node['veth']}").exists(), 10, "veth removal"
    )


def test_tasks_of_two_networks_on_one_node_do_not_reach_each_other(
    swarm_lab, overlay, learner_image
):
    """Every task also sits on its node's docker_gwbridge. A's address there answers from
    the node itself, but not from B's task on another network of the same node: the lab
    puts back the rule Docker's `--iptables=false` leaves out (dlaas.local.swarm_node.plug)."""
    client, network, made = overlay
    server = f"srv-{secrets.token_hex(3)}"
    made.append(_http_server(client, server, learner_image, "node-1", network))
    node = swarm_lab.client("node-1")
    other = client.networks.create(f"lab-{secrets.token_hex(4)}", driver="overlay", attachable=True)
    try:
        processes.wait_until(
            lambda: _running(node, server), TASK_TIMEOUT, f"{server} running on node-1"
        )
        address = _gwbridge_address(node, _running(node, server))
        # The node reaches A there: the path exists and A listens on it.
        netns = next(n["netns"] for n in _lab_record(swarm_lab)["nodes"] if n["name"] == "node-1")
        probe = (
            "import socket, sys\n"
            "s = socket.socket(); s.settimeout(3)\n"
            f"try: s.connect(({address!r}, 8000))\n"
            "except OSError: sys.exit(0)\n"
            "sys.exit(3)\n"
        )
        from_node = subprocess.run(
            ["nsenter", f"--net=/var/run/netns/{netns}", "python3", "-c", probe],
            capture_output=True, timeout=30, check=False,
        )  # fmt: skip
        assert from_node.returncode == 3, from_node.stderr  # open from the node itself
        svc = _one_shot(client, f"cross-{server}", learner_image, probe, "node-1", other.name)
        try:
            task = _final_state(svc)
        finally:
            svc.remove()
        assert task["Status"]["State"] == "complete", task["Status"]  # exit 0: blocked
    finally:
        processes.wait_until(lambda: _removed(other), 30, f"network {other.name} removal")
        node.close()


def _running(node, service: str):
    found = node.containers.list(filters={"label": f"com.docker.swarm.service.name={service}"})
    return found[0] if found else None


def _gwbridge_address(node, container) -> str:
    members = node.networks.get("docker_gwbridge").attrs["Containers"]
    return members[container.id]["IPv4Address"].split("/")[0]


def _lab_record(lab: SwarmLab) -> dict:
    return json.loads((lab.state_dir / "lab.json").read_text())
