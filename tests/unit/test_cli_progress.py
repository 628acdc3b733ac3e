"""The CLI's progress cell (`dlaas list`) and line (`dlaas show`)."""

from __future__ import annotations

from dlaas.clients.cli_progress import progress_cell, progress_line

VIEW = {
    "done": 9.0,
    "total": 20.0,
    "unit": "epoch",
    "percent": 45.0,
    "rate_per_s": 0.05,
    "remaining_s": 220.0,
    "finish_at": 1_800_000_000.0,
}


def test_cell_and_line():
    assert progress_cell(VIEW).startswith("45% · ETA ")
    line = progress_line(VIEW)
    assert line.startswith("progress: epoch 9/20 (45%), 0.05 epoch/s, expected to finish at ")
    assert line.endswith("(in 4 min)")
    assert progress_cell(None) == "" and progress_line(None) == ""


def test_without_total_or_estimate():
    bare = {"done": 120, "total": None, "unit": "step", "percent": None}
    assert progress_cell(bare) == "step 120"
    assert progress_line(bare) == "progress: step 120"
    early = {**VIEW, "rate_per_s": None, "remaining_s": None, "finish_at": None}
    assert progress_cell(early) == "45%"
    assert "not estimated yet" in progress_line(early)
