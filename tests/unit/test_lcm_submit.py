"""Lcm.submit stores a job only once it is accepted: no ghost jobs left QUEUED.

The job store is the real SQLite one; the status keeper (etcd), the scheduler client
and the deployer are FAKES here (small recorders): the cases are failures of exactly
those, which a real etcd or scheduler will not produce on demand.
"""

from __future__ import annotations

import pytest
from lcm_fakes import FakeIdentities

from dlaas.config import PlatformSettings
from dlaas.domain.errors import CapacityExceeded, JobNotFound, TemporaryError
from services.lcm.service import Lcm

MANIFEST = "name: j\nframework: {name: python, command: python3 train.py}\n"


class FakeKeeper:
    """FAKE status keeper: a dict of job id -> reason, like the etcd keys."""

    def __init__(self, fail_create: bool = False):
        self.keys: dict[str, str] = {}
        self.fail_create = fail_create

    def create(self, job_id: str, reason: str = "submitted"):
        self.keys[job_id] = reason
        if self.fail_create:  # the put went through, the answer got lost
            raise TemporaryError("etcd did not answer")

    def delete(self, job_id: str) -> None:
        self.keys.pop(job_id, None)


class FakeScheduler:
    """FAKE scheduler client: accepts, refuses, or raises what the test sets."""

    def __init__(self, answer=(True, ""), raises: BaseException | None = None):
        self.answer, self.raises = answer, raises
        self.enqueued: list[str] = []

    def enqueue(self, gang):
        if self.raises is not None:
            raise self.raises
        self.enqueued.append(gang.job_id)
        return self.answer


class FakeDeployer:
    """FAKE deployer: every image is present."""

    def image_present(self, image: str) -> bool:
        return True


def make_lcm(job_store, keeper, scheduler, settings: PlatformSettings | None = None) -> Lcm:
    """The real Lcm over these fakes. Its job identities are FAKES too (tests/lcm_fakes.py):
    a submission issues none, and the real ones would build an IAM client for nothing."""
    settings = settings or PlatformSettings(s3_access_key="k", s3_secret_key="s")
    return Lcm(
        settings,
        keeper,
        job_store,
        {"local": FakeDeployer()},
        scheduler,
        [],
        identities=FakeIdentities(),
    )


def test_an_accepted_job_is_stored_and_has_a_status_key(job_store):
    keeper, sched = FakeKeeper(), FakeScheduler()
    lcm = make_lcm(job_store, keeper, sched)
    assert lcm.submit("job-1", "alice", MANIFEST, "") == ("QUEUED", [])
    assert job_store.get("job-1").user == "alice"
    assert "job-1" in keeper.keys and sched.enqueued == ["job-1"]


@pytest.mark.parametrize(
    ("keeper", "scheduler", "error"),
    [
        (FakeKeeper(), FakeScheduler(answer=(False, "cpus: never fits")), CapacityExceeded),
        (FakeKeeper(), FakeScheduler(raises=TemporaryError("scheduler down")), TemporaryError),
        # e.g. a number the proto cannot carry: raised while building or sending the gang
        (FakeKeeper(), FakeScheduler(raises=ValueError("Value out of range")), ValueError),
        (FakeKeeper(fail_create=True), FakeScheduler(), TemporaryError),
    ],
    ids=["refused", "scheduler-down", "proto-overflow", "etcd-lost-answer"],
)
def test_a_submission_that_fails_after_the_store_leaves_nothing(
    job_store, keeper, scheduler, error
):
    lcm = make_lcm(job_store, keeper, scheduler)
    with pytest.raises(error):
        lcm.submit("job-2", "alice", MANIFEST, "")
    with pytest.raises(JobNotFound):
        job_store.get("job-2")
    assert keeper.keys == {}
    # The same id can be submitted again once the trouble is gone.
    lcm.scheduler = FakeScheduler()
    keeper.fail_create = False
    assert lcm.submit("job-2", "alice", MANIFEST, "")[0] == "QUEUED"


def test_a_connection_password_is_stored_encrypted(job_store):
    from dlaas.domain.secretbox import SecretBox, new_key

    key = new_key()
    # The store is at a private address: the operator allows its network (else the egress
    # rule refuses the job at submit).
    settings = PlatformSettings(
        s3_access_key="k", s3_secret_key="s", secrets_key=key, egress_allow_networks="10.0.0.0/8"
    )
    lcm = make_lcm(job_store, FakeKeeper(), FakeScheduler(), settings)
    text = MANIFEST + (
        "data_stores:\n  - id: own\n    type: s3\n    training_data: {container: data}\n"
        "    connection: {auth_url: 'http://10.1.2.3:9000', user_name: u, password: Pw-7x-unique}\n"
    )
    lcm.submit("job-s", "alice", text, "", team="vision")
    stored = job_store.get("job-s")
    assert "Pw-7x-unique" not in stored.manifest_yaml
    assert "Pw-7x-unique" in SecretBox(key).open(stored.manifest_yaml)
    assert stored.team == "vision"
