"""The log stream of a learner across restarts of its job (dlaas.adapters.logs).

The pure parts (the line cursor, the run-start mark) and the reader's round logic over
scripted sources: `ScriptedReader` replaces only the four adapter methods (container,
its lines, S3 object, job status) with an in-memory world that moves one step each
time the reader sleeps; that is a fake, named as such, because the point here is the
line arithmetic across sources. The real reader against the real engine and SeaweedFS
across a restart is in tests/integration/test_logs_live.py.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest
from botocore.exceptions import ClientError
from lcm_fakes import FakeEngine

from dlaas.adapters.logs import (
    PAUSE,
    LineCursor,
    LogReader,
    Recent,
    S3Log,
    run_start,
    split_lines,
    stamped,
)
from dlaas.domain import jobspec
from dlaas.domain.locations import S3Location
from dlaas.learner.paths import RUN_START_META

RUN1 = [f"run1 line {i}" for i in range(5)]
RUN2 = [f"run2 line {i}" for i in range(4)]

# --------------------------------------------------------------------------- pure parts


def test_cursor_skips_what_was_consumed_and_the_offset_across_parts():
    cursor = LineCursor(offset=3)
    assert list(cursor.take(RUN1[:2])) == []  # below the offset
    assert list(cursor.take(RUN1)) == RUN1[3:]  # replayed from its start: only new lines
    assert list(cursor.take(RUN2, start=5)) == RUN2  # the next part starts at line 5
    assert list(cursor.take(RUN2[:2], start=5)) == []  # a replay of it gives nothing again
    assert cursor.consumed == 9


def test_an_offset_inside_the_second_part():
    cursor = LineCursor(offset=7)
    got = list(cursor.take(RUN1)) + list(cursor.take(RUN2, start=5))
    assert got == RUN2[2:]


def test_rewind_counts_on_from_where_the_stream_lost_its_lines():
    cursor = LineCursor()
    assert list(cursor.take(RUN1)) == RUN1  # 5 lines handed out, only 3 made it to S3
    cursor.rewind(3)
    assert list(cursor.take(RUN2, start=3)) == RUN2
    cursor.rewind(10)  # never forward
    assert cursor.consumed == 7


def test_run_start_mark():
    assert run_start({RUN_START_META: "12"}) == 12
    assert run_start({}) == 0 and run_start(None) == 0  # objects of one run carry none
    assert run_start({RUN_START_META: "-3"}) == 0 and run_start({RUN_START_META: "x"}) == 0


def test_split_lines_joins_chunks_cut_anywhere():
    assert list(split_lines([b"a\nb", b"c\r\n", b"", b"d"])) == ["a", "bc", "d"]


# --------------------------------------------------------------------------- rounds


@dataclass
class World:
    """One moment: the learner container (id, running?, lines so far) and the S3 object."""

    container: tuple[str, bool, list[str]] | None = None
    s3: tuple[int, list[str]] | None = None  # (run-start mark, lines)
    final: bool = False
    log_gone: bool = False  # Docker still lists the container, its log file is gone


@dataclass
class FakeContainer:
    id: str
    status: str
    lines: list[str] = field(default_factory=list)


class ScriptedReader(LogReader):
    """Fake sources (see the module docstring): the world moves a step at every sleep."""

    def __init__(self, worlds: list[World]):
        super().__init__(None, None, None, poll_s=0)
        self.worlds, self.step = worlds, 0
        self.sleep = self._advance

    def _advance(self, _seconds: float) -> None:
        self.step = min(self.step + 1, len(self.worlds) - 1)

    @property
    def now(self) -> World:
        return self.worlds[self.step]

    def _final(self, job_id, shared=False):
        return self.now.final

    def _container(self, job_id, learner, shared=False):
        c = self.now.container
        return None if c is None else FakeContainer(c[0], "running" if c[1] else "exited", c[2])

    def _container_lines(self, container, shared=False, skip=0, complete=False):
        return None if self.now.log_gone else iter(list(container.lines[skip:]))

    def _has_output(self, container):
        return bool(container.lines)

    def _s3_log(self, results, job_id, learner, shared=False):
        s3 = self.now.s3
        return None if s3 is None else S3Log(s3[0], iter(list(s3[1])))

    def read(self, offset=0, follow=False):
        return list(self.stream(None, "job", 0, offset=offset, follow=follow))


@pytest.mark.parametrize("offset", [0, 2, 5, 7, 9, 12])
def test_a_second_run_reads_earlier_runs_from_s3_then_its_container(offset):
    world = World(("b", True, RUN2), (5, RUN1))
    assert ScriptedReader([world]).read(offset) == (RUN1 + RUN2)[offset:]


def test_after_the_final_upload_the_container_lines_are_not_read_twice():
    world = World(("b", False, RUN2), (5, RUN1 + RUN2), final=True)
    assert ScriptedReader([world]).read() == RUN1 + RUN2


def test_before_the_new_container_prints_every_s3_line_is_earlier():
    # The helper of run 2 has not restored yet: the object is run 1's, marked 0.
    world = World(("b", True, []), (0, RUN1))
    assert ScriptedReader([world]).read() == RUN1


def test_a_container_removed_while_it_is_read_gives_way_to_the_stored_log():
    # The job is final; the monitor removes the learner between our lookup and our read.
    reader = ScriptedReader(
        [World(("a", False, RUN1), (0, RUN1), final=True), World(None, (0, RUN1), final=True)]
    )

    def removed_meanwhile(container, shared=False, skip=0, complete=False):
        reader.step = 1  # its log is gone: nothing to read (None)

    reader._container_lines = removed_meanwhile
    reader._has_output = lambda container: True  # what a vanished container answers
    assert reader.read() == RUN1


def test_a_container_still_listed_while_docker_removes_it_gives_way_to_the_stored_log():
    # Docker still finds the learner (status "removing") but its log file is gone already.
    reader = ScriptedReader([World(("a", False, RUN1), (0, RUN1), final=True, log_gone=True)])
    reader._has_output = lambda container: True  # read a moment before
    assert reader.read() == RUN1


def test_a_followed_container_removed_at_the_jobs_end_gives_its_last_lines_from_the_store():
    # The follow was reading the running learner; then the job ended and the monitor began
    # to remove the container (still listed, its log gone) after the helper stored the log.
    worlds = [
        World(("a", True, RUN1[:3])),
        World(("a", False, RUN1), (0, RUN1), final=True, log_gone=True),
    ]
    assert ScriptedReader(worlds).read(follow=True) == RUN1


def test_following_across_a_restart_gives_every_line_once():
    worlds = [
        World(("a", True, RUN1[:3])),  # run 1 prints
        World(None, (0, RUN1)),  # run 1 removed after its helper stored the log
        World(("b", True, []), (0, RUN1)),  # run 2 created, its helper still restoring
        World(("b", True, RUN2[:2]), (5, RUN1)),  # restored, marked, run 2 prints
        World(("b", True, RUN2[:2]), (5, RUN1 + RUN2[:1])),  # a periodic upload
        World(("b", False, RUN2), (5, RUN1 + RUN2), final=True),
    ]
    assert ScriptedReader(worlds).read(follow=True) == RUN1 + RUN2


@pytest.mark.parametrize("offset", [0, 4, 6])
def test_following_from_an_offset_across_a_restart(offset):
    worlds = [
        World(("a", True, RUN1[:2])),
        World(("a", False, RUN1)),
        World(("b", True, RUN2[:1]), (5, RUN1)),  # swapped between two rounds of ours
        World(None, (5, RUN1 + RUN2), final=True),
    ]
    assert ScriptedReader(worlds).read(offset, follow=True) == (RUN1 + RUN2)[offset:]


def test_lines_lost_with_a_dead_node_do_not_swallow_the_next_run():
    worlds = [
        World(("a", True, RUN1)),  # all 5 lines streamed live ...
        World(None, (0, RUN1[:3])),  # ... but the node died: S3 got only 3 of them
        World(("b", True, RUN2), (3, RUN1[:3])),
        World(None, (3, RUN1[:3] + RUN2), final=True),
    ]
    assert ScriptedReader(worlds).read(follow=True) == RUN1 + RUN2


# --------------------------------------------------------------------------- a follow's end


class NeverEndingFollow(FakeEngine):
    """A Swarm task's log stream (`follow=true`): it does not end when the task does."""

    def follow_logs(self, c):
        yield self.output.get(c.id, b"")
        threading.Event().wait()  # the stream stays open after the task completed


