"""Docker calls whose target may already be gone: the one place that says what is benign,
and what a call raises when the engine itself does not answer."""

from __future__ import annotations

import docker.errors
import requests.exceptions

# What a Docker SDK call raises when no engine answers: the SDK's own errors (an API
# error, or "Error while fetching server API version" from the client's constructor) and
# requests' connection errors and timeouts, which the SDK lets through unwrapped.
ENGINE_UNREACHABLE = (
    docker.errors.DockerException,
    requests.exceptions.RequestException,
    OSError,
)


def quiet(fn, *args, **kwargs):
    """Run a Docker call; None when its target is already gone, stopped or being removed."""
    try:
        return fn(*args, **kwargs)
    except docker.errors.NotFound:
        return None
    except docker.errors.APIError as exc:
        if exc.status_code in (304, 404, 409):
            return None
        raise
