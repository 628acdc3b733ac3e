"""When a helper that finishes by itself (Swarm) takes its learners for ended: their exit
codes, or the alive lock their wrappers hold for their life (dlaas.learner.run) dropped.
Real files and locks in a temporary dir; the wrapper as a real process (a SIGKILL) is
tests/integration/test_learner_wrapper.py."""

from __future__ import annotations

import fcntl

from dlaas.learner.paths import JobPaths
from dlaas.learner.run import hold_alive_lock
from services.learner_helper.presence import LearnerPresence, RestartWatch, lock_held


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


# ---- a gang restarted in place on its node (RestartWatch) ------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _watch(paths, learners=(0, 1)):
    paths.ready_mark.write_text("")
    marked: list[bool] = []
    clock = _Clock()
    watch = RestartWatch(
        LearnerPresence(paths, learners),
        paths.ready_mark,
        lambda: marked.append(paths.ready_mark.exists()),
        lambda _line: None,
        wait_s=20.0,
        clock=clock,
    )
    return watch, marked, clock


def _exit(paths, wrapper, learner: int, code: int) -> None:
    paths.learner_exit(learner).write_text(f"{code}\n")
    wrapper.close()


def test_a_gang_broken_by_a_kill_gets_its_new_run_marked_before_the_mark_comes_back(tmp_path):
    paths = _paths(tmp_path)
    watch, marked, _ = _watch(paths)
    old = [hold_alive_lock(paths, "0"), hold_alive_lock(paths, "1")]
    assert not watch.look()
    old[0].close()  # learner 0 killed from outside: no exit code
    assert not watch.look()
    assert not paths.ready_mark.exists()  # a new wrapper must wait for the new run's start
    assert marked == []  # learner 1 of the old run may still print
    _exit(paths, old[1], 1, 1)  # it lost its peer
    assert not watch.look()
    assert marked == [False] and paths.ready_mark.exists()  # marked, then the mark back
    # The monitor's restart: new wrappers take their locks and drop the old exit codes.
    new = [hold_alive_lock(paths, "0"), hold_alive_lock(paths, "1")]
    paths.learner_exit(1).unlink()
    assert not watch.look() and watch.phase == RestartWatch.RUNNING
    _exit(paths, new[0], 0, 0)
    _exit(paths, new[1], 1, 0)
    assert watch.look()  # the new run ended by itself: finish
    assert marked == [False]


def test_a_new_wrapper_that_took_its_lock_before_the_old_ones_end_was_seen_counts(tmp_path):
    # Its alive file names another wrapper: the old one has gone, unseen between two looks.
    paths = _paths(tmp_path)
    watch, marked, _ = _watch(paths)
    old = [hold_alive_lock(paths, "0"), hold_alive_lock(paths, "1")]
    assert not watch.look()
    old[0].close()
    assert not watch.look()
    old[1].close()
    new1 = hold_alive_lock(paths, "1")  # learner 1's new wrapper, before any look
    assert not watch.look()
    assert marked == [False]
    new1.close()


def test_a_gang_no_restart_joins_is_finished_after_the_wait(tmp_path):
    paths = _paths(tmp_path)
    watch, marked, clock = _watch(paths, (0,))
    wrapper = hold_alive_lock(paths, "0")
    assert not watch.look()
    wrapper.close()  # killed; restarts ran out, say
    assert not watch.look()
    assert marked == [False] and paths.ready_mark.exists()
    clock.now += 19.0
    assert not watch.look()
    clock.now += 1.0
    assert watch.look()


def test_learners_that_end_by_themselves_finish_at_once_without_a_new_run(tmp_path):
    paths = _paths(tmp_path)
    watch, marked, _ = _watch(paths)
    wrappers = [hold_alive_lock(paths, "0"), hold_alive_lock(paths, "1")]
    assert not watch.look()
    _exit(paths, wrappers[0], 0, 0)
    assert not watch.look()
    _exit(paths, wrappers[1], 1, 0)
    assert watch.look()
    assert marked == [] and paths.ready_mark.exists()
