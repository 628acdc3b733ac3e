"""The Docker adapter of JobContainers (dlaas/adapters/engines/docker_engine.py) meets a container that is
being removed: one log line, no traceback; and its other translations (Docker's inspect
data to a Container, "no answer" to EngineUnreachable).

Docker answers 409 ("can not get logs from container which is dead or marked for
removal") when a log is asked of a container a cleanup is removing, and 404 once it is
gone. The Docker client here is a FAKE whose low-level `api.logs` raises exactly those
errors; the real engine is exercised by tests/integration/test_monitor.py.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import docker.errors
import pytest
import requests

from dlaas.adapters.engines.docker_engine import Deployer
from dlaas.adapters.engines.reports import docker_container, epoch
from dlaas.domain import jobspec
from dlaas.domain.ports import Container, EngineUnreachable
from services.jobmonitor.monitor import JobMonitor

REMOVING = "can not get logs from container which is dead or marked for removal"
HELPER = Container("c0ffee", "job-x-helper", "job-x", jobspec.ROLE_HELPER, None, "running")


def _api_error(status: int) -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = status
    if status == 404:
        return docker.errors.NotFound("No such container", response=response)
    return docker.errors.APIError("logs", response=response, explanation=REMOVING)


def _engine(error: Exception) -> Deployer:
    """The adapter over a FAKE client whose every log request raises `error`."""

    def logs(*args, **kwargs):
        raise error

    return Deployer(SimpleNamespace(api=SimpleNamespace(logs=logs)), node="n1")


def _quiet_about_it(caplog) -> None:
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["container job-x-helper is gone or being removed; its log is not read"]


@pytest.mark.parametrize("status", [409, 404])
def test_the_log_of_a_container_being_removed_is_none(caplog, status):
    caplog.set_level(logging.DEBUG)
    assert _engine(_api_error(status)).logs(HELPER, tail=20) is None
    _quiet_about_it(caplog)


@pytest.mark.parametrize("status", [409, 404])
def test_following_a_container_being_removed_yields_nothing(caplog, status):
    caplog.set_level(logging.DEBUG)
    assert list(_engine(_api_error(status)).follow_logs(HELPER)) == []
    _quiet_about_it(caplog)


def test_the_monitor_following_a_helper_being_removed_ends_quietly_and_looks_again(caplog):
    caplog.set_level(logging.DEBUG)
    monitor = JobMonitor({"n1": _engine(_api_error(409))}, None, None, lambda *a: None)
    monitor.observer.follow_logs("job-x", HELPER, "n1")
    _quiet_about_it(caplog)
    assert monitor.queue.dirty == {"job-x"}


def test_other_docker_errors_still_surface():
    with pytest.raises(docker.errors.APIError):
        _engine(_api_error(500)).logs(HELPER, tail=20)


def test_an_engine_that_does_not_answer_is_unreachable_naming_its_node():
    with pytest.raises(EngineUnreachable, match="node n1"):
        _engine(requests.exceptions.ConnectionError("refused")).logs(HELPER)


def test_docker_inspect_data_becomes_a_container():
    labels = {
        jobspec.LABEL_JOB: "job-x",
        jobspec.LABEL_ROLE: jobspec.ROLE_LEARNER,
        jobspec.LABEL_LEARNER: "1",
    }
    state = {
        "Status": "exited",
        "ExitCode": 3,
        "OOMKilled": False,
        "FinishedAt": "2026-11-23T10:00:01.5Z",
    }
    listed = {"Id": "abc", "Names": ["/job-x-learner-1"], "Labels": labels, "State": "exited"}
    c = docker_container(listed, state, "n1")
    assert (c.id, c.name, c.job_id, c.role, c.learner, c.node) == (
        "abc", "job-x-learner-1", "job-x", jobspec.ROLE_LEARNER, 1, "n1"
    )  # fmt: skip
    assert (c.state, c.exit_code, c.oom_killed, c.exited) == ("exited", 3, False, True)
    assert c.finished_at == epoch("2026-11-23T10:00:01Z") + 0.5
    # A running container needs no inspect: the list says all there is.
    running = docker_container({"Id": "h", "Names": ["/h"], "State": "running"})
    assert (running.exit_code, running.finished_at, running.running) == (None, None, True)
