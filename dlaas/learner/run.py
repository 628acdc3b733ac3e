"""The learner wrapper: `python3 -m dlaas.learner.run -- <command string>`.

The LCM starts every learner container with this as its command. It
1. waits until the helper has put data and code in place (the DATA_READY_MARK file),
2. creates RESULT_DIR, CHECKPOINT_DIR and LOG_DIR,
3. runs the user's command with `sh -c` in CODE_DIR (or /job when no code was given),
   with the container's env, in its own process group, started the way the job's launcher
   says (dlaas.domain.launch: as written, under torchrun with the platform's rendezvous, or
   under mpirun on learner 0 with sshd on every learner, dlaas.learner.mpi),
4. copies the command's stdout+stderr line by line to its own stdout (flushed, so the
   platform can stream logs live) and to LOG_DIR/learner-<LEARNER_ID>.log, which the
   helper uploads when the job ends,
5. forwards SIGTERM/SIGINT to the command's process group, and
6. leaves what its container used (CPU-seconds, peak memory: dlaas.learner.usage) in
   LOG_DIR for the helper to report, and
7. exits with the command's exit code (killed by signal n -> 128+n).

Paths come from dlaas.learner.paths (the env the platform sets, jobspec defaults;
DLAAS_JOB_DIR lets tests run the wrapper outside a container).
Stdlib only: this runs on Debian's python3.11 inside the job image.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from dlaas.domain import launch
from dlaas.learner import mpi, usage
from dlaas.learner.paths import JobPaths

POLL_S = 0.05
ALIVE_LOCK_TRIES = 20  # times POLL_S
EXIT_USAGE = 2


def parse_command(argv: list[str]) -> str | None:
    """The command string after `--` (several words are joined with spaces); None if absent."""
    if "--" in argv:
        argv = argv[argv.index("--") + 1 :]
    command = " ".join(argv).strip()
    return command or None


def exit_code(returncode: int) -> int:
    """Popen's return code as a shell would report it: killed by signal n -> 128+n."""
    return 128 - returncode if returncode < 0 else returncode


def working_dir(paths: JobPaths) -> Path:
    """CODE_DIR when the job brought code, else the job volume itself."""
    try:
        if paths.code_dir.is_dir() and any(paths.code_dir.iterdir()):
            return paths.code_dir
    except OSError:
        pass
    return paths.job_dir if paths.job_dir.is_dir() else Path.cwd()


class _Signals:
    """Remembers a stop signal; forwards it to the child's process group once there is one."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.child: subprocess.Popen | None = None

    def handle(self, signum: int, _frame) -> None:
        self.received = signum
        if self.child is not None and self.child.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # exited meanwhile
                os.killpg(self.child.pid, signum)


def wait_for_data(mark: Path, signals: _Signals) -> bool:
    """Poll for the helper's mark; False if a stop signal came first."""
    while not mark.exists():
        if signals.received is not None:
            return False
        time.sleep(POLL_S)
    return True


def run(command: str, env: dict[str, str], out=None) -> int:
    """Run the learner; its exit code is also left in LOG_DIR/learner-<id>.exit, where a
    helper that finishes by itself (on a Swarm node) sees that its learners are done.

    For as long as it runs, the wrapper holds a lock on LOG_DIR/.learner-<id>.alive: a
    wrapper killed from outside (SIGKILL: no exit code written) loses it at once, and the
    helper sees that too (a Swarm engine delays every stop signal it sends by 2 s)."""
    paths = JobPaths.from_env(env)
    learner_id = env.get("LEARNER_ID") or "0"
    alive = hold_alive_lock(paths, learner_id)
    # Restarted in place (its container started again, or a swarm's new task on the same
    # volume): what the last run left would tell the helper this one had ended.
    for stale in (paths.learner_exit(learner_id), paths.learner_usage(learner_id)):
        with contextlib.suppress(OSError):
            stale.unlink(missing_ok=True)
    try:
        code = _run(command, env, paths, learner_id, out or sys.stdout.buffer)
        try:
            paths.log_dir.mkdir(parents=True, exist_ok=True)
            # (before the exit code: a helper that sees the exit code finds the usage too)
            usage.record(paths.learner_usage(learner_id))
            paths.learner_exit(learner_id).write_text(f"{code}\n")
        except OSError as exc:  # the volume is gone or full: the exit code still counts
            print(f"learner: cannot record the exit code: {exc}", file=sys.stderr)
        return code
    finally:
        if alive is not None:
            alive.close()  # after the exit code: the helper reads one or the other


