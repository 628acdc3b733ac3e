"""The LCM against real etcd, Docker and a real scheduler service over gRPC.

Deploying is idempotent (twice, or after a crash between steps, leaves one set of
containers), learners get the platform env, limits and labels, a missing image fails the
job with a reason, a deploy the engine refuses for the job's own reason fails the job with
the engine's reason and frees its allocation, a gang that can never fit is refused leaving
nothing behind, and a halted job ends HALTED with its learners stopped.
"""

from __future__ import annotations

import dataclasses
import time

import pytest
import requests
from lcm_support import containers, submit

import services.lcm.deployment as lcm_deployment
from dlaas.domain import errors, jobspec
from dlaas.domain.status import Status
from services.lcm.reconciler import PENDING_CHECK_S, PENDING_STALE_S

pytestmark = pytest.mark.docker


def test_submit_place_deploy_and_redeploy_leave_exactly_one_set(lcm, docker_client):
    job = f"job-{time.monotonic_ns():x}"
    assert submit(lcm, job)[0] == "QUEUED"
    lcm.place_round()
    assert lcm.keeper.get(job).status == Status.DOWNLOADING
    names = sorted(c.name for c in containers(docker_client, job))
    assert names == [jobspec.helper_name(job), *(jobspec.learner_name(job, i) for i in range(2))]
    learner = docker_client.containers.get(jobspec.learner_name(job, 1))
    env = dict(e.split("=", 1) for e in learner.attrs["Config"]["Env"])
    assert (
        env["LEARNER_ID"] == "1"
        and env["NUM_LEARNERS"] == "2"
        and env["MASTER_ADDR"] == "learner-0"
    )
    # Half a CPU over each second (plans.cfs_limit), not Docker's 50 ms of every 100 ms.
    host = learner.attrs["HostConfig"]
    assert (host["CpuPeriod"], host["CpuQuota"], host["NanoCpus"]) == (1_000_000, 500_000, 0)
    # Learners weigh less than the helper: a saturated node still runs the helper at once.
    assert learner.attrs["HostConfig"]["CpuShares"] == jobspec.LEARNER_CPU_SHARES
    helper = docker_client.containers.get(jobspec.helper_name(job))
    assert helper.attrs["HostConfig"]["CpuShares"] in (0, 1024)
    assert learner.attrs["HostConfig"]["Memory"] == 256 * 1024 * 1024
    assert learner.labels[jobspec.LABEL_ROLE] == "learner"
    # Deploy again, and again after "a crash" removed one learner: still exactly one set.
    placement = [{"learner": i, "node": "local", "gpu_indices": []} for i in range(2)]
    lcm.deploy(job, placement)
    docker_client.containers.get(jobspec.learner_name(job, 0)).remove(force=True)
    lcm.deploy(job, placement)
    assert sorted(c.name for c in containers(docker_client, job)) == names
    history = [t.status for t in lcm.store.get(job).history]
    assert history == [Status.QUEUED, Status.PENDING, Status.DOWNLOADING]


def test_pending_job_is_redeployed_by_reconcile_after_a_crash(lcm, docker_client):
    job = f"job-{time.monotonic_ns():x}"
    submit(lcm, job, learners=1)
    # Crash right after PENDING was written, before any container existed.
    lcm.deploy = lambda *a: None
    lcm.place_round()
    del lcm.deploy
    assert lcm.keeper.get(job).status == Status.PENDING and not containers(docker_client, job)
    lcm.reconcile()
    assert lcm.keeper.get(job).status == Status.DOWNLOADING
    assert len(containers(docker_client, job)) == 2


def test_a_deploy_cut_short_is_done_again_once_the_job_stays_pending(lcm, docker_client):
    job = f"job-{time.monotonic_ns():x}"
    submit(lcm, job, learners=1)
    # The leader placed it, wrote PENDING, and its deploy stopped there (an etcd or engine
    # error, no crash: no new leader comes to reconcile).
    lcm.deploy = lambda *a: None
    lcm.place_round()
    del lcm.deploy
    lcm.redeploy_stale()  # just placed: a deploy may still be under way; left alone
    assert lcm.keeper.get(job).status == Status.PENDING and not containers(docker_client, job)
    real = lcm.clock
    lcm.clock = lambda: real() + PENDING_STALE_S + PENDING_CHECK_S
    lcm.redeploy_stale()
    assert lcm.keeper.get(job).status == Status.DOWNLOADING
    assert len(containers(docker_client, job)) == 2


