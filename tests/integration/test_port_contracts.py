"""The FAKES of tests/lcm_fakes.py against their real adapters: one behavioural contract
per port, each check run on both.

The unit tests run the real LCM and job monitor over the fakes; they are only as good as
the fakes behave like production. So every check here is parametrized over the FAKE and
the real adapter on the real server (the sessions' etcd, SeaweedFS and Docker engine that
tests/conftest.py starts), and asserts only what the LCM and the monitor rely on:

- StatusRepo: InMemoryStatusRepo vs StatusKeeper on etcd (status along the table,
  compare-and-swap refusals, the store's mirror, placements, node health);
- ContainerEngine (and JobContainers): FakeEngine vs the Docker adapter (a gang deployed
  idempotently, listed, stopped, killed and removed; a missing image refused);
- JobIdentities: FakeIdentities vs the SeaweedFS IAM adapter (issued, listed, revoked);
- the results buckets the LCM makes (dlaas.adapters.s3.ensure_bucket): FakeBuckets vs
  boto3 on SeaweedFS.

What a fake does not promise is left out, and said here: the event streams (the fake has
no time; tests/integration/test_monitor.py runs the real one), the scheduler's watch
(FAKE: never called back) and the scheduler port (the real one is a gRPC service:
tests/integration/test_scheduler_service.py).
The real side of each check needs its server and is skipped, saying why, without one;
the Docker checks run under the heavy lock like every Docker test
(`flock /tmp/dlaas-heavy.lock pytest tests/integration/test_port_contracts.py`).
"""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import botocore.exceptions
import pytest
from lcm_fakes import FakeBuckets, FakeEngine, FakeIdentities, InMemoryStatusRepo

from dlaas.adapters.s3 import ensure_bucket
from dlaas.adapters.store.base import JobRecord
from dlaas.domain import jobspec
from dlaas.domain.errors import ImageUnavailable, InvalidTransition, JobNotFound
from dlaas.domain.namespace import job_policy
from dlaas.domain.plan import ContainerSpec, DeploymentPlan, job_labels
from dlaas.domain.ports import ContainerEngine, StatusRepo
from dlaas.domain.status import HAPPY_PATH, Status, Transition

MISSING_IMAGE = "dlaas/no-such-image:0"


def new_job_id() -> str:
    return f"job-{uuid.uuid4().hex[:12]}"


# --------------------------------------------------------------------------- StatusRepo


@pytest.fixture(params=["fake", "etcd"])
def repo(request, job_store) -> StatusRepo:
    if request.param == "fake":
        return InMemoryStatusRepo(job_store)
    from dlaas.adapters.etcd_status import StatusKeeper

    etcd = request.getfixturevalue("etcd_client")
    return StatusKeeper(etcd, job_store, request.getfixturevalue("etcd_prefix"))


def submitted(repo: StatusRepo, job_id: str | None = None) -> str:
    """A job as the API submits it: its record (with its QUEUED entry), then its status."""
    job_id = job_id or new_job_id()
    now = time.time()
    repo.store.create(
        JobRecord(job_id, "alice", "c", "name: c\n", now, history=[Transition(Status.QUEUED, now, "submitted")])
    )  # fmt: skip
    repo.create(job_id)
    return job_id


def test_an_unknown_job_has_no_status_and_cannot_move(repo):
    assert repo.get("job-000000000000") is None
    with pytest.raises(JobNotFound):
        repo.transition("job-000000000000", Status.PENDING, "placed")


def test_create_is_queued_once(repo):
    job_id = submitted(repo)
    first = repo.get(job_id)
    assert (first.status, first.seq) == (Status.QUEUED, 0)
    assert repo.create(job_id, "again") == first  # a second submission changes nothing
    assert [h.status for h in repo.store.get(job_id).history] == [Status.QUEUED]