def test_a_follow_ends_at_the_jobs_end_although_the_engines_log_stream_does_not():
    engine = NeverEndingFollow()
    c = engine.add("job", jobspec.ROLE_LEARNER, 0)
    engine.print(c, "a\nb\n")
    final = threading.Event()
    reader = LogReader(None, None, engine, poll_s=0.01)
    reader._final = lambda job_id, shared=False: final.is_set()
    reader._s3_log = lambda results, job_id, learner, shared=False: None
    got: list[str] = []

    def follow():
        for line in reader.stream(None, "job", 0, offset=0, follow=True):
            got.append(line)
            if line == "b":  # the learner printed its last line and exited; the job ended
                engine.set_state(c, "exited", 0)
                final.set()

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    t.join(timeout=10)
    assert not t.is_alive(), "the follow did not end after the job completed"
    assert got == ["a", "b"]


def test_rounds_pause_instead_of_waiting_and_share_reads_between_followers():
    engine = FakeEngine()
    c = engine.add("job", jobspec.ROLE_LEARNER, 0)
    engine.print(c, "a\n")
    reads = []
    logs = engine.logs
    engine.logs = lambda c, tail=None: reads.append(tail) or logs(c, tail=tail)
    reader = LogReader(None, None, engine, poll_s=60)
    reader._final = lambda job_id, shared=False: False
    reader._s3_log = lambda results, job_id, learner, shared=False: None
    first = reader.stream_rounds(None, "job", 0, offset=0, follow=True)
    second = reader.stream_rounds(None, "job", 0, offset=0, follow=True)
    assert [next(first), next(first)] == ["a", PAUSE]  # never a sleep: the caller waits
    assert [next(second), next(second)] == ["a", PAUSE]
    whole = [t for t in reads if t is None]
    assert len(whole) == 1  # the second follower reused the first one's read
    engine.print(c, "b\n")
    reader.recent = Recent(0)  # the next poll: fresh reads
    assert [next(first), next(first)] == ["b", PAUSE]


