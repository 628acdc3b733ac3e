"""The one way the platform's processes queue Celery tasks on Redis (the API's purges, the
webhook notifier): a producer-only Celery app, built lazily on first use.
"""

from __future__ import annotations

from dlaas.domain import purge


def producer(name: str, redis_url: str, visibility_timeout_s: float, timeout_s: float):
    """A Celery app that only sends tasks: no results kept, broker connect bounded."""
    from celery import Celery

    app = Celery(name, broker=redis_url, set_as_current=False)
    app.conf.update(
        broker_transport_options=purge.transport_options(visibility_timeout_s),
        broker_connection_timeout=timeout_s,
        task_ignore_result=True,
    )
    return app
