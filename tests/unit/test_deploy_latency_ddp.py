"""benchmarks/deploy_latency_ddp.py (deploy_latency.py --ddp): its pure parts (the job it
submits, how a run's time is read from the job's history)."""

from __future__ import annotations

import pytest

from benchmarks import deploy_latency_ddp as bench
from dlaas.domain.manifest import parse_manifest


def test_both_shapes_ask_the_same_cpus_and_differ_only_in_memory():
    two, one = (parse_manifest(bench.ddp_manifest(m, 5)) for m in bench.DDP_SHAPES.values())
    assert two.learners == one.learners == 2
    assert two.cpus == one.cpus == 0.5
    node_mb = int(bench.DDP_NODE_MEMORY_MB)
    assert 2 * two.memory_mb > node_mb >= 2 * one.memory_mb  # spans / fits one node
    assert "--epochs 5" in str(two.framework.command)


def test_run_time_is_the_last_processing_to_completed():
    history = [
        {"status": "QUEUED", "at": 0.0},
        {"status": "PROCESSING", "at": 3.0},
        {"status": "QUEUED", "at": 5.0},  # restarted: its last run counts
        {"status": "PROCESSING", "at": 9.0},
        {"status": "STORING", "at": 20.0},
        {"status": "COMPLETED", "at": 21.5},
    ]
    assert bench.run_time(history) == 12.5
    with pytest.raises(ValueError, match="did not run to COMPLETED"):
        bench.run_time(history[:-1])
