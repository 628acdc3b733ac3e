"""The LCM's submit runs the platform's admission checks (dlaas.adapters.admission) for every
transport: a job the REST API refuses (a data store `connection` at an inside address, a
priority above the team's ceiling) is refused through the integrators' gRPC SDK too. Before,
the LCM's SubmitJob skipped both and stored such jobs.

The REAL LcmServicer on a gRPC server, over the real LCM on the port fakes (tests/lcm_fakes.py)
and a real SQLite job store; the client is the SDK's LcmClient.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from lcm_fakes import fake_lcm
from sample_manifests import MANIFEST

from dlaas.adapters.grpc_server import start_server
from dlaas.clients.sdk import LcmClient
from dlaas.config import PlatformSettings
from dlaas.domain import account_ops
from dlaas.domain.accounts import Quota
from dlaas.domain.errors import InvalidRequest, JobNotFound
from dlaas.domain.secretbox import new_key
from dlaas.local.processes import free_port
from dlaas.v1 import lcm_pb2_grpc
from services.lcm.grpc_api import LcmServicer


@pytest.fixture
def lcm_and_sdk(job_store) -> Iterator[tuple[object, LcmClient]]:
    settings = PlatformSettings(s3_access_key="k", s3_secret_key="s", secrets_key=new_key())
    lcm = fake_lcm(job_store, settings=settings)
    account_ops.add_team(
        job_store, "admin", "nlp", Quota(), 0.0, max_priority=10, max_duration_s=3600
    )
    account_ops.add_user(job_store, "admin", "alice", team="nlp", now=0.0)
    account_ops.add_user(job_store, "admin", "root", team="nlp", admin=True, now=0.0)
    addr = f"127.0.0.1:{free_port()}"
    server = start_server(
        addr,
        lambda s: lcm_pb2_grpc.add_LifecycleManagerServicer_to_server(LcmServicer(lcm), s),
        ["dlaas.v1.LifecycleManager"],
    )
    client = LcmClient(addr, timeout=10)
    try:
        yield lcm, client
    finally:
        client.close()
        server.stop(0)


def manifest(endpoint: str = "", priority: int = 0) -> str:
    text = MANIFEST.format(learners=1, results="r-results")
    if endpoint:
        text = text.replace("    connection:\n", f"    connection:\n      endpoint: {endpoint}\n")
    return text + (f"priority: {priority}\n" if priority else "")


def stored(lcm, job_id: str) -> bool:
    try:
        lcm.store.get(job_id)
    except JobNotFound:
        return False
    return True


@pytest.mark.parametrize(
    "endpoint",
    ["http://127.0.0.1:2379", "http://169.254.169.254/latest/meta-data", "http://localhost:6379"],
)
def test_grpc_submit_refuses_a_store_at_an_inside_address(lcm_and_sdk, endpoint):
    lcm, sdk = lcm_and_sdk
    with pytest.raises(InvalidRequest) as refused:
        sdk.submit("job-in", "alice", manifest(endpoint=endpoint), team="nlp")
    assert refused.value.message.startswith("data_stores[0].connection.endpoint")
    assert "2379" not in refused.value.message and "6379" not in refused.value.message
    assert not stored(lcm, "job-in") and lcm.scheduler.gangs == []


def test_grpc_submit_refuses_a_priority_above_the_teams_ceiling(lcm_and_sdk):
    lcm, sdk = lcm_and_sdk
    with pytest.raises(InvalidRequest) as refused:
        sdk.submit("job-hi", "alice", manifest(priority=2147483647), team="nlp")
    assert refused.value.message.startswith("priority: 2147483647 is above team nlp's ceiling 10")
    assert not stored(lcm, "job-hi")
    # At the ceiling it is accepted; an administrator is exempt, as at the API.
    assert sdk.submit("job-ok", "alice", manifest(priority=10), team="nlp").status == "QUEUED"
    assert sdk.submit("job-adm", "root", manifest(priority=500), team="nlp").status == "QUEUED"
    assert [g.priority for g in lcm.scheduler.gangs] == [10, 500]


def test_grpc_submit_refuses_a_run_time_or_disk_above_the_bounds(lcm_and_sdk):
    lcm, sdk = lcm_and_sdk
    with pytest.raises(InvalidRequest) as refused:
        sdk.submit("job-long", "alice", manifest() + "max_duration: 2h\n", team="nlp")
    assert refused.value.message.startswith("max_duration: 2h is above team nlp's maximum")
    with pytest.raises(InvalidRequest) as refused:  # the platform's bound holds for everyone
        sdk.submit("job-disk", "root", manifest() + "disk: 200GiB\n", team="nlp")
    assert refused.value.message.startswith("disk: 200 GiB per learner is above the platform's")
    assert not stored(lcm, "job-long") and not stored(lcm, "job-disk")
    assert sdk.submit("job-1h", "alice", manifest() + "max_duration: 1h\n", team="nlp").status == (
        "QUEUED"
    )
