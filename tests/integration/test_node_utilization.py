"""Measured node utilization against the real Docker engine: DockerUsage reads the
platform's running containers' counters (docker stats), the sampler turns two reads into
a CPU rate, and the LCM's `Cluster` carries it to GET /v1/nodes and /metrics.

Each test labels its containers with a platform id of its own, so the containers of
other tests and platforms on this engine are not counted.
"""

from __future__ import annotations

import threading
import uuid

import pytest
from fastapi.testclient import TestClient
from lcm_fakes import fake_lcm
from prometheus_client.parser import text_string_to_metric_families

from dlaas.adapters.engines.docker_usage import DockerUsage
from dlaas.adapters.grpc_server import start_server
from dlaas.clients.sdk import LcmClient
from dlaas.config import ApiSettings, PlatformSettings
from dlaas.domain import jobspec
from dlaas.domain.secretbox import new_key
from dlaas.local.processes import free_port
from dlaas.v1 import lcm_pb2_grpc
from services.api.app import create_app
from services.lcm.grpc_api import LcmServicer
from services.lcm.utilization import UtilizationSampler

BUSY = ["sh", "-c", "while :; do :; done"]
# Holds 64 MiB it has written to (so it is resident), then idles.
HOLDS_MEMORY = ["python3", "-c", "import time; b = b'x' * (64 * 2**20); time.sleep(3600)"]
ADMIN = "tok-admin"


@pytest.fixture
def platform(docker_client, learner_image):
    """(platform id, run(command) -> container): containers labelled as that platform's."""
    platform_id = f"t-util-{uuid.uuid4().hex[:8]}"
    made = []

    def run(command: list[str]):
        c = docker_client.containers.run(
            learner_image,
            command,
            detach=True,
            labels={jobspec.LABEL_MANAGED: platform_id, jobspec.LABEL_JOB: "job-util"},
            network_mode="none",
        )
        made.append(c)
        return c

    try:
        yield platform_id, run
    finally:
        for c in made:
            c.remove(force=True)


def measured(sampler: UtilizationSampler) -> dict:
    """Every node's use after two samples a moment apart (the rate needs two)."""
    sampler.sample()
    threading.Event().wait(1.0)
    sampler.sample()
    return {node: sampler.utilization(node) for node in sampler.sources}


# CPU shares on a shared test machine can be a few percent of a core (load averages far
# above the core count are common here), so a busy container is asserted busier than
# nothing, and than a node with nothing on it, not busier than some fraction of a core.


def test_a_container_burning_cpu_shows_on_its_node_and_an_idle_node_shows_0(
    docker_client, platform
):
    platform_id, run = platform
    run(BUSY)
    sampler = UtilizationSampler(
        {
            "busy": DockerUsage(docker_client, platform_id, "busy"),
            # Another platform's view of the same engine: none of its containers run.
            "idle": DockerUsage(docker_client, platform_id + "-none", "idle"),
        }
    )
    use = measured(sampler)
    assert use["busy"].containers == 1
    assert use["busy"].cpus_used is not None and use["busy"].cpus_used > 0
    assert use["busy"].gpu_percent is None  # no GPU telemetry: unknown, not 0
    assert (use["idle"].cpus_used, use["idle"].memory_mb_used, use["idle"].containers) == (0, 0, 0)


def test_a_sleeping_container_shows_its_memory_and_about_no_cpu(docker_client, platform):
    platform_id, run = platform
    run(HOLDS_MEMORY)
    sampler = UtilizationSampler({"local": DockerUsage(docker_client, platform_id, "local")})
    for _ in range(60):  # until python has started and written its 64 MiB
        sampler.sample()
        use = sampler.utilization("local")
        if (use.memory_mb_used or 0) >= 60:
            break
        threading.Event().wait(0.5)
    use = measured(sampler)["local"]
    assert use.containers == 1
    assert use.memory_mb_used is not None and use.memory_mb_used >= 60
    assert use.cpus_used is not None and use.cpus_used < 0.05


def test_utilization_reaches_the_nodes_route_and_metrics(docker_client, platform, job_store):
    platform_id, run = platform
    run(BUSY)
    sampler = UtilizationSampler(
        {"local": DockerUsage(docker_client, platform_id, "local")}, interval_s=1.0
    )
    lcm = fake_lcm(job_store)
    addr = f"127.0.0.1:{free_port()}"
    server = start_server(
        addr,
        lambda s: lcm_pb2_grpc.add_LifecycleManagerServicer_to_server(
            LcmServicer(lcm, utilization=sampler), s
        ),
        ["dlaas.v1.LifecycleManager"],
    )
    settings = PlatformSettings(
        s3_access_key="unused", s3_secret_key="unused", lcm_addr=addr, secrets_key=new_key()
    )
    app = create_app(
        settings,
        ApiSettings(admin_token=ADMIN),
        store=job_store,
        lcm=LcmClient(addr),
        s3=object(),
        docker=False,
        scheduler=object(),
        tasks=object(),
    )
    sampler.start()
    try:
        with TestClient(app) as client:
            headers = {"Authorization": f"Bearer {ADMIN}"}
            for _ in range(60):  # the first ask wakes the sampler; the rate needs 2 samples
                (node,) = client.get("/v1/nodes", headers=headers).json()["nodes"]
                if node["utilization"]["cpus"] is not None:
                    break
                threading.Event().wait(0.5)
            used = node["utilization"]
            assert used["cpus"] > 0 and used["containers"] == 1
            assert used["gpu_percent"] is None and used["sampled_at"] > 0
            samples = {
                s.name: s.value
                for f in text_string_to_metric_families(client.get("/metrics").text)
                for s in f.samples
                if s.labels.get("node") == "local"
            }
            assert samples["dlaas_node_used_cpus"] > 0
            assert samples["dlaas_node_job_containers"] == 1
            assert "dlaas_node_used_memory_bytes" in samples  # a shell: under 1 MiB
    finally:
        sampler.stop()
        server.stop(0)
