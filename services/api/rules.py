"""Pure request checks of the REST API: no I/O, no web framework.

The LCM makes the same checks (it is the authority for every client of its gRPC API);
the API makes them first so a REST caller gets the allowed values in the message
without a round trip.
"""

from __future__ import annotations

from dlaas.domain.errors import InvalidRequest
from dlaas.domain.manifest import Manifest, scale_problem
from dlaas.domain.metric_query import learners_with_logs  # noqa: F401 - shared with the LCM: lives there


def check_scale(manifest: Manifest, learners: int, job_id: str) -> None:
    """Raise InvalidRequest naming `learners` unless the job may run with that many learners."""
    problem = scale_problem(manifest, learners, job_id)
    if problem:
        raise InvalidRequest(problem)