def test_a_line_half_written_by_a_running_learner_comes_once_whole():
    engine = FakeEngine()
    c = engine.add("job", jobspec.ROLE_LEARNER, 0)
    engine.print(c, "a\n[=====")
    reader = LogReader(None, None, engine, poll_s=0)
    final = []
    reader._final = lambda job_id, shared=False: bool(final)
    reader._s3_log = lambda results, job_id, learner, shared=False: None
    rounds = reader.stream_rounds(None, "job", 0, offset=0, follow=True)
    assert [next(rounds), next(rounds)] == ["a", PAUSE]
    engine.print(c, "=====] done\nb")
    assert [next(rounds), next(rounds)] == ["[==========] done", PAUSE]
    engine.set_state(c, "exited", 0)
    final.append(True)
    assert list(rounds) == ["b"]  # it exited without a last newline: the line is whole


def test_followers_of_a_job_without_a_log_yet_share_one_object_read():
    asked = []

    class NoLogYet:  # FAKE S3: the helper has not stored a log yet
        def get_object(self, Bucket, Key):
            asked.append(Key)
            raise ClientError({"Error": {"Code": "NoSuchKey"}}, "GetObject")

    reader = LogReader(None, None, None, lambda loc: NoLogYet(), poll_s=60)
    reader._final = lambda job_id, shared=False: False
    results = S3Location("", "", "", "res")
    followers = [reader.stream_rounds(results, "job", 0, offset=0, follow=True) for _ in range(50)]
    assert all(next(f) is PAUSE for f in followers)
    assert len(asked) == 1


def test_a_stamped_line_is_its_time_and_its_text():
    at, text = stamped("2026-11-27T00:12:34.123456789Z epoch 3/20 loss=0.5")
    assert text == "epoch 3/20 loss=0.5"
    assert at == pytest.approx(1795738354.123456)
    assert stamped("epoch 3/20 loss=0.5") == (None, "epoch 3/20 loss=0.5")
    assert stamped("2026-13-27T00:12:34Z x") == (None, "2026-13-27T00:12:34Z x")


def test_the_tail_is_the_learners_last_lines_with_the_times_they_were_printed():
    engine = FakeEngine()
    c = engine.add("job", jobspec.ROLE_LEARNER, 0)
    engine.print(c, "epoch 1/3\nepoch 2/3\n", at=1000.5)
    engine.print(c, "epoch 3/3\n", at=1010.25)
    reader = LogReader(None, None, engine)
    assert reader.tail("job", 0, 2) == [(1000.5, "epoch 2/3"), (1010.25, "epoch 3/3")]
    # A tail cut by its byte bound loses its first, partial line, not a stamp.
    assert reader.tail("job", 0, 3, max_bytes=50) == [(1010.25, "epoch 3/3")]
    assert reader.tail("job", 1, 3) == []  # no such learner here
