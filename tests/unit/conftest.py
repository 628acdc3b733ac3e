"""tests/unit is pure and fast: no servers, no containers, the whole layer in seconds.

A unit test that asks, even through another fixture, for one of the real servers of
tests/conftest.py stops the run at collection, naming the test: it belongs in
tests/integration. A short subprocess that is not a server (the learner wrapper, protoc)
and SQLite on a temporary file are fine here; docker-compose's config check is not (six
runs of a Python program were a third of the layer's time): it is an integration test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent

# The fixtures of tests/conftest.py that start or reach a real server or the Docker engine.
SERVER_FIXTURES = frozenset(
    {
        "etcd_server",
        "s3_server",
        "docker_client",
        "learner_image",
        "pytorch_image",
        "docker_host",
        "docker_gateway",
    }
)


def pytest_collection_modifyitems(config, items):
    offenders = [
        f"{item.nodeid} uses {', '.join(sorted(used))}"
        for item in items
        if HERE in Path(item.path).parents
        and (used := SERVER_FIXTURES & set(getattr(item, "fixturenames", ())))
    ]
    if offenders:
        raise pytest.UsageError(
            "tests/unit starts no servers; move these to tests/integration:\n  "
            + "\n  ".join(offenders)
        )
