"""Entrypoint of the scheduler service: `python -m services.scheduler.main`."""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict

from dlaas.config import PlatformSettings
from dlaas.etcd_status import connect
from dlaas.grpc_server import configure_logging, start_server, wait_for_termination
from dlaas.nodes import nodes_or_exit
from dlaas.v1 import scheduler_pb2_grpc
from services.scheduler.service import SchedulerService, SchedulerState


class SchedulerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DLAAS_SCHEDULER_", extra="ignore")

    # fifo | priority | las | fair | default (see services/scheduler/policy). The LCM
    # carries out every decision (start, preempt, shrink, grow). "priority" preempts only
    # for a higher priority, which is what users of a shared cluster expect by default.
    policy: str = "priority"


def main() -> None:
    log = configure_logging("scheduler")
    settings = PlatformSettings()
    sched = SchedulerSettings()
    etcd = connect(settings.etcd_hostports())
    service = SchedulerService(
        SchedulerState(etcd, settings.etcd_prefix),
        nodes_or_exit(settings, "scheduler"),
        sched.policy,
    )
    host, _, port = settings.scheduler_addr.rpartition(":")
    server = start_server(
        f"{host}:{port}",
        lambda s: scheduler_pb2_grpc.add_SchedulerServicer_to_server(service, s),
        ["dlaas.v1.Scheduler"],
    )
    log.info("scheduler serving on %s with policy %s", settings.scheduler_addr, sched.policy)
    wait_for_termination(server)


if __name__ == "__main__":
    main()
