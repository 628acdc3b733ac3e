"""The helper's check that a job's own data store answers (services.learner_helper.probe)
and what the helper makes of it (main.check_own_store): the host, the port and the
manifest field named, the platform's own store never checked."""

from __future__ import annotations

import socket

import pytest

from services.learner_helper import probe
from services.learner_helper.main import HelperConfig, check_own_store

FIELD = "data_stores[0].connection.auth_url"


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


def test_a_refused_connection_on_a_real_closed_port():
    with socket.socket() as s:  # a port nobody listens on once this closes
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert probe.unreachable_reason("127.0.0.1", port, timeout_s=1) == "Connection refused"


def config(endpoint: str, field: str) -> HelperConfig:
    env = {
        "JOB_ID": "j",
        "DLAAS_S3_ENDPOINT": endpoint,
        "AWS_ACCESS_KEY_ID": "a",
        "AWS_SECRET_ACCESS_KEY": "s",
        "DLAAS_RESULTS_BUCKET": "r",
        "DLAAS_S3_ENDPOINT_FIELD": field,
    }
    return HelperConfig.from_env(env)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_jobs_own_unreachable_store_is_named_with_its_field():
    port = closed_port()
    message = check_own_store(config(f"http://127.0.0.1:{port}", FIELD))
    assert message is not None
    assert message.startswith(f"{FIELD}: the data store at 127.0.0.1:{port} could not be reached")


def test_the_platforms_store_is_not_checked():
    assert check_own_store(config(f"http://127.0.0.1:{closed_port()}", "")) is None


def test_an_own_store_that_answers_passes():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert check_own_store(config(f"http://127.0.0.1:{server.getsockname()[1]}", FIELD)) is None
