"""The limits and privileges of the containers the deployer makes, on the real engine.

As Docker records them (docker inspect: a process limit, all capabilities dropped,
no-new-privileges, not privileged, the job volume as the only mount, a bounded /tmp, the
helper's CPU and memory), and as the job's code meets them from inside: no capability, no
raw socket, no process past the limit, no byte past /tmp's size.
"""

from __future__ import annotations

import pytest
from security_support import python, result_of

from dlaas.domain import jobspec
from dlaas.domain import plan as plans

pytestmark = pytest.mark.docker

# Reports what the job's code can do: capabilities, a raw socket (ping, ARP/IP spoofing),
# how many processes it can start, how much it can write to /tmp.
INSIDE = """
import json, os, socket, subprocess
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines())
r = {"cap_eff": status["CapEff"].strip(), "no_new_privs": status["NoNewPrivs"].strip()}
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close()
    r["raw_socket"] = "allowed"
except OSError as e:
    r["raw_socket"] = f"refused: {e.strerror}"
children = []
try:
    for _ in range(int(os.environ["TRY_PROCESSES"])):
        children.append(subprocess.Popen(["sleep", "60"]))
except OSError as e:
    r["process_refused"] = e.strerror
r["processes"] = len(children)
for c in children:
    c.kill()
written = 0
try:
    with open("/tmp/fill", "wb") as f:
        for _ in range(int(os.environ["TRY_TMP_MB"])):
            f.write(b"x" * 2**20)
            f.flush()
            written += 1
except OSError as e:
    r["tmp_refused"] = e.strerror
r["tmp_mb_written"] = written
print("RESULT " + json.dumps(r), flush=True)
"""


@pytest.fixture(scope="module")
def inside(platform_id, jobs, docker_client):
    """What a learner found from inside, under small limits that are quick to hit."""
    job = jobs(
        platform_id,
        {"learner-0": python(INSIDE)},
        env={"TRY_PROCESSES": "200", "TRY_TMP_MB": "32"},
        pids_limit=64,
        tmp_mb=8,
    )
    return result_of(docker_client, jobspec.learner_name(job.job_id, 0))


@pytest.fixture(scope="module")
def deployed(platform_id, jobs, docker_client):
    """(plan, learner attrs, helper attrs) of a job deployed with the plan's own limits."""
    job = jobs(platform_id, {})
    learner = docker_client.containers.get(jobspec.learner_name(job.job_id, 0)).attrs
    helper = docker_client.containers.get(jobspec.helper_name(job.job_id)).attrs
    return job, learner, helper


def test_the_job_code_holds_no_capability_and_gains_none(inside):
    assert int(inside["cap_eff"], 16) == 0
    assert inside["no_new_privs"] == "1"
    assert inside["raw_socket"].startswith("refused"), inside  # NET_RAW is gone


def test_processes_stop_at_the_limit(inside):
    assert inside["processes"] < 64 and "process_refused" in inside, inside


def test_tmp_is_bounded(inside):
    assert inside["tmp_mb_written"] <= 8 and "tmp_refused" in inside, inside


@pytest.mark.parametrize("role", ["learner", "helper"])
def test_every_container_is_unprivileged_with_only_the_job_volume(deployed, role):
    job, learner, helper = deployed
    host = (learner if role == "learner" else helper)["HostConfig"]
    assert host["Privileged"] is False
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["Binds"] == [f"{job.volume}:{jobspec.JOB_MOUNT}:rw"]
    assert not host.get("Mounts") and not host.get("Devices")
    mounts = (learner if role == "learner" else helper)["Mounts"]
    assert [(m["Type"], m["Name"], m["Destination"]) for m in mounts] == [
        ("volume", job.volume, jobspec.JOB_MOUNT)
    ]
    size = plans.LEARNER_TMP_MB if role == "learner" else plans.HELPER_TMP_MB
    assert host["Tmpfs"] == {"/tmp": f"rw,nosuid,nodev,size={size}m"}
    assert host["NetworkMode"] == job.network


def test_every_container_has_a_process_limit(deployed):
    _, learner, helper = deployed
    assert learner["HostConfig"]["PidsLimit"] == plans.LEARNER_PIDS_LIMIT
    assert helper["HostConfig"]["PidsLimit"] == plans.HELPER_PIDS_LIMIT


def test_the_helper_has_cpu_and_memory_limits(deployed):
    _, _, helper = deployed
    host = helper["HostConfig"]
    assert host["CpuQuota"] / host["CpuPeriod"] == plans.HELPER_NANO_CPUS / 1e9
    assert helper["HostConfig"]["Memory"] == plans.HELPER_MEMORY_MB * 2**20


def test_the_writable_layer_is_bounded_where_the_engine_can(deployed, deployer):
    _, learner, _ = deployed
    storage = learner["HostConfig"].get("StorageOpt") or {}
    if deployer._layer_limit_ok:
        assert storage == {"size": f"{plans.LEARNER_DISK_MB}m"}
    else:  # overlay2 not on xfs with pquota: unbounded, as the README says
        assert not storage


def test_the_job_network_is_a_bridge_the_firewall_matches(deployed, docker_client, platform_id):
    job, _, _ = deployed
    net = docker_client.networks.get(job.network)
    bridge = net.attrs["Options"]["com.docker.network.bridge.name"]
    assert bridge == job.bridge and bridge.startswith(jobspec.bridge_prefix(platform_id))
    assert len(bridge) <= 15
