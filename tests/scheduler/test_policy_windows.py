"""The production-shaped trace windows of benchmarks/policy_table.py: the sampler on a small
synthetic csv, the window names, and (when the shared Philly trace is here) the pinned counts."""

from __future__ import annotations

import csv
import os
import random
from datetime import datetime, timedelta

import pytest

from benchmarks.policy_table import (
    MIXED_WINDOWS,
    TRACE,
    WINDOWS,
    load_window,
    main,
    mix,
    read_rows,
)

START, END = "2017-10-01", "2017-10-11"
S0, S1 = datetime(2017, 10, 1), datetime(2017, 10, 11)
SPAN = (S1 - S0).total_seconds()
CAP = 112
# Gang size -> jobs inside [START, END). Sized so the sampler lands mid-grid (p8 about 0.5, p1
# below 1) and the kept 2/4/16-GPU jobs are about the 8 % that share1 and share8 leave over.
SIZES = {1: 2000, 2: 150, 4: 150, 8: 200, 16: 60, 128: 20}


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> tuple[str, list[dict]]:
    """A shuffled csv over three VCs; rows outside the window and on both of its edges."""
    rng = random.Random(7)
    rows = []
    for gpus, n in SIZES.items():
        for _ in range(n):
            ts = S0 + timedelta(seconds=rng.randrange(int(SPAN)))
            rows.append((ts, rng.uniform(1_000, 70_000), gpus))
    edge = [
        (S0, 500.0, 1),  # on the start: inside
        (S0 - timedelta(seconds=1), 500.0, 1),  # before: outside
        (S1, 500.0, 1),  # on the end: outside
        (S1 + timedelta(days=3), 500.0, 8),
    ] * 5
    rows += edge
    rng.shuffle(rows)  # the sampler must sort, not rely on the file's order
    path = tmp_path_factory.mktemp("trace") / "mini.csv"
    written = []
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["timestamp", "duration", "num_gpus", "gpu_time", "cluster"])
        for k, (ts, d, g) in enumerate(rows):
            stamp = ts.strftime("%Y-%m-%d %H:%M:%S")
            w.writerow([stamp, f"{d:.1f}", g, f"{d * g:.1f}", f"vc{k % 3}"])
            written.append({"ts": ts, "duration": round(d, 1), "gpus": g})
    return str(path), written


def test_drops_gangs_over_64_and_keeps_smaller_ones(trace):
    jobs = mix(trace[0], START, END, seed=1, cap=CAP).jobs
    sizes = {j.gpus for j in jobs}
    assert max(sizes) <= 64
    assert {1, 2, 4, 8, 16} <= sizes


def test_same_seed_same_jobs_other_seed_other_jobs(trace):
    a = mix(trace[0], START, END, seed=1, cap=CAP).jobs
    b = mix(trace[0], START, END, seed=1, cap=CAP).jobs
    c = mix(trace[0], START, END, seed=2, cap=CAP).jobs
    assert a == b
    assert {j.job_id for j in a} != {j.job_id for j in c}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mix_shares_and_load(trace, seed):
    m = mix(trace[0], START, END, seed=seed, share1=0.82, share8=0.10, load=0.85, cap=CAP)
    assert 0.01 < m.p8 < 1 and m.p1 < 1  # mid-grid, or the shares below test nothing
    n = len(m.jobs)
    share1 = sum(j.gpus == 1 for j in m.jobs) / n
    share8 = sum(j.gpus == 8 for j in m.jobs) / n
    assert share1 == pytest.approx(0.82, abs=0.03)
    assert share8 == pytest.approx(0.10, abs=0.02)
    assert m.expected_load == pytest.approx(0.85, abs=0.01)  # the grid's step is 0.01 in p8
    offered = sum(j.duration * j.gpus for j in m.jobs) / (SPAN * CAP)
    assert offered == pytest.approx(0.85, abs=0.1)


def test_other_shares_move_the_mix(trace):
    m = mix(trace[0], START, END, seed=1, share1=0.6, share8=0.2, cap=CAP)
    share1 = sum(j.gpus == 1 for j in m.jobs) / len(m.jobs)
    assert share1 < 0.72


def test_only_jobs_inside_the_window_times_from_start_sorted(trace):
    path, written = trace
    jobs = mix(path, START, END, seed=1, cap=CAP).jobs
    assert jobs == sorted(jobs, key=lambda j: (j.submit, j.job_id))
    for j in jobs:
        row = written[int(j.job_id[1:])]  # job id j{i}: the 0-based data row
        assert S0 <= row["ts"] < S1
        assert j.submit == (row["ts"] - S0).total_seconds()
        assert (j.duration, j.gpus) == (row["duration"], row["gpus"])
    # the edges themselves, before sampling: the start is in, the end is out
    rows = read_rows(path, S0, S1)
    assert len(rows) == sum(SIZES.values()) + 5
    assert min(r.submit for r in rows) == 0 and max(r.submit for r in rows) < SPAN


def test_unreadable_trace_is_one_line_error(tmp_path):
    with pytest.raises(SystemExit, match=r"^error: --trace: cannot read .*nope\.csv"):
        load_window("P1", trace=str(tmp_path / "nope.csv"))
    bad = tmp_path / "bad.csv"
    bad.write_text("when,duration\n2017-10-01 00:00:00,5\n")
    with pytest.raises(SystemExit, match=r"missing column\(s\) num_gpus, timestamp"):
        mix(str(bad), START, END, seed=1)


def test_unknown_window_names_every_window(capsys):
    with pytest.raises(ValueError) as e:
        load_window("Z9")
    assert "unknown window 'Z9'" in str(e.value)
    assert str(e.value).split("expected some of ")[1].split(", ") == [*WINDOWS, *MIXED_WINDOWS]
    with pytest.raises(SystemExit) as ex:
        main(["--windows", "P1,Z9", "--policies", "fifo"])
    assert ex.value.code == 2
    err = capsys.readouterr().err
    assert "--windows: unknown window 'Z9'" in err and "C8" in err and "P6" in err


@pytest.mark.skipif(not os.path.exists(TRACE), reason="the shared Philly trace is not here")
@pytest.mark.parametrize(
    ("name", "jobs"),
    [("P1", 3916), ("P2", 3853), ("P3", 2206), ("P4", 2082), ("P5", 4264), ("P6", 4360)],
)
def test_p_windows_on_philly_are_pinned(name, jobs):
    # the sampling is fixed: results quoted for a P window must stay reproducible
    got, nodes, gpn = load_window(name)
    assert (len(got), nodes, gpn) == (jobs, 14, 8)
    assert max(j.gpus for j in got) <= 64 and got[0].submit >= 0
