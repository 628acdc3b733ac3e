"""The Swarm engine (dlaas/adapters/engines/swarm_engine.py) on a real 2-node swarm (the `swarm_lab` fixture):
a gang spanning both nodes, reached only through the manager's API.

The containers here run small shell commands instead of the platform's helper and learner
wrapper: what is under test is the adapter (services pinned to nodes, the job's overlay
network and its DNS names, secrets as files, stop/finish/restart through services, the
states and logs of tasks, all-or-nothing and clean removal).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import replace

import pytest

from dlaas.adapters.engines.swarm_engine import SwarmEngine
from dlaas.adapters.engines.swarm_spec import SECRET_PATH
from dlaas.domain import jobspec
from dlaas.domain.errors import TemporaryError
from dlaas.domain.jobspec import LABEL_NODE
from dlaas.domain.plan import ContainerSpec, DeploymentPlan, job_labels

pytestmark = pytest.mark.docker

SECRET = "s3cret-value-never-in-a-spec"
# The helper's contract on a swarm (no signal reaches a service's container): it finishes
# once its node's learners have left their exit codes in LOG_DIR, as the wrapper does.
HELPER = (
    f"cut -d= -f1 {SECRET_PATH} | sort | tr '\\n' ' '; echo; "
    "echo env-has-secret=$(env | grep -c s3cret); "
    "while [ ! -f /job/logs/learner-0.exit ]; do sleep 0.2; done; echo finishing"
)
# A learner stopped with SIGTERM records its exit code as the wrapper does.
STOPPABLE = (
    "mkdir -p /job/logs; trap 'echo 143 > /job/logs/learner-0.exit; exit 143' TERM; sleep 60 & wait"
)

# Learner 0 listens; learner 1, on the other node, connects to it by its alias.
LISTEN = (
    "python3 -c \"import socket; s=socket.socket(); s.bind(('',29500)); s.listen(1); "
    "c,_=s.accept(); print('got', c.recv(64).decode())\""
)
CONNECT = (
    'python3 -c "import socket,time\nfor _ in range(100):\n try:\n'
    "  c=socket.create_connection(('learner-0',29500),timeout=2); break\n"
    " except OSError: time.sleep(0.3)\nc.sendall(b'hello-from-1'); print('sent')\""
)


def _plan(platform_id: str, job_id: str, learner_cmds: list[str], nodes: list[str]):
    labels = job_labels(platform_id, job_id, "alice")

    def spec(name, role, cmd, node, learner=None, env=None, aliases=()):
        extra = {jobspec.LABEL_ROLE: role}
        if learner is not None:
            extra[jobspec.LABEL_LEARNER] = str(learner)
        return ContainerSpec(
            name=name, role=role, image="dlaas/learner:latest", command=["sh", "-c", cmd],
            env=env or {}, labels={**labels, **extra}, nano_cpus=200_000_000,
            mem_limit_mb=128, aliases=aliases, learner=learner, node=node, pids_limit=64,
            tmp_mb=16,
        )  # fmt: skip

    helper = spec(
        jobspec.helper_name(job_id), jobspec.ROLE_HELPER, HELPER, nodes[0],
        env={"AWS_ACCESS_KEY_ID": "job-key", "AWS_SECRET_ACCESS_KEY": SECRET, "JOB_ID": job_id},
        aliases=("helper",),
    )  # fmt: skip
    learners = [
        spec(
            jobspec.learner_name(job_id, i),
            jobspec.ROLE_LEARNER,
            cmd,
            nodes[i],
            learner=i,
            aliases=(jobspec.learner_alias(i),),
        )
        for i, cmd in enumerate(learner_cmds)
    ]
    return DeploymentPlan(
        job_id=job_id,
        network=jobspec.network_name(job_id),
        volume=jobspec.volume_name(job_id),
        bridge=jobspec.bridge_name(platform_id, job_id),
        labels=labels,
        helper=helper,
        learners=learners,
    )


def _wait(predicate, timeout=60.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def swarm(swarm_lab):
    info = swarm_lab.info()
    platform_id = f"t{uuid.uuid4().hex[:6]}"
    engine = SwarmEngine(swarm_lab.client(), platform_id, poll_s=0.3)
    yield engine, info
    for job in engine.jobs():
        engine.remove_job(job)


def test_a_gang_spans_two_nodes_and_its_learners_find_each_other_by_name(swarm):
    engine, info = swarm
    nodes = engine.nodes()
    assert set(info.nodes) <= set(nodes), "every lab node is known by its platform name"
    assert all(n.ready for n in nodes.values())
    n1, n2 = info.nodes[:2]
    job = "job-span"
    plan = _plan(
        engine.platform_id,
        job,
        [LISTEN, CONNECT],
        [n1, n2],
    )
    names = engine.node(n1).deploy(plan)
    assert names[0] == jobspec.helper_name(job) and len(names) == 3
    # Idempotent: a second deploy makes nothing new.
    assert engine.node(n2).deploy(plan) == names
    assert len(engine.services(job)) == 3
    # The monitor's change polling finds the job's three tasks by their labels alone.
    _wait(lambda: len(engine.fingerprint().get(job, ())) == 3, 30, "the job's 3 tasks")

    def learners_done():
        found = [c for c in engine.job_containers(job) if c.role == jobspec.ROLE_LEARNER]
        return found if found and all(c.exited for c in found) else None

    learners = sorted(_wait(learners_done, 90, "both learners to exit"), key=lambda c: c.learner)
    assert [(c.learner, c.node, c.exit_code) for c in learners] == [(0, n1, 0), (1, n2, 0)]
    # Each node's view holds its own containers only.
    assert {c.name for c in engine.node(n2).job_containers(job)} == {learners[1].name}
    out0 = engine.node(n1).logs(learners[0])
    assert b"got hello-from-1" in out0, out0
    assert engine.node(n2).logs(learners[1], tail=1).strip() == b"sent"


def test_credentials_are_a_secret_file_and_the_helper_finishes_after_its_learners(swarm):
    engine, info = swarm
    n1 = info.nodes[0]
    job = "job-secret"
    plan = _plan(engine.platform_id, job, [STOPPABLE], [n1])
    view = engine.node(n1)
    view.deploy(plan)
    helper = _wait(
        lambda: next((c for c in view.containers(job, jobspec.ROLE_HELPER) if c.running), None),
        60,
        "the helper to run",
    )
    _wait(lambda: b"env-has-secret" in (view.logs(helper) or b""), 30, "the helper's output")
    out = view.logs(helper).decode()
    assert "AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY" in out  # the file holds both keys
    assert "env-has-secret=0" in out  # ... and its env none of them
    # The manager stores and shows no secret value in the service spec.
    for svc in engine.services(job):
        assert SECRET not in str(svc) and "job-key" not in str(svc)

    view.stop_learners(job, timeout=2)
    stopped = view.containers(job, jobspec.ROLE_LEARNER)
    assert all(c.exited and c.exit_code == 143 for c in stopped), stopped
    assert view.wait_helper(job, 30)  # it finished by itself: its learner left its code
    view.signal_helper(job)  # a helper that has ended is left as it is
    done = next(iter(view.containers(job, jobspec.ROLE_HELPER)))
    assert done.exited and done.exit_code == 0
    assert b"finishing" in view.logs(done)

    view.remove_job(job)
    assert engine.services(job) == []

    def cleaned():
        label = {"label": f"{jobspec.LABEL_JOB}={job}"}
        return not engine.api.secrets(filters=label) and not engine.api.networks(filters=label)

    if not cleaned():  # tasks were still detaching: the monitor's resync removes it again
        _wait(lambda: view.remove_job(job) or cleaned(), 30, "the network and secret to go")


def test_a_run_removed_for_a_restart_leaves_the_network_to_the_next_run(swarm):
    """`remove_run` (a restart's teardown) removes the services and keeps the job's overlay
    network, which the next run's deploy uses as it is; `remove_job` takes it at the end."""
    engine, info = swarm
    n1 = info.nodes[0]
    job = "job-rerun"
    label = {"label": f"{jobspec.LABEL_JOB}={job}"}
    view = engine.node(n1)
    view.deploy(_plan(engine.platform_id, job, [STOPPABLE], [n1]))
    [network] = engine.api.networks(filters=label)
    view.remove_run(job)
    assert engine.services(job) == []
    assert [n["Id"] for n in engine.api.networks(filters=label)] == [network["Id"]]

    view.deploy(_plan(engine.platform_id, job, [STOPPABLE], [n1]))
    _wait(lambda: any(c.running for c in view.containers(job, jobspec.ROLE_LEARNER)), 60,
          "the next run's learner to run")  # fmt: skip
    assert [n["Id"] for n in engine.api.networks(filters=label)] == [network["Id"]]
    _wait(lambda: view.remove_job(job) or not engine.api.networks(filters=label), 30,
          "the network to go with the job")  # fmt: skip


def test_a_plan_naming_an_unknown_node_creates_nothing(swarm):
    engine, info = swarm
    plan = _plan(engine.platform_id, "job-nowhere", ["true", "true"], [info.nodes[0], "no-such"])
    with pytest.raises(TemporaryError, match="no-such"):
        engine.node(info.nodes[0]).deploy(plan)
    assert engine.services("job-nowhere") == []


def test_services_carry_the_node_and_the_hardening(swarm):
    engine, info = swarm
    n2 = info.nodes[1]
    plan = _plan(engine.platform_id, "job-hard", ["sleep 30"], [n2])
    engine.node(n2).deploy(plan)
    svc = next(s for s in engine.services("job-hard") if "learner" in s["Spec"]["Name"])
    spec = svc["Spec"]
    assert spec["Labels"][LABEL_NODE] == n2
    container = spec["TaskTemplate"]["ContainerSpec"]
    assert container["CapabilityDrop"] == ["ALL"] and container["Init"] is True
    assert spec["TaskTemplate"]["Resources"]["Limits"]["Pids"] == 64
    assert spec["TaskTemplate"]["RestartPolicy"]["Condition"] == "none"
    assert spec["EndpointSpec"]["Mode"] == "dnsrr"


def test_a_helper_whose_learner_left_no_exit_code_finishes_on_the_teardown_signal(swarm):
    """A learner SIGKILLed leaves no exit code for its helper: the LCM's teardown signal
    (the service scaled to 0: its StopSignal is the finish signal) ends the wait at once."""
    engine, info = swarm
    n1 = info.nodes[0]
    job = "job-killed"
    plan = _plan(engine.platform_id, job, ["sleep 60"], [n1])
    finishing = "trap 'echo finishing; exit 0' USR1; while true; do sleep 0.2; done"
    plan = replace(plan, helper=replace(plan.helper, command=["sh", "-c", finishing]))
    view = engine.node(n1)
    view.deploy(plan)
    _wait(lambda: all(c.running for c in view.containers(job)), 60, "the gang to run")

    view.stop_learners(job, timeout=1)  # SIGTERM to `sleep`: no exit code left anywhere
    view.signal_helper(job)
    assert view.wait_helper(job, 20)  # without the signal it would wait forever
    view.remove_job(job)
