"""Entrypoint of the worker: `python -m services.worker.main`.

Configuration: the platform settings (`DLAAS_*`: the Redis broker `DLAAS_REDIS_URL`, the
platform's S3 and key, the job store, `DLAAS_RESULTS_RETENTION_DAYS`,
`DLAAS_RETENTION_SWEEP_S`, `DLAAS_WORKER_VISIBILITY_TIMEOUT_S`). Runs a Celery worker
in this process: one task at a time, on a thread (purges are I/O bound and rare; a pool
of child processes would only cost memory). A thread and not the solo pool: the solo
pool runs the task inside the event loop, which then sends its acknowledgement only once
the task returned whatever `acks_late` says. With a retention set, a thread of this
process queues the retention sweep at start and every `retention_sweep_s` after (not
Celery beat: embedded, beat is a child process that a SIGKILLed worker would leave
behind, still queueing). Stops on SIGTERM (Celery's warm shutdown: a purge under way
finishes, or stays queued for the next worker).
"""

from __future__ import annotations

import logging
import os
import sys
import threading

import redis
from pydantic import ValidationError

from dlaas.adapters.grpc_server import configure_logging
from dlaas.adapters.s3 import platform_client
from dlaas.adapters.store import open_store
from dlaas.config import PlatformSettings
from dlaas.domain.errors import TemporaryError
from dlaas.domain.purge import RETENTION_TASK, cancel_key
from services.worker.tasks import make_app


def worker_argv() -> list[str]:
    return [
        "worker", "--pool=threads", "--concurrency=1", "--loglevel=INFO",
        # No chatter between workers: there is one, and it needs nothing from its peers.
        "--without-gossip", "--without-mingle", "--without-heartbeat",
        f"--hostname=dlaas-worker-{os.getpid()}@%h",
    ]  # fmt: skip


def queue_sweeps(app, every_s: float, log: logging.Logger, stop: threading.Event) -> None:
    """Queue the retention sweep now and every `every_s`; a broker that is down skips one."""
    while True:
        try:
            app.send_task(RETENTION_TASK)
        except Exception as exc:  # noqa: BLE001 - broad: any publish failure; next round retries
            log.warning("could not queue the retention sweep: %s", exc)
        if stop.wait(every_s):
            return


def main() -> None:
    log = configure_logging("worker")
    try:
        settings = PlatformSettings()
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        sys.exit(f"worker: bad configuration: {problems}")
    store = open_store(settings.store_url)
    s3 = platform_client(settings)
    broker = redis.Redis.from_url(settings.redis_url, socket_timeout=5, socket_connect_timeout=5)

    def cancelled(request_id: str) -> bool:
        try:
            return bool(broker.exists(cancel_key(request_id)))
        except redis.RedisError as exc:
            raise TemporaryError(f"redis: cannot read the purge's cancel mark: {exc}") from exc

    app = make_app(settings, store, s3, cancelled)
    retention = settings.results_retention_days
    log.info("worker on %s; retention %s", settings.redis_url.split("@")[-1],
             f"{retention:g} days" if retention > 0 else "off (results kept)")  # fmt: skip
    stop = threading.Event()
    if retention > 0:
        threading.Thread(
            target=queue_sweeps, args=(app, settings.retention_sweep_s, log, stop),
            name="retention", daemon=True,
        ).start()  # fmt: skip
    try:
        app.worker_main(worker_argv())
    finally:
        stop.set()
        store.close()


if __name__ == "__main__":
    main()
