"""The job monitor's decisions (services/jobmonitor/decide.py): every rule, with plain data."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from dlaas.domain.jobspec import (
    HELPER_EXIT_BAD_ARCHIVE,
    HELPER_EXIT_CONNECTION_UNREACHABLE,
    HELPER_EXIT_DATA_NOT_FOUND,
    HELPER_EXIT_STORE_REFUSED,
    HELPER_EXIT_STORE_UNREACHABLE,
    HELPER_EXIT_UPLOAD_FAILED,
    ROLE_HELPER,
    ROLE_LEARNER,
)
from dlaas.domain.ports import Container
from dlaas.domain.status import JobState, Status
from services.jobmonitor import classify, restarts
from services.jobmonitor import decide as d
from services.jobmonitor.decide import (
    Cleanup,
    JobView,
    KillHelper,
    ReleaseAllocation,
    Requeue,
    SignalHelperFinish,
    StopLearners,
    TransitionTo,
    decide,
)

NOW = 1000.0


def state(status: Status, seq: int = 2) -> JobState:
    return JobState(status, NOW - 10, "because", seq=seq)


def helper(
    st: str = "running", code: int | None = None, oom: bool = False, at: float | None = None
) -> Container:
    return Container("h", "h", "job", ROLE_HELPER, None, st, "", code, oom, finished_at=at)


def learner(
    i: int, st: str = "running", code: int | None = None, oom: bool = False, at: float | None = None
) -> Container:
    return Container(f"l{i}", f"l{i}", "job", ROLE_LEARNER, i, st, "", code, oom, finished_at=at)


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
    assert not any(isinstance(a, TransitionTo) for a in dec.actions)
    assert kinds(dec) == [Requeue]  # learner 1 is gone: infrastructure, restart


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


def test_helper_exit_zero_before_learners_finish_restarts_the_helper_alone():
    # The helper exits 0 early only on a finish signal the monitor did not send.
    dec = decide(view(Status.PROCESSING, [helper("exited", 0), learner(0)]))
    [action] = dec.actions
    assert isinstance(action, d.RestartHelper) and "stopped from outside" in action.reason


def test_helper_exit_zero_again_and_again_restarts_the_gang():
    dec = decide(
        view(
            Status.PROCESSING,
            [helper("exited", 0), learner(0)],
            helper_restarts=restarts.MAX_HELPER_RESTARTS,
        )
    )
    assert dec.actions == [
        Requeue(
            "the helper was stopped from outside before the learners finished", d.ERROR_TERMINATED
        )
    ]


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
    assert len(tail) == classify.LOG_TAIL_LINES and tail[-1] == "Traceback: boom"
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
    assert t.error_code == classify.ERROR_HELPER and "99" in t.reason


# ---- classification: the job's own fault fails, infrastructure restarts ---------------


def requeues(decision: d.Decision) -> list[Requeue]:
    return [a for a in decision.actions if isinstance(a, Requeue)]


@pytest.mark.parametrize("code", [1, 2, 3, 126, 127, 134, 139])
def test_a_learner_exit_code_from_the_program_fails_the_job_without_restart(code):
    dec = decide(view(Status.PROCESSING, [helper(), learner(0, "exited", code), learner(1)]))
    t = transition(dec)
    assert (t.target, t.error_code, t.exit_code) == (Status.FAILED, classify.ERROR_EXIT_CODE, code)
    assert requeues(dec) == []


def test_an_oom_killed_learner_fails_without_restart_even_with_exit_137():
    f = classify.classify_learner(learner(0, "exited", 137, oom=True))
    assert (f.error_code, f.exit_code, f.infrastructure) == (classify.ERROR_OOM, 137, False)
    dec = decide(view(Status.PROCESSING, [helper(), learner(0, "exited", 137, oom=True)]))
    assert requeues(dec) == [] and transition(dec).target == Status.FAILED


def test_a_learner_killed_from_outside_asks_the_lcm_for_a_restart():
    dec = decide(view(Status.PROCESSING, [helper(), learner(0), learner(1, "exited", 137)]))
    # Only the request: no status change, nothing stopped or removed (the LCM tears down
    # after the helper has synced the checkpoints).
    assert dec.actions == [
        Requeue("learner 1 was killed from outside (SIGKILL, exit code 137)", classify.ERROR_KILLED)
    ]
    assert dec.recheck_at == NOW + d.DEFAULT_REQUEUE_RETRY_S


def test_a_learner_stopped_from_outside_asks_for_a_restart():
    dec = decide(view(Status.PROCESSING, [helper(), learner(0, "exited", 143)]))
    assert dec.actions == [
        Requeue("learner 0 was stopped from outside (SIGTERM, exit code 143)", d.ERROR_TERMINATED)
    ]


def test_exit_255_after_the_engine_was_lost_asks_for_a_restart():
    # A restarted engine records 255 for a container that died with the old engine.
    died = [helper(), learner(0, "exited", 255, at=NOW - 2)]
    dec = decide(view(Status.PROCESSING, died, engine_lost_at=NOW - 4))
    assert dec.actions == [
        Requeue("learner 0 died with the Docker engine of its node (exit code 255)", "engine_lost")
    ]
    # The monitor notices a lost engine late: an exit just before it noticed is the engine's.
    dec = decide(view(Status.PROCESSING, died, engine_lost_at=NOW - 1))
    assert [type(a) for a in dec.actions] == [Requeue]
    # The same exit long before the engine went away (or with no engine trouble) is the
    # job's own.
    early = [helper(), learner(0, "exited", 255, at=NOW - 2 - d.ENGINE_LOSS_NOTICED_S - 1)]
    for gone, lost_at in ((early, NOW - 1), (died, None)):
        dec = decide(view(Status.PROCESSING, gone, engine_lost_at=lost_at))
        t = transition(dec)
        assert (t.target, t.error_code, t.exit_code) == (
            Status.FAILED,
            classify.ERROR_EXIT_CODE,
            255,
        )


def test_infrastructure_failure_while_downloading_also_restarts():
    dec = decide(view(Status.DOWNLOADING, [helper(), learner(0, "exited", 137)]))
    assert kinds(dec) == [Requeue]


@pytest.mark.parametrize(
    ("code", "error_code"),
    [
        (HELPER_EXIT_DATA_NOT_FOUND, "data_not_found"),
        (HELPER_EXIT_STORE_REFUSED, "store_refused"),
        (HELPER_EXIT_BAD_ARCHIVE, "bad_archive"),
        (HELPER_EXIT_UPLOAD_FAILED, "upload_failed"),
        (2, classify.ERROR_HELPER),  # bad configuration: a platform bug a restart would repeat
        (99, classify.ERROR_HELPER),
    ],
)
def test_helper_errors_that_would_repeat_fail_the_job(code, error_code):
    dec = decide(view(Status.DOWNLOADING, [helper("exited", code), learner(0)]))
    assert transition(dec).error_code == error_code and requeues(dec) == []


def test_an_oom_killed_helper_fails_the_job():
    dec = decide(view(Status.PROCESSING, [helper("exited", 137, oom=True), learner(0)]))
    assert transition(dec).error_code == classify.ERROR_OOM and requeues(dec) == []


def test_an_unreachable_data_store_restarts_with_the_helpers_message():
    dec = decide(
        view(
            Status.DOWNLOADING,
            [helper("exited", HELPER_EXIT_STORE_UNREACHABLE), learner(0)],
            helper_events=[{"event": "error", "code": "store_unreachable", "message": "timeout"}],
        )
    )
    assert dec.actions == [
        Requeue("the data store could not be reached: timeout", "store_unreachable")
    ]


def test_the_jobs_own_unreachable_store_fails_it_naming_host_and_field_without_restart():
    message = (
        "data_stores[0].connection.auth_url: the data store at s3.example.org:9000 could not "
        "be reached (Connection refused)"
    )
    dec = decide(
        view(
            Status.DOWNLOADING,
            [helper("exited", HELPER_EXIT_CONNECTION_UNREACHABLE), learner(0)],
            helper_events=[{"event": "error", "code": "store_unreachable", "message": message}],
        )
    )
    change = transition(dec)
    assert change.target == Status.FAILED and requeues(dec) == []
    assert change.error_code == "store_unreachable"
    assert "s3.example.org:9000" in change.reason
    assert "data_stores[0].connection.auth_url" in change.reason


@pytest.mark.parametrize(("code", "how"), [(137, "killed (SIGKILL)"), (143, "stopped (SIGTERM)")])
def test_a_helper_lost_beside_healthy_learners_is_restarted_alone(code, how):
    dec = decide(view(Status.PROCESSING, [helper("exited", code), learner(0)]))
    [action] = dec.actions
    assert isinstance(action, d.RestartHelper) and f"the helper was {how}" in action.reason
    assert "1/3" in action.reason


@pytest.mark.parametrize(("code", "error_code"), [(137, "killed"), (143, "terminated")])
def test_a_helper_lost_too_often_restarts_the_gang(code, error_code):
    dec = decide(
        view(
            Status.PROCESSING,
            [helper("exited", code), learner(0)],
            helper_restarts=restarts.MAX_HELPER_RESTARTS,
        )
    )
    assert [r.error_code for r in requeues(dec)] == [error_code]
    assert "helper" in requeues(dec)[0].reason


def test_a_helper_lost_after_a_learner_failed_is_not_restarted_alone():
    dec = decide(
        view(
            Status.PROCESSING,
            [helper("exited", 137), learner(0, "exited", 137, at=NOW - 2)],
        )
    )
    assert not any(isinstance(a, d.RestartHelper) for a in dec.actions)


@pytest.mark.parametrize(
    ("containers", "what"),
    [
        ([], "the job's containers are gone"),
        ([learner(0)], "the helper container is gone"),
        ([helper(), learner(0)], "learner 1 container is gone"),
    ],
)
def test_missing_containers_restart(containers, what):
    dec = decide(view(Status.PROCESSING, containers, num_learners=2))
    [r] = requeues(dec)
    assert r.error_code == d.ERROR_CONTAINERS_MISSING and r.reason.startswith(what)
    assert kinds(dec) == [Requeue]


def test_the_first_failure_decides_a_kill_then_its_consequence_restarts():
    # Learner 0 is killed; learner 1 loses its peer and exits 1 a moment later.
    killed_first = [
        helper(),
        learner(0, "exited", 137, at=NOW - 3),
        learner(1, "exited", 1, at=NOW),
    ]
    assert kinds(decide(view(Status.PROCESSING, killed_first))) == [Requeue]
    # The program's own failure first: the job fails, the later kill does not matter.
    user_first = [helper(), learner(0, "exited", 137, at=NOW), learner(1, "exited", 1, at=NOW - 3)]
    t = transition(decide(view(Status.PROCESSING, user_first)))
    assert (t.error_code, t.exit_code) == (classify.ERROR_EXIT_CODE, 1)


def test_a_helper_killed_before_a_learner_failed_is_the_cause():
    cs = [
        helper("exited", 137, at=NOW - 2),
        learner(0, "exited", 1, at=NOW),
    ]
    assert kinds(decide(view(Status.PROCESSING, cs))) == [Requeue]


def test_a_helper_killed_while_storing_restarts_from_the_checkpoint():
    # The training finished but the results the helper was uploading are lost with it; the
    # checkpoints are in S3: restart from the last one (STORING -> QUEUED) rather than fail.
    dec = decide(
        view(
            Status.STORING,
            [helper("exited", 137), learner(0, "exited", 0)],
            helper_signalled_at=NOW - 1,
        )
    )
    assert dec.actions == [
        Requeue(
            "the helper was killed from outside (SIGKILL, exit code 137)", classify.ERROR_KILLED
        )
    ]


def test_a_storing_jobs_helper_gone_with_its_nodes_engine_restarts_from_the_checkpoint():
    # The chaos run: the node holding a STORING job's helper died and came back; the helper
    # died with its engine (255), or its container is gone. The node's fault, not the job's.
    died = [helper("exited", 255, at=NOW - 2), learner(0, "exited", 0, at=NOW - 60)]
    dec = decide(view(Status.STORING, died, engine_lost_at=NOW - 4, helper_signalled_at=NOW - 9))
    assert dec.actions == [
        Requeue("the helper died with the Docker engine of its node (exit code 255)", "engine_lost")
    ]
    gone = decide(view(Status.STORING, [learner(0, "exited", 0)], helper_signalled_at=NOW - 9))
    assert requeues(gone) == [
        Requeue("the helper container is gone while the job was STORING", "containers_missing")
    ]
    assert not any(isinstance(a, TransitionTo) for a in gone.actions)


def test_a_storing_jobs_own_upload_failure_still_fails_it():
    # Only the platform's trouble restarts: an upload the job's store refused would repeat.
    dec = decide(
        view(
            Status.STORING,
            [helper("exited", HELPER_EXIT_UPLOAD_FAILED), learner(0, "exited", 0)],
            helper_signalled_at=NOW - 1,
        )
    )
    t = transition(dec)
    assert (t.target, t.error_code) == (Status.FAILED, "upload_failed")
    assert requeues(dec) == [] and Cleanup in kinds(dec)


def test_the_restart_is_asked_once_while_the_lcm_handles_it():
    containers = [helper(), learner(0, "exited", 137)]
    asked = decide(view(Status.PROCESSING, containers, requeue_requested_at=NOW - 5))
    assert asked.actions == [] and asked.recheck_at == NOW - 5 + d.DEFAULT_REQUEUE_RETRY_S
    # The LCM did nothing for a whole retry period (its answer was lost): ask again.
    late = NOW - d.DEFAULT_REQUEUE_RETRY_S
    assert kinds(decide(view(Status.PROCESSING, containers, requeue_requested_at=late))) == [
        Requeue
    ]
    short = view(Status.PROCESSING, containers, requeue_requested_at=NOW - 3, requeue_retry_s=2)
    assert kinds(decide(short)) == [Requeue]


@pytest.mark.parametrize("status", [Status.QUEUED, Status.PENDING])
def test_a_requeued_job_with_its_old_containers_is_left_to_the_lcm(status):
    old = [helper("exited", 0), learner(0, "exited", 137), learner(1, "exited", 143)]
    assert decide(view(status, old)).actions == []


def test_a_halted_jobs_stopped_learners_are_no_failure():
    dec = decide(view(Status.HALTED, [helper(), learner(0, "exited", 143)], released=True))
    assert requeues(dec) == [] and not any(isinstance(a, TransitionTo) for a in dec.actions)


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
