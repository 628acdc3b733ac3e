"""Errors only the REST API raises, and the body every error reply has; app.py maps them
with the domain errors."""

from __future__ import annotations

from typing import Any

from dlaas.domain.errors import DlaasError, PermanentError


def error_body(code: str, message: str, problems: list[str] | None = None) -> dict[str, Any]:
    return {"error": code, "message": message, "problems": problems or []}


class Unauthorized(DlaasError):
    """No token, or a token the API does not know (HTTP 401)."""

    code = "unauthorized"


class NoResults(PermanentError):
    """The job exists but has stored no results (yet) (HTTP 404)."""

    code = "no_results"


class Forbidden(DlaasError):
    """A known caller asking for what only an administrator may do (HTTP 403)."""

    code = "forbidden"


class HookNotFound(PermanentError):
    """No such webhook; another user's hook is reported as missing too (HTTP 404)."""

    code = "hook_not_found"
