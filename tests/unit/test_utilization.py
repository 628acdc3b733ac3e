"""Measured node utilization (services/lcm/utilization.py, and the pure helpers of
dlaas/adapters/engines/docker_usage.py):
CPU as a rate between two samples, unknown (None) wherever it cannot be known, never 0;
the sampler's cache, its rest when nobody asks and its staleness, on a fake clock."""

from __future__ import annotations

import pytest

from dlaas.adapters.engines.docker_usage import container_stats, memory_in_use
from dlaas.domain.ports import ContainerStats, EngineUnreachable, UsageSource
from services.lcm.utilization import (
    MIB,
    UNKNOWN,
    NodeSample,
    UtilizationSampler,
    node_utilization,
)

S = 10**9  # nanoseconds


def sample(at: float, *containers: ContainerStats) -> NodeSample:
    return NodeSample(at, containers)


def test_cpu_is_the_rate_between_two_reads_and_memory_the_sum():
    before = sample(
        100, ContainerStats("a", 10 * S, 100.0, MIB), ContainerStats("b", 0, 100.0, MIB)
    )
    now = sample(
        102, ContainerStats("a", 12 * S, 102.0, 3 * MIB), ContainerStats("b", S, 102.0, MIB)
    )
    u = node_utilization(before, now)
    # a: 2 s of CPU in 2 s (one core); b: 1 s in 2 s (half a core).
    assert (u.cpus_used, u.memory_mb_used, u.containers, u.sampled_at) == (1.5, 4, 2, 102)
    assert u.gpu_percent is None


def test_a_first_sample_knows_memory_but_not_cpu():
    u = node_utilization(None, sample(5, ContainerStats("a", S, 5.0, 2 * MIB)))
    assert (u.cpus_used, u.memory_mb_used, u.containers) == (None, 2, 1)


def test_no_running_container_uses_nothing_known():
    u = node_utilization(None, sample(5))
    assert (u.cpus_used, u.memory_mb_used, u.containers, u.sampled_at) == (0.0, 0, 0, 5)


@pytest.mark.parametrize(
    "later",
    [
        ContainerStats("new", 5 * S, 102.0, MIB),  # started since: no earlier read
        ContainerStats("a", 1 * S, 102.0, MIB),  # restarted: its counter went back
        ContainerStats("a", 12 * S, 100.0, MIB),  # read twice at the same instant
    ],
)
def test_a_container_without_a_usable_earlier_read_makes_cpu_unknown(later):
    before = sample(100, ContainerStats("a", 10 * S, 100.0, MIB))
    u = node_utilization(before, sample(102, later))
    assert u.cpus_used is None
    assert u.memory_mb_used == 1


def test_memory_unknown_if_one_container_does_not_say():
    before = sample(100, ContainerStats("a", 0, 100.0, MIB), ContainerStats("b", 0, 100.0, None))
    now = sample(101, ContainerStats("a", S, 101.0, MIB), ContainerStats("b", 0, 101.0, None))
    u = node_utilization(before, now)
    assert (u.cpus_used, u.memory_mb_used) == (1.0, None)


# ----------------------------------------------------------------------------- sampler


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


class FakeSource(UsageSource):
    """A node whose one container burns `cores` cores; `down` makes the engine not answer."""

    def __init__(self, clock: Clock, cores: float):
        self.clock, self.cores, self.down, self.reads = clock, cores, False, 0

    def read(self) -> list[ContainerStats]:
        self.reads += 1
        if self.down:
            raise EngineUnreachable("n1", "refused")
        t = self.clock()
        return [ContainerStats("c", int(t * self.cores * S), t, 64 * MIB)]


def test_sampler_reports_unknown_then_the_measured_rate_per_node():
    clock = Clock()
    busy, idle = FakeSource(clock, 1.0), FakeSource(clock, 0.0)
    sampler = UtilizationSampler({"n1": busy, "n2": idle, "swarm": None}, 5.0, clock=clock)
    assert sampler.utilization("n1") == UNKNOWN  # nothing sampled yet
    sampler.sample()
    assert sampler.utilization("n1").cpus_used is None  # one sample: no rate yet
    assert sampler.utilization("n1").memory_mb_used == 64
    clock.t += 5
    sampler.sample()
    assert sampler.utilization("n1").cpus_used == 1.0
    assert sampler.utilization("n2").cpus_used == 0.0
    assert sampler.utilization("swarm") == UNKNOWN  # no source: never measured
    assert sampler.utilization("nope") == UNKNOWN


def test_a_stale_result_and_an_engine_that_does_not_answer_are_unknown():
    clock = Clock()
    source = FakeSource(clock, 1.0)
    sampler = UtilizationSampler({"n1": source}, 5.0, clock=clock)
    sampler.sample()
    clock.t += 5
    sampler.sample()
    assert sampler.utilization("n1").cpus_used == 1.0
    clock.t += 16  # past 3 intervals without a sample
    assert sampler.utilization("n1") == UNKNOWN
    sampler.sample()
    source.down = True
    clock.t += 5
    sampler.sample()
    assert sampler.utilization("n1") == UNKNOWN
    source.down = False
    clock.t += 5
    sampler.sample()  # back: a first sample again, so its CPU is not known yet
    assert sampler.utilization("n1").cpus_used is None
    assert sampler.utilization("n1").memory_mb_used == 64


def test_the_sampler_samples_only_while_asked():
    clock = Clock()
    sampler = UtilizationSampler({"n1": FakeSource(clock, 1.0)}, 5.0, clock=clock, idle_after_s=60)
    assert not sampler._wanted()  # never asked: the thread rests
    sampler.utilization("n1")
    assert sampler._wanted()
    clock.t += 61
    assert not sampler._wanted()


# ----------------------------------------------------------------------------- docker


def test_memory_in_use_leaves_the_page_cache_out_in_both_cgroup_versions():
    assert memory_in_use({"usage": 100, "stats": {"total_inactive_file": 30}}) == 70  # v1
    assert memory_in_use({"usage": 100, "stats": {"inactive_file": 40}}) == 60  # v2
    assert memory_in_use({"usage": 100, "stats": {}}) == 100
    assert memory_in_use({}) is None


def test_container_stats_of_an_engine_document():
    doc = {
        "read": "2026-11-24T02:37:34.5Z",
        "cpu_stats": {"cpu_usage": {"total_usage": 761823579}},
        "memory_stats": {"usage": 2 * MIB, "stats": {"total_inactive_file": MIB}},
    }
    stats = container_stats("abc", doc)
    assert stats is not None
    assert (stats.id, stats.cpu_ns, stats.memory_bytes) == ("abc", 761823579, MIB)
    assert stats.read_at % 1 == 0.5
    # A container that stopped between the listing and the read: the engine's zero time.
    stopped = {**doc, "read": "0001-01-01T00:00:00Z"}
    assert container_stats("abc", stopped) is None
    assert container_stats("abc", {"read": doc["read"]}) is None
