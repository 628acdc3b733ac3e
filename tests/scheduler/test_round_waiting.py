"""Jobs a round stops before still count as waiting when it grows elastic jobs.

A round may stop walking the queue early (a full cluster, fifo's head-of-line block). Without
"wait" decisions it lists the jobs it did not look at only if the grow step asks; they must
be there when it does: idle GPUs go to a waiting job that could use them before a running
job grows into them.
"""

from __future__ import annotations

import pytest

from services.scheduler.policy import Allocation, Node, QueuedJob, RunningJob, Snapshot, schedule

NOW = 10_000.0


def snapshot() -> Snapshot:
    # "el" runs 2 of the 3 learners it asked for on n0 (resized long ago): it would grow into
    # n0's idle GPUs. fifo's head "big" can never fit (8 GPUs a learner) and blocks the queue
    # (fifo_blocking "count": 6 GPUs free < 8), so the round stops before "small", which fits.
    el = RunningJob(
        "el",
        "u",
        tuple(Allocation(i, "n0", (i,), 1.0, 1000) for i in range(2)),
        start_time=0.0,
        min_learners=1,
        max_learners=4,
        target_learners=3,
    )
    queue = [
        QueuedJob("big", "u", 1, 8, 1.0, 1000, submit_time=1.0),
        QueuedJob("small", "u", 1, 1, 1.0, 1000, submit_time=2.0),
    ]
    nodes = [Node("n0", 4, 32.0, 256_000), Node("n1", 4, 32.0, 256_000)]
    return Snapshot(nodes, [el], queue)


@pytest.mark.parametrize("include_waits", [True, False])
def test_a_job_the_round_stopped_before_keeps_idle_gpus_from_growth(include_waits):
    decisions = schedule(snapshot(), NOW, "fifo", include_waits=include_waits)
    acted = [(d.job_id, d.action) for d in decisions if d.action != "wait"]
    assert acted == []  # no grow of "el": "small" waits and could use the idle GPUs
    if include_waits:
        assert [d.job_id for d in decisions] == ["big", "small"]
