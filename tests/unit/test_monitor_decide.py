"""The job monitor's decisions (services/jobmonitor/decide.py): every rule, with plain data."""

from __future__ import annotations

import ast
from pathlib import Path

from dlaas.jobspec import HELPER_EXIT_DATA_NOT_FOUND, ROLE_HELPER, ROLE_LEARNER
from dlaas.status import JobState, Status
from services.jobmonitor import decide as d
from services.jobmonitor.decide import (
    Cleanup,
    ContainerView,
    JobView,
    KillHelper,
    ReleaseAllocation,
    SignalHelperFinish,
    StopLearners,
    TransitionTo,
    decide,
)

NOW = 1000.0


def state(status: Status, seq: int = 2) -> JobState:
    return JobState(status, NOW - 10, "because", seq=seq)


def helper(st: str = "running", code: int | None = None, oom: bool = False) -> ContainerView:
    return ContainerView(ROLE_HELPER, None, st, code, oom, name="h")


def learner(
    i: int, st: str = "running", code: int | None = None, oom: bool = False, at: float | None = None
) -> ContainerView:
    return ContainerView(ROLE_LEARNER, i, st, code, oom, name=f"l{i}", finished_at=at)


def view(status: Status, containers, **kw) -> JobView:
    return JobView(state=state(status), containers=containers, now=NOW, **kw)


def kinds(decision: d.Decision) -> list[type]:
    return [type(a) for a in decision.actions]


def transition(decision: d.Decision) -> TransitionTo:
    ts = [a for a in decision.actions if isinstance(a, TransitionTo)]
    assert len(ts) == 1, decision
    return ts[0]


# ---- quiet states ---------------------------------------------------------------------


def test_running_job_without_news_needs_nothing():
    dec = decide(view(Status.PROCESSING, [helper(), learner(0), learner(1)]))
    assert dec.actions == [] and dec.recheck_at is None


def test_pending_job_waits_for_the_lcm_even_when_data_is_ready():
    dec = decide(
        view(Status.PENDING, [helper()], helper_events=[{"event": "data_ready"}], num_learners=1)
    )
    assert dec.actions == []


def test_queued_job_without_containers_is_left_to_the_lcm():
    assert decide(view(Status.QUEUED, [])).actions == []


def test_pending_job_without_containers_waits_for_the_lcm():
    assert decide(view(Status.PENDING, [])).actions == []


# ---- happy path -----------------------------------------------------------------------


def test_data_ready_moves_downloading_to_processing():
    dec = decide(
        view(Status.DOWNLOADING, [helper(), learner(0)], helper_events=[{"event": "data_ready"}])
    )
    assert dec.actions == [TransitionTo(Status.PROCESSING, "helper reported data and code ready")]


def test_no_data_ready_yet_keeps_downloading():
    dec = decide(view(Status.DOWNLOADING, [helper(), learner(0)], helper_events=[]))
    assert dec.actions == []


def test_all_learners_exited_zero_goes_storing_and_signals_the_helper():
    dec = decide(
        view(Status.PROCESSING, [helper(), learner(0, "exited", 0), learner(1, "exited", 0)])
    )
    assert kinds(dec) == [TransitionTo, SignalHelperFinish]
    assert transition(dec).target == Status.STORING
    assert "all 2 learner(s) exited 0" in transition(dec).reason
    assert dec.recheck_at == NOW + d.DEFAULT_STORE_TIMEOUT_S


def test_learners_done_seen_late_from_downloading_still_goes_storing():
    dec = decide(view(Status.DOWNLOADING, [helper(), learner(0, "exited", 0)]))
    assert transition(dec).target == Status.STORING  # the adapter walks over PROCESSING


def test_one_learner_still_running_is_not_done():
    dec = decide(view(Status.PROCESSING, [helper(), learner(0, "exited", 0), learner(1)]))
    assert dec.actions == []


def test_a_missing_learner_is_not_done_when_the_count_is_known():
    dec = decide(view(Status.PROCESSING, [helper(), learner(0, "exited", 0)], num_learners=2))
    assert dec.actions == []


