"""Helpers for the LCM integration tests (the fixture `lcm` is in conftest.py)."""

from __future__ import annotations

from dlaas.domain import jobspec

MANIFEST = """
name: sleeper
learners: {learners}
cpus: 0.5
memory: 256MiB
framework:
  name: python
  image: {image}
  command: sleep 30
"""


def submit(lcm, job_id, learners=2, image=None, extra=""):
    lcm.created.append(job_id)
    text = MANIFEST.format(learners=learners, image=image or lcm.image) + extra
    return lcm.submit(job_id, "alice", text, "")


def containers(docker_client, job_id):
    return docker_client.containers.list(
        all=True, filters={"label": f"{jobspec.LABEL_JOB}={job_id}"}, ignore_removed=True
    )
