"""The log stream of a learner across a restart of its job (dlaas.adapters.logs), live: the real
reader against the real Docker engine and SeaweedFS. The round logic over scripted
sources is in tests/unit/test_logs.py.
"""

from __future__ import annotations

import contextlib
import threading
import time

import docker.errors
import pytest

from dlaas.adapters.engines.docker_engine import Deployer
from dlaas.adapters.logs import LogReader
from dlaas.domain import jobspec
from dlaas.domain.locations import S3Location
from dlaas.learner.paths import RUN_START_META

RUN1 = [f"run1 line {i}" for i in range(5)]
RUN2 = [f"run2 line {i}" for i in range(4)]
PLATFORM = "test-logs"


class RealReader(LogReader):
    """The real reader on the real engine (through its Docker adapter) and S3; the job's
    status is the test's."""

    def __init__(self, docker_client, s3_client):
        engine = Deployer(docker_client, platform_id=PLATFORM, node="local")
        super().__init__(None, None, {"local": engine}, lambda _loc: s3_client, poll_s=0.05)
        self.final = threading.Event()

    def _final(self, job_id, shared=False):
        return self.final.is_set()


@pytest.mark.docker
def test_a_live_stream_spans_a_restart_without_gap_or_duplicate(
    docker_client, learner_image, s3_client, s3_bucket
):
    job_id = "l" + str(time.monotonic_ns())[-10:]
    name, key = jobspec.learner_name(job_id, 0), jobspec.log_object_key(job_id, 0)
    labels = {  # as the LCM labels a learner
        jobspec.LABEL_MANAGED: PLATFORM,
        jobspec.LABEL_JOB: job_id,
        jobspec.LABEL_ROLE: jobspec.ROLE_LEARNER,
        jobspec.LABEL_LEARNER: "0",
    }

    def learner(lines: list[str], wait_s: float):
        script = (
            f"import time\ntime.sleep({wait_s})\n"
            f"for line in {lines!r}:\n    print(line, flush=True)\n    time.sleep(0.05)\n"
        )
        return docker_client.containers.run(
            learner_image, ["python3", "-c", script], name=name, labels=labels,
            detach=True, init=True,
        )  # fmt: skip

    def helper_upload(lines: list[str], start: int) -> None:
        body = "".join(line + "\n" for line in lines).encode()
        s3_client.put_object(
            Bucket=s3_bucket, Key=key, Body=body, Metadata={RUN_START_META: str(start)}
        )

    reader = RealReader(docker_client, s3_client)
    got: list[str] = []
    follower = threading.Thread(
        target=lambda: got.extend(
            reader.stream(S3Location("", "", "", s3_bucket), job_id, 0, offset=2, follow=True)
        ),
        daemon=True,
    )
    containers = []
    try:
        containers.append(learner(RUN1, 0))
        follower.start()
        deadline = time.monotonic() + 20
        while len(got) < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        containers[0].wait(timeout=20)
        helper_upload(RUN1, 0)  # run 1's helper stores the log, then it is removed
        containers[0].remove(force=True)
        containers.append(learner(RUN2, 1.0))  # run 2 waits for its helper's data_ready
        time.sleep(0.3)
        helper_upload(RUN1, 5)  # ... who restored the log and marked where run 2 starts
        containers[1].wait(timeout=20)
        helper_upload(RUN1 + RUN2, 5)  # run 2's final upload
        reader.final.set()
        follower.join(timeout=20)
    finally:
        for c in containers:
            with contextlib.suppress(docker.errors.APIError):
                c.remove(force=True)
    assert not follower.is_alive()
    assert got == (RUN1 + RUN2)[2:]
