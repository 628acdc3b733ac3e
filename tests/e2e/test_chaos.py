"""The chaos suite, short: jobs complete while the LCM leader, the API and a learner die.

The measuring logic of benchmarks/chaos_checks.py (log stream check, lost work, duplicates) is
tested first with plain data; the process supervisor with real processes and a fake
`up`; then the suite itself runs against a real platform (one node, 3 jobs, 3 SIGKILLs)
through the same functions the benchmark uses.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks import chaos_checks
from dlaas.local import processes
from dlaas.local import supervisor as sv

REPO = Path(__file__).resolve().parents[2]


def _load_chaos():
    spec = importlib.util.spec_from_file_location("chaos_bench", REPO / "benchmarks/chaos.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


chaos = _load_chaos()


# --------------------------------------------------------------------------- log check


def epochs(first: int, last: int, total: int = 5) -> list[str]:
    return [f"epoch {k}/{total} loss=0.1 accuracy=0.9" for k in range(first, last + 1)]


DATA = "data: 1437 training and 360 test images from /job/data/digits.npz"


def test_an_uninterrupted_stream_is_complete():
    check = chaos_checks.check_log([DATA, *epochs(1, 5), "done: test accuracy 0.95"], 5)
    assert (check.lost, check.duplicated, check.runs) == (0, 0, 1)


def test_epochs_repeated_after_a_resume_are_allowed():
    lines = [DATA, *epochs(1, 4), DATA, "resuming from the checkpoint of epoch 2", *epochs(3, 5)]
    check = chaos_checks.check_log(lines, 5)
    assert (check.lost, check.duplicated, check.runs) == (0, 0, 2)


def test_a_line_printed_twice_in_one_run_is_a_duplicate():
    check = chaos_checks.check_log([DATA, *epochs(1, 3), *epochs(3, 5)], 5)
    assert (check.lost, check.duplicated) == (0, 1)


def test_gaps_resume_past_the_stream_and_a_missing_end_are_lost_lines():
    assert chaos_checks.check_log([DATA, *epochs(1, 2), *epochs(4, 5)], 5).lost == 1
    lines = [DATA, *epochs(1, 2), DATA, "resuming from the checkpoint of epoch 4", *epochs(5, 5)]
    assert chaos_checks.check_log(lines, 5).lost == 2  # epochs 3 and 4 were trained, never shown
    assert chaos_checks.check_log([DATA, *epochs(1, 3)], 5).lost == 2
    assert chaos_checks.check_log([DATA, *epochs(1, 3)], 5, completed=False).lost == 0


def test_ddp_lines_and_a_restart_from_scratch():
    shard = "learner 1/2: shard of 719 images, 44 steps per epoch"
    lines = [shard, *epochs(1, 2), shard, *epochs(1, 5)]
    check = chaos_checks.check_log(lines, 5)
    assert (check.lost, check.duplicated, check.runs) == (0, 0, 2)
    mid = "learner 1: resuming from the checkpoint of epoch 3 and 7 steps of epoch 4"
    assert (
        chaos_checks.check_log([shard, *epochs(1, 3), shard, mid, *epochs(4, 5)], 5).bad_lines == 0
    )


# --------------------------------------------------------------------------- lost work


def run(start: float, lines: list[tuple[float, str]], end: float | None):
    return chaos_checks.RunTimeline("c", start, list(lines), end)


def test_lost_work_is_the_time_from_the_resumed_checkpoint_to_the_previous_runs_end():
    first = run(0.0, [(0.5, DATA), (1.0, "epoch 1/5"), (3.0, "epoch 2/5")], end=4.2)
    second = run(6.0, [(6.5, DATA), (6.6, "resuming from the checkpoint of epoch 2")], None)
    assert chaos_checks.lost_work([first, second]) == [pytest.approx(1.2)]


def test_a_mid_epoch_checkpoint_loses_nothing_and_from_scratch_loses_the_run():
    first = run(0.0, [(0.5, DATA), (1.0, "epoch 1/5")], end=2.0)
    mid = run(3.0, [(3.1, DATA), (3.2, "resuming from the checkpoint of epoch 1 and 5 mini")], 9)
    assert chaos_checks.lost_work([first, mid]) == [0.0]
    scratch = run(3.0, [(3.1, DATA), (3.5, "epoch 1/5")], None)
    assert chaos_checks.lost_work([first, scratch]) == [pytest.approx(2.0)]


def test_duplicates_are_pairs_seen_twice_at_once():
    assert chaos_checks.duplicates([("a", 0), ("a", 1), ("b", 0)]) == set()
    assert chaos_checks.duplicates([("a", 0), ("b", 0), ("a", 0)]) == {("a", 0)}


def test_the_job_mix_has_every_kind_and_the_resilience_settings():
    plans = chaos_checks.job_mix(20, random.Random(1))
    kinds = [p.kind for p in plans]
    assert kinds.count("digits") == 10 and kinds.count("ddp") == 5 and kinds.count("elastic") == 5
    from dlaas.domain.manifest import parse_manifest

    for plan in plans:
        m = parse_manifest(plan.manifest)
        assert m.checkpoint.interval_s == 5 and m.max_restarts == 3
        assert (m.min_learners, m.max_learners) == (
            (1, 2) if plan.kind == "elastic" else (m.learners,) * 2
        )
    assert len({parse_manifest(p.manifest).priority for p in plans}) > 1


# --------------------------------------------------------------------------- supervisor


def test_dead_components_and_when_the_supervisor_leaves():
    records = {"api": {"pid": 1}, "lcm-0": {"pid": 2}, "supervisor": {"pid": 3}}
    assert sv.dead_components(records, lambda r: r["pid"] != 1) == ["api"]
    assert sv.dead_components(records, lambda r: False) == ["api", "lcm-0"]  # never itself
    assert sv.still_wanted(records, 3, was_recorded=True)
    assert not sv.still_wanted(records, 4, was_recorded=True)  # another supervisor took over
    assert not sv.still_wanted({}, 3, was_recorded=True)  # `down` removed the record
    assert sv.still_wanted({}, 3, was_recorded=False)  # started by hand
    assert [sv.retry_delay(n) for n in (1, 2, 3, 10)] == [1.0, 2.0, 4.0, sv.MAX_RETRY_S]


def _record(state: Path, name: str, pid: int, match: str) -> None:
    (state / "pids" / f"{name}.json").write_text(json.dumps({"pid": pid, "match": match}))


def test_supervisor_restarts_a_dead_process_through_up_and_leaves_stopped_ones_alone(tmp_path):
    (tmp_path / "pids").mkdir()
    proc = subprocess.Popen(["sleep", "60"])
    try:
        # Between fork and the end of exec the child's command line reads empty.
        deadline = time.monotonic() + 5
        while "sleep" not in processes.pid_cmdline(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        _record(tmp_path, "scheduler", proc.pid, "sleep")
        calls = []
        sup = sv.Supervisor(tmp_path, up=lambda: calls.append(time.monotonic()))
        assert sup.step() is None and calls == []  # alive: nothing to do
        proc.kill()
        proc.wait()
        done = sup.step()
        assert done is not None and done.ok and done.dead == ["scheduler"] and len(calls) == 1
        # `down` forgets what it stops: a removed record is never restarted.
        (tmp_path / "pids" / "scheduler.json").unlink()
        assert sup.step() is None and len(calls) == 1
    finally:
        proc.kill()
        proc.wait()


def test_a_failing_up_is_retried_with_backoff(tmp_path):
    (tmp_path / "pids").mkdir()
    _record(tmp_path, "api", 999_999_999, "nothing")  # a pid that cannot exist
    now = [100.0]

    def broken_up():
        raise RuntimeError("api did not answer")

    sup = sv.Supervisor(tmp_path, up=broken_up, clock=lambda: now[0])
    first = sup.step()
    assert first is not None and not first.ok and "did not answer" in first.error
    assert sup.step() is None  # waiting out the 1 s backoff
    now[0] += 1.0
    assert sup.step() is not None


def test_supervisor_process_exits_when_down_removes_its_record(tmp_path):
    (tmp_path / "pids").mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlaas.local.supervisor", str(tmp_path), "--poll", "0.05"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _record(tmp_path, "supervisor", proc.pid, "dlaas.local.supervisor")
        time.sleep(1.5)  # it starts (imports) and sees its record
        assert proc.poll() is None
        (tmp_path / "pids" / "supervisor.json").unlink()
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


# --------------------------------------------------------------------------- the suite


def _plan(name: str, kind: str, epochs: int, command: str, learners: str, cpus: float):
    code = REPO / ("examples/digits" if kind == "digits" else "tests/fixtures/jobs/numpy-allreduce")
    results = "digits-results" if kind == "digits" else "digits-ddp-results"
    text = chaos_checks._manifest(name, learners, cpus, "normal", command, results)
    return chaos_checks.JobPlan(name, kind, epochs, text, code)


@pytest.mark.e2e
@pytest.mark.docker
@pytest.mark.timeout(300)
def test_short_chaos_suite_loses_nothing(docker_client):
    plans = [
        _plan(
            "chaos-t-digits-a",
            "digits",
            10,
            "python3 train.py --epochs 10 --epoch-sleep 1",
            "learners: 1\n",
            1,
        ),
        _plan(
            "chaos-t-digits-b",
            "digits",
            10,
            "python3 train.py --epochs 10 --epoch-sleep 1",
            "learners: 1\n",
            1,
        ),
        _plan("chaos-t-ddp", "ddp", 10, "python3 train.py --epochs 10", "learners: 2\n", 0.5),
    ]
    out = chaos.run(
        chaos.Options(
            kills=("lcm-leader", "api", "learner"),
            seed=3,
            nodes=1,
            timeout=200,
            first_gap=(0.5, 1.5),
            plans=plans,
            recovery_wait_s=45,
        )
    )
    chaos.print_table(out)
    assert out["completed"] == len(plans), out["details"]
    assert out["lost"] == 0
    assert out["duplicate_learners"] == 0
    assert out["lost_log_lines"] == 0, out["details"]
    assert set(out["recovery_s"]) == {"lcm-leader", "api", "learner"}
    assert all(v is not None for v in out["recovery_s"].values()), out["recovery_s"]
