"""`dlaas down` leaves a Docker engine that another platform (another DLAAS_HOME) uses
running, and says so; the last platform using it to go down stops it.

The bug: `down` of the platform whose `up` had started dockerd stopped it, although
another platform's jobs ran on it. Here the engine asked is the machine's real one (its
containers and volumes), while the dockerd each state dir records is a stand-in process
(its command line says `dockerd`): the test never stops the machine's engine.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dlaas.domain.jobspec import LABEL_MANAGED
from dlaas.local import platform
from dlaas.local.dockerd import DEFAULT_DOCKER_HOST, MARK_PREFIX, mark_user
from dlaas.local.processes import pid_alive
from dlaas.local.state import StateDir

pytestmark = pytest.mark.docker


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen]]:
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _stand_in(processes: list[subprocess.Popen], name: str) -> subprocess.Popen:
    """A process whose command line names `name` (what a pid record's `match` checks)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", name])
    processes.append(proc)
    return proc


def _platform(tmp_path: Path, name: str) -> tuple[StateDir, str]:
    state = StateDir(tmp_path / name)
    state.pids.mkdir(parents=True)
    platform_id = f"dlaas-test-{secrets.token_hex(4)}"
    (state.root / "platform.json").write_text(json.dumps({"platform_id": platform_id}))
    return state, platform_id


def _record(state: StateDir, name: str, proc: subprocess.Popen, match: str) -> None:
    state.write_pid(name, {"pid": proc.pid, "match": match, "address": DEFAULT_DOCKER_HOST})


@pytest.fixture
def marks(docker_client) -> Iterator[list[str]]:
    """Platform ids whose engine marks the test may leave: removed after it."""
    ids: list[str] = []
    yield ids
    for platform_id in ids:
        for volume in docker_client.volumes.list(filters={"name": MARK_PREFIX + platform_id}):
            volume.remove(force=True)


def test_down_leaves_the_engine_another_platforms_jobs_run_on(
    tmp_path, docker_client, learner_image, processes
):
    a, _ = _platform(tmp_path, "a")
    dockerd = _stand_in(processes, "stand-in-dockerd")
    _record(a, "dockerd", dockerd, "dockerd")
    other = f"dlaas-test-{secrets.token_hex(4)}"  # a platform that is down, its job still runs
    job = docker_client.containers.run(
        learner_image, ["sleep", "60"], detach=True, labels={LABEL_MANAGED: other}
    )
    try:
        said: list[str] = []
        stopped = platform.down(a.root, progress=said.append)
    finally:
        job.remove(force=True)
    assert "dockerd" not in stopped and pid_alive(dockerd.pid), said
    line = next(x for x in said if x.startswith("dockerd: left running"))
    assert other in line and "1 running container(s)" in line, line
    assert not a.read_pid("dockerd")  # no longer this platform's to stop


def test_the_last_platform_using_the_engine_to_go_down_stops_it(
    tmp_path, docker_client, processes, marks
):
    a, a_id = _platform(tmp_path, "a")
    b, b_id = _platform(tmp_path, "b")
    marks.extend([a_id, b_id])
    dockerd = _stand_in(processes, "stand-in-dockerd")
    _record(a, "dockerd", dockerd, "dockerd")
    _record(b, "supervisor", _stand_in(processes, "stand-in-supervisor"), "stand-in-supervisor")
    for state, platform_id in ((a, a_id), (b, b_id)):
        mark_user(platform_id, state.root)  # as their `up` did

    said: list[str] = []
    platform.down(a.root, progress=said.append)
    assert pid_alive(dockerd.pid), said
    line = next(x for x in said if x.startswith("dockerd: left running"))
    assert b_id in line and str(b.root) in line, line
    assert b.read_pid("dockerd")["pid"] == dockerd.pid  # b's `down` stops it now
    assert not docker_client.volumes.list(filters={"name": MARK_PREFIX + a_id})

    said.clear()
    stopped = platform.down(b.root, progress=said.append)
    assert "dockerd" in stopped, said
    dockerd.wait(10)
    assert not docker_client.volumes.list(filters={"name": MARK_PREFIX + b_id})
