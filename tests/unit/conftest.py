"""tests/unit is pure and fast: no servers, no subprocesses, no containers, the layer in seconds.

Two guards keep it so; each failure names the test and says where it belongs instead
(tests/integration):
- at collection, a unit test that asks, even through another fixture, for one of the real
  servers of tests/conftest.py stops the run;
- while a unit test runs (its fixtures' setup and teardown included), starting a
  subprocess (subprocess, os.fork/posix_spawn/system, multiprocessing), binding, listening
  on or connecting a socket (no network at all, not even to a closed local port),
  starting a gRPC server or building a Docker client fails it. The
  refusal is raised where the call is made and also recorded, so a test whose code
  swallows the error (a broad `except`, a background thread) still fails after its phase.
  Only the test's own thread and the threads started during a unit test are refused: a
  thread left running by an earlier integration or e2e test in the same session (a
  server's pool, a watcher) goes on as before, as it is not the unit test's doing.
SQLite on a temporary file, threads and in-process ASGI clients (fastapi's TestClient
opens no socket) are fine here.
"""

from __future__ import annotations

import multiprocessing.process
import os
import socket
import subprocess
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import docker.api.client
import grpc
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
        "tensorflow_image",
        "mpi_image",
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


# --------------------------------------------------------------------------- the run-time guard


class NotPure(Exception):
    """Raised where a unit test reaches outside its process. An Exception (not a pytest
    outcome) so that it reads like any other error where it is raised; the record in
    PurityGuard fails the test even if the code under test catches it."""


# (owner, attribute, what calling it means). Patched on the class or module that every
# caller goes through: subprocess.run/call/check_output and asyncio's subprocesses build a
# Popen; socket.create_server, asyncio and http.server call socket.socket.bind, and
# socket.create_connection, httpx and requests socket.socket.connect (a socketpair, as an
# event loop makes for itself, is neither); every
# Docker client (docker.from_env, DockerClient) builds an APIClient, whose __init__ already
# talks to the engine to learn its API version.
GUARDED: tuple[tuple[object, str, str], ...] = (
    (subprocess.Popen, "__init__", "started a subprocess"),
    (os, "fork", "forked a process"),
    (os, "posix_spawn", "spawned a process"),
    (os, "posix_spawnp", "spawned a process"),
    (os, "system", "ran a shell command"),
    (multiprocessing.process.BaseProcess, "start", "started a multiprocessing process"),
    (socket.socket, "bind", "bound a socket"),
    (socket.socket, "listen", "listened on a socket"),
    (socket.socket, "connect", "connected a socket"),
    (socket.socket, "connect_ex", "connected a socket"),
    # gRPC's C core binds its ports itself, past socket.socket.
    (grpc, "server", "started a gRPC server"),
    (docker, "from_env", "connected to a Docker engine"),
    (docker.api.client.APIClient, "__init__", "connected to a Docker engine"),
)


class PurityGuard:
    """Refuses the calls in GUARDED while a unit test's phase runs; records each refusal."""

    Refused = NotPure  # for the guard's own tests, which cannot import a conftest

    def __init__(self) -> None:
        self.refused: list[str] = []
        self._test = ""
        self._runner: threading.Thread | None = None  # the thread running the phase
        self._unit_threads: weakref.WeakSet[threading.Thread] = weakref.WeakSet()

    def take(self) -> list[str]:
        """The refusals recorded so far, cleared (for the guard's own tests)."""
        out, self.refused = self.refused, []
        return out

    def _ours(self) -> bool:
        """The calling thread is the test's own, or one a unit test started."""
        now = threading.current_thread()
        return now is self._runner or now in self._unit_threads

    def _refuse(self, what: str, original: Callable[..., object]) -> Callable[..., object]:
        def refused(*args, **kwargs):
            if not self._ours():  # another test's leftover thread: not this test's call
                return original(*args, **kwargs)
            message = (
                f"{self._test} {what}: tests/unit is pure (no subprocess, network, "
                "gRPC server or Docker engine); move this test to tests/integration"
            )
            self.refused.append(message)
            raise NotPure(message)

        return refused

    def phase(self, item: pytest.Item) -> Iterator[None]:
        """One phase of `item` (setup, call or teardown) under the guard; fails the phase
        if anything was refused, even where the code under test caught the refusal."""
        self._test = item.nodeid
        self._runner = threading.current_thread()
        patch = pytest.MonkeyPatch()
        start = threading.Thread.start
        unit_threads = self._unit_threads

        def start_recorded(thread: threading.Thread) -> None:
            unit_threads.add(thread)
            start(thread)

        try:
            patch.setattr(threading.Thread, "start", start_recorded)
            for owner, name, what in GUARDED:
                if hasattr(owner, name):  # os.posix_spawn is not on every platform
                    patch.setattr(owner, name, self._refuse(what, getattr(owner, name)))
            yield
        finally:
            patch.undo()
            # Cleared also when the phase failed anyway: a refusal belongs to this test only.
            refused = self.take()
        if refused:
            raise pytest.fail.Exception("\n".join(refused), pytrace=False)


GUARD = PurityGuard()


@pytest.fixture
def purity_guard() -> PurityGuard:
    """The guard itself, for the tests that prove it fires."""
    return GUARD


# Hook wrappers rather than an autouse fixture: a module- or session-scoped fixture (a
# server started once for a file) is set up before any function-scoped fixture, but
# always inside some test's setup phase. Hooks in this conftest see only tests/unit items.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from GUARD.phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from GUARD.phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    if nextitem is None:
        # The session's last test: its teardown also finalizes every session-scoped fixture
        # of the run, those of tests/integration and tests/e2e too (a swarm lab stopped by
        # `ip netns del`), which is not this unit test's doing: that one teardown goes
        # unguarded (the test's own fixtures are guarded in its setup and call).
        return (yield)
    return (yield from GUARD.phase(item))


# --------------------------------------------------------------------------- job stores


def _memory_store() -> Iterator[object]:
    from dlaas.adapters.store import open_store

    store = open_store("sqlite:///:memory:")
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def job_store():
    """A fresh SqliteJobStore in memory: the real store and its SQL, without a file.

    Overrides tests/conftest.py's file-backed one for tests/unit: creating, checkpointing and
    closing a WAL file costs a few fsyncs, a second or more across the layer on a busy disk,
    and no unit test reads the file. What only a file shows (WAL, several connections,
    a store from before a migration) is tested in test_store_contract.py on a real file.
    """
    yield from _memory_store()


@pytest.fixture(scope="module")
def module_job_store():
    """One in-memory SqliteJobStore for a module, for an app made once per module: the
    first request to a new app builds every route's models (about 0.1 s a time). The
    module's tests must not change what another of them reads."""
    yield from _memory_store()