def test_missing_image_fails_the_job_with_a_reason_and_leaves_nothing(lcm, docker_client):
    job = f"job-{time.monotonic_ns():x}"
    with pytest.raises(errors.ImageUnavailable, match="no-such/image"):
        submit(lcm, job, image="no-such/image:1")
    with pytest.raises(errors.JobNotFound):
        lcm.store.get(job)


def _learners_changed(monkeypatch, **changes):
    """Deploy plans whose learners carry `changes`: what Docker refuses, past any check at
    submit time (the deploy path must be safe on its own)."""
    real = lcm_deployment.deployment_plan

    def plan(**kw):
        p = real(**kw)
        return dataclasses.replace(
            p, learners=[dataclasses.replace(s, **changes) for s in p.learners]
        )

    monkeypatch.setattr(lcm_deployment, "deployment_plan", plan)


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"mem_limit_mb": 1}, "Minimum memory limit"),  # Docker: 400 at create
        # runc fails to start it (a 500 from Docker); its message quotes the env entry.
        ({"env": {"MY_TOKEN": "s3cr3t-value\x00rest"}}, "can't contain null"),
    ],
    ids=["memory-1MB", "nul-in-env"],
)
def test_a_deploy_the_engine_refuses_fails_the_job_and_frees_its_allocation(
    lcm, docker_client, monkeypatch, changes, says
):
    job, after = (f"job-{time.monotonic_ns():x}-{i}" for i in range(2))
    submit(lcm, job, learners=1)
    _learners_changed(monkeypatch, **changes)
    lcm.place_round()
    state = lcm.keeper.get(job)
    assert state.status == Status.FAILED and state.error_code == "deploy_refused"
    assert says in state.reason and "refused" in state.reason
    assert "s3cr3t" not in state.reason  # the env value stays out of the job's status
    assert lcm.store.get(job).status == Status.FAILED
    assert not containers(docker_client, job)
    # Its allocation is free: a gang filling the whole node (4 x 0.5 cpus) is placed.
    monkeypatch.undo()
    submit(lcm, after, learners=4)
    lcm.place_round()
    assert lcm.keeper.get(after).status == Status.DOWNLOADING


def test_an_engine_that_does_not_answer_is_retried_not_failed(lcm, docker_client, monkeypatch):
    job = f"job-{time.monotonic_ns():x}"
    submit(lcm, job, learners=1)

    def unreachable(plan):
        raise requests.exceptions.ConnectionError("connection refused")

    # Under the real deploy, which says what the engine's silence is: temporary.
    monkeypatch.setattr(lcm.deployer, "_deploy", unreachable)
    lcm.place_round()
    assert lcm.keeper.get(job).status == Status.PENDING  # deployed again later
    monkeypatch.undo()
    lcm.deploy(job, [{"learner": 0, "node": "local", "gpu_indices": []}])
    assert lcm.keeper.get(job).status == Status.DOWNLOADING


def test_gang_that_can_never_fit_is_refused_and_leaves_no_record(lcm):
    job = f"job-{time.monotonic_ns():x}"
    with pytest.raises(errors.CapacityExceeded):
        submit(lcm, job, learners=5)
    with pytest.raises(errors.JobNotFound):
        lcm.store.get(job)
    assert lcm.keeper.get(job) is None


def test_halt_stops_learners_and_ends_halted(lcm, docker_client):
    job = f"job-{time.monotonic_ns():x}"
    submit(lcm, job, learners=1)
    lcm.place_round()
    assert lcm.halt(job, "alice", "") == "HALTED"
    with pytest.raises(errors.InvalidTransition):
        lcm.halt(job, "alice", "")
    with pytest.raises(errors.JobNotFound):
        lcm.halt(job, "mallory", "")  # someone else's job looks missing
    deadline = time.time() + 20
    while time.time() < deadline:
        learner = docker_client.containers.get(jobspec.learner_name(job, 0))
        if learner.status == "exited":
            break
        time.sleep(0.2)
    assert learner.status == "exited"
    assert lcm.store.get(job).status == Status.HALTED


def test_queued_job_halted_before_placement_never_starts(lcm, docker_client):
    first, second = (f"job-{time.monotonic_ns():x}-{i}" for i in range(2))
    submit(lcm, first, learners=4)  # 4 x 0.5 cpus fill the node
    submit(lcm, second, learners=1)
    lcm.place_round()
    assert lcm.keeper.get(second).status == Status.QUEUED
    lcm.halt(second, "alice", "changed my mind")
    lcm.scheduler.release(first)
    lcm.place_round()
    assert lcm.keeper.get(second).status == Status.HALTED
    assert not containers(docker_client, second)
