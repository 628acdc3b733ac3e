"""Entrypoint of the lifecycle manager: `python -m services.lcm.main`."""

from __future__ import annotations

import docker

from dlaas.config import PlatformSettings
from dlaas.etcd_status import StatusKeeper, connect
from dlaas.grpc_server import configure_logging, start_server, wait_for_termination
from dlaas.nodes import configured_nodes
from dlaas.sdk import SchedulerClient
from dlaas.store import open_store
from dlaas.v1 import lcm_pb2_grpc
from services.lcm.deployer import Deployer
from services.lcm.service import Lcm, LcmServicer


def main() -> None:
    log = configure_logging("lcm")
    settings = PlatformSettings()
    store = open_store(settings.store_url)
    keeper = StatusKeeper(connect(settings.etcd_hostports()), store, settings.etcd_prefix)
    lcm = Lcm(
        settings,
        keeper,
        store,
        Deployer(docker.DockerClient(base_url=settings.docker_host)),
        SchedulerClient(settings.scheduler_addr),
        configured_nodes(settings),
    )
    server = start_server(
        settings.lcm_addr,
        lambda s: lcm_pb2_grpc.add_LifecycleManagerServicer_to_server(LcmServicer(lcm), s),
        ["dlaas.v1.LifecycleManager"],
    )
    lcm.start()
    log.info("lcm serving on %s", settings.lcm_addr)
    wait_for_termination(server)
    lcm.stop()


if __name__ == "__main__":
    main()
