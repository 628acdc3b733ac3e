"""The simulator's elastic jobs: they run faster grown, and every resize is counted with the
learner-seconds its gang restart costs, so the grow rule's thrash can be measured."""

from __future__ import annotations

import json
import zlib
from dataclasses import replace

import pytest

from services.scheduler.policy import DEFAULT_CONFIG
from services.scheduler.replay import simulate
from services.scheduler.trace import TraceJob

BEFORE = replace(DEFAULT_CONFIG, resize_interval_s=0.0, grow_payback=0.0)


def _pick(job_id: str) -> float:
    return zlib.crc32(f"elastic {job_id}".encode()) / 2**32


def one_elastic(long: TraceJob, others: list[TraceJob]) -> tuple[list[TraceJob], float]:
    """The jobs, and an `elastic` share that makes `long` elastic and none of the others
    (renamed until their hash falls above it)."""
    share = _pick(long.job_id) + 1e-9
    renamed = []
    for j in others:
        k = 0
        while _pick(f"{j.job_id}-{k}") < share:
            k += 1
        renamed.append(replace(j, job_id=f"{j.job_id}-{k}"))
    return [long, *renamed], share


def test_a_grown_job_runs_faster_and_its_resize_is_counted():
    jobs, share = one_elastic(TraceJob("long", 0.0, 20_000.0, 2), [])
    m = simulate(jobs, 1, 4, "default", elastic=share, per_job=True)
    # started at its target (1 learner of 2 GPUs), grown to its max 2 once the 300 s interval
    # after its start passed; paused 20 + 30 s; the rest at twice the speed
    assert (m["elastic_jobs"], m["resizes"]) == (1, 1)
    (row,) = m["_per_job"]
    assert row[4] == pytest.approx(300.0 + 50.0 + 19_700.0 / 2)
    assert m["resize_learner_s"] == 20.0 * 1 + 30.0 * 2  # save x before + restore x after
    assert m["resizes_per_job_hour"] == pytest.approx(1 / (row[4] / 3600))


def test_short_jobs_coming_and_going_make_the_old_rule_thrash_and_the_new_one_not():
    # a long 2-GPU elastic job (max 4 GPUs) on one 4-GPU node; a 2-GPU job of 60 s every 100 s
    long = TraceJob("long", 0.0, 20_000.0, 2)
    shorts = [TraceJob(f"s{i}", 100.0 * i + 5, 60.0, 2) for i in range(1, 60)]
    jobs, share = one_elastic(long, shorts)
    before = simulate(jobs, 1, 4, "default", config=BEFORE, elastic=share)
    after = simulate(jobs, 1, 4, "default", elastic=share)
    # grown into each gap, given back at each arrival
    assert before["resizes"] >= 40
    # each grow 1 -> 2 learners costs 20 x 1 + 30 x 2, each give-back 2 -> 1 20 x 2 + 30 x 1
    assert 70 * before["resizes"] <= before["resize_learner_s"] <= 80 * before["resizes"]
    # arrivals every 100 s: a loan of 1 learner costs 3 restarts of 50 s, more than it gains
    assert after["resizes"] <= 2
    assert after["resize_learner_s"] < before["resize_learner_s"] / 10


def test_the_simulate_command_reports_resizes_with_elastic_jobs(tmp_path, capsys):
    from services.scheduler.simulator import main

    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,duration,num_gpus\n2017-10-09 00:00:00,20000.0,2\n")
    args = ["--trace", str(trace), "--nodes", "1", "--gpus-per-node", "4", "--json"]
    assert main([*args, "--elastic", "1"]) == 0
    out = capsys.readouterr().out
    assert "resizes of 1 elastic jobs" in out and "80 learner-s lost" in out
    last = json.loads(out.strip().splitlines()[-1])
    assert (last["resizes"], last["resize_learner_s"]) == (1, 80.0)
    assert main(args) == 0  # without --elastic: no such keys
    assert "resizes" not in json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    with pytest.raises(SystemExit):
        main([*args, "--elastic", "1.5"])
    assert "--elastic: expected a share from 0 to 1" in capsys.readouterr().err
