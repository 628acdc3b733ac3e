"""The container engines of the platform's nodes, built in one place for every service.

On a swarm platform (DLAAS_SWARM_MANAGER) each node is a view of the swarm, reached through
its manager's API alone; otherwise the machine's one Docker engine (DLAAS_DOCKER_HOST) is
the engine of every node named (the one local node). The LCM, the job monitor and the API's
log reader hold what `engines_for_nodes` returns.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import docker
import docker.errors

from dlaas.adapters.engines.docker_engine import Deployer
from dlaas.adapters.engines.swarm_engine import SwarmEngine
from dlaas.config import PlatformSettings
from dlaas.domain.errors import PermanentError, TemporaryError
from dlaas.domain.ports import ContainerEngine

log = logging.getLogger(__name__)

# The API version to speak to an engine that does not answer at start (the oldest the
# platform supports); an engine that answers is asked for its own.
FALLBACK_API_VERSION = "1.41"


def docker_client(
    host: str, *, timeout_s: int | None = None, down_ok: bool = True, setting: str = "docker_host"
):
    """A Docker SDK client for the engine at `host` (the value of settings field `setting`).

    The client asks the engine for its API version; an engine that does not answer now
    raises TemporaryError, or, with `down_ok`, gets a client all the same (the version
    pinned to FALLBACK_API_VERSION): a service that must start while the engine is down
    reconnects later. An address the SDK cannot use raises PermanentError naming `setting`.
    """
    timeout = {} if timeout_s is None else {"timeout": timeout_s}
    try:
        return docker.DockerClient(base_url=host, **timeout)
    except docker.errors.DockerException as exc:
        if not down_ok:
            raise TemporaryError(f"the Docker engine at {host} does not answer: {exc}") from None
        log.warning("the Docker engine at %s does not answer yet: %s", host, exc)
    except ValueError as exc:  # the SDK's parse of a port that is not a number
        raise PermanentError(f"{setting}: bad Docker engine address {host}: {exc}") from None
    try:
        return docker.DockerClient(base_url=host, version=FALLBACK_API_VERSION, **timeout)
    except (docker.errors.DockerException, ValueError) as exc:  # no engine asked: a bad address
        raise PermanentError(f"{setting}: bad Docker engine address {host}: {exc}") from None


def engines_for_nodes(
    settings: PlatformSettings,
    names: Iterable[str],
    *,
    timeout_s: int | None = None,
    down_ok: bool = True,
) -> dict[str, ContainerEngine]:
    """The container engine of each node named, by name (see the module doc).

    `timeout_s` bounds each Docker call (the SDK's default when None); `down_ok` as for
    `docker_client`, whose errors this raises.
    """
    if settings.swarm_manager:
        client = docker_client(
            settings.swarm_manager, timeout_s=timeout_s, down_ok=down_ok, setting="swarm_manager"
        )
        swarm = SwarmEngine(client, settings.platform_id)
        return {name: swarm.node(name) for name in names}
    client = docker_client(settings.docker_host, timeout_s=timeout_s, down_ok=down_ok)
    return {name: Deployer(client, platform_id=settings.platform_id, node=name) for name in names}
