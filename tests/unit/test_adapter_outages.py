"""Adapters say "temporary" themselves: the job store's, etcd's, S3's and the container
engine's library errors for an outage leave them as the domain's TemporaryError (naming the
error's class, never its message: hosts, paths, keys), so that no service imports a driver
to classify them. The REAL adapters over FAKE libraries (a failing connection, etcd client,
S3 client, Docker client)."""

from __future__ import annotations

import sqlite3
from types import SimpleNamespace

import botocore.exceptions
import docker.errors
import pyetcd.exceptions
import pytest
import requests.exceptions
import test_lcm_plan

from dlaas.adapters.engines.docker_engine import Deployer
from dlaas.adapters.etcd_status import StatusKeeper
from dlaas.adapters.s3 import ensure_bucket
from dlaas.adapters.store.sqlite import SqliteJobStore
from dlaas.domain.errors import (
    DeployRefused,
    JobNotFound,
    TemporaryError,
    temporary_on,
    temporary_on_all,
)


class LockedStore(SqliteJobStore):
    """The REAL SQLite store; its connection fails once `error` is set."""

    error: Exception | None = None

    def _connection(self):
        if self.error is not None:
            raise self.error
        return super()._connection()


def test_a_locked_sqlite_store_is_temporary_and_names_no_path(tmp_path):
    store = LockedStore(tmp_path / "jobs.db")
    store.error = sqlite3.OperationalError(f"unable to open {tmp_path}/jobs.db")
    with pytest.raises(TemporaryError) as caught:
        store.get("job-1")
    assert caught.value.message.startswith("the job store is unavailable (OperationalError)")
    assert str(tmp_path) not in caught.value.message
    assert isinstance(caught.value.__cause__, sqlite3.OperationalError)  # for the log


def test_the_stores_own_answers_are_not_outages(tmp_path):
    with pytest.raises(JobNotFound):
        SqliteJobStore(tmp_path / "jobs.db").get("job-1")


class FailingEtcd:
    def __init__(self, error: Exception):
        self.error = error

    def get(self, key):
        raise self.error


def test_etcd_away_is_temporary_for_every_status_read(tmp_path):
    keeper = StatusKeeper(
        FailingEtcd(pyetcd.exceptions.ConnectionFailedError("10.0.0.9:2379")),
        SqliteJobStore(tmp_path / "jobs.db"),
    )
    for read in (keeper.get, keeper.placement, keeper.held_allocation):
        with pytest.raises(TemporaryError, match=r"etcd is unavailable \(ConnectionFailedError\)"):
            read("job-1")


class FailingS3:
    def head_bucket(self, Bucket):
        raise botocore.exceptions.EndpointConnectionError(endpoint_url="http://10.0.0.9:8333")


def test_s3_away_while_making_a_results_bucket_is_temporary():
    with pytest.raises(TemporaryError) as caught:
        ensure_bucket(FailingS3(), "results")
    assert "EndpointConnectionError" in caught.value.message
    assert "10.0.0.9" not in caught.value.message


def test_an_engine_that_does_not_answer_is_temporary_for_the_lcm():
    def refused(*args, **kwargs):
        raise requests.exceptions.ConnectionError("connection refused: /var/run/docker.sock")

    client = SimpleNamespace(
        containers=SimpleNamespace(list=refused), networks=SimpleNamespace(list=refused)
    )
    engine = Deployer(client, node="n1")
    for call in (engine.containers, engine.remove_job, engine.stop_learners):
        with pytest.raises(TemporaryError, match=r"container engine is unavailable"):
            call("job-1")


def _deploying(error: Exception) -> Deployer:
    """The REAL Docker adapter whose engine raises `error` at the deploy's first call."""

    def fail(*args, **kwargs):
        raise error

    return Deployer(SimpleNamespace(networks=SimpleNamespace(list=fail)), node="n1")


@pytest.mark.parametrize(
    "error",
    [
        requests.exceptions.ConnectionError("connection refused"),
        requests.exceptions.ReadTimeout("read timed out"),
        docker.errors.APIError("500 Server Error", explanation="the daemon is shutting down"),
    ],
    ids=type,
)
def test_a_deploy_cut_short_by_the_engine_is_temporary(error):
    plan = test_lcm_plan.plan(learners=1, nodes=["n1"])
    with pytest.raises(TemporaryError, match="container engine is unavailable"):
        _deploying(error).deploy(plan)


def test_a_deploy_the_engine_refuses_for_the_job_is_still_refused():
    response = SimpleNamespace(status_code=400, reason="Bad Request")
    refused = docker.errors.APIError("400", response=response, explanation="invalid mount")
    with pytest.raises(DeployRefused, match="invalid mount"):
        _deploying(refused).deploy(test_lcm_plan.plan(learners=1, nodes=["n1"]))


def test_a_generator_method_is_covered_while_it_is_iterated():
    class Reader:
        @temporary_on((OSError,), "the reader")
        def lines(self):
            yield b"one"
            raise OSError("reset by peer")

    lines = Reader().lines()
    assert next(lines) == b"one"
    with pytest.raises(TemporaryError, match=r"the reader is unavailable \(OSError\)"):
        next(lines)


def test_only_public_methods_of_the_class_itself_are_wrapped():
    @temporary_on_all((OSError,), "the thing")
    class Thing:
        def call(self):
            raise OSError("down")

        def _inner(self):
            raise OSError("down")

    with pytest.raises(TemporaryError):
        Thing().call()
    with pytest.raises(OSError):
        Thing()._inner()
