"""Which learner of a gang to blame when the first to fail only waited for another. Pure.

A distributed job's learners wait for each other in every collective. When one hangs
(a deadlock, a stuck read, a frozen GPU) or dies, the others fail in their collective:
torch raises when the platform's collective timeout passes (dlaas.domain.launch), or at
once when the peer's connection resets. The monitor judges the learner that failed first
(decide.py), and that is often one of those: its last lines say `collective_timeout` or
`peer_reset` (the triage catalog, dlaas.domain.triage), and naming it would send the user
to the wrong learner. `blame()` names the one that caused it:

- another failed learner whose own failure is something else (an error in its code, an
  OOM kill, a signal): its failure is the job's, whenever it ended;
- else the learners that stopped taking part: still running while the first had given up
  on them (hung), or exited 0 while the others still waited (left the gang early). The
  failure stays the collective's (restarted from the checkpoint per the catalog), its
  reason naming them first;
- else (every learner failed in a collective: the network between them) the first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from dlaas.domain.jobspec import JobErrorCode
from dlaas.domain.ports import Container
from dlaas.domain.triage import Rule
from services.jobmonitor.classify import Failure, classify_learner

# The labels of a learner that failed waiting for a peer, not of its own fault.
SYMPTOMS = frozenset({str(JobErrorCode.COLLECTIVE_TIMEOUT), str(JobErrorCode.PEER_RESET)})


def blame(
    failure: Failure,
    first: Container,
    learners: Sequence[Container],
    log_tails: Mapping[int, Sequence[str]],
    rules: Sequence[Rule],
    image: str = "",
) -> Failure:
    """`failure` (of `first`, the learner that failed first), or the failure that caused it."""
    if str(failure.error_code) not in SYMPTOMS:
        return failure
    others = [c for c in learners if c.learner != first.learner]
    failed = sorted(
        (c for c in others if c.exited and (c.exit_code or c.oom_killed)),
        key=lambda c: (c.finished_at or float("inf"), c.learner or 0),
    )
    for c in failed:
        own = classify_learner(c, log_tails.get(c.learner or 0, ()), rules, image)
        if str(own.error_code) not in SYMPTOMS:
            waited = f"learner {first.learner} failed first, waiting for it ({failure.error_code})"
            head, sep, tail = own.reason.partition("; last log lines:")
            return replace(own, reason=f"{head} ({waited}){sep}{tail}")
    hung = [c for c in others if c.running]
    left = [c for c in others if c.exited and c.exit_code == 0 and not c.oom_killed]
    if not hung and not left:
        return failure
    parts = []
    if hung:
        parts.append(f"{_learners(hung)} stopped answering the gang's collectives (still running)")
    if left:
        parts.append(f"{_learners(left)} left the gang early (exited 0 while the others waited)")
    reason = f"{'; '.join(parts)}: {failure.reason}"
    return replace(failure, reason=reason)


def _learners(cs: Sequence[Container]) -> str:
    ids = sorted(c.learner or 0 for c in cs)
    return ("learner " if len(ids) == 1 else "learners ") + ", ".join(map(str, ids))
