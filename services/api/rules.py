"""Pure request checks of the REST API: no I/O, no web framework.

The LCM makes the same checks (it is the authority for every client of its gRPC API);
the API makes them first so a REST caller gets the allowed values in the message
without a round trip.
"""

from __future__ import annotations

from typing import Any

from dlaas.errors import InvalidRequest
from dlaas.manifest import Manifest, scale_problem


def check_scale(manifest: Manifest, learners: int, job_id: str) -> None:
    """Raise InvalidRequest naming `learners` unless the job may run with that many learners."""
    problem = scale_problem(manifest, learners, job_id)
    if problem:
        raise InvalidRequest(problem)


def learners_with_logs(requested: int, info: dict[str, Any]) -> int:
    """How many learners (0..n-1) of a job may have logs: the most of its size as submitted,
    its target (the user's last scale) and its current deployment (an elastic job grown past
    its target runs learners the manifest does not count)."""
    deployed = info.get("learners")
    now = len(deployed) if isinstance(deployed, list) else 0
    try:
        target = int(info.get("learners_target") or 0)
    except (TypeError, ValueError):  # the store holds what the LCM wrote; be safe all the same
        target = 0
    return max(requested, target, now, 1)
