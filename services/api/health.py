"""What the API can tell about the components it depends on: `GET /health?components=true`.

Each probe asks one component whether it answers: the job store (a one-row read), every
LCM replica and the scheduler (the gRPC health service), and the platform's S3 (a HEAD
of its bucket; any answer below 500, "no such bucket" included, means S3 answers). The
probes run side by side and each gets `PROBE_TIMEOUT_S`, so a report takes about that
long even when everything is down. Plain `/health` stays a cheap liveness answer (the
store only): `dlaas up`, the supervisor and compose health checks call it often.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dlaas.adapters.s3 import bucket_answers
from dlaas.adapters.store.base import JobStore

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class ComponentHealth:
    ok: bool
    detail: str


def grpc_serving(address: str, timeout: float = PROBE_TIMEOUT_S) -> ComponentHealth:
    """Whether the gRPC server at `address` says SERVING to a health check."""
    try:
        with grpc.insecure_channel(address) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=timeout
            )
    except grpc.RpcError as exc:
        code = exc.code().name if hasattr(exc, "code") else "error"
        return ComponentHealth(False, f"{address} does not answer ({code})")
    name = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    return ComponentHealth(reply.status == health_pb2.HealthCheckResponse.SERVING, name)


def replicas_serving(addresses: str, timeout: float = PROBE_TIMEOUT_S) -> ComponentHealth:
    """A replicated gRPC service ("host:port,host:port"): healthy while one replica serves."""
    replicas = [a.strip() for a in addresses.split(",") if a.strip()]
    answers = [grpc_serving(a, timeout) for a in replicas]
    serving = sum(a.ok for a in answers)
    detail = f"{serving} of {len(replicas)} replicas serving"
    down = [a.detail for a in answers if not a.ok]
    if down:
        detail += "; " + "; ".join(down)
    return ComponentHealth(serving > 0, detail)


def store_answers(store: JobStore) -> ComponentHealth:
    try:
        store.list(limit=1)
    except Exception as exc:  # broad: any failure of any backend means "not answering"
        log.warning("health: job store not answering", exc_info=True)
        return ComponentHealth(False, f"not answering ({type(exc).__name__})")
    return ComponentHealth(True, "answers")


def s3_answers(s3: Any, bucket: str) -> ComponentHealth:
    return ComponentHealth(*bucket_answers(s3, bucket))


def check_all(
    probes: dict[str, Callable[[], ComponentHealth]], timeout: float = PROBE_TIMEOUT_S
) -> dict[str, ComponentHealth]:
    """Every probe's answer, run side by side; one that takes longer than `timeout` more
    than its own deadline (a client retrying) is reported as not answering."""
    pool = ThreadPoolExecutor(max_workers=len(probes) or 1, thread_name_prefix="health")
    try:
        running = {name: pool.submit(probe) for name, probe in probes.items()}
        out = {}
        for name, future in running.items():
            try:
                out[name] = future.result(timeout=timeout * 2)
            except FutureTimeout:
                out[name] = ComponentHealth(False, f"no answer within {timeout * 2:.0f} s")
            except Exception as exc:  # broad: a probe's own failure is its answer
                log.warning("health probe %s failed", name, exc_info=True)
                out[name] = ComponentHealth(False, f"probe failed ({type(exc).__name__})")
        return out
    finally:
        pool.shutdown(wait=False)  # a probe still waiting ends with its own deadline
