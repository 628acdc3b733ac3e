"""Fixtures for the integration tests of the LCM: a real scheduler service over gRPC,
real etcd and the real Docker engine, each test in its own etcd prefix."""

from __future__ import annotations

import time

import pyetcd
import pytest

from dlaas.config import PlatformSettings
from dlaas.etcd_status import StatusKeeper
from dlaas.grpc_server import start_server
from dlaas.nodes import NodeSpec
from dlaas.sdk import SchedulerClient
from dlaas.servers import free_port
from dlaas.v1 import scheduler_pb2_grpc
from services.lcm.deployer import Deployer
from services.lcm.service import Lcm
from services.scheduler.service import SchedulerService, SchedulerState


@pytest.fixture
def lcm(etcd_server, docker_client, job_store, learner_image, s3_server, docker_gateway):
    prefix = f"/t-lcm-{time.monotonic_ns()}"
    etcd = pyetcd.client(host=etcd_server.host, port=etcd_server.port)
    node = NodeSpec(name="local", cpus=2, memory_mb=2048)
    port = free_port()
    sched = SchedulerService(SchedulerState(etcd, prefix), [node], "fifo")
    server = start_server(
        f"127.0.0.1:{port}",
        lambda s: scheduler_pb2_grpc.add_SchedulerServicer_to_server(sched, s),
        ["dlaas.v1.Scheduler"],
    )
    settings = PlatformSettings(
        s3_endpoint=s3_server.endpoint,
        s3_endpoint_for_containers=f"http://{docker_gateway}:{s3_server.port}",
        s3_access_key=s3_server.access_key,
        s3_secret_key=s3_server.secret_key,
        etcd_prefix=prefix,
        platform_id=f"t{prefix}",
    )
    keeper = StatusKeeper(etcd, job_store, prefix)
    manager = Lcm(
        settings,
        keeper,
        job_store,
        Deployer(docker_client),
        SchedulerClient(f"127.0.0.1:{port}"),
        [node],
    )
    created: list[str] = []
    manager.created = created
    manager.image = learner_image
    yield manager
    for job_id in created:
        manager.deployer.remove_job(job_id)
    server.stop(0)
    etcd.delete_prefix(prefix + "/")
