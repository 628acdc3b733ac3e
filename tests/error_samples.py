"""Every class of the domain error tree (dlaas.domain.errors) and one sample instance of each, for
the tests that check the errors' mapping (tests/unit/test_grpc_errors.py) and that they
cross a real gRPC server as themselves (tests/integration/test_grpc_errors_wire.py)."""

from __future__ import annotations

import dlaas.domain.account_ops  # noqa: F401 - its errors are in the tree too
import services.api.errors  # noqa: F401 - the API's own errors are in the tree too
from dlaas.domain import errors


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
