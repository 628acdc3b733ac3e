"""Docker calls whose target may already be gone: the one place that says what is benign,
and what a call raises when the engine itself does not answer."""

from __future__ import annotations

import contextlib

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


# How long a removal another caller has under way is waited for (the engine's own force
# removal: a kill and the layer's deletion, seconds even on a loaded node).
REMOVAL_WAIT_S = 60


def remove_container(api, container_id: str) -> None:
    """Remove a container (forced); gone already is fine. When another caller is removing
    it (the engine's 409, e.g. the LCM deleting a job the monitor cleans up), wait until it
    is gone: what goes next, its network and volume, must not find it still attached."""
    try:
        api.remove_container(container_id, force=True)
    except docker.errors.NotFound:
        return
    except docker.errors.APIError as exc:
        if exc.status_code != 409:
            raise
        with contextlib.suppress(docker.errors.NotFound):  # gone before the wait began
            api.wait(container_id, timeout=REMOVAL_WAIT_S, condition="removed")
