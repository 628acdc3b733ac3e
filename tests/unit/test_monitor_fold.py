"""A gang spanning nodes has a helper per node; the monitor judges them as one (pure)."""

from dlaas.domain.ports import Container
from services.jobmonitor.fold import fold_events, fold_helpers


def helper(name, state, exit_code=None, finished_at=None):
    return Container(id=name, name=name, job_id="j", role="helper", learner=None,
                     state=state, exit_code=exit_code, finished_at=finished_at)  # fmt: skip


def test_the_helpers_run_while_any_runs_and_end_with_the_first_failure():
    main, other = helper("dlaas-j-helper", "exited", 0, 5.0), helper("dlaas-j-helper-1", "running")
    folded = fold_helpers([main, other])
    assert folded.name == "dlaas-j-helper" and folded.running and folded.exit_code is None
    done = fold_helpers([main, helper("dlaas-j-helper-1", "exited", 12, 9.0)])
    assert done.exited and done.exit_code == 12 and done.finished_at == 9.0
    ok = fold_helpers([main, helper("dlaas-j-helper-1", "exited", 0, 7.0)])
    assert ok.exited and ok.exit_code == 0 and ok.finished_at == 7.0


def test_data_is_ready_only_when_every_node_has_it_and_every_error_counts():
    ready = {"event": "data_ready"}
    synced = {"event": "checkpoint_synced", "files": 1}
    error = {"event": "error", "code": "data_not_found", "message": "no data"}
    assert fold_events([[ready, synced], []]) == [synced]
    assert fold_events([[ready, synced], [ready]]) == [ready, synced]
    assert fold_events([[ready], [error]]) == [error]
    assert fold_events([[ready]]) == [ready] and fold_events([]) == []