def test_transitions_follow_the_table_and_are_mirrored_into_the_store(repo):
    job_id = submitted(repo)
    repo.transition(job_id, Status.PENDING, "placed")
    state = repo.transition(job_id, Status.DOWNLOADING, "helper started")
    assert (state.status, state.seq, state.reason) == (Status.DOWNLOADING, 2, "helper started")
    assert repo.get(job_id) == state
    failed = repo.transition(
        job_id, Status.FAILED, "gpu_oom: CUDA out of memory", error_code="gpu_oom", exit_code=1
    )
    record = repo.store.get(job_id)
    assert [h.status for h in record.history] == [
        Status.QUEUED, Status.PENDING, Status.DOWNLOADING, Status.FAILED,
    ]  # fmt: skip
    assert (record.status, record.error_code, record.exit_code) == (Status.FAILED, "gpu_oom", 1)
    assert record.history[-1] == failed.transition()


def test_an_edge_off_the_table_is_refused_and_changes_nothing(repo):
    job_id = submitted(repo)
    with pytest.raises(InvalidTransition):
        repo.transition(job_id, Status.COMPLETED, "skipping ahead")
    assert repo.try_transition(job_id, Status.STORING, "skipping ahead") is None
    assert repo.get(job_id).status == Status.QUEUED
    assert len(repo.store.get(job_id).history) == 1


def test_walk_to_records_every_step_on_the_way(repo):
    job_id = submitted(repo)
    assert repo.walk_to(job_id, Status.COMPLETED, "seen late").status == Status.COMPLETED
    assert [h.status for h in repo.store.get(job_id).history] == list(HAPPY_PATH)
    assert repo.repair_mirrors() == [] and repo.repair_mirrors(since=0.0) == []


def test_active_jobs_are_those_not_final(repo):
    running, halted, done = submitted(repo), submitted(repo), submitted(repo)
    repo.walk_to(running, Status.PROCESSING, "training")
    repo.transition(halted, Status.HALTED, "user")
    repo.walk_to(done, Status.COMPLETED, "done")
    active = repo.active_jobs()
    assert set(active) == {running} and active[running].status == Status.PROCESSING


def test_a_placement_round_trips_and_goes_with_the_job(repo):
    job_id = submitted(repo)
    assert repo.placement(job_id) == []
    placement = [
        {"learner": 0, "node": "n1", "gpu_indices": [0, 1]},
        {"learner": 1, "node": "n2", "gpu_indices": []},
    ]
    repo.set_placement(job_id, placement)
    assert repo.placement(job_id) == placement
    assert repo.held_allocation(job_id) == []  # the scheduler holds nothing for it
    repo.delete(job_id)
    assert repo.get(job_id) is None and repo.placement(job_id) == []
    assert job_id not in repo.active_jobs()


def test_unhealthy_nodes_are_those_marked_so(repo):
    repo.set_node_health("n1", {"healthy": False, "since": 1.0})
    repo.set_node_health("n2", {"healthy": True, "since": 2.0})
    repo.set_node_health("n3", {"healthy": False, "since": 3.0})
    repo.set_node_health("n3", {"healthy": True, "since": 4.0})  # came back
    assert repo.unhealthy_nodes() == {"n1"}


# --------------------------------------------------------------------------- ContainerEngine


