"""One default policy and configuration everywhere: the live scheduler (hence `dlaas up`,
which leaves DLAAS_SCHEDULER_POLICY unset), the scheduler service, the simulator and
`schedule()` itself; an unknown policy name stops the scheduler at start-up, by name."""

from __future__ import annotations

import inspect

import pytest

from services.scheduler.main import SchedulerSettings, load_settings
from services.scheduler.policy import DEFAULT_POLICY, policy_problem, schedule
from services.scheduler.service import SchedulerService, SchedulerState
from services.scheduler.simulator import main as simulate_main


def test_the_live_scheduler_and_the_pure_round_share_one_default(monkeypatch):
    monkeypatch.delenv("DLAAS_SCHEDULER_POLICY", raising=False)
    assert SchedulerSettings().policy == DEFAULT_POLICY == "default"
    assert inspect.signature(schedule).parameters["policy"].default == DEFAULT_POLICY
    assert inspect.signature(SchedulerService).parameters["policy"].default == DEFAULT_POLICY


def test_the_simulator_cli_defaults_to_the_same_policy(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 00:00:00,10.0,1,10.0,vc\n"
    )
    args = ["--trace", str(trace), "--vc", "vc", "--start", "2017-10-09", "--end", "2017-10-10"]
    assert simulate_main([*args, "--nodes", "1", "--gpus-per-node", "1"]) == 0
    assert capsys.readouterr().out.startswith(f"policy {DEFAULT_POLICY} ")


def test_an_unknown_policy_stops_the_scheduler_at_start_up_naming_the_variable(monkeypatch):
    monkeypatch.setenv("DLAAS_SCHEDULER_POLICY", "prio")
    with pytest.raises(SystemExit) as exc:
        load_settings()
    msg = str(exc.value)
    assert "DLAAS_SCHEDULER_POLICY" in msg and "'prio'" in msg and "priority" in msg
    monkeypatch.setenv("DLAAS_SCHEDULER_POLICY", "las")
    assert load_settings().policy == "las"


def test_the_service_refuses_an_unknown_policy_before_any_round():
    with pytest.raises(ValueError, match="policy: unknown policy 'FIFO'"):
        SchedulerService(SchedulerState(etcd=None), [], "FIFO")  # type: ignore[arg-type]
    assert policy_problem("fair") == ""
