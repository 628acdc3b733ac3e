"""Pure request checks of the REST API: no I/O, no web framework.

The LCM makes the same checks (it is the authority for every client of its gRPC API);
the API makes them first so a REST caller gets the allowed values in the message
without a round trip.
"""

from __future__ import annotations

from dlaas.errors import InvalidRequest
from dlaas.manifest import Manifest


def check_scale(manifest: Manifest, learners: int, job_id: str) -> None:
    """Raise InvalidRequest naming `learners` unless the job may run with that many learners."""
    lo, hi = manifest.min_learners, manifest.max_learners
    if not manifest.elastic:
        raise InvalidRequest(
            f"learners: job {job_id} is not elastic (it runs exactly {manifest.learners} "
            "learner(s)); set min_learners < max_learners in its manifest to allow scaling"
        )
    if not lo <= learners <= hi:  # type: ignore[operator]  # set by the manifest's validator
        raise InvalidRequest(
            f"learners: {learners} is outside the job's elastic range; allowed {lo} to {hi}"
        )
