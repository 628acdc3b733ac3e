"""A stalled job on the real Docker engine and etcd: a learner prints two epochs, then
sleeps; with stall_after 5 s and on_stall fail the monitor (polling the learners' last
lines every second here) fails it `stalled` within stall_after + 10 s of its last line,
stops it and cleans up. The harness (test_monitor.py) deploys the job the way the LCM does."""

from __future__ import annotations

import time
import uuid
from datetime import datetime

from test_monitor import (  # noqa: F401 - harness, image and keeper are fixtures
    HELPER_OK,
    SCOPE,
    harness,
    image,
    keeper,
)

from dlaas.adapters.store.base import JobRecord
from dlaas.domain import jobspec
from dlaas.domain.status import Status
from services.jobmonitor.activity import Limits

STALL_AFTER = 5
HANGS = "import time\nfor i in (1, 2): print(f'epoch {i}/10', flush=True)\ntime.sleep(120)\n"


def test_a_job_that_prints_then_sleeps_fails_stalled(harness):  # noqa: F811 - the fixture
    job = f"{SCOPE}{uuid.uuid4().hex[:10]}"
    harness.jobs.append(job)
    text = (
        f"name: stall-test\nlearners: 1\nstall_after: {STALL_AFTER}\non_stall: fail\n"
        "framework: {name: python, version: '3', command: python3 train.py}\n"
    )
    harness.store.create(JobRecord(job, "alice", "stall-test", text, time.time()))
    harness.keeper.create(job)
    harness.keeper.transition(job, Status.PENDING, "placed on local")
    harness.start_monitor(limits=Limits(poll_s=1))
    harness.deploy(job, HELPER_OK, [HANGS])

    # When the learner printed its last line, by the engine's own clock (read before the
    # cleanup removes the container).
    name = jobspec.learner_name(job, 0)
    line = harness.wait_until(
        "epoch 2",
        lambda: next(
            (
                x
                for x in harness.docker.api.logs(name, timestamps=True).decode().splitlines()
                if "epoch 2/10" in x
            ),
            None,
        ),
    )
    printed = datetime.fromisoformat(line.split()[0][:26] + "+00:00").timestamp()

    record = harness.wait_cleaned(job, timeout=60)
    assert (record.status, record.error_code) == (Status.FAILED, "stalled")
    assert "learner 0 (running): last line 'epoch 2/10'" in record.reason
    seen_after = record.info["stall"]["at"] - printed
    print(f"stall seen {seen_after:.1f} s after the last line (stall_after {STALL_AFTER} s)")
    assert STALL_AFTER <= seen_after <= STALL_AFTER + 10
    assert harness.leftovers(job) == []
