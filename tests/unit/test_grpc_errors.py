"""Every domain error has its place on both transports: its own code, a gRPC status and an
HTTP status, temporary ones on retryable gRPC codes.

That each class crosses a real gRPC server as itself (same class, message and fields) is
tests/integration/test_grpc_errors_wire.py.
"""

from __future__ import annotations

import grpc
import pytest
from error_samples import all_classes, sample

from dlaas.adapters.grpc_errors import STATUS_FOR
from dlaas.domain import errors

CLASSES = all_classes()


def test_the_tree_is_walked_and_every_code_names_one_class():
    names = {c.__name__ for c in CLASSES}
    assert {"Conflict", "TemporaryError", "Unauthorized", "NoResults", "DeployRefused"} <= names
    codes = [c.code for c in CLASSES]
    assert len(codes) == len(set(codes)), f"codes shared by several classes: {codes}"
    assert {c: errors.by_code()[c.code] for c in CLASSES} == {c: c for c in CLASSES}


def test_every_class_gets_a_status_and_temporary_ones_are_not_permanent_ones():
    from dlaas.adapters.grpc_errors import status_for

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
    from dlaas.adapters.grpc_errors import status_for
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