def hold_alive_lock(paths: JobPaths, learner_id: str):
    """The open, exclusively locked alive file, or None where the volume cannot lock: the
    helper then learns of the learner's end from its exit code or a signal only. Silent:
    a line here would be in the container's log but not in the log file, and the log
    reader counts the two as one stream (dlaas.adapters.logs)."""
    try:
        paths.log_dir.mkdir(parents=True, exist_ok=True)
        f = open(paths.learner_alive(learner_id), "a")  # noqa: SIM115 - held for the run
    except OSError:
        return None
    # Never blocking: the helper's look takes the lock for an instant, and a wrapper of an
    # earlier run that still holds it must not keep this one from training.
    for _ in range(ALIVE_LOCK_TRIES):
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            time.sleep(POLL_S)
            continue
        except OSError:  # a file system without locks
            break
        with contextlib.suppress(OSError):
            # Which wrapper holds it: the helper tells a restarted learner's new wrapper
            # from the old one by it (services.learner_helper.presence).
            os.ftruncate(f.fileno(), 0)
            f.write(f"{socket.gethostname()} {os.getpid()} {time.time():.6f}\n")
            f.flush()
        return f
    f.close()
    return None


def _run(command: str, env: dict[str, str], paths: JobPaths, learner_id: str, out) -> int:
    signals = _Signals()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signals.handle)

    if not wait_for_data(paths.ready_mark, signals):
        return 128 + signals.received
    for d in (paths.result_dir, paths.checkpoint_dir, paths.log_dir):
        d.mkdir(parents=True, exist_ok=True)

    child_env = dict(env)
    child_env.setdefault("PYTHONUNBUFFERED", "1")  # the child's stdout is a pipe
    cwd = working_dir(paths)
    sshd = None
    with open(paths.learner_log(learner_id), "ab") as log:
        try:
            if env.get("DLAAS_LAUNCHER") == launch.LAUNCHER_MPI:
                sshd = mpi.start_sshd()
                if learner_id != "0":
                    return mpi.serve_until_master_gone(lambda: signals.received is not None)
                command = mpi.prepare_master(command, child_env, str(cwd))
            else:
                command = launch.launch_command(command, env)
            return _run_child(command, child_env, cwd, signals, out, log)
        except mpi.MpiError as exc:
            line = f"learner {learner_id}: MPI set-up failed: {exc}\n".encode()
            for stream in (out, log):
                stream.write(line)
                stream.flush()
            return 1
        finally:
            if sshd is not None:
                sshd.terminate()  # learner 0's: the other learners see it gone and end


def _run_child(command: str, env: dict[str, str], cwd: Path, signals: _Signals, out, log) -> int:
    """Run `command` with `sh -c` in its own process group, its output copied line by line."""
    signals.child = subprocess.Popen(
        ["sh", "-c", command],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # own process group: a signal reaches sh AND its children
    )
    if signals.received is not None:  # a signal that came between wait and Popen
        signals.handle(signals.received, None)
    for line in iter(signals.child.stdout.readline, b""):
        out.write(line)
        out.flush()
        log.write(line)
        log.flush()
    signals.child.stdout.close()
    return exit_code(signals.child.wait())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = parse_command(argv)
    if command is None or argv[:1] in (["-h"], ["--help"]):
        print("usage: python3 -m dlaas.learner.run -- <command string>", file=sys.stderr)
        return EXIT_USAGE
    return run(command, dict(os.environ))


if __name__ == "__main__":
    sys.exit(main())
