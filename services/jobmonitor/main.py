"""Entrypoint of the job monitor: `python -m services.jobmonitor.main`.

Configuration: the platform settings (`DLAAS_*`: etcd endpoints and prefix, job store URL,
the machine's Docker engine or the swarm manager, scheduler and LCM addresses, the
operator's triage rows DLAAS_TRIAGE_FILE) plus the monitor's own timings and limits
(`DLAAS_MONITOR_*`). One monitor watches every node: a gang may span
nodes, and only a view of all its containers tells a failed job from a running one.
Runs until SIGTERM or SIGINT.
"""

from __future__ import annotations

import signal
import sys
import threading

import yaml
from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from dlaas.adapters.engines.connect import engines_for_nodes
from dlaas.adapters.etcd_status import StatusKeeper, connect
from dlaas.adapters.grpc_server import configure_logging
from dlaas.adapters.nodes import nodes_or_exit
from dlaas.adapters.notify import hook_notifier
from dlaas.adapters.store import open_store
from dlaas.config import PlatformSettings
from dlaas.domain.errors import PermanentError
from dlaas.domain.ports import JobContainers
from dlaas.domain.triage import Rule, operator_rules
from services.jobmonitor.activity import Limits
from services.jobmonitor.decide import (
    DEFAULT_HELPER_TIMEOUT_S,
    DEFAULT_REQUEUE_RETRY_S,
    DEFAULT_STORE_TIMEOUT_S,
)
from services.jobmonitor.disk import DEFAULT_DISK_POLL_S
from services.jobmonitor.limits import DEFAULT_POLL_S, DEFAULT_STALL_AFTER_S, MAX_STALL_AFTER_S
from services.jobmonitor.monitor import JobMonitor
from services.jobmonitor.watchers import RECONNECT_MAX_S

MAX_TRIAGE_FILE = 256 * 1024


class MonitorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DLAAS_MONITOR_", extra="ignore")

    # Seconds a helper of an ended job may take to store the logs after the finish signal.
    helper_timeout_s: float = DEFAULT_HELPER_TIMEOUT_S
    # Seconds a helper may take to store results and logs while the job is STORING.
    store_timeout_s: float = DEFAULT_STORE_TIMEOUT_S
    # Seconds to wait for the LCM to act on a restart request before asking again.
    requeue_retry_s: float = DEFAULT_REQUEUE_RETRY_S
    # Longest wait between two attempts to reach an engine that stopped answering.
    reconnect_max_s: float = RECONNECT_MAX_S
    # Seconds a Docker call may take before its engine counts as not answering.
    docker_timeout_s: int = 10
    # Safety-net resync of every active job; events drive everything else.
    resync_s: float = 15.0
    # Grace time for learners to stop on SIGTERM before Docker kills them.
    stop_grace_s: int = 10
    # Stalls (services/jobmonitor/limits.py): seconds without a new learner log line when a
    # manifest names no stall_after (0: such jobs are not watched), the most a manifest
    # may ask, and how often a PROCESSING job's learner logs are looked at.
    stall_after_s: float = Field(DEFAULT_STALL_AFTER_S, ge=0)
    max_stall_after_s: float = Field(MAX_STALL_AFTER_S, gt=0)
    stall_poll_s: float = Field(DEFAULT_POLL_S, gt=0, le=60)
    # The most running time any job gets (its max_duration, if shorter, ends it first);
    # 0: no maximum.
    max_duration_s: float = Field(0, ge=0)
    # How often a running job's learners' writable layers are measured (disk.py; the
    # disk sizes are the platform's DLAAS_LEARNER_DISK_MB and the manifests').
    disk_poll_s: float = Field(DEFAULT_DISK_POLL_S, gt=0, le=300)


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
    try:
        rules = load_triage_file(settings.triage_file)
    except ValueError as exc:
        sys.exit(f"jobmonitor: bad configuration: DLAAS_TRIAGE_FILE: {exc}")

    # Imported here: the SDK pulls in gRPC, which the pure parts of this service never need.
    from dlaas.clients.sdk import LcmClient, SchedulerClient

    nodes = nodes_or_exit(settings, "jobmonitor")
    engines: dict[str, JobContainers]
    try:
        # Also for an engine that is down now: the monitor starts, and reconnects with backoff.
        engines = dict(
            engines_for_nodes(settings, [n.name for n in nodes], timeout_s=ms.docker_timeout_s)
        )
    except PermanentError as exc:
        sys.exit(f"jobmonitor: {exc.message}")
    if settings.swarm_manager:
        where = f"the swarm's {len(nodes)} nodes (manager {settings.swarm_manager})"
    else:
        where = f"node {', '.join(engines)} ({settings.docker_host})"
    store = open_store(settings.store_url)
    notifier = hook_notifier(settings, store)
    keeper = StatusKeeper(
        connect(settings.etcd_hostports()), store, settings.etcd_prefix, notifier=notifier,
    )  # fmt: skip
    scheduler = SchedulerClient(settings.scheduler_addr)
    lcm = LcmClient(settings.lcm_addr)
    limits = Limits(
        rules, ms.stall_after_s, ms.max_stall_after_s, ms.stall_poll_s, ms.max_duration_s,
        learner_disk_mb=settings.learner_disk_mb, disk_poll_s=ms.disk_poll_s,
    )  # fmt: skip
    monitor = JobMonitor(
        engines,
        keeper,
        store,
        scheduler.release,
        requeue=lcm.requeue,
        helper_timeout_s=ms.helper_timeout_s,
        store_timeout_s=ms.store_timeout_s,
        requeue_retry_s=ms.requeue_retry_s,
        resync_s=ms.resync_s,
        stop_grace_s=ms.stop_grace_s,
        reconnect_max_s=ms.reconnect_max_s,
        limits=limits,
        notifier=notifier,
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log.info("job monitor watching %s (etcd prefix %s)", where, settings.etcd_prefix)
    monitor.run(stop)
    lcm.close()
    scheduler.close()
    store.close()
    log.info("job monitor stopped")


def load_triage_file(path: str) -> tuple[Rule, ...]:
    """The operator's triage rows from `path` ("": none); ValueError naming the file and
    the row that is wrong."""
    if not path:
        return ()
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_TRIAGE_FILE + 1)
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if len(raw) > MAX_TRIAGE_FILE:
        raise ValueError(f"{path}: larger than {MAX_TRIAGE_FILE // 1024} KiB")
    try:
        rows = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not YAML ({str(exc).splitlines()[0]})") from None
    return operator_rules(rows, path)


if __name__ == "__main__":
    main()
