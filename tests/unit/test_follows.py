"""The API's follows (services.api.follows): per-user and per-replica limits, and streams
that wait on the event loop, not in a thread, and give their slot back however they end."""

from __future__ import annotations

import asyncio
import time

from dlaas.adapters.logs import PAUSE
from services.api.follows import Follows


def test_limits_per_user_and_per_replica():
    follows = Follows(per_user=2, per_replica=3, workers=1)
    assert follows.take("alice") is None and follows.take("alice") is None
    refused = follows.take("alice")
    assert refused is not None and "at most 2" in refused.message
    response = refused.response()
    assert response.status_code == 429 and response.headers["retry-after"]
    assert follows.take("bob") is None
    assert "already serves 3" in follows.take("carol").message
    follows.give_back("alice")
    assert follows.take("carol") is None


def quiet_source(closed: list[str], name: str):
    """A follow of a learner that prints one line, then nothing for ever."""
    try:
        yield f"{name} first"
        while True:
            yield PAUSE
    finally:
        closed.append(name)


async def until(done, timeout_s: float = 5.0) -> None:
    """Wait until `done()` holds (a bound, not a pace: it returns as soon as it does)."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "not reached in time"
        await asyncio.sleep(0.005)


def test_many_quiet_follows_share_one_thread_and_end_at_once_when_cancelled():
    follows = Follows(per_user=100, per_replica=100, workers=1)
    closed: list[str] = []

    async def follow(name: str, got: list[str]) -> None:
        assert follows.take(name) is None
        stream = follows.stream(
            quiet_source(closed, name), lambda line: line, 0.01, what=name, user=name
        )
        async for chunk in stream:
            got.append(chunk)

    async def main() -> list[list[str]]:
        got: list[list[str]] = [[] for _ in range(50)]
        tasks = [asyncio.create_task(follow(f"u{i}", got[i])) for i in range(50)]
        # One thread, 50 followers: each gets its line.
        await until(lambda: all(g == [f"u{i} first"] for i, g in enumerate(got)))
        assert follows.total == 50
        for t in tasks:
            t.cancel()  # the clients went away
        await asyncio.gather(*tasks, return_exceptions=True)
        assert follows.total == 0  # the slots are back at once
        await until(lambda: len(closed) == 50)  # the sources are closed on the pool
        return got

    asyncio.run(main())
    assert sorted(closed) == sorted(f"u{i}" for i in range(50))


def test_a_source_that_breaks_ends_the_stream_and_frees_its_slot():
    follows = Follows(workers=1)

    def broken():
        yield "line"
        raise OSError("store gone")

    async def main() -> list[str]:
        assert follows.take("alice") is None
        return [c async for c in follows.stream(broken(), str, 0.01, what="t", user="alice")]

    assert asyncio.run(main()) == ["line"]
    assert follows.total == 0
