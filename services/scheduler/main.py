"""Entrypoint of the scheduler service: `python -m services.scheduler.main`."""

from __future__ import annotations

import sys
from dataclasses import replace

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from dlaas.adapters.etcd_status import connect
from dlaas.adapters.grpc_server import configure_logging, start_server, wait_for_termination
from dlaas.adapters.nodes import nodes_or_exit
from dlaas.config import PlatformSettings
from dlaas.v1 import scheduler_pb2_grpc
from services.scheduler.policy import DEFAULT_CONFIG, DEFAULT_POLICY, PolicyConfig, policy_problem
from services.scheduler.service import SchedulerService, SchedulerState


class SchedulerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DLAAS_SCHEDULER_", extra="ignore")

    # fifo | priority | las | fair | default (see services/scheduler/policy). The LCM
    # carries out every decision (start, preempt, shrink, grow). One default everywhere
    # (policy.DEFAULT_POLICY): the live platform runs the policy the simulator measures.
    policy: str = DEFAULT_POLICY
    # Elastic growth without thrash (PolicyConfig, docs/scheduling.md): no job grown within
    # this many seconds of its (re)start or last resize (0: off); a resize's restart pause in
    # seconds until pauses are measured (restarts.py); how many times its restarts a loan of
    # idle learners must pay back (0: off).
    resize_interval_s: float = Field(DEFAULT_CONFIG.resize_interval_s, ge=0, le=86_400)
    restart_s: float = Field(DEFAULT_CONFIG.restart_s, ge=0, le=3_600)
    grow_payback: float = Field(DEFAULT_CONFIG.grow_payback, ge=0, le=100)

    @field_validator("policy")
    @classmethod
    def _known(cls, v: str) -> str:
        # Checked at start-up: a typo must stop the service, not fail every round later.
        problem = policy_problem(v)
        if problem:
            raise ValueError(problem.removeprefix("policy: "))
        return v

    def policy_config(self) -> PolicyConfig:
        """The policies' configuration with these settings' knobs."""
        return replace(
            DEFAULT_CONFIG,
            resize_interval_s=self.resize_interval_s,
            restart_s=self.restart_s,
            grow_payback=self.grow_payback,
        )


def load_settings() -> SchedulerSettings:
    """The scheduler's settings; exits naming the DLAAS_SCHEDULER_ variable that is wrong."""
    try:
        return SchedulerSettings()
    except ValidationError as exc:
        problems = "; ".join(
            f"DLAAS_SCHEDULER_{'.'.join(str(p) for p in e['loc']).upper()}: "
            f"{e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        sys.exit(f"scheduler: bad configuration: {problems}")


def main() -> None:
    log = configure_logging("scheduler")
    settings = PlatformSettings()
    sched = load_settings()
    etcd = connect(settings.etcd_hostports())
    service = SchedulerService(
        SchedulerState(etcd, settings.etcd_prefix),
        nodes_or_exit(settings, "scheduler"),
        sched.policy,
        span_nodes=bool(settings.swarm_manager),
        config=sched.policy_config(),
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
