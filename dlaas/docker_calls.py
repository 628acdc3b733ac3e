"""Docker calls whose target may already be gone: the one place that says what is benign."""

from __future__ import annotations

import docker.errors


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
