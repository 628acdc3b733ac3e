"""The learner wrapper (dlaas.learner.run) as a real child process, as the learner image runs
it: it waits for the helper's data-ready mark, runs the command in the code dir, tees its
output into the learner's log (appending to earlier runs' lines), forwards SIGTERM and
exits with the command's code. Its pure parts are in tests/unit/test_learner_lib.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _wrapper(tmp_path: Path, command: str, **env) -> subprocess.Popen:
    full = {**os.environ, "DLAAS_JOB_DIR": str(tmp_path), "LEARNER_ID": "1", **env}
    return subprocess.Popen(
        [sys.executable, "-m", "dlaas.learner.run", "--", command],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )


def test_wrapper_waits_for_data_then_runs_in_code_dir_and_logs(tmp_path):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "job.sh").write_text("echo out-line\necho err-line >&2\nexit 3\n")
    proc = _wrapper(tmp_path, "pwd; sh job.sh")
    try:
        time.sleep(0.5)
        assert proc.poll() is None, "started before the data was ready"
        (tmp_path / ".data_ready").touch()
        out, _ = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 3
    lines = out.decode().splitlines()
    assert lines == [str(tmp_path / "code"), "out-line", "err-line"]
    assert (tmp_path / "logs" / "learner-1.log").read_text().splitlines() == lines
    assert (tmp_path / "results").is_dir() and (tmp_path / "checkpoints").is_dir()


def test_wrapper_forwards_sigterm_to_the_command(tmp_path):
    (tmp_path / ".data_ready").touch()
    proc = _wrapper(tmp_path, "echo started; sleep 30; echo never")
    try:
        assert proc.stdout.readline() == b"started\n"
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    assert time.monotonic() - start < 5 and b"never" not in out
    # no code: the command runs in the job dir
    assert (tmp_path / "logs" / "learner-1.log").read_text() == "started\n"


def test_wrapper_without_a_command_is_a_usage_error():
    done = subprocess.run(
        [sys.executable, "-m", "dlaas.learner.run"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 2 and "usage" in done.stderr


def test_wrapper_appends_to_the_log_of_earlier_runs(tmp_path):
    (tmp_path / ".data_ready").touch()
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "learner-1.log").write_text("run 1\n")  # restored by the helper
    proc = _wrapper(tmp_path, "echo run 2")
    try:
        out, _ = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert out == b"run 2\n"  # the container's own output: this run's lines only
    assert (tmp_path / "logs" / "learner-1.log").read_text() == "run 1\nrun 2\n"


def test_a_helper_sees_a_sigkilled_wrapper_end_though_it_left_no_exit_code(tmp_path):
    # On Swarm a helper finishes by itself once its learners have ended; a learner killed
    # from outside writes no exit code, but drops the lock on its alive file with its life.
    from dlaas.learner.paths import JobPaths
    from services.learner_helper.presence import LearnerPresence

    (tmp_path / ".data_ready").touch()
    proc = _wrapper(tmp_path, "echo started; sleep 30")
    presence = LearnerPresence(JobPaths.from_env({"DLAAS_JOB_DIR": str(tmp_path)}), (1,))
    try:
        assert proc.stdout.readline() == b"started\n"
        assert not presence.all_ended()  # running: its lock is held
        proc.kill()
        proc.wait(timeout=10)
    finally:
        proc.kill()
    assert not (tmp_path / "logs" / "learner-1.exit").exists()
    assert presence.all_ended()


def test_a_wrapper_restarted_in_place_drops_what_its_last_run_left(tmp_path):
    # The same learner started again on its volume (its container restarted in place): the
    # last run's exit code must not tell the helper that this run has ended, and the alive
    # file names the wrapper that holds it now (how a swarm helper tells a new one).
    from dlaas.learner.paths import JobPaths
    from services.learner_helper.presence import LearnerPresence

    paths = JobPaths.from_env({"DLAAS_JOB_DIR": str(tmp_path)})
    (tmp_path / ".data_ready").touch()
    first = _wrapper(tmp_path, "echo one")
    first.communicate(timeout=20)
    assert paths.learner_exit(1).read_text() == "0\n" and paths.learner_usage(1).exists()
    presence = LearnerPresence(paths, (1,))
    token = presence.token(1)
    assert token.split()[1] == str(first.pid)
    proc = _wrapper(tmp_path, "echo two; sleep 30")
    try:
        assert proc.stdout.readline() == b"two\n"
        assert not paths.learner_exit(1).exists() and not paths.learner_usage(1).exists()
        assert not presence.all_ended()
        assert presence.token(1).split()[1] == str(proc.pid)
        # The wrapper copies a line to its stdout first (the live stream), then to the log
        # file: the test waits for the second copy before it kills the wrapper.
        deadline = time.monotonic() + 10
        while paths.learner_log(1).read_text() != "one\ntwo\n" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert paths.learner_log(1).read_text() == "one\ntwo\n"
    finally:
        proc.kill()
        proc.wait(timeout=10)
