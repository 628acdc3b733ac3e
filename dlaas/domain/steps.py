"""One place that runs a step against another service and interprets the two kinds of errors.

The LCM and the job monitor call each other, the scheduler and the identity store in steps
that may fail for two different reasons (`dlaas/domain/errors.py`):
  - a `PermanentError`: the step cannot succeed (the job moved on, was deleted, the scheduler
    holds nothing for it). Never retried: logged at INFO, and the step is settled;
  - a `TemporaryError`, or a `DlaasError` not classed (the gRPC clients turn every failure of
    the call into one): the other side is down or failing over. Logged as a WARNING; the
    caller tries again later (`on_temporary`, e.g. a deadline in its work queue).
Anything that is not a domain error is not interpreted here: it reaches the caller's own guard.

Pure: no I/O but the log lines.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from dlaas.domain.errors import DlaasError, PermanentError

T = TypeVar("T")


class Outcome(enum.Enum):
    DONE = "done"  # the step succeeded
    PERMANENT = "permanent"  # refused for good: nothing to retry
    TEMPORARY = "temporary"  # failed for now: the caller tries again


@dataclass(frozen=True)
class StepResult(Generic[T]):
    outcome: Outcome
    value: T | None = None  # what the step returned (DONE only)
    error: DlaasError | None = None  # why it did not (PERMANENT, TEMPORARY)

    @property
    def done(self) -> bool:
        return self.outcome is Outcome.DONE


def run_step(
    what: str,
    fn: Callable[[], T],
    *,
    log: logging.Logger,
    on_permanent: Callable[[PermanentError], None] | None = None,
    on_temporary: Callable[[DlaasError], None] | None = None,
    then: str = "will retry",
) -> StepResult[T]:
    """Run `fn()`, the step named `what` ("release of job j1"); interpret a domain error.

    A PermanentError is logged at INFO ("<what>: <error>") and `on_permanent(error)` runs; any
    other DlaasError is logged as a WARNING ("<what> failed (<error>); <then>") and
    `on_temporary(error)` runs. Other exceptions propagate.
    """
    try:
        value = fn()
    except PermanentError as exc:
        log.info("%s: %s", what, exc)
        if on_permanent is not None:
            on_permanent(exc)
        return StepResult(Outcome.PERMANENT, error=exc)
    except DlaasError as exc:
        log.warning("%s failed (%r); %s", what, exc, then)
        if on_temporary is not None:
            on_temporary(exc)
        return StepResult(Outcome.TEMPORARY, error=exc)
    return StepResult(Outcome.DONE, value=value)
