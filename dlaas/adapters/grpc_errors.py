"""Domain errors across gRPC, mapped in one place.

Servers wrap their handlers with `translate_errors`: a DlaasError becomes a gRPC status
(`STATUS_FOR`, the one table for this transport) with the error's code and its fields
(`problems`, `job_id`, `delay_s`, ...) in trailing metadata, so the client raises the same
domain error again, with the same message and fields (`raise_from_rpc`). The code names
the class (dlaas.domain.errors.by_code), so no code is spelled here. Anything else is an internal
error whose details stay in the server log, never in the reply.
"""

from __future__ import annotations

import functools
import json
import logging

import grpc

from dlaas.domain import errors

log = logging.getLogger(__name__)

# Domain error -> gRPC status. A class not listed takes its nearest listed ancestor's.
STATUS_FOR: dict[type[errors.DlaasError], grpc.StatusCode] = {
    errors.InvalidManifest: grpc.StatusCode.INVALID_ARGUMENT,
    errors.InvalidRequest: grpc.StatusCode.INVALID_ARGUMENT,
    errors.PayloadTooLarge: grpc.StatusCode.INVALID_ARGUMENT,
    errors.JobNotFound: grpc.StatusCode.NOT_FOUND,
    errors.JobExists: grpc.StatusCode.ALREADY_EXISTS,
    errors.PermanentError: grpc.StatusCode.FAILED_PRECONDITION,
    # A lost compare-and-swap: ABORTED, which the channel does not retry by itself.
    errors.Conflict: grpc.StatusCode.ABORTED,
    # Transport failures are UNAVAILABLE too: the channel's retry policy retries both.
    errors.TemporaryError: grpc.StatusCode.UNAVAILABLE,
    errors.DlaasError: grpc.StatusCode.UNKNOWN,
}

_CODE_KEY = "dlaas-error"
_FIELDS_KEY = "dlaas-fields"


def status_for(exc: errors.DlaasError) -> grpc.StatusCode:
    return next(STATUS_FOR[c] for c in type(exc).__mro__ if c in STATUS_FOR)


def _fields(exc: errors.DlaasError) -> dict:
    """The error's own attributes beyond its message (JSON-able ones: they cross the wire)."""
    out = {}
    for name, value in vars(exc).items():
        if name == "message" or name.startswith("_"):
            continue
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue
        out[name] = value
    return out


def _abort(context, exc: errors.DlaasError) -> None:
    """End the call with the status `exc` stands for (gRPC's abort raises)."""
    # ASCII JSON: metadata values other than "-bin" ones must be printable ASCII.
    context.set_trailing_metadata([(_CODE_KEY, exc.code), (_FIELDS_KEY, json.dumps(_fields(exc)))])
    context.abort(status_for(exc), exc.message)


def _internal(context) -> None:
    context.abort(grpc.StatusCode.INTERNAL, "internal error; see the service log")


def translate_errors(method):
    """Decorator for servicer methods: domain errors -> gRPC status (a platform service's
    outage is the TemporaryError its adapter raised: UNAVAILABLE), others -> INTERNAL."""

    @functools.wraps(method)
    def wrapper(self, request, context):
        try:
            return method(self, request, context)
        except errors.DlaasError as exc:
            _abort(context, exc)
        # Broad: the one place where a servicer's unexpected error becomes INTERNAL; its
        # details stay in this log (with the trace), never in the reply.
        except Exception:  # broad: any unexpected error becomes INTERNAL; logged
            log.exception("internal error in %s", method.__name__)
            _internal(context)

    return wrapper


def translate_stream_errors(method):
    """`translate_errors` for a server-streaming method (a generator): an error raised
    before or between its messages ends the stream with the status it stands for."""

    @functools.wraps(method)
    def wrapper(self, request, context):
        try:
            yield from method(self, request, context)
        except errors.DlaasError as exc:
            _abort(context, exc)
        except Exception:  # broad, as in translate_errors
            log.exception("internal error in %s", method.__name__)
            _internal(context)

    return wrapper


def rebuild(code: str, message: str, fields: dict) -> errors.DlaasError:
    """The domain error `code` names, with `message` and `fields` as the server had them.

    Built without its class's constructor: constructors take different arguments
    (`problems`, `job_id`) and derive the message from them, while the wire carries the
    finished message and every field, which is all a constructor would have set.
    """
    cls = errors.by_code().get(code, errors.DlaasError)
    exc = cls.__new__(cls)
    errors.DlaasError.__init__(exc, message)
    vars(exc).update(fields)
    return exc


def raise_from_rpc(exc: grpc.RpcError, service: str) -> None:
    """Raise the domain error a gRPC failure stands for."""
    meta = dict(exc.trailing_metadata() or ()) if hasattr(exc, "trailing_metadata") else {}
    code = meta.get(_CODE_KEY)
    message = exc.details() or str(exc.code())
    if code is not None:
        try:
            fields = json.loads(meta.get(_FIELDS_KEY) or "{}")
        except ValueError:
            fields = {}
        raise rebuild(code, message, fields if isinstance(fields, dict) else {}) from None
    if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        raise errors.TemporaryError(f"{service} is not answering: {message}") from None
    raise errors.DlaasError(f"{service} failed: {message}") from None
