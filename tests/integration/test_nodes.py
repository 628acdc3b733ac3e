"""The platform's nodes: the one local node, the retired multi-engine mode, a node's machine lost.

Without a swarm, `configured_nodes` is the one local node with declared or measured
capacity; DLAAS_NODES_FILE (the nodes file of the retired multi-engine mode) is refused,
naming it, and `up`/`down` retire the extra engines a state dir from that mode recorded.
Against the session's swarm lab: a node whose machine dies (`SwarmLab.kill_node(...,
machine=True)`, the chaos benchmark's "engine" kill) leaves no process of it running, and
once restarted its engine runs containers again.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from dlaas.adapters.nodes import (
    NodesError,
    NodeSpec,
    configured_nodes,
    machine_capacity,
    nodes_or_exit,
)
from dlaas.config import PlatformSettings
from dlaas.local import platform, processes
from dlaas.local.state import StateDir


def _settings(**fields) -> PlatformSettings:
    return PlatformSettings(s3_access_key="k", s3_secret_key="s", **fields)


def test_one_local_node_with_declared_or_measured_capacity(monkeypatch):
    monkeypatch.delenv("DLAAS_NODES_FILE", raising=False)
    declared = _settings(node_cpus=3, node_memory_mb=1000, node_gpus=1, node_gpu_type="t4")
    assert configured_nodes(declared) == [
        NodeSpec(name="local", cpus=3, memory_mb=1000, gpus=1, gpu_type="t4")
    ]
    (measured,) = configured_nodes(_settings(node_name="box"))
    assert (measured.name, measured.cpus, measured.memory_mb) == ("box", *machine_capacity())


def test_a_nodes_file_setting_is_refused_naming_it(monkeypatch, tmp_path):
    monkeypatch.setenv("DLAAS_NODES_FILE", str(tmp_path / "nodes.yaml"))
    with pytest.raises(NodesError, match="DLAAS_NODES_FILE: nodes files are no longer read"):
        configured_nodes(_settings())
    with pytest.raises(SystemExit, match="^lcm: bad configuration: DLAAS_NODES_FILE: .*Swarm"):
        nodes_or_exit(_settings(), "lcm")


def test_up_and_down_retire_the_engines_a_state_dir_of_the_multi_engine_mode_recorded(tmp_path):
    state = StateDir(tmp_path)
    state.prepare()
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        deadline = time.monotonic() + 5  # its command line reads empty until exec is done
        while "sleep" not in processes.pid_cmdline(sleeper.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        state.write_pid("engine-node-2", {"pid": sleeper.pid, "match": "sleep"})
        state.write_pid("engine-node-3", {"pid": 999_999_999, "match": "dockerd"})  # dead
        (tmp_path / "nodes.yaml").write_text(json.dumps({"nodes": []}))
        lines: list[str] = []
        assert platform._retire_old_engines(state, lines.append) == ["engine-node-2"]
        assert sleeper.wait(timeout=10) == -signal.SIGTERM  # stopped by its recorded pid
    finally:
        sleeper.kill()
        sleeper.wait()
    assert list(state.pids.glob("engine-*.json")) == []  # the supervisor never sees them
    assert not (tmp_path / "nodes.yaml").exists()
    assert len(lines) == 2 and all("retired" in line for line in lines)
    assert platform._retire_old_engines(state, lines.append) == []


@pytest.mark.docker
def test_a_node_whose_machine_dies_leaves_nothing_running_and_comes_back(swarm_lab, learner_image):
    node = swarm_lab.client("node-2")
    sleeper = node.containers.run(
        learner_image, ["python3", "-c", "import time; time.sleep(600)"],
        network_mode="none", labels={"dlaas.test": "test_nodes"}, detach=True,
    )  # fmt: skip
    pid = node.api.inspect_container(sleeper.id)["State"]["Pid"]
    exec_root = swarm_lab._node(swarm_lab._read(), "node-2")["exec_root"]
    assert processes.pid_alive(pid)
    node.close()
    swarm_lab.kill_node("node-2", machine=True)
    try:
        # dockerd, its containerd, the shims and the container's process: all gone.
        processes.wait_until(lambda: not processes.pid_alive(pid), 10, "the container's process")
        assert processes.pids_with_token(exec_root + "/") == []
    finally:
        swarm_lab.restart_node("node-2")  # waits until the manager sees it Ready
    node = swarm_lab.client("node-2")
    try:
        assert node.api.inspect_container(sleeper.id)["State"]["Running"] is False
        out = node.containers.run(
            learner_image, ["python3", "-c", "print('back')"], network_mode="none", remove=True
        )
        assert out.strip() == b"back"
    finally:
        node.api.remove_container(sleeper.id, force=True)
        node.close()
