"""Disk limits on the real Docker engine and etcd (the harness of test_monitor.py deploys
each job the way the LCM does; the monitor is the real one).

A learner that writes past its disk size into its container's file system (the writable
layer, which overlay2 on ext4 cannot bound) is measured by the monitor (SizeRw) and its job
ends FAILED `disk_full` with its last log lines, while a neighbour job on the same engine
completes. A learner that fills the job volume is seen by the helper's real volume walk
(services/learner_helper/diskwatch.py, run in the helper stand-in) and fails the same way."""

from __future__ import annotations

import time
import uuid

from test_monitor import (  # noqa: F401 - harness, image and keeper are fixtures
    HELPER_OK,
    SCOPE,
    harness,
    image,
    keeper,
)

from dlaas.adapters.store.base import JobRecord
from dlaas.domain.status import Status
from services.jobmonitor.activity import Limits

# Writes 64 MiB in 4 MiB steps (each synced: the bytes are on disk, not in the page cache
# only) to `where`, printing each step, then waits to be stopped.
FILLS = """
import os, time
print("epoch 1/10 loss 0.9", flush=True)
with open("{where}", "wb") as f:
    for step in range(16):
        f.write(os.urandom(4 * 2**20)); f.flush(); os.fsync(f.fileno())
        print(f"wrote {{4 * (step + 1)}} MiB", flush=True)
        time.sleep(0.1)
time.sleep(120)
"""
NEIGHBOUR = """
import time
for i in range(8):
    print(f"epoch {i}", flush=True)
    time.sleep(1)
"""
# The helper stand-in with the real volume watch (its limit as the plan gives it).
HELPER_WATCHES_VOLUME = (
    """
import pathlib, threading
from dlaas.domain.jobspec import format_event
from services.learner_helper import diskwatch
diskwatch.start(pathlib.Path("/job"), {"DLAAS_VOLUME_LIMIT_MB": "16"},
                lambda e, **f: print(format_event(e, **f), flush=True), threading.Event())
"""
    + HELPER_OK
)


def new_job(h, fields: str) -> str:
    job = f"{SCOPE}{uuid.uuid4().hex[:10]}"
    h.jobs.append(job)
    text = (
        f"name: disk-test\nlearners: 1\n{fields}"
        "framework: {name: python, version: '3', command: python3 train.py}\n"
    )
    h.store.create(JobRecord(job, "alice", "disk-test", text, time.time()))
    h.keeper.create(job)
    h.keeper.transition(job, Status.PENDING, "placed on local")
    return job


def test_a_learner_writing_past_its_disk_fails_disk_full_and_a_neighbour_completes(harness):  # noqa: F811
    full = new_job(harness, "disk: 16MiB\n")
    neighbour = new_job(harness, "")  # the platform's default: 1 GiB here
    harness.start_monitor(limits=Limits(learner_disk_mb=1024, disk_poll_s=1))
    started = time.time()
    harness.deploy(neighbour, HELPER_OK, [NEIGHBOUR])
    harness.deploy(full, HELPER_OK, [FILLS.format(where="/var/tmp/fill")])

    record = harness.wait_cleaned(full, timeout=60)
    took = record.history[-1].at - started
    assert (record.status, record.error_code) == (Status.FAILED, "disk_full"), record.reason
    assert record.reason.startswith("disk_full: learner 0 wrote "), record.reason
    assert "its disk size is 16 MiB (the manifest's `disk`)" in record.reason
    assert "last log lines of learner 0:\nepoch 1/10 loss 0.9\nwrote 4 MiB" in record.reason
    written = record.reason.split("last log lines")[1].count("wrote ")
    print(f"disk_full {took:.1f} s after the deploy, {4 * written} MiB written (disk 16 MiB)")
    assert harness.leftovers(full) == []

    done = harness.wait_cleaned(neighbour, timeout=60)
    assert done.status == Status.COMPLETED, done.reason


def test_a_learner_filling_the_job_volume_fails_disk_full(harness):  # noqa: F811
    job = new_job(harness, "disk: 16MiB\n")
    harness.start_monitor(limits=Limits(learner_disk_mb=1024, disk_poll_s=1))
    started = time.time()
    harness.deploy(job, HELPER_WATCHES_VOLUME, [FILLS.format(where="/job/fill")])

    record = harness.wait_cleaned(job, timeout=60)
    took = record.history[-1].at - started
    assert (record.status, record.error_code) == (Status.FAILED, "disk_full"), record.reason
    assert record.reason.startswith("disk_full: the job volume holds "), record.reason
    assert "its learners' disk sizes add up to 16 MiB" in record.reason
    tail = record.reason.split("; last log lines of learner 0:\n")[1].splitlines()
    assert tail[-1].startswith("wrote "), record.reason  # its last 10 lines, the newest last
    print(f"disk_full (volume) {took:.1f} s after the deploy, {record.reason.split(';')[0]}")
    assert harness.leftovers(job) == []
