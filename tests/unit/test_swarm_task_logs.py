"""A swarm task's log that the manager will not give (its service being removed as the job
ends: a 5xx, not only a 404) reads as "cannot be read", the REAL SwarmNodeView over a FAKE
manager: the log reader then takes the stored log object, instead of the logs route
answering 500 (CI fresh-E3: GET /v1/jobs/{id}/logs of a swarm job just COMPLETED)."""

from __future__ import annotations

import docker.errors
import pytest

from dlaas.adapters.engines.swarm_node import SwarmNodeView
from dlaas.domain.ports import Container


class RefusingManager:
    """FAKE swarm manager whose task logs raise `error`."""

    def __init__(self, error: Exception):
        self.error = error

    def task_logs(self, task_id: str, **_params):
        raise self.error


@pytest.mark.parametrize(
    "error",
    [
        docker.errors.NotFound("task not found"),
        docker.errors.APIError(
            "500 Server Error: rpc error: code = Unknown desc = subscription closed"
        ),
    ],
    ids=["404", "500"],
)
def test_a_task_log_the_manager_cannot_give_cannot_be_read(error):
    view = SwarmNodeView(RefusingManager(error), "node-1")
    task = Container(id="task-1", name="dlaas-j-learner-0", job_id="j", role="learner",
                     learner=0, state="complete")  # fmt: skip
    assert view.logs(task) is None
    assert list(view.follow_logs(task)) == []
