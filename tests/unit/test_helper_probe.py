"""The helper's check that a job's own data store answers (services.learner_helper.probe):
the address read from the endpoint, and the tries over a FAKE connect. The checks against
real ports on this machine (a closed one, a listening one) and what the helper makes of
them (main.check_own_store) are in tests/integration/test_helper_probe_net.py."""

from __future__ import annotations

import socket

import pytest

from services.learner_helper import probe


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://s3.example.org:9000", ("s3.example.org", 9000)),
        ("https://s3.example.org", ("s3.example.org", 443)),
        ("http://10.0.0.7/", ("10.0.0.7", 80)),
        ("http://[::1]:8333", ("::1", 8333)),
    ],
)
def test_address_of_an_endpoint(url, expected):
    assert probe.address(url) == expected


@pytest.mark.parametrize("url", ["http://", "http://host:99999", "http://host:port"])
def test_an_endpoint_without_a_usable_address_is_refused(url):
    with pytest.raises(ValueError):
        probe.address(url)


class FakeConnect:
    """socket.create_connection that fails with the given errors in turn, then connects."""

    def __init__(self, *errors: OSError):
        self.errors = list(errors)
        self.calls = 0

    def __call__(self, address, timeout):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return socket.socket()


def test_an_answering_store_is_reachable_even_after_one_miss():
    connect = FakeConnect(TimeoutError())
    assert probe.unreachable_reason("h", 1, connect) is None
    assert connect.calls == 2


def test_a_silent_store_is_tried_twice_and_said_to_be_silent():
    connect = FakeConnect(TimeoutError(), TimeoutError())
    assert probe.unreachable_reason("h", 1, connect, timeout_s=3) == "no answer within 3 s"
    assert connect.calls == probe.PROBE_TRIES


def test_a_name_that_does_not_resolve_is_not_tried_again():
    connect = FakeConnect(socket.gaierror(-2, "Name or service not known"))
    assert probe.unreachable_reason("h", 1, connect) == "the host name does not resolve"
    assert connect.calls == 1
