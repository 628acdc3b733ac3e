"""`dlaas metrics` against a real API server (test_cli's `server`): a table with a
sparkline per series, --json, several jobs side by side, --follow."""

from __future__ import annotations

import json

from test_api import put_log
from test_cli import manifest_file, server  # noqa: F401 - fixtures

LINES = [f"epoch {i}/4 loss={1 / i:.3f} accuracy={0.2 * i:.1f}" for i in range(1, 5)]


def submitted(server, manifest_file, lines):  # noqa: F811
    job_id = server.cli("submit", str(manifest_file)).stdout.strip().splitlines()[0]
    put_log(server, job_id, 0, lines)
    server.finish(job_id)
    return job_id


def test_one_job_as_a_table_with_a_sparkline(server, manifest_file):  # noqa: F811
    job_id = submitted(server, manifest_file, LINES)
    r = server.cli("metrics", job_id)
    assert r.exit_code == 0, r.output
    rows = {
        line.split()[1]: line
        for line in r.stdout.splitlines()
        if "loss" in line or "accuracy" in line
    }
    assert set(rows) == {"loss", "accuracy"}
    assert "0.25" in rows["loss"] and "█▃▂▁" in rows["loss"]  # 1, .5, .333, .25
    assert "0.8" in rows["accuracy"] and "▁▃▆█" in rows["accuracy"]


def test_json_is_the_api_reply(server, manifest_file):  # noqa: F811
    job_id = submitted(server, manifest_file, LINES)
    r = server.cli("metrics", job_id, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["series"]["loss"] == [[1, 1.0], [2, 0.5], [3, 0.333], [4, 0.25]]


def test_several_jobs_side_by_side(server, manifest_file):  # noqa: F811
    first = submitted(server, manifest_file, LINES)
    second = submitted(server, manifest_file, ["epoch 1 loss=0.7", "epoch 2 lr=0.01"])
    r = server.cli("metrics", first, second)
    assert r.exit_code == 0, r.output
    assert first in r.stdout and second in r.stdout
    lr_row = next(line for line in r.stdout.splitlines() if " lr " in line)
    assert "-" in lr_row and "0.01" in lr_row  # the first job has no lr series
    r = server.cli("metrics", first, second, "--json")
    assert [reply["job_id"] for reply in json.loads(r.stdout)] == [first, second]


def test_follow_prints_points_until_the_job_ends(server, manifest_file):  # noqa: F811
    job_id = submitted(server, manifest_file, LINES[:2])
    r = server.cli("metrics", job_id, "--follow")
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [
        "loss step 1: 1",
        "accuracy step 1: 0.2",
        "loss step 2: 0.5",
        "accuracy step 2: 0.4",
    ]


def test_no_metrics_and_unknown_jobs_are_said_plainly(server, manifest_file):  # noqa: F811
    job_id = submitted(server, manifest_file, ["hello"])
    r = server.cli("metrics", job_id)
    assert r.exit_code == 0 and r.stdout.startswith("no metrics yet")
    r = server.cli("metrics", "job-000000000000")
    assert r.exit_code == 1 and "not found" in r.output
    r = server.cli("metrics", job_id, "other", "--follow")
    assert r.exit_code == 1 and "exactly one job" in r.output