def test_storing_waits_for_the_helper_until_its_deadline():
    dec = decide(
        view(Status.STORING, [helper(), learner(0, "exited", 0)], helper_signalled_at=NOW - 5)
    )
    assert dec.actions == []
    assert dec.recheck_at == NOW - 5 + d.DEFAULT_STORE_TIMEOUT_S


def test_storing_without_a_signal_sends_it_after_a_monitor_restart():
    dec = decide(view(Status.STORING, [helper(), learner(0, "exited", 0)]))
    assert kinds(dec) == [SignalHelperFinish]


def test_helper_exit_zero_while_storing_completes_and_cleans_up():
    dec = decide(
        view(
            Status.STORING,
            [helper("exited", 0), learner(0, "exited", 0)],
            helper_signalled_at=NOW - 5,
        )
    )
    assert kinds(dec) == [TransitionTo, ReleaseAllocation, Cleanup]
    assert transition(dec).target == Status.COMPLETED
    cleanup = dec.actions[-1]
    assert isinstance(cleanup, Cleanup) and not cleanup.logs_incomplete


def test_helper_exit_zero_with_learners_done_completes_from_processing():
    # The monitor was down through STORING: the walk records the skipped step.
    dec = decide(view(Status.PROCESSING, [helper("exited", 0), learner(0, "exited", 0)]))
    assert transition(dec).target == Status.COMPLETED


def test_helper_exit_zero_before_learners_finish_fails():
    dec = decide(view(Status.PROCESSING, [helper("exited", 0), learner(0)]))
    t = transition(dec)
    assert t.target == Status.FAILED and t.error_code == d.ERROR_HELPER
    assert StopLearners in kinds(dec)


def test_store_timeout_fails_the_job_and_kills_the_helper():
    dec = decide(
        view(
            Status.STORING,
            [helper(), learner(0, "exited", 0)],
            helper_signalled_at=NOW - d.DEFAULT_STORE_TIMEOUT_S - 1,
        )
    )
    assert kinds(dec) == [TransitionTo, ReleaseAllocation, KillHelper, Cleanup]
    assert transition(dec).error_code == d.ERROR_STORE_TIMEOUT


# ---- failures -------------------------------------------------------------------------


def test_learner_nonzero_exit_fails_with_code_and_last_log_lines():
    lines = [f"line {i}" for i in range(25)] + ["Traceback: boom"]
    dec = decide(
        view(
            Status.PROCESSING,
            [helper(), learner(0), learner(1, "exited", 3)],
            log_tails={1: lines},
        )
    )
    t = transition(dec)
    assert (t.target, t.error_code, t.exit_code) == (Status.FAILED, "exit_code", 3)
    assert t.reason.startswith("learner 1 exited with code 3; last log lines:\n")
    tail = t.reason.split("\n")[1:]
    assert len(tail) == d.LOG_TAIL_LINES and tail[-1] == "Traceback: boom"
    assert "line 15" not in tail
    # Then as a final job: release, stop the others, let the helper store the logs.
    assert kinds(dec) == [TransitionTo, ReleaseAllocation, StopLearners, SignalHelperFinish]
    assert dec.recheck_at == NOW + d.DEFAULT_HELPER_TIMEOUT_S


def test_oom_killed_learner_fails_with_oom_code():
    dec = decide(view(Status.PROCESSING, [helper(), learner(0, "exited", 137, oom=True)]))
    t = transition(dec)
    assert (t.error_code, t.exit_code) == ("oom_killed", 137)
    assert "out of memory" in t.reason


def test_the_first_learner_to_fail_is_the_cause():
    dec = decide(
        view(
            Status.PROCESSING,
            [helper(), learner(0, "exited", 1, at=NOW - 1), learner(1, "exited", 7, at=NOW - 3)],
        )
    )
    assert transition(dec).exit_code == 7


def test_failures_in_pending_wait_for_the_lcm_to_finish_deploying():
    dec = decide(view(Status.PENDING, [helper("exited", 10), learner(0, "exited", 2)]))
    assert dec.actions == []
    # Once the LCM wrote DOWNLOADING, the same containers fail the job.
    assert transition(decide(view(Status.DOWNLOADING, [learner(0, "exited", 2), helper()])))


