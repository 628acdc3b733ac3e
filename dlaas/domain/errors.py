"""Domain errors, raised by the logic and mapped to HTTP/gRPC codes once per transport.

`PermanentError`s are the caller's or the job's fault and are never retried;
`TemporaryError`s are infrastructure trouble and may be retried after `delay_s`.
Every class has its own `code`: it names the error on the wire (`by_code` finds the class
again), so the codes on these classes are the one table of error codes.

Adapters turn their library's outage errors into TemporaryError at their boundary
(`temporary_on`, `temporary_on_all`), so no caller imports a driver to classify an error.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=type)


class DlaasError(Exception):
    """Base of every error the platform raises on purpose."""

    code = "internal"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class PermanentError(DlaasError):
    code = "permanent"


class TemporaryError(DlaasError):
    code = "unavailable"

    def __init__(self, message: str, delay_s: float = 1.0):
        super().__init__(message)
        self.delay_s = delay_s


class InvalidManifest(PermanentError):
    """The manifest is malformed; `problems` lists `field.path: what is wrong`."""

    code = "invalid_manifest"

    def __init__(self, problems: list[str]):
        super().__init__("invalid manifest: " + "; ".join(problems))
        self.problems = problems


class InvalidRequest(PermanentError):
    code = "invalid_request"


class JobNotFound(PermanentError):
    code = "not_found"

    def __init__(self, job_id: str):
        super().__init__(f"job {job_id} not found")
        self.job_id = job_id


class JobExists(PermanentError):
    code = "already_exists"


class InvalidTransition(PermanentError):
    code = "invalid_transition"


class CapacityExceeded(PermanentError):
    """The job can never fit on this cluster, however long it waits."""

    code = "capacity_exceeded"


class ImageUnavailable(PermanentError):
    code = "image_unavailable"


class DeployRefused(PermanentError):
    """The container engine refused the job's containers for the job's own reason (a 4xx
    from Docker, the OCI runtime failing to create or start it): deploying again would
    only be refused again."""

    code = "deploy_refused"


class PayloadTooLarge(PermanentError):
    code = "payload_too_large"


class Conflict(TemporaryError):
    """A compare-and-swap lost a race; re-read and try again."""

    code = "conflict"


def unavailable(what: str, exc: BaseException) -> TemporaryError:
    """`exc`, a library's outage error, as the TemporaryError it is. The message names the
    error's class only: an outage's own message may name hosts, paths or credentials (it
    stays reachable as the TemporaryError's __cause__, for the log)."""
    return TemporaryError(f"{what} is unavailable ({type(exc).__name__}); try again shortly")


def temporary_on(outages: tuple[type[BaseException], ...], what: str) -> Callable[[F], F]:
    """Decorator for an adapter's method: the `outages` its library raises (the service
    not answering, locked, failing over) leave it as TemporaryError (`unavailable`), so no
    caller imports the library to classify them. A generator method is covered while it
    is iterated too."""

    def wrap(fn: F) -> F:
        if inspect.isgeneratorfunction(fn):

            @functools.wraps(fn)
            def generator(*args: Any, **kwargs: Any) -> Any:
                try:
                    return (yield from fn(*args, **kwargs))
                except outages as exc:
                    raise unavailable(what, exc) from exc

            return generator  # type: ignore[return-value]

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except outages as exc:
                raise unavailable(what, exc) from exc

        return call  # type: ignore[return-value]

    return wrap


def temporary_on_all(outages: tuple[type[BaseException], ...], what: str) -> Callable[[C], C]:
    """Class decorator: `temporary_on` for every public method the class defines (its
    subclasses inherit them so; a method a subclass defines anew is its own)."""

    def decorate(cls: C) -> C:
        for name, value in list(vars(cls).items()):
            if not name.startswith("_") and inspect.isfunction(value):
                setattr(cls, name, temporary_on(outages, what)(value))
        return cls

    return decorate


def by_code() -> dict[str, type[DlaasError]]:
    """Every domain error class loaded in this process, by its code (walks the class tree,
    so errors defined by a service, such as the API's, are found once imported)."""
    found: dict[str, type[DlaasError]] = {}
    todo: list[type[DlaasError]] = [DlaasError]
    while todo:
        cls = todo.pop()
        found.setdefault(cls.code, cls)  # a subclass that keeps its parent's code is the parent
        todo.extend(cls.__subclasses__())
    return found
