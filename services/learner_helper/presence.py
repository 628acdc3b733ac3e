"""When a helper that finishes by itself (on a Swarm) takes its learners for ended, and its
side of a gang the job monitor restarts in place on its node.

A learner has ended once its wrapper left its exit code, or once its wrapper, seen alive
(holding the lock on its alive file: dlaas.learner.run), no longer holds it: it was killed
from outside, SIGKILL included, and could leave nothing. An alive file never seen locked
(an earlier run's, or a wrapper not started yet) says nothing.

A gang whose learners all run on this node, one of them killed or stopped from outside, may
be restarted in place by the job monitor (services/jobmonitor/restarts.py). On a swarm each
learner's service then gets a new task: a new container, whose `docker logs` start empty.
The log reader (dlaas.adapters.logs) takes a new container's lines to start at the run start
of the learner's log object, so that start must be set before the new learners print
(`RestartWatch`): the helper takes the ready mark away as soon as it sees a learner killed
(the new wrappers wait for it), and once every learner of the old run has ended (each seen
ended, or its alive file written by a new wrapper) it marks the new run's start in every
log, uploads them and puts the mark back. A gang no new wrapper joins within RESTART_WAIT_S
(restarts ran out, the job was requeued or failed) is taken for ended, as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path

from dlaas.learner.paths import JobPaths
from services.learner_helper import volume

# How long a helper whose gang was broken by a kill waits for a new wrapper (the monitor's
# restart in place: the kill noticed, a swarm's new task created and started) before it
# takes the gang for ended and finishes.
RESTART_WAIT_S = 20.0


class LearnerPresence:
    """Whether every learner of this node has ended; which ended killed (no exit code)."""

    def __init__(self, paths: JobPaths, learners: tuple[int, ...]):
        self.paths = paths
        self.learners = learners
        self.seen_alive: set[int] = set()
        self.killed: set[int] = set()  # ended without an exit code, at the last look

    def all_ended(self) -> bool:
        # Every learner is looked at, not up to the first still running: one not looked at
        # now could be killed before the next look, never seen alive.
        ended = [self.ended(i) for i in self.learners]
        return all(ended)

    def ended(self, learner: int) -> bool:
        if self.paths.learner_exit(learner).exists():
            self.killed.discard(learner)
            return True
        held = lock_held(self.paths.learner_alive(learner))
        if held:
            self.seen_alive.add(learner)
            self.killed.discard(learner)
            return False
        if held is False and learner in self.seen_alive:
            self.killed.add(learner)
            return True
        return False

    def token(self, learner: int) -> str:
        """What the learner's wrapper wrote in its alive file: which wrapper it is (read
        following no link: the file is the learners')."""
        path = self.paths.learner_alive(learner)
        with contextlib.suppress(ValueError, OSError):
            rel = str(path.relative_to(self.paths.job_dir))
            fd = volume.open_below(self.paths.job_dir, rel)
            if fd is not None:
                with os.fdopen(fd, "rb") as f:
                    return f.read(200).decode("utf-8", "replace")
        return ""


class RestartWatch:
    """A swarm helper's look at its learners, with a restart in place of its whole gang.

    `look()` says when the helper should finish: every learner ended by itself, or a gang
    broken by a kill that no new wrapper joined within `wait_s`. `new_run()` marks the new
    run's start in the learners' logs (LearnerLogs.new_run) and raises nothing: the mark
    goes back whatever it managed (the learners must start)."""

    RUNNING, BROKEN, WAITING = "running", "broken", "waiting"

    def __init__(
        self,
        presence: LearnerPresence,
        ready_mark: Path,
        new_run: Callable[[], None],
        say: Callable[[str], None],
        wait_s: float = RESTART_WAIT_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.presence, self.ready_mark, self.new_run, self.say = presence, ready_mark, new_run, say
        self.wait_s, self.clock = wait_s, clock
        self.phase = self.RUNNING
        self.tokens: dict[int, str] = {}  # each learner's wrapper when the gang broke
        self.gone: set[int] = set()  # learners whose old wrapper has ended since
        self.since = 0.0

    def look(self) -> bool:
        learners = set(self.presence.learners)
        ended = {i for i in learners if self.presence.ended(i)}
        if self.phase == self.RUNNING:
            if not self.presence.killed:
                return ended == learners
            killed = ", ".join(str(i) for i in sorted(self.presence.killed))
            self.say(f"learner {killed} killed: waiting for the gang's restart in place")
            self.ready_mark.unlink(missing_ok=True)  # a new wrapper waits for the new start
            self.phase, self.gone = self.BROKEN, set()
            self.tokens = {i: self.presence.token(i) for i in learners}
        if self.phase == self.BROKEN:
            self.gone |= ended | {i for i in learners if self.presence.token(i) != self.tokens[i]}
            if self.gone != learners:
                return False
            self.new_run()
            volume.write_mark(self.ready_mark)
            self.phase, self.since = self.WAITING, self.clock()
            return False
        if ended != learners:  # a new wrapper holds its lock: the restart came
            self.say("the gang restarted in place: its new run's logs go on")
            self.phase = self.RUNNING
            return False
        return self.clock() - self.since >= self.wait_s


def lock_held(path: Path) -> bool | None:
    """Whether another open file holds a lock on `path` (None: no such file, or no locks)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)  # also drops our own lock, if we took it
    return False
