"""A running job's progress through the SDK (the LCM's gRPC `JobProgress`) and REST's job
view, on test_api's `env` (real S3 and job store). The learner's log tail is the one
stand-in: `env` has no engine, so both readers' `tail` answer with lines set here (FAKE)."""

from __future__ import annotations

import time

import pytest
from test_api import ALICE, auth, env  # noqa: F401 - env is a fixture
from test_metrics_grpc import sdk  # noqa: F401 - sdk is a fixture

from dlaas.domain.errors import JobNotFound
from dlaas.domain.status import Status

TEXTS = ["starting", "epoch 1/4 loss=0.9", "epoch 2/4 loss=0.6"]


def running_job(env) -> str:  # noqa: F811
    job_id = env.submit().json()["job_id"]
    env.finish(job_id, Status.PROCESSING, reason="running")
    return job_id


def test_progress_over_grpc_and_rest(env, sdk, monkeypatch):  # noqa: F811
    job_id = running_job(env)
    assert sdk.job_progress(job_id, "alice") is None  # nothing logged yet
    time.sleep(1.1)  # the reader looks at most once a second per job
    # FAKE tails: every LogReader (the LCM's and the API's) sees the same lines now, printed
    # 10 s apart as the engine stamped them
    t0 = time.time() - 30
    lines = [(t0 + 10 * i, text) for i, text in enumerate(TEXTS)]
    monkeypatch.setattr("dlaas.adapters.logs.LogReader.tail", lambda *a, **k: lines)
    got = sdk.job_progress(job_id, "alice")
    assert got["done"] == 2 and got["total"] == 4 and got["unit"] == "epoch"
    # One look estimates from the lines' times: an epoch in 10 s, two to go after t0 + 20.
    assert got["percent"] == 50.0 and got["rate_per_s"] == 0.1
    assert got["finish_at"] == pytest.approx(t0 + 40)
    rest = env.client.get(f"/v1/jobs/{job_id}", headers=auth(ALICE)).json()["progress"]
    assert {k: rest[k] for k in ("done", "total", "percent")} == {
        "done": 2.0,
        "total": 4.0,
        "percent": 50.0,
    }
    assert rest["finish_at"] == pytest.approx(t0 + 40)  # the API's replica: the same estimate
    listed = env.client.get("/v1/jobs", headers=auth(ALICE)).json()["jobs"]
    assert next(j for j in listed if j["job_id"] == job_id)["progress"]["total"] == 4.0
    with pytest.raises(JobNotFound):
        sdk.job_progress(job_id, "bob")
