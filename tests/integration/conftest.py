"""Fixtures for the integration tests of the LCM: a real scheduler service over gRPC,
real etcd and the real Docker engine, each test in its own etcd prefix; and a 2-node Docker
Swarm on this machine (`swarm_lab`, dlaas.local.swarm) for the tests of the Swarm engine."""

from __future__ import annotations

import time

import pyetcd
import pytest

from dlaas.adapters.engines.docker_engine import Deployer
from dlaas.adapters.etcd_status import StatusKeeper
from dlaas.adapters.grpc_server import start_server
from dlaas.adapters.nodes import NodeSpec
from dlaas.clients.sdk import SchedulerClient
from dlaas.config import PlatformSettings
from dlaas.local.processes import free_port
from dlaas.local.swarm import SwarmLab, SwarmLabError, check_requirements
from dlaas.v1 import scheduler_pb2_grpc
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
        manager.scheduler.close()  # a channel left open goes on reconnecting to its port
        server.stop(0)
    etcd.delete_prefix(prefix + "/")


@pytest.fixture
def lcm(lcm_factory):
    return lcm_factory()


@pytest.fixture(scope="session")
def swarm_lab(session_ram_path, learner_image):
    """A running 2-node swarm (SwarmLab, already up) shared by the session; down at the end.

    `swarm_lab.info()` gives the manager's socket (a Docker base URL), the node names
    ("node-1" is the manager, "node-2" a worker; labels rack=r1/r2, area=a1), their sockets
    and `host_address`, where containers on the swarm reach the host's servers (S3 binds
    0.0.0.0 in these tests). `swarm_lab.client()` is a DockerClient on the manager. A test
    that kills a node restarts it (`restart_node` waits until the manager sees it Ready).
    Skipped where a lab cannot run (not root, a tool missing); the learner image is copied
    to every node.
    """
    try:
        check_requirements()
    except SwarmLabError as e:
        pytest.skip(str(e))
    lab = SwarmLab(
        session_ram_path / "swarm",  # in memory: tests/conftest.py's RAM_ROOT says why
        nodes=2,
        labels={"node-1": {"rack": "r1", "area": "a1"}, "node-2": {"rack": "r2", "area": "a1"}},
        images=[learner_image],
    )
    try:
        lab.up()
        yield lab
    finally:
        lab.down()
