"""The guard of tests/unit (tests/unit/conftest.py) fires: a unit test that starts a
subprocess, binds, listens on or connects a socket, starts a gRPC server or reaches the
Docker engine is refused where it does so, and the refusal is recorded even when the code
catches it.

Each test takes the record back (`purity_guard.take()`) so that the refusal it provoked on
purpose does not fail it; one drives a phase by hand to see the record fail it.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import subprocess
import sys
import threading
from concurrent import futures

import docker
import grpc
import pytest

from dlaas.adapters.grpc_server import start_server


def bind_a_socket() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))


# Each a lambda: the guarded names are looked up when the test runs, under the guard.
ATTEMPTS = {
    "subprocess.run": lambda: subprocess.run([sys.executable, "-c", "pass"], check=False),
    "subprocess.Popen": lambda: subprocess.Popen(["true"]),
    "os.system": lambda: os.system("true"),  # noqa: S605 - the call the guard must refuse
    "os.fork": lambda: os.fork(),
    "multiprocessing": lambda: multiprocessing.get_context("fork").Process(target=print).start(),
    "socket.bind": bind_a_socket,
    "socket.create_server": lambda: socket.create_server(("127.0.0.1", 0)),
    "socket.create_connection": lambda: socket.create_connection(("127.0.0.1", 9), timeout=1),
    "grpc.server": lambda: grpc.server(futures.ThreadPoolExecutor(max_workers=1)),
    "dlaas start_server": lambda: start_server("127.0.0.1:0", lambda s: None, []),
    "docker.from_env": lambda: docker.from_env(),
    "docker.DockerClient": lambda: docker.DockerClient(base_url="unix:///nowhere.sock"),
}
SAYS = {
    "subprocess.run": "started a subprocess",
    "subprocess.Popen": "started a subprocess",
    "os.system": "ran a shell command",
    "os.fork": "forked a process",
    "multiprocessing": "started a multiprocessing process",
    "socket.bind": "bound a socket",
    "socket.create_server": "bound a socket",
    "socket.create_connection": "connected a socket",
    "grpc.server": "started a gRPC server",
    "dlaas start_server": "started a gRPC server",
    "docker.from_env": "connected to a Docker engine",
    "docker.DockerClient": "connected to a Docker engine",
}


@pytest.mark.parametrize("what", sorted(ATTEMPTS))
def test_reaching_outside_the_process_is_refused_naming_the_test(purity_guard, what, request):
    with pytest.raises(purity_guard.Refused) as caught:
        ATTEMPTS[what]()
    message = str(caught.value)
    assert message.startswith(f"{request.node.nodeid} {SAYS[what]}")
    assert "move this test to tests/integration" in message
    assert purity_guard.take() == [message]


def test_listen_is_refused_on_its_own_too(purity_guard):
    """Also for a socket bound where the guard does not see it (C code, before the test)."""
    with socket.socket() as s, pytest.raises(purity_guard.Refused, match="listened on a socket"):
        s.listen()
    assert len(purity_guard.take()) == 1


def test_a_phase_whose_code_swallowed_a_refusal_fails_at_its_end(purity_guard, request):
    """The record is what fails the test after its phase, whatever the code did with the
    error (here a broad except, as product code with a fallback might have)."""
    phase = purity_guard.phase(request.node)  # one phase, as the runtest hooks drive it
    next(phase)
    try:  # noqa: SIM105 - spelled as product code with a fallback would spell it
        subprocess.run(["true"], check=False)
    except Exception:  # noqa: BLE001, S110 - swallowed on purpose: the phase must fail anyway
        pass
    with pytest.raises(pytest.fail.Exception) as failed:
        next(phase)
    assert str(failed.value) == (
        f"{request.node.nodeid} started a subprocess: tests/unit is pure (no subprocess, "
        "network, gRPC server or Docker engine); move this test to tests/integration"
    )
    assert purity_guard.take() == []  # taken by the phase that failed


def test_pure_work_passes(purity_guard, tmp_path):
    """Files, threads and a socket pair (no address, nothing bound) are fine here."""
    (tmp_path / "f").write_text("x")
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b"ping")
        assert b.recv(4) == b"ping"
    assert purity_guard.take() == []


def _in_a_thread(fn, *, foreign: bool, guard) -> list[BaseException]:
    """Run `fn` in a thread; `foreign`: as if another test had left the thread running."""
    go, errors = threading.Event(), []

    def body():
        go.wait(5)
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - broad: handed back to the test
            errors.append(exc)

    thread = threading.Thread(target=body)
    thread.start()
    if foreign:
        guard._unit_threads.discard(thread)
    go.set()
    thread.join(5)
    return errors


def test_a_thread_the_test_started_is_refused_too(purity_guard):
    errors = _in_a_thread(bind_a_socket, foreign=False, guard=purity_guard)
    assert [type(e) for e in errors] == [purity_guard.Refused]
    assert len(purity_guard.take()) == 1


def test_a_thread_another_test_left_running_is_not_this_tests_doing(purity_guard):
    """An integration test's server pool or watcher, still running when the unit layer
    starts in the same session, is not refused (nor does it fail the unit test)."""
    assert _in_a_thread(bind_a_socket, foreign=True, guard=purity_guard) == []
    assert purity_guard.take() == []
