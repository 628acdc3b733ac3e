"""End to end: a running example job (examples/digits, epochs made 1 s long) shows its
progress with a total, a rate and an expected finish in REST's job view and in the CLI's
`show` and `list`, read off its log by a platform brought up for this module."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import test_platform_e2e as platform_e2e
from test_platform_e2e import submit
from typer.testing import CliRunner

from dlaas.clients.cli import app

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

REPO = Path(__file__).resolve().parents[2]
home = platform_e2e.home
live = platform_e2e.live
EPOCHS = 40


@pytest.mark.timeout(600)
def test_a_running_example_shows_its_progress_in_rest_and_the_cli(live, home):
    http, _, _ = live
    manifest = (REPO / "examples/digits/manifest.yaml").read_text()
    manifest = manifest.replace("--epochs 20", f"--epochs {EPOCHS} --epoch-sleep 1")
    job_id = submit(http, manifest, REPO / "examples/digits")
    deadline = time.time() + 300
    progress = None
    while time.time() < deadline:
        job = http.get(f"/v1/jobs/{job_id}").json()
        assert job["status"] not in ("COMPLETED", "FAILED"), job["history"]
        progress = job.get("progress")
        if job["status"] == "PROCESSING" and progress and progress.get("finish_at"):
            break
        time.sleep(0.5)
    else:
        raise AssertionError(f"no estimate in 300 s: {progress}")
    try:
        assert progress["unit"] == "epoch" and progress["total"] == EPOCHS
        assert 0 < progress["percent"] < 100 and progress["rate_per_s"] > 0
        assert progress["finish_at"] > time.time() - 5
        listed = {j["job_id"]: j for j in http.get("/v1/jobs").json()["jobs"]}
        assert listed[job_id]["progress"]["total"] == EPOCHS

        cli = CliRunner()
        # Each API replica estimates from its own looks at the log: one that has not yet seen
        # two moves says "not estimated yet" (dlaas.adapters.job_progress), for an epoch or two.
        for _ in range(20):
            shown = cli.invoke(app, ["--home", str(home), "show", job_id], env={"COLUMNS": "200"})
            assert shown.exit_code == 0, shown.output
            assert "progress: epoch " in shown.output and f"/{EPOCHS} (" in shown.output
            rows = cli.invoke(app, ["--home", str(home), "list"], env={"COLUMNS": "200"})
            row = next(line for line in rows.output.splitlines() if job_id in line)
            if "expected to finish at" in shown.output and "% · ETA " in row:
                break
            time.sleep(0.5)
        assert "expected to finish at" in shown.output, shown.output
        assert "% · ETA " in row, rows.output
    finally:
        http.post(f"/v1/jobs/{job_id}/halt")
