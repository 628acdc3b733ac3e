"""Every domain error crosses gRPC and comes back as itself.

A tiny real gRPC server (the scheduler's proto, a servicer that raises what the test
sets) and the real SDK client: for every class in the DlaasError tree, the client raises
the same class with the same message and fields (`delay_s`, `problems`, `job_id`).
"""

from __future__ import annotations

import grpc
import pytest

import dlaas.account_ops  # noqa: F401 - its errors are in the tree too
import services.api.errors  # noqa: F401 - the API's own errors are in the tree too
from dlaas import errors
from dlaas.grpc_errors import STATUS_FOR, translate_errors
from dlaas.grpc_server import start_server
from dlaas.local.processes import free_port
from dlaas.sdk import SchedulerClient
from dlaas.v1 import scheduler_pb2_grpc


def all_classes() -> list[type[errors.DlaasError]]:
    out, todo = [], [errors.DlaasError]
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted(out, key=lambda c: c.__name__)


def sample(cls: type[errors.DlaasError]) -> errors.DlaasError:
    """One instance of `cls`, with fields that differ from every default."""
    if issubclass(cls, errors.InvalidManifest):
        return cls(["learners: must be >= 1", "cpus: not a number (ünïcode, 'quotes')"])
    if issubclass(cls, errors.JobNotFound):
        return cls("job-4f2a")
    if issubclass(cls, errors.TemporaryError):
        return cls(f"{cls.__name__}: etcd is busy; ünïcode", delay_s=7.5)
    return cls(f"{cls.__name__}: something precise went wrong; ünïcode")


class Raiser(scheduler_pb2_grpc.SchedulerServicer):
    """Raises `self.error` from Release (the call the test makes)."""

    error: Exception = RuntimeError("unset")

    @translate_errors
    def Release(self, request, context):
        raise self.error


@pytest.fixture(scope="module")
def raiser():
    servicer = Raiser()
    port = free_port()
    server = start_server(
        f"127.0.0.1:{port}",
        lambda s: scheduler_pb2_grpc.add_SchedulerServicer_to_server(servicer, s),
        ["dlaas.v1.Scheduler"],
    )
    client = SchedulerClient(f"127.0.0.1:{port}", timeout=10)
    yield servicer, client
    client.close()
    server.stop(0)


CLASSES = all_classes()


def test_the_tree_is_walked_and_every_code_names_one_class():
    names = {c.__name__ for c in CLASSES}
    assert {"Conflict", "TemporaryError", "Unauthorized", "NoResults", "DeployRefused"} <= names
    codes = [c.code for c in CLASSES]
    assert len(codes) == len(set(codes)), f"codes shared by several classes: {codes}"
    assert {c: errors.by_code()[c.code] for c in CLASSES} == {c: c for c in CLASSES}


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
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


def test_every_class_gets_a_status_and_temporary_ones_are_not_permanent_ones():
    from dlaas.grpc_errors import status_for

    for cls in CLASSES:
        code = status_for(sample(cls))
        assert isinstance(code, grpc.StatusCode)
        if issubclass(cls, errors.TemporaryError):
            assert code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ABORTED)
        elif issubclass(cls, errors.PermanentError):
            assert code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ABORTED)
    assert set(STATUS_FOR) <= set(CLASSES)


# Errors that never leave the API process (raised by its own authentication): no gRPC
# server raises them, so they need no gRPC class of their own.
API_ONLY = {"Unauthorized", "Forbidden"}
# Never answered over HTTP: the abstract roots, and the engine's refusal, which the LCM
# turns into a FAILED job (the API sees the job's status, not the error).
NOT_ON_HTTP = {"DlaasError", "PermanentError", "DeployRefused"}


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_domain_error_is_mapped_on_both_transports(cls):
    """A new error class must say what it is on the wire: its own code (checked above), a
    gRPC status other than the catch-all UNKNOWN, and an HTTP status other than 500."""
    from dlaas.grpc_errors import status_for
    from services.api.app import STATUS_FOR as HTTP_STATUS_FOR

    if cls is not errors.DlaasError and cls.__name__ not in API_ONLY:
        assert status_for(sample(cls)) != grpc.StatusCode.UNKNOWN, cls
    http = next((code for c, code in HTTP_STATUS_FOR.items() if issubclass(cls, c)), 500)
    if cls.__name__ in NOT_ON_HTTP:
        assert http == 500, f"{cls.__name__} is mapped now: drop it from NOT_ON_HTTP"
    else:
        assert http != 500, f"{cls.__name__} has no HTTP status in services/api/app.py"


def test_an_unmapped_class_would_fail_the_mapping_test():
    class Unmapped(errors.DlaasError):
        code = "unmapped_for_this_test"

    try:
        with pytest.raises(AssertionError):
            test_every_domain_error_is_mapped_on_both_transports(Unmapped)
    finally:
        del Unmapped  # out of the class tree again once collected
