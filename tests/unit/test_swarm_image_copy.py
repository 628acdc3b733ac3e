"""How a swarm lab's images reach its nodes (dlaas/local/swarm.py, swarm_node.py): one
`docker save` of them all, streamed into every node's `docker load` at once by fan_out.

fan_out: each consumer gets every chunk in order from one read; a consumer that fails
neither stops the others nor hangs the reader; the first error is raised; the reader runs
at most `depth` chunks ahead of the slowest consumer. SwarmLab._copy_images against FAKE
engines: one save of every tag, the same stream loaded on every node; a tag missing on the
machine's engine named before anything is saved."""

from __future__ import annotations

import time
from types import SimpleNamespace

import docker
import pytest

from dlaas.local.swarm import SwarmLab
from dlaas.local.swarm_node import fan_out
from dlaas.local.swarm_plan import SwarmLabError, lab_plan

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


# ---- SwarmLab._copy_images against FAKE engines (docker.DockerClient replaced) -------------

MACHINE = "unix:///machine.sock"
TAGS = ["dlaas/learner:latest", "dlaas/learner-pytorch:2.13"]


class FakeEngines:
    """FAKE engines by address: the machine's holds `present`; a `docker save` of several
    names is one stream; each node records the bytes it loaded and then holds the tags."""

    def __init__(self, present):
        self.present = set(present)
        self.saves: list[list[str]] = []
        self.loaded: dict[str, bytes] = {}

    def client(self, base_url, timeout=None):
        engines = self

        class Images:
            def get(self, tag):
                if base_url == MACHINE:
                    held = tag in engines.present
                else:  # a node holds what it loaded
                    held = base_url in engines.loaded and tag in TAGS
                if not held:
                    raise docker.errors.ImageNotFound(tag)

            def load(self, data):
                engines.loaded[base_url] = b"".join(data)

        class Api:
            def _url(self, path):
                return path

            def _get(self, url, params=None, stream=False):
                assert url == "/images/get" and stream
                engines.saves.append(list(params["names"]))
                return [b"tar:" + name.encode() for name in params["names"]]

            def _stream_raw_result(self, response, chunk_size, decode):
                return iter(response)

        return SimpleNamespace(images=Images(), api=Api(), close=lambda: None)


def _lab(tmp_path, monkeypatch, present):
    engines = FakeEngines(present)
    monkeypatch.setattr(docker, "DockerClient", engines.client)
    lab = SwarmLab(tmp_path, nodes=2, images=TAGS, machine_docker_host=MACHINE)
    record = lab_plan(tmp_path, "abc123", "10.199.7.0/24", 2)
    return lab, record, engines


def test_one_save_of_every_image_reaches_every_node(tmp_path, monkeypatch):
    lab, record, engines = _lab(tmp_path, monkeypatch, TAGS)
    lab._copy_images(record)
    assert engines.saves == [TAGS]  # one save for all: layers they share travel once
    stream = b"tar:dlaas/learner:latesttar:dlaas/learner-pytorch:2.13"
    sockets = [f"unix://{n['socket']}" for n in record["nodes"]]
    assert engines.loaded == dict.fromkeys(sockets, stream)


def test_an_image_missing_on_the_machine_is_named_before_anything_is_saved(tmp_path, monkeypatch):
    lab, record, engines = _lab(tmp_path, monkeypatch, TAGS[:1])
    with pytest.raises(SwarmLabError, match=r"dlaas/learner-pytorch:2.13 .*dlaas images build"):
        lab._copy_images(record)
    assert engines.saves == [] and engines.loaded == {}
