"""fan_out (dlaas/local/swarm_node.py), which streams one `docker save` of a lab's images
into every node's `docker load` at once: each consumer gets every chunk in order from one
read; a consumer that fails neither stops the others nor hangs the reader; the first error
is raised; the reader runs at most `depth` chunks ahead of the slowest consumer."""

from __future__ import annotations

import time

import pytest

from dlaas.local.swarm_node import fan_out

CHUNKS = [bytes([i]) * 3 for i in range(50)]


class Reader:
    """The saved stream: counts how often it is read and how far."""

    def __init__(self, chunks=CHUNKS, fail_at: int | None = None):
        self.chunks, self.fail_at = chunks, fail_at
        self.iterations, self.read = 0, 0

    def __iter__(self):
        self.iterations += 1
        for i, chunk in enumerate(self.chunks):
            if i == self.fail_at:
                raise OSError("the engine closed the save")
            self.read = i + 1
            yield chunk


def test_every_consumer_gets_every_chunk_in_order_from_one_read():
    got: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
    reader = Reader()
    fan_out(reader, [lambda data, k=k: got[k].extend(data) for k in got], depth=2)
    assert reader.iterations == 1
    assert got == {k: CHUNKS for k in got}


def test_a_failed_consumer_neither_stops_the_others_nor_hangs_the_reader():
    got: list[bytes] = []

    def fails_after_two(data):
        next(data), next(data)
        raise RuntimeError("node-1: load failed")

    reader = Reader()
    with pytest.raises(RuntimeError, match="node-1"):
        fan_out(reader, [fails_after_two, got.extend], depth=1)
    assert got == CHUNKS and reader.read == len(CHUNKS)


def test_the_readers_error_is_raised_once_the_consumers_have_ended():
    ended = []

    def loads(data):
        for _ in data:
            pass
        ended.append(True)

    with pytest.raises(OSError, match="closed the save"):
        fan_out(Reader(fail_at=5), [loads, loads], depth=2)
    assert ended == [True, True]


def test_the_reader_is_at_most_depth_chunks_ahead_of_the_slowest_consumer():
    reader = Reader()
    ahead: list[int] = []

    def slow(data):
        for taken, _ in enumerate(data, 1):
            time.sleep(0.002)  # the reader, unbounded, would be at the end by now
            ahead.append(reader.read - taken)

    fan_out(reader, [slow, lambda data: list(data)], depth=4)
    # Up to `depth` chunks queued, one more in the reader's hand waiting for room.
    assert len(ahead) == len(CHUNKS) and max(ahead) <= 4 + 1, ahead
