"""The job monitor meets a container that is being removed: one log line, no traceback.

Docker answers 409 ("can not get logs from container which is dead or marked for
removal") when a log is asked of a container a cleanup is removing, and 404 once it is
gone. The containers here are FAKES raising exactly those errors from `logs()`; the
monitor's Docker engine, etcd keeper and store are never reached by these paths.
"""

from __future__ import annotations

import logging

import docker.errors
import pytest
import requests

from services.jobmonitor import monitor as m

REMOVING = "can not get logs from container which is dead or marked for removal"


def _api_error(status: int) -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = status
    if status == 404:
        return docker.errors.NotFound("No such container", response=response)
    return docker.errors.APIError("logs", response=response, explanation=REMOVING)


class Removing:
    """FAKE container whose logs Docker refuses with `status`."""

    def __init__(self, status: int):
        self.id, self.name, self.status = "c0ffee", "job-x-helper", status

    def logs(self, **kwargs):
        raise _api_error(self.status)


def _monitor() -> m.JobMonitor:
    return m.JobMonitor({"local": object()}, keeper=None, store=None, release=lambda *a: None)


def _quiet_about_it(caplog) -> None:
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["container job-x-helper is gone or being removed; its log is not read"]


@pytest.mark.parametrize("status", [409, 404])
def test_the_log_tail_of_a_container_being_removed_is_empty(caplog, status):
    caplog.set_level(logging.DEBUG, logger="dlaas.jobmonitor")
    assert m._tail(Removing(status), 20) == []
    _quiet_about_it(caplog)


@pytest.mark.parametrize("status", [409, 404])
def test_the_events_of_a_helper_being_removed_are_none(caplog, status):
    caplog.set_level(logging.DEBUG, logger="dlaas.jobmonitor")
    assert _monitor()._all_events(Removing(status)) == []
    _quiet_about_it(caplog)


def test_following_a_helper_being_removed_ends_quietly_and_looks_at_the_job_again(caplog):
    caplog.set_level(logging.DEBUG, logger="dlaas.jobmonitor")
    monitor = _monitor()
    monitor._follow_logs("job-x", Removing(409))
    _quiet_about_it(caplog)
    assert monitor._dirty == {"job-x"}


def test_other_docker_errors_still_surface():
    class Broken(Removing):
        def logs(self, **kwargs):
            raise _api_error(500)

    with pytest.raises(docker.errors.APIError):
        m._tail(Broken(500), 20)
