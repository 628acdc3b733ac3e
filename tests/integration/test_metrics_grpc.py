"""Training metrics through the SDK (`LcmClient.job_metrics`, `follow_metrics`): the LCM's
gRPC `JobMetrics` and `FollowMetrics` against the real S3 and job store of test_api's `env`,
next to REST's GET /v1/jobs/{id}/metrics on the same jobs.

The LCM is the real servicer over env's LCM (its use cases on the port fakes); its metrics
queries read the learners' logs from S3 with the API's settings, as a deployed LCM does
with the platform's.
"""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from test_api import ALICE, BOB, auth, env, put_log  # noqa: F401 - env is a fixture

from dlaas.adapters.grpc_server import start_server
from dlaas.adapters.job_metrics import s3_for_locations
from dlaas.adapters.logs import LogReader
from dlaas.clients.sdk import LcmClient
from dlaas.domain.errors import InvalidRequest, JobNotFound, TemporaryError
from dlaas.domain.metric_query import MAX_LIMIT
from dlaas.local.processes import free_port
from dlaas.v1 import lcm_pb2, lcm_pb2_grpc
from services.lcm.grpc_api import LcmServicer
from services.lcm.metrics import MetricsQueries

LINES = [
    "starting",
    "epoch 1/3 loss=0.90 accuracy=0.50",
    "epoch 2/3 loss=0.60 accuracy=0.70",
    "epoch 3/3 loss=0.40 accuracy=0.85",
    "done",
]


@pytest.fixture
def sdk(env):  # noqa: F811
    """An LcmClient on a LifecycleManager whose metrics read env's S3 (at most 1 follow)."""
    logs = LogReader(env.store, env.settings, None, s3_for_locations(lambda: env.s3), poll_s=0.05)
    queries = MetricsQueries(env.lcm.owned, env.settings, logs, max_followers=1, check_s=0.05)
    addr = f"127.0.0.1:{free_port()}"
    server = start_server(
        addr,
        lambda s: lcm_pb2_grpc.add_LifecycleManagerServicer_to_server(
            LcmServicer(env.lcm, metrics=queries), s
        ),
        ["dlaas.v1.LifecycleManager"],
    )
    client = LcmClient(addr, timeout=10)
    try:
        yield client
    finally:
        client.close()
        server.stop(0)


def finished_job(env, lines=LINES) -> str:  # noqa: F811
    job_id = env.submit().json()["job_id"]
    put_log(env, job_id, 0, lines)
    env.finish(job_id)
    return job_id


def as_lists(series):
    return {name: [list(p) for p in points] for name, points in series.items()}


def test_the_sdk_gets_the_series_rest_serves(env, sdk):  # noqa: F811
    job_id = finished_job(env)
    rest = env.client.get(f"/v1/jobs/{job_id}/metrics", headers=auth(ALICE)).json()["series"]
    got = sdk.job_metrics(job_id, "alice")
    assert rest["loss"] == [[1, 0.9], [2, 0.6], [3, 0.4]]
    assert as_lists(got.series) == rest
    assert (got.job_id, got.learner, got.truncated, got.next_since_step) == (job_id, 0, False, None)


def test_names_and_since_step_filter_the_series(env, sdk):  # noqa: F811
    job_id = finished_job(env)
    got = sdk.job_metrics(job_id, "alice", names=["loss"], since_step=1)
    assert as_lists(got.series) == {"loss": [[2, 0.6], [3, 0.4]]}


def test_a_limit_pages_by_whole_steps(env, sdk):  # noqa: F811
    job_id = finished_job(env)
    first = sdk.job_metrics(job_id, "alice", limit=3)  # 2 series: step 1 whole, not step 2
    assert as_lists(first.series) == {"loss": [[1, 0.9]], "accuracy": [[1, 0.5]]}
    assert (first.truncated, first.next_since_step) == (True, 1)
    rest = sdk.job_metrics(job_id, "alice", since_step=first.next_since_step)
    assert as_lists(rest.series) == {
        "loss": [[2, 0.6], [3, 0.4]],
        "accuracy": [[2, 0.7], [3, 0.85]],
    }
    assert not rest.truncated


