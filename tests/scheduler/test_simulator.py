"""The simulator on a small slice of the real trace, through the same schedule()."""

from __future__ import annotations

import json
import os
from datetime import datetime

import pytest

from services.scheduler.replay import _gang, simulate
from services.scheduler.simulator import KEYS, main
from services.scheduler.trace import TraceJob, load_trace, team_of

TRACE = "/work/shared/traces/philly.csv"


def test_gang_shapes_use_whole_nodes():
    assert _gang(1, 4) == (1, 1)
    assert _gang(4, 4) == (1, 4)
    assert _gang(16, 4) == (4, 4)
    assert _gang(6, 4) == (2, 3)  # 2 learners of 3 GPUs: each fits one 4-GPU node


def test_synthetic_fifo_is_exact():
    # 1 node x 2 GPUs: a (2 GPUs, 100 s) then b (1 GPU, 10 s) must wait for a.
    jobs = [TraceJob("a", 0, 100, 2), TraceJob("b", 1, 10, 1), TraceJob("huge", 2, 5, 4)]
    m = simulate(jobs, 1, 2, "fifo")
    assert m["jobs"] == 2 and m["refused"] == 1  # counted, not silently dropped
    assert m["avg_jct"] == pytest.approx((100 + (110 - 1)) / 2)
    assert m["avg_queue"] == pytest.approx((0 + 99) / 2)


def test_preemption_costs_save_and_restore():
    # 1 GPU. long (1 GPU, 10,000 s) runs; short arrives at 2000 s and preempts it under las.
    jobs = [TraceJob("long", 0, 10_000, 1), TraceJob("short", 2_000, 100, 1)]
    m = simulate(jobs, 1, 1, "las", save_s=20, restore_s=30)
    assert m["preemptions"] == 1
    # short starts after the 20 s save: JCT 120; long loses no work but pays 20 + 100 + 30 s
    assert m["avg_jct"] == pytest.approx((120 + 10_000 + 20 + 100 + 30) / 2)


def test_eta_at_submit_contains_the_start_and_sees_running_progress():
    # 1 GPU, fifo, every job runs 1,000 s. Six jobs queue at t=0 and run back to back; "w"
    # arrives at 5,500 s while the sixth has run 500 s: with five 1,000-s runs in the history
    # its range is exactly [6,000, 6,000] (seeing the sixth as just started would say 6,500).
    jobs = [TraceJob(f"a{i}", 0, 1_000, 1) for i in range(6)] + [TraceJob("w", 5_500, 1_000, 1)]
    m = simulate(jobs, 1, 1, "fifo", per_job=True, progress=False)
    (w,) = [r for r in m["_per_job"] if r[0] == 5_500]
    first_start, eta = w[3], w[6]
    assert first_start == 6_000 and eta == (6_000, 6_000)


def test_teams_a_team_reclaims_its_guarantee_from_a_borrower():
    # 2 nodes x 2 GPUs, two teams guaranteed 2 GPUs each. team0 fills the cluster at t=0 with
    # two long 2-GPU jobs (one borrowed); team1's short job at t=100 takes the borrowed one's
    # GPUs back at once (after its 20 s checkpoint save) instead of waiting 10,000 s.
    ids = [f"j{i}" for i in range(50)]
    a1, a2 = [i for i in ids if team_of(i, 2) == "team0"][:2]
    b = next(i for i in ids if team_of(i, 2) == "team1")
    jobs = [TraceJob(a1, 0, 10_000, 2), TraceJob(a2, 0, 10_000, 2), TraceJob(b, 100, 100, 2)]
    with_teams = simulate(jobs, 2, 2, "fifo", teams=2)
    assert with_teams["reclaims"] == with_teams["preemptions"] == 1
    assert with_teams["teams"]["team1"]["avg_jct"] == pytest.approx(120)
    assert with_teams["teams"]["team0"]["jobs"] == 2
    shares = [t["gpu_share"] for t in with_teams["teams"].values()]
    assert sum(shares) == pytest.approx(1) and shares[0] > shares[1] > 0
    without = simulate(jobs, 2, 2, "fifo")
    assert without["preemptions"] == 0 and "teams" not in without
    assert without["avg_jct"] > with_teams["avg_jct"]


