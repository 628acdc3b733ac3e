"""Fixtures for the isolation tests: job containers made by the real deployer on the real
Docker engine, fenced in by the real firewall rules of a test platform.

Every container runs a small python3 script in dlaas/learner:latest instead of a
learner or the helper, with the limits, capabilities and network the plan gives them.
"""

from __future__ import annotations

import dataclasses
import os
import uuid

import pytest
from security_support import MANIFEST, SLEEP

from dlaas.adapters.engines.docker_engine import Deployer
from dlaas.domain.locations import S3Location
from dlaas.domain.manifest import parse_manifest
from dlaas.domain.plan import DeploymentPlan, deployment_plan
from dlaas.local import firewall


@pytest.fixture(scope="session")
def deployer(docker_client) -> Deployer:
    return Deployer(docker_client)


@pytest.fixture(scope="module")
def platform_id() -> str:
    return f"t-sec-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def fenced(platform_id, s3_server):
    """The firewall rules of `platform_id` applied (S3 and its gRPC port of `s3_server`),
    removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("the firewall rules need root")
    try:
        ruleset = firewall.apply(platform_id, s3_server.port, s3_server.grpc_port)
    except firewall.FirewallError as e:
        pytest.skip(f"no firewall: {e}")
    try:
        yield ruleset
    finally:
        firewall.remove(platform_id)


@pytest.fixture(scope="module")
def jobs(deployer, learner_image):
    """make(platform_id, commands, learners, env) -> a deployed plan; all removed after.

    `commands` maps "helper" / "learner-<i>" to a command (others sleep); `env` is added
    to every container's; `changes` replaces fields of every ContainerSpec.
    """
    made: list[str] = []

    def make(
        platform_id: str,
        commands: dict[str, list[str]],
        learners: int = 1,
        env: dict[str, str] | None = None,
        **changes,
    ) -> DeploymentPlan:
        job_id = f"sec-{uuid.uuid4().hex[:12]}"
        plan = deployment_plan(
            platform_id=platform_id,
            job_id=job_id,
            user="mallory",
            manifest=parse_manifest(MANIFEST.format(learners=learners)),
            learners=learners,
            gpu_indices=[],
            image=learner_image,
            helper_image=learner_image,
            data=None,
            results=S3Location("http://s3.invalid", "key", "secret", "results"),
            code=None,
        )

        def adapt(spec, key):
            return dataclasses.replace(
                spec,
                command=commands.get(key, SLEEP),
                env={**spec.env, **(env or {})},
                **changes,
            )

        plan = dataclasses.replace(
            plan,
            helper=adapt(plan.helper, "helper"),
            learners=[adapt(s, f"learner-{i}") for i, s in enumerate(plan.learners)],
        )
        made.append(job_id)
        deployer.deploy(plan)
        return plan

    yield make
    for job_id in made:
        deployer.remove_job(job_id)
