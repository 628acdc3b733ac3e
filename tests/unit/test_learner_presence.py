"""When a helper that finishes by itself (Swarm) takes its learners for ended: their exit
codes, or the alive lock their wrappers hold for their life (dlaas.learner.run) dropped.
Real files and locks in a temporary dir; the wrapper as a real process (a SIGKILL) is
tests/integration/test_learner_wrapper.py."""

from __future__ import annotations

import fcntl

from dlaas.learner.paths import JobPaths
from dlaas.learner.run import hold_alive_lock
from services.learner_helper.main import LearnerPresence, lock_held


def _paths(tmp_path) -> JobPaths:
    paths = JobPaths.from_env({"DLAAS_JOB_DIR": str(tmp_path)})
    paths.log_dir.mkdir(parents=True)
    return paths


def test_a_learner_seen_alive_has_ended_once_its_lock_is_dropped(tmp_path):
    paths = _paths(tmp_path)
    presence = LearnerPresence(paths, (0, 1))
    wrappers = [hold_alive_lock(paths, "0"), hold_alive_lock(paths, "1")]
    assert all(w is not None for w in wrappers)
    assert not presence.all_ended()
    wrappers[0].close()  # learner 0 killed: no exit code
    assert not presence.all_ended()  # learner 1 still runs
    wrappers[1].close()
    assert presence.all_ended()


def test_an_exit_code_ends_a_learner_even_never_seen_alive(tmp_path):
    paths = _paths(tmp_path)
    paths.learner_exit(0).write_text("0\n")
    assert LearnerPresence(paths, (0,)).all_ended()


def test_an_unlocked_alive_file_never_seen_locked_says_nothing(tmp_path):
    # An earlier run's file, or a wrapper that has not started yet: not an ended learner.
    paths = _paths(tmp_path)
    paths.learner_alive(0).write_text("")
    presence = LearnerPresence(paths, (0,))
    assert not presence.all_ended()
    assert lock_held(paths.learner_alive(0)) is False
    assert lock_held(paths.learner_alive(5)) is None  # no file


def test_the_helper_look_leaves_the_lock_to_the_wrapper(tmp_path):
    paths = _paths(tmp_path)
    assert lock_held(paths.learner_alive(0)) is None
    paths.learner_alive(0).write_text("")
    assert lock_held(paths.learner_alive(0)) is False  # looked, and let go again
    wrapper = hold_alive_lock(paths, "0")
    assert wrapper is not None and lock_held(paths.learner_alive(0)) is True
    wrapper.close()


def test_a_wrapper_does_not_wait_for_a_lock_another_holds(tmp_path, monkeypatch):
    # A wrapper of an earlier run still holding it must not keep this one from training.
    from dlaas.learner import run

    monkeypatch.setattr(run, "POLL_S", 0.001)
    paths = _paths(tmp_path)
    with open(paths.learner_alive(0), "a") as other:
        fcntl.flock(other.fileno(), fcntl.LOCK_EX)
        assert hold_alive_lock(paths, "0") is None


def test_every_learner_is_looked_at_though_an_earlier_one_runs(tmp_path):
    # Learner 1 must be seen alive while learner 0 still runs, or its kill goes unseen.
    paths = _paths(tmp_path)
    presence = LearnerPresence(paths, (0, 1))
    wrappers = [hold_alive_lock(paths, "0"), hold_alive_lock(paths, "1")]
    assert not presence.all_ended()
    for w in wrappers:
        w.close()
    assert presence.all_ended()