class EngineSide:
    """An engine under contract, the image its jobs run and the jobs it was given."""

    def __init__(self, engine: ContainerEngine, image: str, platform_id: str):
        self.engine, self.image, self.platform_id = engine, image, platform_id
        self.jobs: list[str] = []

    def plan(self, learners: int = 2, image: str = "") -> DeploymentPlan:
        """A gang of a helper and `learners` learners that wait (a minute at most)."""
        job_id = new_job_id()
        self.jobs.append(job_id)
        labels = job_labels(self.platform_id, job_id, "alice")

        def spec(name: str, role: str, learner: int | None = None) -> ContainerSpec:
            extra = {jobspec.LABEL_ROLE: role}
            if learner is not None:
                extra[jobspec.LABEL_LEARNER] = str(learner)
            return ContainerSpec(
                name=name, role=role, image=image or self.image, command=["sleep", "60"],
                env={}, labels={**labels, **extra}, nano_cpus=100_000_000, mem_limit_mb=64,
                learner=learner, pids_limit=16, tmp_mb=4,
            )  # fmt: skip

        return DeploymentPlan(
            job_id=job_id,
            network=jobspec.network_name(job_id),
            volume=jobspec.volume_name(job_id),
            bridge=jobspec.bridge_name(self.platform_id, job_id),
            labels=labels,
            helper=spec(jobspec.helper_name(job_id), jobspec.ROLE_HELPER),
            learners=[
                spec(jobspec.learner_name(job_id, i), jobspec.ROLE_LEARNER, i)
                for i in range(learners)
            ],
        )

    def states(self, job_id: str) -> dict[str, str]:
        return {c.name: c.state for c in self.engine.job_containers(job_id)}


@pytest.fixture(params=["fake", "docker"])
def side(request):
    platform_id = f"contract-{uuid.uuid4().hex[:8]}"
    if request.param == "fake":
        yield EngineSide(FakeEngine(missing_images={MISSING_IMAGE}), "dlaas/learner", platform_id)
        return
    from dlaas.adapters.engines.docker_engine import Deployer

    client = request.getfixturevalue("docker_client")
    image = request.getfixturevalue("learner_image")
    side = EngineSide(Deployer(client, platform_id=platform_id, node="local"), image, platform_id)
    try:
        yield side
    finally:
        for job_id in side.jobs:
            side.engine.remove_resources(job_id)


def test_the_engine_answers_and_knows_its_images(side):
    assert side.engine.ping()
    assert side.engine.image_present(side.image)
    assert not side.engine.image_present(MISSING_IMAGE)


def test_a_gang_is_deployed_once_listed_and_removed(side):
    plan = side.plan(learners=2)
    names = side.engine.deploy(plan)
    assert names == [s.name for s in plan.containers]
    found = side.engine.job_containers(plan.job_id)
    assert sorted((c.name, c.role, c.learner, c.job_id) for c in found) == sorted(
        (s.name, s.role, s.learner, plan.job_id) for s in plan.containers
    )
    assert all(c.running for c in found)
    assert side.engine.containers(plan.job_id)
    assert plan.job_id in side.engine.jobs_with_resources()
    # Deployed again (a retry, a new leader): nothing new is made, nothing restarted.
    assert side.engine.deploy(plan) == names
    assert {c.id for c in side.engine.job_containers(plan.job_id)} == {c.id for c in found}

    side.engine.remove_job(plan.job_id)
    assert not side.engine.containers(plan.job_id)
    assert side.engine.job_containers(plan.job_id) == []
    assert plan.job_id not in side.engine.jobs_with_resources()
    assert side.engine.logs(found[0]) is None  # a container gone has no log to read
    side.engine.remove_job(plan.job_id)  # removing again, or a job never deployed: fine
    side.engine.remove_job(new_job_id())


def test_a_gang_removed_by_the_lcm_and_the_monitor_at_once_is_gone_without_errors(side):
    # A user deletes a job just halted while the monitor cleans it up: both remove the same
    # containers, network and volume at once. Neither may fail on the other's removal in
    # progress (the engine's 409 for a container, 403 for a network still attached), and
    # nothing may be left. Several gangs, as the race is a matter of timing.
    plans = [side.plan(learners=3) for _ in range(6)]
    for plan in plans:
        side.engine.deploy(plan)
    with ThreadPoolExecutor(8) as pool:
        calls = [
            pool.submit(remove, plan.job_id)
            for plan in plans
            for remove in (side.engine.remove_job, side.engine.remove_resources)
        ]
        for call in calls:
            call.result()  # raises what either removal raised
    for plan in plans:
        assert not side.engine.containers(plan.job_id)
        assert plan.job_id not in side.engine.jobs_with_resources()