@pytest.mark.skipif(not os.path.exists(TRACE), reason="trace not present")
def test_cli_on_a_slice_of_the_trace(capsys):
    rc = main(
        [
            "--trace",
            TRACE,
            "--vc",
            "6c71a0",
            "--start",
            "2017-10-09",
            "--end",
            "2017-10-12",
            "--nodes",
            "16",
            "--gpus-per-node",
            "4",
            "--policy",
            "default",
            "--json",
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out.strip().splitlines()
    m = json.loads(out[-1])
    assert tuple(m) == KEYS
    assert m["jobs"] > 100 and m["refused"] == 0
    assert 0 < m["utilization"] <= 1 and 0 <= m["eta_in_range"] <= 1
    assert 0 <= m["eta_median_width"] < float("inf")
    assert m["p50_jct"] <= m["p95_jct"] <= m["p99_jct"]


@pytest.mark.skipif(not os.path.exists(TRACE), reason="trace not present")
def test_cli_teams_prints_each_teams_jct_and_gpu_share(capsys):
    args = ["--trace", TRACE, "--vc", "6c71a0", "--start", "2017-10-09", "--end", "2017-10-11"]
    args += ["--nodes", "16", "--gpus-per-node", "4", "--teams", "2", "--json"]
    assert main(args) == 0
    out = capsys.readouterr().out.strip().splitlines()
    m = json.loads(out[-1])
    assert set(m["teams"]) == {"team0", "team1"}
    assert sum(t["jobs"] for t in m["teams"].values()) == m["jobs"]
    assert sum(t["gpu_share"] for t in m["teams"].values()) == pytest.approx(1)
    assert all(t["quota_gpus"] == 32 for t in m["teams"].values())
    assert any(line.strip().startswith("team1 (guarantee 32 GPUs)") for line in out)


def test_cli_refuses_bad_arguments_by_name(capsys):
    with pytest.raises(SystemExit, match="--start"):
        main(
            [
                "--trace",
                TRACE,
                "--vc",
                "x",
                "--start",
                "2017-13-01",
                "--end",
                "2017-10-10",
                "--nodes",
                "1",
                "--gpus-per-node",
                "4",
            ]
        )
    with pytest.raises(SystemExit):
        main(
            [
                "--trace",
                TRACE,
                "--vc",
                "x",
                "--start",
                "2017-10-01",
                "--end",
                "2017-10-10",
                "--nodes",
                "0",
                "--gpus-per-node",
                "4",
            ]
        )
    assert "--nodes" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(
            ["--trace", TRACE, "--vc", "x", "--start", "2017-10-01", "--end", "2017-10-10"]
            + ["--nodes", "1", "--gpus-per-node", "4", "--teams", "-1"]
        )
    assert "--teams: must not be negative" in capsys.readouterr().err


def _csv(tmp_path, text: str) -> str:
    path = tmp_path / "trace.csv"
    path.write_text(text)
    return str(path)


def test_a_trace_without_virtual_clusters_replays_whole(tmp_path, capsys):
    # any trace of timestamp, duration and gang size: no cluster column, no dates given
    trace = _csv(
        tmp_path,
        "timestamp,duration,num_gpus\n"
        "2017-10-09 00:00:10,100.0,8\n"
        "2017-10-09 00:00:00,50.0,16\n"
        "2017-10-10 00:00:00,20.0,1\n",
    )
    jobs = load_trace(trace)
    # times from the first submit, sorted; ids the rows' order in the file
    assert [(j.job_id, j.submit, j.gpus) for j in jobs] == [
        ("j1", 0.0, 16),
        ("j0", 10.0, 8),
        ("j2", 86_400.0, 1),
    ]
    assert load_trace(trace, start=datetime(2017, 10, 9, 0, 0, 5))[0].submit == 5.0
    assert [j.job_id for j in load_trace(trace, end=datetime(2017, 10, 10))] == ["j1", "j0"]
    assert main(["--trace", trace, "--nodes", "2", "--gpus-per-node", "8", "--json"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("policy default  VC all  2x8 GPUs  submits [first, last]")
    m = json.loads(out[-1])
    # the 16-GPU gang first (it came first), the 8-GPU job after it, the last alone
    assert m["jobs"] == 3 and m["avg_jct"] == pytest.approx((50 + (50 + 100 - 10) + 20) / 3)


def test_a_trace_that_matches_nothing_or_is_malformed_is_refused_by_name(tmp_path):
    args = ["--nodes", "1", "--gpus-per-node", "8"]
    no_vc = _csv(tmp_path, "timestamp,duration,num_gpus\n2017-10-09 00:00:00,5,1\n")
    with pytest.raises(SystemExit, match="missing column.s. cluster"):
        main(["--trace", no_vc, "--vc", "6c71a0", *args])
    with pytest.raises(SystemExit, match="no job in .* matches --start 2018-01-01"):
        main(["--trace", no_vc, "--start", "2018-01-01", *args])
    bad = _csv(tmp_path, "timestamp,duration,num_gpus\n2017-10-09 00:00:00,5,1\n2017-10-09,x,1\n")
    with pytest.raises(SystemExit, match="line 3: expected timestamp .* got '2017-10-09', 'x'"):
        main(["--trace", bad, *args])
