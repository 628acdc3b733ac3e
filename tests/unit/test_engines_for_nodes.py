"""The one builder of the nodes' container engines (dlaas.adapters.engines.connect): the
swarm's node views or the machine's one engine, a client also for an engine that is down at
start (where the service asks for that), and a bad address refused by name. The Docker SDK's
client is a FAKE here (no engine is reached)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import ClassVar

import docker.errors
import pytest

from dlaas.adapters.engines import connect
from dlaas.adapters.engines.docker_engine import Deployer
from dlaas.adapters.engines.swarm_node import SwarmNodeView
from dlaas.domain.errors import PermanentError, TemporaryError


class FakeClient:
    """FAKE docker.DockerClient: records how it was built; `down` engines do not answer the
    version query, `bad` addresses are refused however the client is built."""

    built: ClassVar[list[dict]] = []
    down = False
    bad = False

    def __init__(self, base_url: str, **kw) -> None:
        FakeClient.built.append({"base_url": base_url, **kw})
        if FakeClient.bad:
            raise docker.errors.DockerException(f"invalid bind address format: {base_url}")
        if FakeClient.down and "version" not in kw:
            raise docker.errors.DockerException("Error while fetching server API version")
        self.api = SimpleNamespace()


@pytest.fixture
def fake_docker(monkeypatch):
    FakeClient.built, FakeClient.down, FakeClient.bad = [], False, False
    monkeypatch.setattr(
        connect, "docker", SimpleNamespace(DockerClient=FakeClient, errors=docker.errors)
    )
    return FakeClient


def settings(swarm_manager: str = ""):
    """What the builder reads of PlatformSettings."""
    return SimpleNamespace(
        platform_id="p1", docker_host="unix:///engine.sock", swarm_manager=swarm_manager
    )


def test_the_machines_engine_serves_every_node_named(fake_docker):
    engines = connect.engines_for_nodes(settings(), ["local"], timeout_s=7)
    [engine] = engines.values()
    assert list(engines) == ["local"] and isinstance(engine, Deployer)
    assert (engine.node, engine.platform_id) == ("local", "p1")
    assert fake_docker.built == [{"base_url": "unix:///engine.sock", "timeout": 7}]


def test_a_swarm_node_is_a_view_through_the_manager(fake_docker):
    engines = connect.engines_for_nodes(settings(swarm_manager="tcp://mgr:2375"), ["a", "b"])
    assert sorted(engines) == ["a", "b"]
    assert all(isinstance(e, SwarmNodeView) for e in engines.values())
    assert engines["a"].engine is engines["b"].engine  # one manager client for all
    assert fake_docker.built == [{"base_url": "tcp://mgr:2375"}]  # the SDK's own timeout


def test_an_engine_down_at_start_gets_a_client_with_the_version_pinned(fake_docker, caplog):
    fake_docker.down = True
    engines = connect.engines_for_nodes(settings(), ["local"], timeout_s=10)
    assert engines["local"].client is not None
    assert fake_docker.built[-1] == {
        "base_url": "unix:///engine.sock",
        "timeout": 10,
        "version": connect.FALLBACK_API_VERSION,
    }
    assert "does not answer yet" in caplog.text


def test_an_engine_down_is_temporary_where_the_service_needs_it_up(fake_docker):
    fake_docker.down = True
    with pytest.raises(TemporaryError, match="unix:///engine.sock does not answer"):
        connect.engines_for_nodes(settings(), ["local"], down_ok=False)


def test_a_bad_address_is_refused_by_name(fake_docker):
    fake_docker.bad = True
    with pytest.raises(
        PermanentError, match="docker_host: bad Docker engine address unix:///engine.sock"
    ):
        connect.engines_for_nodes(settings(), ["local"])


def test_a_port_that_is_not_a_number_is_refused_by_name(fake_docker, monkeypatch):
    def unparsable(self, base_url, **kw):
        raise ValueError("Port could not be cast to integer value as 'x'")

    monkeypatch.setattr(fake_docker, "__init__", unparsable)
    with pytest.raises(PermanentError, match="swarm_manager: bad Docker engine address"):
        connect.engines_for_nodes(settings(swarm_manager="tcp://mgr:x"), ["a"])