def test_stopping_the_learners_leaves_the_helper_running(side):
    plan = side.plan(learners=2)
    side.engine.deploy(plan)
    side.engine.stop_learners(plan.job_id, timeout=1)
    states = side.states(plan.job_id)
    assert states.pop(plan.helper.name) == "running"
    assert set(states.values()) == {"exited"}


def test_a_killed_container_exits_137_and_a_stopped_one_exits(side):
    plan = side.plan(learners=2)
    side.engine.deploy(plan)
    first, second = sorted(
        (c for c in side.engine.job_containers(plan.job_id) if c.role == jobspec.ROLE_LEARNER),
        key=lambda c: c.learner,
    )
    side.engine.kill(first)
    side.engine.stop(second, timeout=1)
    after = {c.learner: c for c in side.engine.job_containers(plan.job_id) if c.learner is not None}
    assert (after[0].state, after[0].exit_code) == ("exited", 137)
    assert after[1].exited and after[1].exit_code in (137, 143)  # `sleep` may ignore SIGTERM
    side.engine.restart(after[0])  # an exited one starts again
    assert side.states(plan.job_id)[first.name] == "running"
    side.engine.restart(after[0])  # a running one (a broken gang's survivor) too
    assert side.states(plan.job_id)[first.name] == "running"


def test_a_gang_with_a_missing_image_is_refused_whole(side):
    plan = side.plan(learners=1)
    plan.learners[0] = replace(plan.learners[0], image=MISSING_IMAGE)  # one learner's
    with pytest.raises(ImageUnavailable):
        side.engine.deploy(plan)
    assert side.engine.job_containers(plan.job_id) == []


# --------------------------------------------------------------------------- JobIdentities


@pytest.fixture(params=["fake", "seaweedfs"])
def identities(request):
    if request.param == "fake":
        yield FakeIdentities()
        return
    from dlaas.adapters.job_identities import JobIdentities

    s3 = request.getfixturevalue("s3_server")
    real = JobIdentities(s3.endpoint, s3.access_key, s3.secret_key)
    made: list[str] = []
    real.issued_here = made
    yield real
    for job_id in made:
        real.revoke(job_id)


def issue(identities, job_id: str) -> tuple[str, str]:
    # A policy as the LCM writes one (SeaweedFS refuses one without actions).
    policy = job_policy(job_id, data=None, results=("results", f"{job_id}/"), code=None)
    keys = identities.issue(job_id, policy)
    getattr(identities, "issued_here", []).append(job_id)
    return keys


def test_an_identity_is_issued_listed_and_revoked_once(identities):
    a, b = new_job_id(), new_job_id()
    keys_a, keys_b = issue(identities, a), issue(identities, b)
    assert all(keys_a) and all(keys_b) and keys_a != keys_b
    assert {a, b} <= identities.job_users()
    assert identities.revoke(a) is True
    assert a not in identities.job_users() and b in identities.job_users()
    assert identities.revoke(a) is False  # revoked before: nothing left to revoke


def test_an_identity_issued_again_is_still_one_identity(identities):
    job_id = new_job_id()
    issue(identities, job_id)
    assert all(issue(identities, job_id))  # a redeploy asks again
    assert identities.revoke(job_id) is True
    assert job_id not in identities.job_users()


# --------------------------------------------------------------------------- results buckets


@pytest.fixture(params=["fake", "seaweedfs"])
def buckets(request):
    if request.param == "fake":
        return FakeBuckets()
    return request.getfixturevalue("s3_client")


def test_a_missing_bucket_is_a_404_until_made(buckets):
    name = f"contract-{uuid.uuid4().hex[:12]}"
    with pytest.raises(botocore.exceptions.ClientError) as missing:
        buckets.head_bucket(Bucket=name)
    assert missing.value.response["Error"]["Code"] in ("404", "NoSuchBucket")
    ensure_bucket(buckets, name)  # as the LCM makes a job's results bucket
    buckets.head_bucket(Bucket=name)  # there now: no error
    ensure_bucket(buckets, name)  # and again (a restart): it is there, no error
