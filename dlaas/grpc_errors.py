"""Domain errors across gRPC, mapped in one place.

Servers wrap their handlers with `translate_errors`: a DlaasError becomes a gRPC status
with the error's code and problems in trailing metadata, so the client raises the same
domain error again (`raise_from_rpc`). Anything else is an internal error whose details
stay in the server log, never in the reply.
"""

from __future__ import annotations

import functools
import json
import logging

import grpc

from dlaas import errors

log = logging.getLogger(__name__)

_STATUS = {
    "invalid_manifest": grpc.StatusCode.INVALID_ARGUMENT,
    "invalid_request": grpc.StatusCode.INVALID_ARGUMENT,
    "payload_too_large": grpc.StatusCode.INVALID_ARGUMENT,
    "not_found": grpc.StatusCode.NOT_FOUND,
    "already_exists": grpc.StatusCode.ALREADY_EXISTS,
    "invalid_transition": grpc.StatusCode.FAILED_PRECONDITION,
    "capacity_exceeded": grpc.StatusCode.FAILED_PRECONDITION,
    "image_unavailable": grpc.StatusCode.FAILED_PRECONDITION,
    "unavailable": grpc.StatusCode.UNAVAILABLE,
    "conflict": grpc.StatusCode.ABORTED,
}

_CLASSES: dict[str, type[errors.DlaasError]] = {
    "invalid_request": errors.InvalidRequest,
    "payload_too_large": errors.PayloadTooLarge,
    "already_exists": errors.JobExists,
    "invalid_transition": errors.InvalidTransition,
    "capacity_exceeded": errors.CapacityExceeded,
    "image_unavailable": errors.ImageUnavailable,
}


def translate_errors(method):
    """Decorator for servicer methods: domain errors -> gRPC status, others -> INTERNAL."""

    @functools.wraps(method)
    def wrapper(self, request, context):
        try:
            return method(self, request, context)
        except errors.DlaasError as exc:
            meta = [("dlaas-error", exc.code)]
            if isinstance(exc, errors.InvalidManifest):
                meta.append(("dlaas-problems", json.dumps(exc.problems)))
            if isinstance(exc, errors.JobNotFound):
                meta.append(("dlaas-job", exc.job_id))
            context.set_trailing_metadata(meta)
            context.abort(_STATUS.get(exc.code, grpc.StatusCode.UNKNOWN), exc.message)
        except Exception:
            log.exception("internal error in %s", method.__name__)
            context.abort(grpc.StatusCode.INTERNAL, "internal error; see the service log")

    return wrapper


def raise_from_rpc(exc: grpc.RpcError, service: str) -> None:
    """Raise the domain error a gRPC failure stands for."""
    meta = dict(exc.trailing_metadata() or ()) if hasattr(exc, "trailing_metadata") else {}
    code = meta.get("dlaas-error")
    message = exc.details() or str(exc.code())
    if code == "invalid_manifest":
        raise errors.InvalidManifest(json.loads(meta.get("dlaas-problems", "[]"))) from None
    if code == "not_found":
        raise errors.JobNotFound(meta.get("dlaas-job", "?")) from None
    if code in _CLASSES:
        raise _CLASSES[code](message) from None
    if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        raise errors.TemporaryError(f"{service} is not answering: {message}") from None
    raise errors.DlaasError(f"{service} failed: {message}") from None
