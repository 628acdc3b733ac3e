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
def lcm_factory(etcd_server, docker_client, job_store, learner_image, s3_server, docker_gateway):
    """Build an Lcm over the given nodes (name -> docker client, 2 cpus each) with its own
    scheduler service (`policy`, on `clock`); everything it made is removed afterwards."""
    prefix = f"/t-lcm-{time.monotonic_ns()}"
    etcd = pyetcd.client(host=etcd_server.host, port=etcd_server.port)
    made: list[tuple[Lcm, object]] = []

    def make(engines=None, policy="fifo", clock=time.time) -> Lcm:
        engines = engines or {"local": docker_client}
        nodes = [NodeSpec(name=name, cpus=2, memory_mb=2048) for name in engines]
        port = free_port()
        sched = SchedulerService(SchedulerState(etcd, prefix), nodes, policy, clock)
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
        manager = Lcm(
            settings,
            StatusKeeper(etcd, job_store, prefix),
            job_store,
            {
                name: Deployer(client, platform_id=settings.platform_id, node=name)
                for name, client in engines.items()
            },
            SchedulerClient(f"127.0.0.1:{port}"),
            nodes,
        )
        manager._leading.set()  # the tests drive the leader's loop steps by hand
        manager.created = []
        manager.image = learner_image
        made.append((manager, server))
        return manager

    yield make
    cleaner = Deployer(docker_client)
    for manager, server in made:
        for job_id in manager.created:
            cleaner.remove_job(job_id)
        server.stop(0)
    etcd.delete_prefix(prefix + "/")


@pytest.fixture
def lcm(lcm_factory):
    return lcm_factory()
