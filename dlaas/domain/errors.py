"""Domain errors, raised by the logic and mapped to HTTP/gRPC codes once per transport.

`PermanentError`s are the caller's or the job's fault and are never retried;
`TemporaryError`s are infrastructure trouble and may be retried after `delay_s`.
Every class has its own `code`: it names the error on the wire (`by_code` finds the class
again), so the codes on these classes are the one table of error codes.
"""

from __future__ import annotations


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
