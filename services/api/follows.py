"""Streams of log lines and metric points that cannot starve the API (`logs?follow`, `metrics?follow`).

A follow waits for its learner on the event loop, not in a thread: its source
(dlaas.adapters.logs.LogReader.rounds, dlaas.adapters.job_metrics.LearnerMetrics.follow_rounds)
yields `PAUSE` where it used to block, so the stream awaits `poll_s` and then asks for the
next round. Each round is bounded work (a container listing and log read, an S3 read, a
store read, at most `batch` items) and runs on this replica's own small pool of `workers`
threads, never on the pool the other routes (and `/health`, auth, admin) run on. A client
that goes away cancels its stream at the next await (Starlette listens for the
disconnect), and its slot is free at once.

Limits: a user holds at most `per_user` follows on a replica and the replica at most
`per_replica`; beyond them the answer is 429 with `Retry-After` (`FollowRefused`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from dlaas.adapters.logs import Pause
from services.api.app import error_body
from services.api.models import ErrorReply

log = logging.getLogger(__name__)

PER_USER = 32
PER_REPLICA = 512
WORKERS = 8
# Items one round hands over at most: a long log is read in steps, the event loop
# sends each step before the next is read (a slow client holds no thread either).
BATCH = 512
RETRY_AFTER_S = 5


# The OpenAPI `responses=` entry of a route that follows.
REFUSED_DOC = {
    429: {
        "model": ErrorReply,
        "description": f"too many follows: at most {PER_USER} per user and {PER_REPLICA} per "
        "API replica; retry after `Retry-After` seconds",
    }
}


@dataclass
class FollowRefused:
    """A follow over a limit: the 429 to answer."""

    message: str

    def response(self) -> JSONResponse:
        return JSONResponse(
            error_body("too_many_follows", self.message, [self.message]),
            429,
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )


@dataclass
class Batch:
    """One round's items; `paused`: the source waits for its next poll; `ended`: it is
    done; `error`: what broke it (after `items`)."""

    items: list[Any]
    paused: bool = False
    ended: bool = False
    error: Exception | None = None


def _batch(items: Iterator[Any], size: int) -> Batch:
    """Up to `size` items of `items`, stopping at a pause."""
    out: list[Any] = []
    try:
        for item in items:
            if isinstance(item, Pause):
                return Batch(out, paused=True)
            out.append(item)
            if len(out) >= size:
                return Batch(out)
    except Exception as exc:  # noqa: BLE001 - broad: handed to the stream, which ends there
        return Batch(out, ended=True, error=exc)
    return Batch(out, ended=True)


class Follows:
    """This replica's follows: who holds how many, and the pool their rounds run on."""

    def __init__(
        self,
        per_user: int = PER_USER,
        per_replica: int = PER_REPLICA,
        workers: int = WORKERS,
        batch: int = BATCH,
    ):
        self.per_user, self.per_replica, self.batch = per_user, per_replica, batch
        self.held: Counter[str] = Counter()
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="follow")

    @property
    def total(self) -> int:
        return sum(self.held.values())

    def take(self, user: str) -> FollowRefused | None:
        """A slot for `user`'s follow, or why not. Called on the event loop (no lock)."""
        if self.held[user] >= self.per_user:
            return FollowRefused(
                f"follow: you already follow {self.held[user]} streams on this API replica "
                f"(at most {self.per_user}); end one, or retry after {RETRY_AFTER_S} s"
            )
        if self.total >= self.per_replica:
            return FollowRefused(
                f"follow: this API replica already serves {self.per_replica} follows; "
                f"retry after {RETRY_AFTER_S} s"
            )
        self.held[user] += 1
        return None

    def give_back(self, user: str) -> None:
        self.held[user] -= 1
        if self.held[user] <= 0:
            del self.held[user]

    async def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)` on the follows' pool."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, lambda: fn(*args, **kwargs))

    async def stream(
        self,
        items: Iterator[Any],
        encode: Callable[[Any], str],
        poll_s: float,
        *,
        what: str,
        user: str | None = None,
    ) -> AsyncIterator[str]:
        """The encoded `items`, a round at a time on the pool, awaiting `poll_s` (up to twice
        that while nothing comes) at each pause; `user`'s slot (taken with `take`) is given back when the stream ends,
        however it ends (its client gone included)."""
        loop = asyncio.get_running_loop()
        running: asyncio.Future | None = None
        wait = poll_s
        try:
            while True:
                running = loop.run_in_executor(self.pool, _batch, items, self.batch)
                batch = await running
                running = None
                if batch.items:
                    yield "".join(encode(item) for item in batch.items)
                if batch.error is not None:
                    # The status line is already sent: all that is left is to end the
                    # stream; the trace is kept here.
                    log.error("%s broke", what, exc_info=batch.error)
                if batch.ended:
                    return
                if batch.paused:
                    # A quiet source (a queued job, an idle learner) is asked half as
                    # often, down to every 2 x poll_s; a line brings the pace back.
                    wait = poll_s if batch.items else min(2 * wait, 2 * poll_s)
                    await asyncio.sleep(wait)
        finally:
            if user is not None:
                self.give_back(user)
            # A generator a pool thread still runs cannot be closed: close it after.
            close = getattr(items, "close", None)
            if close is not None and running is not None:
                running.add_done_callback(lambda _: self.pool.submit(close))
            elif close is not None:
                self.pool.submit(close)


def follows_of(request: Request) -> Follows:
    """The replica's `Follows`, made at the first follow (on the event loop: no race)."""
    state = request.app.state
    if getattr(state, "follows", None) is None:
        state.follows = Follows()
    return state.follows
