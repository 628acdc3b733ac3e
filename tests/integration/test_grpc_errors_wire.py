"""Every domain error crosses gRPC and comes back as itself.

A tiny real gRPC server (the scheduler's proto, a servicer that raises what the test
sets) and the real SDK client: for every class in the DlaasError tree, the client raises
the same class with the same message and fields (`delay_s`, `problems`, `job_id`). The
mapping itself (every class has a gRPC and an HTTP status) is checked without a server in
tests/unit/test_grpc_errors.py.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import contextmanager

import pyetcd.exceptions
import pytest
from error_samples import all_classes, sample

from dlaas.adapters.etcd_status import StatusKeeper
from dlaas.adapters.grpc_errors import translate_errors
from dlaas.adapters.grpc_server import start_server
from dlaas.adapters.store.sqlite import SqliteJobStore
from dlaas.clients.sdk import SchedulerClient
from dlaas.domain import errors
from dlaas.local.processes import free_port
from dlaas.v1 import scheduler_pb2_grpc
from services.lcm.grpc_api import translate_errors as lcm_translate_errors


class Raiser(scheduler_pb2_grpc.SchedulerServicer):
    """Raises `self.error` from Release (the call the test makes)."""

    error: Exception = RuntimeError("unset")

    @translate_errors
    def Release(self, request, context):
        raise self.error


@contextmanager
def serving(servicer, addr: str = ""):
    """`servicer` on a real gRPC server (at `addr`, else a free port), and an SDK client of
    it."""
    addr = addr or f"127.0.0.1:{free_port()}"
    server = start_server(
        addr,
        lambda s: scheduler_pb2_grpc.add_SchedulerServicer_to_server(servicer, s),
        ["dlaas.v1.Scheduler"],
    )
    client = SchedulerClient(addr, timeout=10)
    try:
        yield client
    finally:
        client.close()
        server.stop(0)


@pytest.fixture(scope="module")
def raiser():
    servicer = Raiser()
    with serving(servicer) as client:
        yield servicer, client


@pytest.mark.parametrize("cls", all_classes(), ids=lambda c: c.__name__)
def test_a_domain_error_comes_back_as_itself(raiser, cls):
    servicer, client = raiser
    sent = sample(cls)
    servicer.error = sent
    with pytest.raises(errors.DlaasError) as caught:
        client.release("job-1")
    got = caught.value
    assert type(got) is cls
    assert got.message == sent.message and str(got) == str(sent)
    assert vars(got) == vars(sent)  # delay_s, problems, job_id, ...
    if isinstance(sent, errors.TemporaryError):
        assert got.delay_s == 7.5


def test_conflict_is_temporary_and_not_a_bare_error_on_the_client(raiser):
    servicer, client = raiser
    servicer.error = errors.Conflict("job j: status changed meanwhile", delay_s=0.2)
    with pytest.raises(errors.TemporaryError) as caught:
        client.release("job-1")
    assert isinstance(caught.value, errors.Conflict) and caught.value.delay_s == 0.2


def test_an_unexpected_error_is_internal_with_no_details(raiser):
    servicer, client = raiser
    servicer.error = KeyError("secret-token-123")
    with pytest.raises(errors.DlaasError) as caught:
        client.release("job-1")
    assert type(caught.value) is errors.DlaasError
    assert "secret-token-123" not in caught.value.message
    assert "internal error" in caught.value.message


def test_nobody_listening_is_temporary():
    client = SchedulerClient(f"127.0.0.1:{free_port()}", timeout=2)
    with client, pytest.raises(errors.TemporaryError) as caught:
        client.release("job-1")
    assert "not answering" in caught.value.message


def test_a_new_client_reaches_a_server_that_is_back_whatever_an_older_client_saw():
    """A client that saw its server go (an earlier test's, to a port the kernel hands out
    again; an LCM replica's before the scheduler restarted) backs off its reconnects; a new
    client to the server now listening there answers at once, not after that backoff
    (gRPC shares connections between a process's channels unless told not to)."""
    addr = f"127.0.0.1:{free_port()}"
    servicer = Raiser()
    servicer.error = errors.JobNotFound("job-1")
    before = SchedulerClient(addr, timeout=10)
    with serving(servicer, addr), pytest.raises(errors.JobNotFound):
        before.release("job-1")
    for _ in range(6):  # it goes on calling: its reconnects back off, for seconds by now
        with pytest.raises(errors.TemporaryError):
            before.release("job-1")
        time.sleep(0.5)
    with serving(servicer, addr) as after, pytest.raises(errors.JobNotFound):
        after.release("job-1")
    before.close()


class FailingEtcd:
    """FAKE etcd client: every read raises `error`, as pyetcd does with etcd away."""

    def __init__(self, error: Exception):
        self.error = error

    def get(self, key):
        raise self.error


class LockedStore(SqliteJobStore):
    """The REAL SQLite store, whose connection fails with `error` (a locked, unreadable file)."""

    error: Exception | None = None

    def _connection(self):
        if self.error is not None:
            raise self.error
        return super()._connection()


class LcmOutage(scheduler_pb2_grpc.SchedulerServicer):
    """Reads a job through the REAL etcd and store adapters in Release, under the LCM's
    translation: `outage` is what the library under one of them raises."""

    def __init__(self, outage: Exception, tmp_path):
        store = LockedStore(tmp_path / "jobs.db")
        store.error = outage
        self.keeper = StatusKeeper(FailingEtcd(outage), store)
        self.read = self.keeper.store.get if isinstance(outage, sqlite3.Error) else self.keeper.get

    @lcm_translate_errors
    def Release(self, request, context):
        self.read("job-1")


@pytest.mark.parametrize(
    "outage",
    [
        pyetcd.exceptions.NoServerAvailableError("etcd at 10.0.0.9:2379 user=root:hunter2"),
        pyetcd.exceptions.ConnectionFailedError("etcd at 10.0.0.9:2379 user=root:hunter2"),
        sqlite3.OperationalError("database is locked at /secret/path"),
    ],
    ids=type,
)
def test_an_lcm_outage_is_temporary_and_names_no_host(outage, tmp_path):
    """The stack's LCM started before etcd answered: its submit was an internal error (a
    500 at the API) instead of a retryable 503. The adapters (etcd's, the store's) say
    so themselves now: the LCM's servicer names no library's errors."""
    with (
        serving(LcmOutage(outage, tmp_path)) as client,
        pytest.raises(errors.TemporaryError) as caught,
    ):
        client.release("job-1")
    assert type(outage).__name__ in caught.value.message
    for secret in ("10.0.0.9", "hunter2", "/secret/path"):
        assert secret not in caught.value.message
