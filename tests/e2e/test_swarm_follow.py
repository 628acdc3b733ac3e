"""On a swarm, every way of following a job ends within seconds of the job's end:
`dlaas submit --follow`, `dlaas logs -f` and REST `logs?follow=true`.

The bug: on the swarm (`dlaas up --nodes 2`, dlaas.local.swarm) the three never ended after
the job COMPLETED (4 of 4; one hung 10 minutes); the tests of the follow ran only against a
fake engine whose stream never ends. Here the engine is the real swarm lab: the job's
learner is a swarm service, its log a task's log read through the manager. Since the
follows read the learner's log in rounds (polled, never a task log followed: dd62c0d) it
passes: on 2026-11-26 the three ended 0.0-0.1 s after the job's COMPLETED.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from dlaas.local import platform
from dlaas.local.swarm import SwarmLabError, check_requirements

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

REPO = Path(__file__).resolve().parents[2]
# How soon after the job's end (its COMPLETED transition) a follow must have ended: the
# API polls every 0.5 s and the CLI reads the job again after its stream ends.
END_WITHIN_S = 5
# A follow still open this long after the job's end is the bug; the test stops waiting.
GIVE_UP_S = 60


@pytest.fixture(scope="module")
def home(tmp_path_factory, docker_client, learner_image):
    try:
        check_requirements()
    except SwarmLabError as e:
        pytest.skip(str(e))
    home = tmp_path_factory.mktemp("swarm-follow")
    try:
        platform.up(home, progress=lambda line: None, nodes=2)
        yield home
    finally:
        platform.down(home, progress=lambda line: None)


def _cli(home: Path, *args: str) -> subprocess.Popen:
    """`dlaas --home HOME ARGS` as a user runs it: a process of its own (this checkout's code)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    code = "from dlaas.clients.cli import app; app(prog_name='dlaas')"
    return subprocess.Popen(
        [sys.executable, "-c", code, "--home", str(home), *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_every_follow_ends_within_seconds_of_the_jobs_end_on_the_swarm(home, tmp_path):
    from test_platform_e2e import _upload_digits, wait_final

    cfg = json.loads((home / "client.json").read_text())
    http = httpx.Client(
        base_url=cfg["url"], headers={"Authorization": f"Bearer {cfg['token']}"}, timeout=30
    )
    _upload_digits(http)
    manifest = tmp_path / "digits.yaml"
    manifest.write_text(
        (REPO / "examples/digits/manifest.yaml")
        .read_text()
        .replace("cpus: 1", "cpus: 0.5")
        .replace("--epochs 20", "--epochs 6 --epoch-sleep 0.5")
    )
    ended: dict[str, float] = {}
    outputs: dict[str, str] = {}

    def waits(name: str, proc: subprocess.Popen) -> threading.Thread:
        def run() -> None:
            try:
                out, errs = proc.communicate(timeout=300)
                ended[name] = time.time()
                outputs[name] = out + errs
            except subprocess.TimeoutExpired:
                pass

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    submitted = _cli(home, "submit", str(manifest), "--code", str(REPO / "examples/digits"), "-f")
    job_id = submitted.stdout.readline().strip()
    assert job_id.startswith("job-"), submitted.stderr.read() if submitted.poll() else job_id
    following = _cli(home, "logs", job_id, "-f")
    procs = [submitted, following]
    threads = [waits("submit --follow", submitted), waits("logs -f", following)]

    def rest() -> None:
        lines = []
        with httpx.Client(base_url=cfg["url"], headers=http.headers, timeout=GIVE_UP_S) as c:
            params = {"follow": "true"}
            with c.stream("GET", f"/v1/jobs/{job_id}/logs", params=params) as r:
                try:
                    lines.extend(r.iter_lines())
                except httpx.ReadTimeout:
                    return
        ended["REST logs?follow=true"] = time.time()
        outputs["REST logs?follow=true"] = "\n".join(lines)

    threads.append(threading.Thread(target=rest, daemon=True))
    threads[-1].start()
    try:
        job = wait_final(http, job_id, timeout=300)
        history = [(h["status"], h["reason"]) for h in job["history"]]
        assert job["status"] == "COMPLETED", history
        done_at = job["history"][-1]["at"]
        for thread in threads:
            thread.join(max(0.0, done_at + GIVE_UP_S - time.time()))
        late = {
            name: round(ended[name] - done_at, 1) if name in ended else f"open after {GIVE_UP_S} s"
            for name in ("submit --follow", "logs -f", "REST logs?follow=true")
        }
        print(f"follows ended after the job's end (s): {late}")
        assert all(isinstance(v, float) and v <= END_WITHIN_S for v in late.values()), late
        assert all("epoch 6/6" in outputs[name] for name in late), outputs
        assert "COMPLETED" in outputs["submit --follow"] and "COMPLETED" in outputs["logs -f"]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        http.close()
