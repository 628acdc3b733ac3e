"""The helper's check that a job's own data store answers, against real ports on this
machine (services.learner_helper.probe and main.check_own_store): a closed port is
refused, a listening one passes, the host, the port and the manifest field are named and
the platform's own store is never checked. The pure parts (the address, the tries) are in
tests/unit/test_helper_probe.py."""

from __future__ import annotations

import socket

from services.learner_helper import probe
from services.learner_helper.main import HelperConfig, check_own_store

FIELD = "data_stores[0].connection.auth_url"


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
