"""The job monitor's limits on a running job: stalls and deadlines. Pure (a fake clock in tests).

decide.py asks these and turns the answers into actions.

A stall: a PROCESSING job none of whose learners wrote a new log line for its `stall_after`
seconds (the manifest's, else the platform's default; at most the platform's maximum) while
one still runs: a deadlock, a peer that died inside a collective, a data read that hangs.
"Log activity" is what the monitor sees of each learner: the time its log's last lines
last changed (activity.py polls the last lines of running learners, at most `poll_s`
apart, so a stall is seen within stall_after + poll_s), and, for a learner that exited,
when it exited. The job's manifest says what then (`on_stall`): `notify` (the default:
marked in the job's info with the evidence and a `stalled` webhook event), `fail`
(FAILED `stalled`), or `restart` (from the last checkpoint, counted against max_restarts).
Each stall is marked once: a learner that logs again starts a new one.

A deadline: a job whose running time (its DOWNLOADING, PROCESSING and STORING spans in the
status history; QUEUED, PENDING and HALTED not counted, restarts' runs added up) reaches its
`max_duration` (else its team's default or maximum; at most the platform's maximum:
dlaas.domain.run_time) is stopped like a halt: its learners get SIGTERM
(the examples checkpoint), and once they have exited it fails `deadline_exceeded`, its
helper then storing the checkpoints, results and logs.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dlaas.domain.ports import Container
from dlaas.domain.status import JobState, Status, Transition, between

ON_STALL_NOTIFY = "notify"
ON_STALL_FAIL = "fail"
ON_STALL_RESTART = "restart"
# How often the monitor looks at a PROCESSING job's learner logs for stall detection.
DEFAULT_POLL_S = 10.0
# The platform's defaults (DLAAS_MONITOR_*): stall_after when a manifest names none, and
# the most any job may ask; 0 for the maximum run time: none.
DEFAULT_STALL_AFTER_S = 1800.0
MAX_STALL_AFTER_S = 86400.0
# After SIGTERM at the deadline: look again this soon (the learners' exits bring the job
# back earlier anyway).
STOP_RECHECK_S = 5.0
_RUNNING = between(Status.DOWNLOADING, Status.STORING)
MAX_LINE = 200  # of a learner's last line in the evidence


@dataclass(frozen=True)
class Activity:
    """What the monitor last saw of one learner's log: when it last changed, its last line."""

    at: float
    line: str = ""


def running_s(history: Sequence[Transition], state: JobState, now: float) -> float:
    """Seconds the job spent in DOWNLOADING..STORING, over every run, up to `now`.

    `history` is the store's (it may lag the live `state` by a transition: then the live
    one is added)."""
    marks = [(t.status, t.at) for t in history]
    if not marks or marks[-1] != (state.status, state.at):
        marks.append((state.status, state.at))
    total = 0.0
    for (status, at), (_next, until) in zip(marks, [*marks[1:], (None, now)], strict=True):
        if status in _RUNNING:
            total += max(0.0, until - at)
    return total


def last_activity(learners: Sequence[Container], seen: Mapping[int, Activity]) -> float | None:
    """The job's last log activity (a learner's exit counts); None while a running learner
    has not been looked at yet."""
    times = []
    for c in learners:
        a = seen.get(c.learner or 0)
        if c.running and a is None:
            return None
        times += [a.at] if a is not None else []
        times += [c.finished_at] if c.exited and c.finished_at is not None else []
    return max(times) if times else None


def evidence(learners: Sequence[Container], seen: Mapping[int, Activity]) -> list[dict]:
    """Per learner: its state, last line and when it last logged (or exited)."""
    out = []
    for c in learners:
        a = seen.get(c.learner or 0)
        entry: dict = {"learner": c.learner, "state": c.state}
        if a is not None:
            entry.update(last_line=a.line[:MAX_LINE], last_line_at=a.at)
        if c.exited:
            entry.update(exit_code=c.exit_code, exited_at=c.finished_at)
        out.append(entry)
    return out


def stall_reason(found: Sequence[dict], quiet_s: float, stall_after_s: float) -> str:
    parts = []
    for e in found:
        when = _clock(e.get("last_line_at"))
        line = f"last line {e['last_line']!r} at {when}" if e.get("last_line") else "no output"
        if e.get("exited_at") is not None:
            line += f", exited {e.get('exit_code')} at {_clock(e['exited_at'])}"
        parts.append(f"learner {e['learner']} ({e['state']}): {line}")
    return (
        f"stalled: no learner logged for {quiet_s:.0f} s (stall_after {stall_after_s:.0f} s); "
        + "; ".join(parts)
    )


def _clock(t: float | None) -> str:
    return "?" if t is None else time.strftime("%H:%M:%S UTC", time.gmtime(t))
