"""The system routes: `/health` (liveness, or every component's report) and `/metrics`
(Prometheus), outside `/v1` and without a token; and `/v1/statuses`, the job status
vocabulary generated from dlaas.domain.status's table, so that clients (the dashboard)
never re-type the statuses or their groupings.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel

from dlaas.domain import status as job_status
from dlaas.domain.errors import TemporaryError
from services.api import health as health_probes
from services.api.deps import CallerDep, DepsDep
from services.api.models import ComponentHealthPublic, HealthReply, error_responses

system_router = APIRouter(tags=["system"])


@system_router.get("/health", response_model_exclude_none=True, responses=error_responses(503))
def health(
    deps: DepsDep,
    components: Annotated[
        bool,
        Query(description="also ask the LCM, the scheduler and S3 whether they answer"),
    ] = False,
) -> HealthReply:
    """Liveness: the API answers and can read its job store (503 if not).

    With `components=true`, a report of every component the API depends on instead: it
    answers 200 even when some are down (`status: degraded`), saying which and why.
    """
    replica = deps.api.replica or None
    if not components:
        store = health_probes.store_answers(deps.store)
        if not store.ok:
            raise TemporaryError(f"the job store is {store.detail}")
        return HealthReply(status="ok", replica=replica)
    settings = deps.settings
    report = health_probes.check_all(
        {
            "store": lambda: health_probes.store_answers(deps.store),
            "lcm": lambda: health_probes.replicas_serving(settings.lcm_addr),
            "scheduler": lambda: health_probes.grpc_serving(settings.scheduler_addr),
            "s3": lambda: health_probes.s3_answers(deps.s3, settings.s3_bucket),
        }
    )
    return HealthReply(
        status="ok" if all(c.ok for c in report.values()) else "degraded",
        replica=replica,
        components={
            name: ComponentHealthPublic(ok=c.ok, detail=c.detail) for name, c in report.items()
        },
    )


@system_router.get("/metrics", response_class=Response)
def metrics(deps: DepsDep) -> Response:
    """Prometheus metrics: requests, jobs by status, queue, nodes, deploys, restarts."""
    return Response(generate_latest(deps.metrics.registry), media_type=CONTENT_TYPE_LATEST)


class StatusesReply(BaseModel):
    """Every job status in the table's order, the edges between them, and the groupings."""

    statuses: list[str]
    transitions: dict[str, list[str]]
    final: list[str]  # no container of the job runs; only a user's resume leaves HALTED
    terminal: list[str]  # nothing leaves them


def _ordered(group: frozenset[job_status.Status]) -> list[str]:
    return [str(s) for s in job_status.Status if s in group]


@system_router.get("/v1/statuses", responses=error_responses(401, 503))
def statuses(caller: CallerDep) -> StatusesReply:
    """The job statuses and their transition table, as the platform enforces them."""
    return StatusesReply(
        statuses=[str(s) for s in job_status.Status],
        transitions={str(s): _ordered(nxt) for s, nxt in job_status.TRANSITIONS.items()},
        final=_ordered(job_status.FINAL),
        terminal=_ordered(job_status.TERMINAL),
    )
