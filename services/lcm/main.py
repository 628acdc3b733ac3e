"""Entrypoint of the lifecycle manager: `python -m services.lcm.main`.

Run several replicas against the same etcd: each serves gRPC; the one holding the
leadership lease runs the placement loop.
"""

from __future__ import annotations

import os
import socket
import sys

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from dlaas.adapters.engines.connect import engines_for_nodes
from dlaas.adapters.engines.docker_engine import Deployer
from dlaas.adapters.engines.docker_usage import DockerUsage
from dlaas.adapters.etcd_status import StatusKeeper, connect
from dlaas.adapters.grpc_server import configure_logging, start_server, wait_for_termination
from dlaas.adapters.leader import LeaderElection
from dlaas.adapters.nodes import nodes_or_exit
from dlaas.adapters.notify import hook_notifier
from dlaas.adapters.store import open_store
from dlaas.clients.sdk import SchedulerClient
from dlaas.config import PlatformSettings
from dlaas.domain.errors import PermanentError
from dlaas.domain.keys import EtcdKeys
from dlaas.domain.ports import UsageSource
from dlaas.v1 import lcm_pb2_grpc
from services.lcm.grpc_api import LcmServicer
from services.lcm.service import Lcm
from services.lcm.utilization import UtilizationSampler


class LcmSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DLAAS_LCM_", extra="ignore")

    # This replica's gRPC address; DLAAS_LCM_ADDR may list every replica for clients.
    listen: str = ""
    # Seconds without a lease refresh before a standby takes over (etcd's minimum is 1).
    leader_ttl_s: int = 1
    # Seconds between two samples of the nodes' measured utilization (docker stats).
    utilization_interval_s: float = Field(default=5.0, gt=0.5, le=300)


def main() -> None:
    log = configure_logging("lcm")
    settings = PlatformSettings()
    lcm_settings = LcmSettings()
    store = open_store(settings.store_url)
    etcd = connect(settings.etcd_hostports())
    # Transitions the LCM records reach the users' webhooks (queued, preempted, restarted...).
    keeper = StatusKeeper(
        etcd, store, settings.etcd_prefix, notifier=hook_notifier(settings, store)
    )
    nodes = nodes_or_exit(settings, "lcm")
    try:
        # Also for an engine that is down now: the LCM starts, and counts the node lost.
        deployers = engines_for_nodes(settings, [n.name for n in nodes])
    except PermanentError as exc:
        sys.exit(f"lcm: {exc.message}")
    # A swarm manager's API has no container stats: a swarm node's utilization is unknown.
    usage: dict[str, UsageSource | None] = {
        name: DockerUsage(d.client, settings.platform_id, name) if isinstance(d, Deployer) else None
        for name, d in deployers.items()
    }
    sampler = UtilizationSampler(usage, lcm_settings.utilization_interval_s)
    lcm = Lcm(settings, keeper, store, deployers, SchedulerClient(settings.scheduler_addr), nodes)
    listen = lcm_settings.listen or settings.lcm_addr.split(",")[0]
    server = start_server(
        listen,
        lambda s: lcm_pb2_grpc.add_LifecycleManagerServicer_to_server(
            LcmServicer(lcm, utilization=sampler), s
        ),
        ["dlaas.v1.LifecycleManager"],
    )
    identity = f"{socket.gethostname()}:{os.getpid()}@{listen}"
    election = LeaderElection(
        etcd,
        EtcdKeys(settings.etcd_prefix).lcm_leader,
        identity,
        ttl=lcm_settings.leader_ttl_s,
        on_elected=lcm.on_elected,
        on_lost=lcm.on_lost,
    )
    lcm.start()
    sampler.start()
    election.start()
    log.info("lcm %s serving on %s", identity, listen)
    wait_for_termination(server)
    election.stop()
    sampler.stop()
    lcm.stop()


if __name__ == "__main__":
    main()
