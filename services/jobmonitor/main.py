"""Entrypoint of the job monitor: `python -m services.jobmonitor.main`.

Configuration: the platform settings (`DLAAS_*`: etcd endpoints and prefix, job store URL,
Docker host, scheduler address) plus the monitor's own timings (`DLAAS_MONITOR_*`).
Runs until SIGTERM or SIGINT.
"""

from __future__ import annotations

import signal
import sys
import threading

import docker
import docker.errors
from pydantic import ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from dlaas.config import PlatformSettings
from dlaas.etcd_status import StatusKeeper, connect
from dlaas.grpc_server import configure_logging
from dlaas.store import open_store
from services.jobmonitor.decide import DEFAULT_HELPER_TIMEOUT_S, DEFAULT_STORE_TIMEOUT_S
from services.jobmonitor.monitor import JobMonitor


class MonitorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DLAAS_MONITOR_", extra="ignore")

    # Seconds a helper of an ended job may take to store the logs after the finish signal.
    helper_timeout_s: float = DEFAULT_HELPER_TIMEOUT_S
    # Seconds a helper may take to store results and logs while the job is STORING.
    store_timeout_s: float = DEFAULT_STORE_TIMEOUT_S
    # Safety-net resync of every active job; events drive everything else.
    resync_s: float = 15.0
    # Grace time for learners to stop on SIGTERM before Docker kills them.
    stop_grace_s: int = 10


def main() -> None:
    log = configure_logging("jobmonitor")
    try:
        settings = PlatformSettings()
        ms = MonitorSettings()
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        sys.exit(f"jobmonitor: bad configuration: {problems}")

    # Imported here: the SDK pulls in gRPC, which the pure parts of this service never need.
    from dlaas.sdk import SchedulerClient

    try:
        engine = docker.DockerClient(base_url=settings.docker_host)
    except docker.errors.DockerException as exc:
        sys.exit(f"jobmonitor: no Docker engine at {settings.docker_host}: {exc}")
    store = open_store(settings.store_url)
    keeper = StatusKeeper(connect(settings.etcd_hostports()), store, settings.etcd_prefix)
    scheduler = SchedulerClient(settings.scheduler_addr)
    monitor = JobMonitor(
        engine,
        keeper,
        store,
        scheduler.release,
        helper_timeout_s=ms.helper_timeout_s,
        store_timeout_s=ms.store_timeout_s,
        resync_s=ms.resync_s,
        stop_grace_s=ms.stop_grace_s,
        platform_id=settings.platform_id,
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log.info("job monitor watching %s (etcd prefix %s)", settings.docker_host, settings.etcd_prefix)
    monitor.run(stop)
    scheduler.close()
    store.close()
    log.info("job monitor stopped")


if __name__ == "__main__":
    main()
