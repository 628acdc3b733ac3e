"""Removing a container that another caller removes at the same time (dlaas.adapters.docker_calls).

The engine answers the second remover 409 at once, while the first one's removal is still
under way; what the second removes next (the job's network) would then find the container
still attached (403). So a 409 is waited out, until the container is gone. The real engine's
race is in tests/integration/test_port_contracts.py."""

from __future__ import annotations

import docker.errors
import pytest
import requests

from dlaas.adapters.docker_calls import REMOVAL_WAIT_S, remove_container


def api_error(status: int) -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = status
    cls = docker.errors.NotFound if status == 404 else docker.errors.APIError
    return cls("engine says no", response=response)


class Api:
    """The two calls remove_container makes, answering as told; what it was asked."""

    def __init__(self, remove: int | None = None, wait: int | None = None):
        self.answers = {"remove": remove, "wait": wait}
        self.calls: list[tuple] = []

    def _answer(self, call: str, *args, **kwargs):
        self.calls.append((call, *args, *sorted(kwargs.items())))
        if self.answers[call] is not None:
            raise api_error(self.answers[call])

    def remove_container(self, cid, force=False):
        self._answer("remove", cid, force=force)

    def wait(self, cid, timeout=None, condition=None):
        self._answer("wait", cid, condition=condition, timeout=timeout)


def test_a_container_is_removed_by_force_and_not_waited_for():
    api = Api()
    remove_container(api, "c1")
    assert api.calls == [("remove", "c1", ("force", True))]


def test_a_removal_under_way_elsewhere_is_waited_out_until_the_container_is_gone():
    api = Api(remove=409)
    remove_container(api, "c1")
    assert api.calls[1] == ("wait", "c1", ("condition", "removed"), ("timeout", REMOVAL_WAIT_S))


@pytest.mark.parametrize("answers", [{"remove": 404}, {"remove": 409, "wait": 404}])
def test_a_container_already_gone_is_fine(answers):
    remove_container(Api(**answers), "c1")


def test_any_other_refusal_is_raised():
    with pytest.raises(docker.errors.APIError):
        remove_container(Api(remove=500), "c1")