def test_follow_yields_points_as_they_come_until_the_job_ends(env, sdk):  # noqa: F811
    job_id = env.submit().json()["job_id"]
    put_log(env, job_id, 0, LINES[:2])
    stream = sdk.follow_metrics(job_id, "alice", names=["loss"])
    first = next(stream)
    assert (first.name, first.step, first.value, first.line) == ("loss", 1, 0.9, 1)
    # New lines after the follow began: their points come on the same stream.
    put_log(env, job_id, 0, LINES)
    env.finish(job_id)
    rest = [(p.name, p.step, p.value) for p in stream]
    assert rest == [("loss", 2, 0.6), ("loss", 3, 0.4)]


def test_another_users_job_is_not_found_like_a_missing_one(env, sdk):  # noqa: F811
    job_id = finished_job(env)
    with pytest.raises(JobNotFound) as refused:
        sdk.job_metrics(job_id, "bob")
    with pytest.raises(JobNotFound) as missing:
        sdk.job_metrics("job-000000000000", "bob")
    assert str(refused.value) == f"job {job_id} not found"
    assert str(missing.value) == "job job-000000000000 not found"
    with pytest.raises(JobNotFound):
        list(sdk.follow_metrics(job_id, "bob"))
    # REST answers alike: 404 for bob.
    assert env.client.get(f"/v1/jobs/{job_id}/metrics", headers=auth(BOB)).status_code == 404


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"since_step": -1}, "since_step:"),
        ({"since_step": float("nan")}, "since_step:"),
        ({"limit": 10**12}, "limit:"),
        ({"limit": -5}, "limit:"),
        ({"learner": -1}, "learner:"),
        ({"names": ["x" * 500]}, "names:"),
    ],
)
def test_bad_filters_are_refused_naming_the_field(env, sdk, kwargs, field):  # noqa: F811
    job_id = finished_job(env)
    with pytest.raises(InvalidRequest) as refused:
        sdk.job_metrics(job_id, "alice", **kwargs)
    assert str(refused.value).startswith(field)


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({"since_step": -1.0}, "since_step:"),
        ({"limit": MAX_LIMIT + 1}, "limit:"),
        ({"learner": 7}, "learner: the job has learners 0..0"),
        ({"job_id": ""}, "job_id:"),
    ],
)
def test_the_lcm_itself_refuses_bad_filters(env, sdk, request_fields, field):  # noqa: F811
    """Past the SDK's own checks: a client of the raw protos gets the same answer."""
    job_id = finished_job(env)
    stub = lcm_pb2_grpc.LifecycleManagerStub(grpc.insecure_channel(sdk.addr))
    request = lcm_pb2.MetricsRequest(**{"job_id": job_id, "user": "alice", **request_fields})
    for call in (stub.JobMetrics, lambda r, timeout: list(stub.FollowMetrics(r, timeout=timeout))):
        with pytest.raises(grpc.RpcError) as refused:
            call(request, timeout=10)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert refused.value.details().startswith(field)


def test_a_replica_streams_at_most_max_followers(env, sdk):  # noqa: F811
    job_id = env.submit().json()["job_id"]
    put_log(env, job_id, 0, LINES[:2])
    first = sdk.follow_metrics(job_id, "alice")
    next(first)  # holds the one follow this replica allows
    with pytest.raises(TemporaryError) as refused:
        next(sdk.follow_metrics(job_id, "alice"))
    assert "metric follows" in str(refused.value)
    first.close()  # the client goes away: the server frees its follow
    done = threading.Event()
    # The server notices within check_s; retry until it has (30 s: a loaded CI machine).
    deadline = time.monotonic() + 30
    while True:
        try:
            again = sdk.follow_metrics(job_id, "alice")
            assert next(again).name == "loss"
            again.close()
            break
        except TemporaryError:
            if time.monotonic() > deadline:
                pytest.fail("the follow slot was never given back")
            done.wait(0.1)
