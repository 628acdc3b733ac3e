"""Measured use, from the learner's cgroup to the job's info: the wrapper's reading (cgroup v2,
v1, the rusage fallback), the helper's `usage` event, the monitor's record per run. The
accounting of what is recorded is in test_usage.py; a real job on Docker in
tests/integration/test_monitor.py."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from dlaas.domain import jobspec
from dlaas.domain.status import Status
from dlaas.domain.usage import MAX_MEASURED_RUNS, MEASURED_INFO
from dlaas.learner import usage
from dlaas.learner.paths import JobPaths
from services.jobmonitor.fold import fold_events
from services.jobmonitor.measured import record_measured, usage_in


def test_cgroup_v2_gives_the_cpu_counter_and_the_peak(tmp_path):
    (tmp_path / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 5\n")
    (tmp_path / "memory.peak").write_text(f"{300 * 2**20 + 1}\n")
    assert usage.cgroup_usage(tmp_path) == (2.5, 300 * 2**20 + 1)
    assert usage.measured(tmp_path) == {"cpu_s": 2.5, "memory_peak_mib": 301}  # MiB, up


def test_cgroup_v1_gives_cpuacct_in_nanoseconds_and_the_max_usage(tmp_path):
    (tmp_path / "cpuacct").mkdir()
    (tmp_path / "memory").mkdir()
    (tmp_path / "cpuacct" / "cpuacct.usage").write_text("1234567890\n")
    (tmp_path / "memory" / "memory.max_usage_in_bytes").write_text(f"{64 * 2**20}\n")
    assert usage.measured(tmp_path) == {"cpu_s": 1.235, "memory_peak_mib": 64}


def test_without_a_cgroup_the_processes_rusage_stands_in(tmp_path):
    got = usage.measured(tmp_path / "none")
    cpu, peak = usage.rusage()
    assert 0 < got["cpu_s"] <= cpu + 0.001 and got["memory_peak_mib"] >= 1
    assert got["memory_peak_mib"] == -(-peak // 2**20)


def test_a_v2_cgroup_without_memory_peak_still_gives_its_cpu(tmp_path):
    (tmp_path / "cpu.stat").write_text("usage_usec 7\n")
    (tmp_path / "memory.peak").write_text("max\n")  # not a reading
    got = usage.measured(tmp_path)
    assert got["cpu_s"] == 0.0 and got["memory_peak_mib"] >= 1  # the rusage peak


def test_the_wrapper_record_round_trips_and_a_bad_one_is_none(tmp_path):
    path = tmp_path / ".learner-0.usage"
    usage.record(path)
    assert set(usage.read(path) or {}) == {"cpu_s", "memory_peak_mib"}
    for bad in ("{", "[]", '{"cpu_s": -1, "memory_peak_mib": 1}', '{"cpu_s": 1}'):
        path.write_text(bad)
        assert usage.read(path) is None
    assert usage.read(tmp_path / "missing") is None


def test_the_helper_reports_its_learners_usage_in_one_event(tmp_path, capsys):
    from services.learner_helper.main import report_usage

    paths = JobPaths.from_env({"DLAAS_JOB_DIR": str(tmp_path)})
    paths.log_dir.mkdir(parents=True)
    paths.learner_usage(0).write_text('{"cpu_s": 12.5, "memory_peak_mib": 100}')
    # learner 1 was killed from outside: it left nothing
    report_usage(paths, (0, 1))
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("DLAAS-EVENT")]
    event = jobspec.parse_event(line)
    assert event == {
        "event": jobspec.EVENT_USAGE,
        "learners": {"0": {"cpu_s": 12.5, "memory_peak_mib": 100}},
    }
    paths.learner_usage(0).unlink()
    report_usage(paths, (0, 1))
    assert "DLAAS-EVENT" not in capsys.readouterr().out  # nothing to report: no event


def test_every_nodes_helper_usage_reaches_the_monitor():
    a = {"event": "usage", "learners": {"0": {"cpu_s": 1.0, "memory_peak_mib": 1}}}
    b = {"event": "usage", "learners": {"1": {"cpu_s": 2.0, "memory_peak_mib": 2}}}
    assert usage_in(fold_events([[a], [b]])) == {
        "0": {"cpu_s": 1.0, "memory_peak_mib": 1},
        "1": {"cpu_s": 2.0, "memory_peak_mib": 2},
    }


@pytest.mark.parametrize(
    "learners",
    [
        "x",
        {"0": {"cpu_s": "1", "memory_peak_mib": 1}},
        {"0": {"cpu_s": float("nan"), "memory_peak_mib": 1}},
        {"0": {"cpu_s": 1.0, "memory_peak_mib": True}},
        {"0": {"cpu_s": -1.0, "memory_peak_mib": 1}},
        {"zero": {"cpu_s": 1.0, "memory_peak_mib": 1}},
    ],
)
def test_a_bad_usage_event_is_not_recorded(learners):
    assert usage_in([{"event": "usage", "learners": learners}]) == {}


class Store:
    def __init__(self):
        self.writes: list[dict] = []

    def update_info(self, job_id, facts):
        self.writes.append(json.loads(json.dumps(facts)))


def seen(status, events, run=4, info=None):
    view = SimpleNamespace(state=SimpleNamespace(status=status), helper_events=events)
    return SimpleNamespace(view=view, run=SimpleNamespace(run=run, info=info or {}))


EVENT = {"event": "usage", "learners": {"0": {"cpu_s": 3.0, "memory_peak_mib": 64}}}


def test_the_monitor_records_a_runs_usage_once_under_its_queued_seq():
    store = Store()
    s = seen(Status.STORING, [EVENT], run=4, info={MEASURED_INFO: {"0": {"0": {"cpu_s": 1}}}})
    record_measured(store, "j", s)
    record_measured(store, "j", s)  # the same figures again: no second write
    assert store.writes == [
        {MEASURED_INFO: {"0": {"0": {"cpu_s": 1}}, "4": EVENT["learners"]}}
    ]  # the earlier run's kept


def test_the_previous_runs_helper_is_not_taken_for_this_runs():
    store = Store()
    for status in (Status.QUEUED, Status.PENDING):
        record_measured(store, "j", seen(status, [EVENT]))
    record_measured(store, "j", seen(Status.PROCESSING, []))  # nothing reported yet
    assert store.writes == []


def test_the_runs_kept_are_bounded_oldest_first():
    store = Store()
    old = {str(i): {"0": {"cpu_s": 1.0, "memory_peak_mib": 1}} for i in range(MAX_MEASURED_RUNS)}
    record_measured(
        store, "j", seen(Status.COMPLETED, [EVENT], run=1000, info={MEASURED_INFO: old})
    )
    (write,) = store.writes
    runs = write[MEASURED_INFO]
    assert len(runs) == MAX_MEASURED_RUNS and "0" not in runs and "1000" in runs
