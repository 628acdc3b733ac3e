"""The REST API's application: wiring, error mapping and metrics, in one place.

`create_app(settings, api_settings, store=..., lcm=..., s3=..., docker=...)` builds a
FastAPI app around its adapters; `main.py` passes the real ones, tests inject theirs.
Domain errors (dlaas.domain.errors) become HTTP codes here and nowhere else; the body is
always `{"error", "message", "problems"}` and never a stack trace.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.exceptions import HTTPException as StarletteHTTPException

from dlaas.adapters.logs import LogReader
from dlaas.adapters.s3 import STORE_UNREACHABLE, platform_client
from dlaas.adapters.store import JobStore, open_store
from dlaas.config import ApiSettings, PlatformSettings
from dlaas.domain import errors
from services.api.auth import Authenticator, AuthMetrics, FailureLimiter, TooManyFailures
from services.api.deps import Deps
from services.api.errors import Forbidden, HookNotFound, NoResults, Unauthorized, error_body
from services.api.models import ERROR_MEANINGS, error_responses, manifest_schemas

log = logging.getLogger(__name__)

# Domain error -> HTTP status. Anything not listed is a 500 with no details.
STATUS_FOR: dict[type[errors.DlaasError], int] = {
    Unauthorized: 401,
    Forbidden: 403,
    errors.InvalidManifest: 422,
    errors.InvalidRequest: 422,
    errors.JobNotFound: 404,
    NoResults: 404,
    HookNotFound: 404,
    errors.JobExists: 409,
    errors.CapacityExceeded: 422,
    errors.ImageUnavailable: 422,
    errors.InvalidTransition: 409,
    errors.PayloadTooLarge: 413,
    TooManyFailures: 429,  # before its base class, TemporaryError
    errors.TemporaryError: 503,  # includes Conflict: retry
}

# Routes anyone may call, without a token.
PUBLIC_PATHS = frozenset({"/health", "/metrics", "/docs", "/docs/oauth2-redirect", "/openapi.json"})


class Metrics:
    """The API's Prometheus metrics, in a registry of its own (one per app).

    `registry` is what /metrics exposes: this replica's own counters (kept in `counted`)
    with its `replica` label added, and, once `watch()` is called, the platform's series
    computed at scrape time (services/api/opmetrics.py).
    """

    def __init__(self, replica: str = "") -> None:
        # Imported here: opmetrics reuses the nodes route, which imports this module.
        from services.api.opmetrics import ReplicaLabels

        # Named replicas share one port: unnamed, the host name still tells them apart.
        self.replica = replica or socket.gethostname()
        self.counted = CollectorRegistry()
        self.registry = CollectorRegistry()
        self.registry.register(ReplicaLabels(self.counted, self.replica))
        self.requests = Counter(
            "dlaas_api_requests_total",
            "HTTP requests by method, route and status code",
            ["method", "route", "status"],
            registry=self.counted,
        )
        self.latency = Histogram(
            "dlaas_api_request_seconds",
            "Time to answer an HTTP request (to the first byte of a stream)",
            ["method", "route"],
            registry=self.counted,
        )
        self.submitted = Counter(
            "dlaas_api_jobs_submitted_total", "Jobs accepted by the LCM", registry=self.counted
        )
        self.refused = Counter(
            "dlaas_api_jobs_refused_total",
            "Submissions refused, by error code",
            ["error"],
            registry=self.counted,
        )

    def watch(self, store: JobStore, lcm: Any) -> None:
        """Expose the platform's state (jobs, queue, nodes, restarts) read at each scrape."""
        from services.api.opmetrics import PlatformCollector

        self.registry.register(PlatformCollector(store, lcm, self.replica))


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(errors.DlaasError)
    async def domain_error(request: Request, exc: errors.DlaasError) -> JSONResponse:
        status = next((code for cls, code in STATUS_FOR.items() if isinstance(exc, cls)), 500)
        problems = getattr(exc, "problems", None)
        if problems is None and isinstance(exc, errors.InvalidRequest | errors.PayloadTooLarge):
            problems = [exc.message]  # "field: what is wrong", as for manifests
        message = exc.message if status != 500 else "internal error; see the API log"
        if status == 500:
            log.error("unmapped domain error on %s: %s", request.url.path, exc.message)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        if status in (429, 503):
            headers = {"Retry-After": str(max(1, round(getattr(exc, "delay_s", 1.0))))}
        return JSONResponse(error_body(exc.code, message, problems), status, headers=headers)

    # A store the route reads (a user's own, reached under the egress rule, or the
    # platform's) that does not answer is a 503, not a 500: no route catches it on every path
    # (a metrics read of a job whose store is down was a 500). The store is not named.
    for unreachable in STORE_UNREACHABLE:

        @app.exception_handler(unreachable)
        async def store_unreachable(request: Request, exc: Exception) -> JSONResponse:
            log.warning("a data store did not answer on %s: %s", request.url.path, exc)
            message = f"the job's data store did not answer ({type(exc).__name__}); try again later"
            body = error_body(errors.TemporaryError.code, message)
            return JSONResponse(body, 503, headers={"Retry-After": "10"})

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for err in exc.errors():
            if err.get("type") == "json_invalid":  # its loc is ("body", character offset)
                at = err.get("loc", ())[-1]
                problems.append(f"body: malformed JSON at character {at}")
                continue
            loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path")]
            problems.append(f"{'.'.join(loc) or 'request'}: {err.get('msg', 'invalid')}")
        return JSONResponse(
            error_body("invalid_request", "invalid request: " + "; ".join(problems), problems),
            422,
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse(error_body(code, str(exc.detail)), exc.status_code)

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        # The trace goes to the API log only; the client gets a plain message.
        log.exception("internal error on %s %s", request.method, request.url.path)
        return JSONResponse(error_body("internal", "internal error; see the API log"), 500)


class RequestMetrics:
    """ASGI middleware: count every request by route and status, and time it to its first
    byte (a follow's stream is not its latency).

    Plain ASGI rather than `@app.middleware("http")`: Starlette's BaseHTTPMiddleware runs
    each request through a task group and memory streams, which cost more CPU than most
    routes here do.
    """

    def __init__(self, app, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        recorded = False

        def record(status: int) -> None:
            nonlocal recorded
            recorded = True
            path = getattr(scope.get("route"), "path", "unmatched")
            method = scope["method"]
            self.metrics.requests.labels(method, path, str(status)).inc()
            self.metrics.latency.labels(method, path).observe(time.perf_counter() - start)

        async def timed_send(message):
            if message["type"] == "http.response.start" and not recorded:
                record(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            if not recorded:  # raised before answering: the outer handler answers 500
                record(500)


class BodyLimit:
    """ASGI middleware: refuse request bodies over `limit` bytes while they arrive.

    The multipart parser spools uploads to disk before a route runs; this bounds that
    spool (Content-Length first, then the bytes actually received) so an oversized
    archive is refused with 413 instead of being stored.
    """

    def __init__(self, app, limit: int, data_limit: int = 0):
        self.app = app
        self.limit = limit
        # Training data uploads (PUT /v1/data/...) have a limit of their own.
        self.data_limit = data_limit or limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.data_limit if scope.get("path", "").startswith("/v1/data/") else self.limit
        length = dict(scope.get("headers") or ()).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            return await self._refuse(send, limit)
        received = 0
        started = False

        async def counting_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise errors.PayloadTooLarge(self._message(limit))
            return message

        async def tracking_send(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except errors.PayloadTooLarge:
            if not started:
                await self._refuse(send, limit)

    @staticmethod
    def _message(limit: int) -> str:
        return f"request: the body is larger than {limit // 2**20} MiB"

    async def _refuse(self, send, limit: int) -> None:
        resp = JSONResponse(error_body("payload_too_large", self._message(limit)), 413)
        await send({"type": "http.response.start", "status": 413, "headers": resp.raw_headers})
        await send({"type": "http.response.body", "body": resp.body})


def _node_views(settings: PlatformSettings) -> dict[str, Any]:
    """One JobContainers per node, where the learners' live log lines are read: the swarm's
    nodes through its manager, or the machine's one engine. None when the engine does not
    answer now (log lines then come from S3 only)."""
    from dlaas.adapters.engines.connect import engines_for_nodes
    from dlaas.adapters.nodes import NodesError, configured_nodes

    try:
        names = [n.name for n in configured_nodes(settings)]
        return dict(engines_for_nodes(settings, names, down_ok=False))
    except (NodesError, errors.DlaasError) as exc:
        host = settings.swarm_manager or settings.docker_host
        log.warning("Docker engine at %s not reachable (%s); logs from S3 only", host, exc)
        return {}


def create_app(
    settings: PlatformSettings,
    api_settings: ApiSettings,
    *,
    store: JobStore | None = None,
    lcm: Any = None,
    s3: Any = None,
    docker: Any = None,
    scheduler: Any = None,
    tasks: Any = None,
    failure_counts: Any = None,
    log_poll_s: float = 0.5,
) -> FastAPI:
    """The API app; real adapters are built from `settings` for any not given.

    `docker`: the nodes' container views for live log lines (node name -> JobContainers,
    or one JobContainers); None builds one per configured node; `docker=False` runs
    without an engine (log lines then come from S3 only). `failure_counts`: where failed
    token checks are counted for every replica; None counts them in Redis,
    `failure_counts=False` leaves each replica to count its own.
    """
    from dlaas.clients.sdk import LcmClient, SchedulerClient

    store = store or open_store(settings.store_url)
    lcm = lcm or LcmClient(settings.lcm_addr)
    # A short deadline: the queue is shown alongside a job, which must not wait long for it.
    scheduler = scheduler or SchedulerClient(settings.scheduler_addr, timeout=5.0)
    s3 = s3 or platform_client(settings)
    if docker is False:  # explicitly no engine: logs come from S3 only
        docker = None
    elif docker is None:
        docker = _node_views(settings)
    metrics = Metrics(api_settings.replica)
    if failure_counts is None:  # in Redis, so the guessing limit holds across replicas
        from dlaas.adapters.failure_counts import RedisFailureCounts

        failure_counts = RedisFailureCounts(settings.redis_url)
    limiter = FailureLimiter(
        api_settings.auth_max_failures,
        api_settings.auth_failure_window_s,
        shared=None if failure_counts is False else failure_counts,
    )
    tokens = Authenticator(
        store,
        api_settings.admin_token.get_secret_value(),
        limiter=limiter,
        metrics=AuthMetrics(metrics.counted),
    )
    metrics.watch(store, lcm)
    deps = Deps(settings, api_settings, store, lcm, s3, scheduler, tokens, None, metrics)  # type: ignore[arg-type]
    deps.logs = LogReader(store, settings, docker, deps.s3_for, poll_s=log_poll_s)
    if tasks is None:
        from services.api.tasks import CeleryTaskQueue

        tasks = CeleryTaskQueue(settings.redis_url, settings.worker_visibility_timeout_s)
    deps.tasks = tasks

    app = FastAPI(
        title="dlaas",
        version="1",
        summary="Deep-learning training as a service: submit manifests, follow jobs, fetch results.",
    )
    app.state.deps = deps
    _install_error_handlers(app)

    # Manifest and form fields get 1 MiB of headroom above the archive limit; training data
    # uploads (PUT /v1/data/...) have a limit of their own. Request metrics sit outside it,
    # so a refused upload is counted as the 413 it gets.
    app.add_middleware(
        BodyLimit,
        limit=api_settings.max_code_archive_mb * 2**20 + 2**20,
        data_limit=api_settings.max_data_object_mb * 2**20,
    )
    app.add_middleware(RequestMetrics, metrics=metrics)

    from services.api import dashboard
    from services.api.admin import router as admin_router
    from services.api.dashboard.nodes import router as nodes_router
    from services.api.data import router as data_router
    from services.api.hooks import router as hooks_router
    from services.api.metrics import router as metrics_router
    from services.api.outputs import router as outputs_router
    from services.api.routes import router
    from services.api.system import system_router
    from services.api.usage import router as usage_router

    # Every /v1 route needs a token and may find a platform service not answering.
    v1_errors = error_responses(401, 503)
    app.include_router(system_router)
    app.include_router(router, responses=v1_errors)
    app.include_router(outputs_router, responses=v1_errors)
    app.include_router(admin_router, responses=v1_errors)
    app.include_router(data_router, responses=v1_errors)
    app.include_router(metrics_router, responses=v1_errors)
    app.include_router(hooks_router, responses=v1_errors)
    app.include_router(nodes_router, responses=v1_errors)
    app.include_router(usage_router, responses=v1_errors)
    # The web dashboard at /ui: static files, and its own Content-Security-Policy.
    dashboard.mount(app)
    app.add_middleware(dashboard.SecurityHeaders)
    _document(app)
    return app


def _document(app: FastAPI) -> None:
    """Complete the OpenAPI spec FastAPI derives from the routes.

    It adds the manifest's schemas (the submit route reads its body by hand, so FastAPI
    cannot see them) and, where FastAPI documents its own 422 body for invalid
    parameters, puts the `ErrorReply` that `bad_request` above really answers with.
    """
    derive = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        spec = derive()
        schemas = spec.setdefault("components", {}).setdefault("schemas", {})
        schemas.update(manifest_schemas())
        invalid = {
            "description": ERROR_MEANINGS[422],
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/ErrorReply"}}
            },
        }
        for operations in spec.get("paths", {}).values():
            for operation in operations.values():
                answers = operation.get("responses", {})
                if "HTTPValidationError" in json.dumps(answers.get("422", {})):
                    answers["422"] = invalid
        schemas.pop("HTTPValidationError", None)
        schemas.pop("ValidationError", None)
        return spec

    app.openapi = openapi  # type: ignore[method-assign]
