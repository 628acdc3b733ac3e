"""Why a job's container failed and whose fault it is: the job monitor's classification. Pure.

`decide()` (decide.py) judges the container that failed first with these. The job's own
fault (a learner's non-zero exit code, an OOM kill, what its last log lines say through the
triage catalog, dlaas.domain.triage) fails the job; the platform's (a container killed or
stopped from outside, an engine lost, its store unreachable, a triage row whose action is
`restart`) asks the LCM for a restart from the last checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dlaas.domain.jobspec import (
    EVENT_ERROR,
    HELPER_EXIT_REASONS,
    HELPER_EXIT_STORE_UNREACHABLE,
    JobErrorCode,
)
from dlaas.domain.ports import Container
from dlaas.domain.triage import CATALOG, Rule, triage

# How many of a failed learner's last log lines go into the job's failure reason.
LOG_TAIL_LINES = 10

# The codes this detector records (their one home: dlaas.domain.errors.JobErrorCode).
ERROR_EXIT_CODE = JobErrorCode.EXIT_CODE
ERROR_OOM = JobErrorCode.OOM_KILLED
ERROR_HELPER = JobErrorCode.HELPER_FAILED
ERROR_CONTAINERS_MISSING = JobErrorCode.CONTAINERS_MISSING
ERROR_STORE_TIMEOUT = JobErrorCode.STORE_TIMEOUT
ERROR_KILLED = JobErrorCode.KILLED
ERROR_TERMINATED = JobErrorCode.TERMINATED

# Exit codes of a container whose main process died of a signal sent from outside: Docker
# (and the init process) report 128 + the signal number.
EXIT_SIGKILL = 137
EXIT_SIGTERM = 143
# What a restarted Docker engine records for a container whose process died with the old
# engine (it cannot learn the real exit code).
EXIT_ENGINE_LOST = 255
# What Docker records for a container its engine failed to start, with no code of the
# program's own (an engine killed while it started or restarted the container).
EXIT_START_FAILED = 128
ERROR_ENGINE_LOST = JobErrorCode.ENGINE_LOST
# The codes of a container that ended with its engine rather than by its program: near an
# engine loss they are the node's fault (decide.py), elsewhere the program's own.
ENGINE_EXITS = frozenset({EXIT_ENGINE_LOST, EXIT_START_FAILED})

# Helper failures that are the job's own fault (bad location, credentials, archive, its
# own data store not answering: HELPER_EXIT_CONNECTION_UNREACHABLE): a restart would fail
# the same way. The one the platform's: its own store not answering (exit
# HELPER_EXIT_STORE_UNREACHABLE) restarts; unknown codes fail as helper_failed. By exit
# code, not error code: both kinds of unreachable store report `store_unreachable`.
HELPER_INFRA_EXITS = frozenset({HELPER_EXIT_STORE_UNREACHABLE})


@dataclass(frozen=True)
class Failure:
    """Why a job's containers failed, and whose fault it is."""

    reason: str
    error_code: str
    exit_code: int | None = None
    # True: the platform's trouble, restart from the last checkpoint; False: the job's own.
    infrastructure: bool = False


# --- classification ----------------------------------------------------------------


def classify_learner(
    c: Container, tail: Sequence[str] = (), rules: Sequence[Rule] = CATALOG, image: str = ""
) -> Failure:
    """Why a learner that exited non-zero (or was OOM-killed) failed, and whose fault it is.

    Its last lines are triaged first (a CUDA out-of-memory, an NCCL timeout, a missing
    module say more than an exit code): the row's label is the error code, its action
    whose fault it is. An engine's OOM kill stays oom_killed whatever the lines say."""
    code = c.exit_code
    if c.oom_killed:
        # The job asked for too little memory, or its program uses too much: the same
        # gang would run out again, so no restart.
        reason = f"learner {c.learner} was killed: out of memory (exit code {code})"
        return Failure(_with_tail(reason, tail), ERROR_OOM, code)
    verdict = triage(tail, rules, image)
    if verdict is not None:
        reason = f"learner {c.learner} exited with code {code}: {verdict.label}: {verdict.what}"
        if verdict.restart:  # the restart's reason names the line, not the whole tail
            reason += f" (log: {verdict.line.strip()[:200]!r})"
            return Failure(reason, str(verdict.label), code, infrastructure=True)
        return Failure(_with_tail(reason, tail), str(verdict.label), code)
    if code == EXIT_SIGKILL:
        # SIGKILL that was not the OOM killer: docker kill, a dying node, a chaos test.
        reason = f"learner {c.learner} was killed from outside (SIGKILL, exit code {code})"
        return Failure(reason, ERROR_KILLED, code, infrastructure=True)
    if code == EXIT_SIGTERM:
        # The platform stops learners only of ended or requeued jobs (status written first),
        # so a SIGTERM on a running job came from outside: docker stop, an engine shutdown.
        reason = f"learner {c.learner} was stopped from outside (SIGTERM, exit code {code})"
        return Failure(reason, ERROR_TERMINATED, code, infrastructure=True)
    reason = f"learner {c.learner} exited with code {code}"
    return Failure(_with_tail(reason, tail), ERROR_EXIT_CODE, code)


def classify_helper(helper: Container, events: Sequence[Mapping] = ()) -> Failure:
    """Why a helper that exited non-zero failed, and whose fault it is."""
    code = helper.exit_code
    if helper.oom_killed:
        return Failure("the helper ran out of memory", ERROR_OOM, code)
    if code == EXIT_SIGKILL:
        return Failure(
            f"the helper was killed from outside (SIGKILL, exit code {code})",
            ERROR_KILLED,
            code,
            infrastructure=True,
        )
    if code == EXIT_SIGTERM:  # it exits 0 on SIGTERM once its handler is in place
        return Failure(
            f"the helper was stopped from outside (SIGTERM, exit code {code})",
            ERROR_TERMINATED,
            code,
            infrastructure=True,
        )
    error_code, text = HELPER_EXIT_REASONS.get(
        code or 0, (ERROR_HELPER, f"helper exited with code {code}")
    )
    message = next(
        (str(e.get("message", "")) for e in reversed(events) if e.get("event") == EVENT_ERROR),
        "",
    )
    reason = f"{text}: {message}" if message else text
    return Failure(reason, error_code, infrastructure=code in HELPER_INFRA_EXITS)


def _with_tail(reason: str, tail: Sequence[str]) -> str:
    lines = [line for line in tail if line.strip()][-LOG_TAIL_LINES:]
    return reason + "; last log lines:\n" + "\n".join(lines) if lines else reason