def test_helper_data_not_found_fails_with_its_error_message():
    dec = decide(
        view(
            Status.DOWNLOADING,
            [helper("exited", HELPER_EXIT_DATA_NOT_FOUND), learner(0)],
            helper_events=[{"event": "error", "code": "data_not_found", "message": "no bucket x"}],
        )
    )
    t = transition(dec)
    assert (t.target, t.error_code) == (Status.FAILED, "data_not_found")
    assert t.reason == "training data not found: no bucket x"
    # The helper has exited: nothing to wait for, learners stop and everything goes.
    assert kinds(dec) == [TransitionTo, ReleaseAllocation, StopLearners, Cleanup]
    cleanup = dec.actions[-1]
    assert isinstance(cleanup, Cleanup) and cleanup.logs_incomplete


def test_helper_unknown_exit_code_is_helper_failed():
    t = transition(decide(view(Status.DOWNLOADING, [helper("exited", 99), learner(0)])))
    assert t.error_code == d.ERROR_HELPER and "99" in t.reason


def test_containers_gone_fails_an_active_job():
    t = transition(decide(view(Status.PROCESSING, [])))
    assert t.error_code == d.ERROR_CONTAINERS_MISSING


def test_helper_gone_fails_an_active_job():
    t = transition(decide(view(Status.PROCESSING, [learner(0)])))
    assert t.error_code == d.ERROR_CONTAINERS_MISSING and "helper" in t.reason


# ---- final jobs -----------------------------------------------------------------------


def test_halted_job_releases_stops_learners_and_signals_the_helper_once():
    dec = decide(view(Status.HALTED, [helper(), learner(0)]))
    assert kinds(dec) == [ReleaseAllocation, StopLearners, SignalHelperFinish]
    again = decide(view(Status.HALTED, [helper()], helper_signalled_at=NOW - 1, released=True))
    assert again.actions == [] and again.recheck_at == NOW - 1 + d.DEFAULT_HELPER_TIMEOUT_S


def test_helper_that_ignores_the_signal_is_killed_then_cleanup_notes_incomplete_logs():
    dec = decide(
        view(
            Status.HALTED,
            [helper(), learner(0, "exited", 143)],
            helper_signalled_at=NOW - 61,
            released=True,
        )
    )
    assert kinds(dec) == [KillHelper, Cleanup]
    cleanup = dec.actions[-1]
    assert isinstance(cleanup, Cleanup) and cleanup.logs_incomplete


def test_final_job_with_exited_helper_is_cleaned_up():
    dec = decide(view(Status.FAILED, [helper("exited", 0), learner(0, "exited", 3)], released=True))
    assert kinds(dec) == [Cleanup]
    assert not dec.actions[0].logs_incomplete


def test_final_job_with_a_never_started_helper_is_cleaned_up():
    dec = decide(view(Status.FAILED, [helper("created")], released=True))
    assert kinds(dec) == [Cleanup]


def test_cleaned_up_job_needs_nothing_more():
    assert decide(view(Status.COMPLETED, [], released=True, cleaned_up=True)).actions == []


def test_final_job_without_containers_still_removes_network_and_volume_once():
    dec = decide(view(Status.HALTED, [], released=True))
    assert kinds(dec) == [Cleanup]


def test_final_job_never_changes_status():
    dec = decide(view(Status.COMPLETED, [helper("exited", 0), learner(0, "exited", 5)]))
    assert not any(isinstance(a, TransitionTo) for a in dec.actions)


def test_custom_timeout_is_honoured():
    dec = decide(
        view(
            Status.HALTED,
            [helper()],
            helper_signalled_at=NOW - 3,
            released=True,
            helper_timeout_s=2,
        )
    )
    assert kinds(dec) == [KillHelper, Cleanup]


# ---- purity ---------------------------------------------------------------


def test_decide_imports_no_io_library():
    tree = ast.parse(Path(d.__file__).read_text())
    names = {
        (n.module or "") if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    }
    roots = {n.split(".")[0] for n in names}
    assert not roots & {"docker", "pyetcd", "grpc", "pymongo", "sqlite3", "boto3", "time"}
