"""The REST API's dependencies, in one place: the adapters every route uses (`Deps`, built
once per app by app.py's `create_app`) and who is calling (`Caller`, from the request's
bearer token). Routes take them as `DepsDep` and `CallerDep`; whether the caller may see
a job or a hook is the domain's one rule (dlaas.domain.authz, `Caller.can_see`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from dlaas.adapters.job_progress import ProgressReader
from dlaas.adapters.logs import LogReader
from dlaas.adapters.s3 import client_for_location
from dlaas.adapters.store.base import JobRecord, JobStore
from dlaas.config import ApiSettings, PlatformSettings
from dlaas.domain.accounts import audit_entry
from dlaas.domain.locations import S3Location
from services.api.auth import Authenticator, Caller

if TYPE_CHECKING:
    from services.api.app import Metrics

log = logging.getLogger(__name__)

# Bound of every integer query parameter: SQLite (and Mongo) integers are 64-bit, and
# no listing or log is a billion entries long.
MAX_OFFSET = 10**9


@dataclass
class Deps:
    """The adapters every route uses, built once per app."""

    settings: PlatformSettings
    api: ApiSettings
    store: JobStore
    lcm: Any  # dlaas.clients.sdk.LcmClient or anything with submit/halt/resume/scale/delete
    s3: Any  # boto3 client for the platform's S3
    scheduler: Any  # dlaas.clients.sdk.SchedulerClient
    tokens: Authenticator
    logs: LogReader
    metrics: Metrics
    tasks: Any = None  # services.api.tasks.TaskQueue: work queued for the worker
    progress: ProgressReader = field(default_factory=ProgressReader)  # running jobs' progress
    # Looks at running jobs' logs under way in the background: job id -> its task (one per
    # job at a time; held here so the task is not collected before it ends).
    looks: dict[str, asyncio.Task] = field(default_factory=dict)

    def look_later(self, record: JobRecord) -> None:
        """Look at a running job's logs in the background (one look per job at a time)."""
        if record.job_id not in self.looks:
            self.looks[record.job_id] = asyncio.get_running_loop().create_task(self._look(record))

    async def _look(self, record: JobRecord) -> None:
        try:
            await run_in_threadpool(self.progress.of, record, self.logs)
        except Exception:  # broad: a look is best effort; the next view tries again
            log.warning("looking at the logs of %s failed", record.job_id, exc_info=True)
        finally:
            self.looks.pop(record.job_id, None)

    def s3_for(self, loc: S3Location):
        return client_for_location(loc, lambda: self.s3)


_bearer = HTTPBearer(auto_error=False, description="API token: `Authorization: Bearer <token>`")


async def get_deps(request: Request) -> Deps:
    # async: FastAPI runs a plain `def` dependency on the thread pool, a hop per request
    # for an attribute read.
    return request.app.state.deps


async def get_caller(
    request: Request,
    _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Caller:
    # async, and the check on the event loop: as a plain `def` it cost every request a
    # hop to the thread pool and back, and a wait there behind the other requests' routes.
    client = request.client.host if request.client else ""
    tokens = request.app.state.deps.tokens
    return await tokens.caller(request.headers.get("authorization"), client)


DepsDep = Annotated[Deps, Depends(get_deps)]
CallerDep = Annotated[Caller, Depends(get_caller)]


def owned_job(deps: Deps, caller: Caller, job_id: str) -> JobRecord:
    """The job's record, if the caller may see it; another user's job is reported missing."""
    record = deps.store.get(job_id)
    caller.check_owner(job_id, record.user)
    return record


def audit(deps: Deps, caller: Caller, action: str, target: str, detail: str = "") -> None:
    """Append to the audit log; it never holds secrets (callers pass names and counts)."""
    deps.store.append_audit(audit_entry(time.time(), caller.user, action, target, detail))
