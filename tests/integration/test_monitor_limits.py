"""The job monitor's limits on the real Docker engine and etcd; the harness (test_monitor.py)
deploys each job the way the LCM does.

A stalled job: a learner prints two epochs, then sleeps; with stall_after 5 s and on_stall
fail the monitor (polling the learners' last lines every second here) fails it `stalled`
within stall_after + 10 s of its last line, stops it and cleans up.

A deadline: a learner that trains on past its max_duration gets SIGTERM, saves a checkpoint
and exits; only then is the helper told to finish (it stores what the learner saved), and
the job ends FAILED `deadline_exceeded`."""

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
# The helper stand-in for the deadline: data ready at once; on the finish signal it stores
# the checkpoint, and fails (exit 12, upload failed) if the learner has not written it yet.
HELPER_NEEDS_CHECKPOINT = """
import os, signal, sys, time
done = []
signal.signal(signal.SIGUSR1, lambda *a: done.append(1))
print('DLAAS-EVENT {"event": "data_ready"}', flush=True)
while not done:
    time.sleep(0.05)
sys.exit(0 if os.path.exists("/job/checkpoints/ckpt") else 12)
"""
# Trains until SIGTERM, then takes a second to write its checkpoint and exits 143 (the
# monitor's grace before SIGKILL is 10 s here, so a loaded machine does not turn it into 137).
TRAINS_ON = """
import os, signal, sys, time
def stop(*_):
    time.sleep(1)
    os.makedirs("/job/checkpoints", exist_ok=True)
    open("/job/checkpoints/ckpt", "w").write("step")
    print("checkpoint saved", flush=True)
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
for step in range(10_000):
    print(f"step {step}", flush=True)
    time.sleep(0.5)
"""
HANGS = "import time\nfor i in (1, 2): print(f'epoch {i}/10', flush=True)\ntime.sleep(120)\n"


def new_job(h, fields: str) -> str:
    job = f"{SCOPE}{uuid.uuid4().hex[:10]}"
    h.jobs.append(job)
    text = (
        f"name: limits-test\nlearners: 1\n{fields}"
        "framework: {name: python, version: '3', command: python3 train.py}\n"
    )
    h.store.create(JobRecord(job, "alice", "limits-test", text, time.time()))
    h.keeper.create(job)
    h.keeper.transition(job, Status.PENDING, "placed on local")
    return job


def test_a_job_that_prints_then_sleeps_fails_stalled(harness):  # noqa: F811 - the fixture
    job = new_job(harness, f"stall_after: {STALL_AFTER}\non_stall: fail\n")
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


def test_at_its_deadline_a_job_checkpoints_then_fails_with_its_results_stored(harness):  # noqa: F811
    job = new_job(harness, "max_duration: 4\n")
    harness.start_monitor(stop_grace_s=10)
    started = time.time()
    harness.deploy(job, HELPER_NEEDS_CHECKPOINT, [TRAINS_ON])

    record = harness.wait_cleaned(job, timeout=60)
    assert (record.status, record.error_code) == (Status.FAILED, "deadline_exceeded")
    assert record.reason.startswith("deadline: ran 4s (max_duration;")
    # The helper found the checkpoint: it was told to finish after the learner saved it.
    assert not record.info.get("logs_incomplete"), record.info.get("logs_note")
    assert [e["exit_code"] for e in record.info["learners"]] == [143]
    ran = record.history[-1].at - started
    print(f"failed deadline_exceeded {ran:.1f} s after the deploy (max_duration 4 s)")
    assert harness.leftovers(job) == []
