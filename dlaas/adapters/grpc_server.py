"""One way to start a gRPC server: thread pool, health checking and reflection included."""

from __future__ import annotations

import logging
import signal
import threading
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection


def start_server(addr: str, register, service_names: list[str], workers: int = 16) -> grpc.Server:
    """Bind `addr`, let `register(server)` add the servicers, mark them SERVING, start."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers))
    register(server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    for name in ["", *service_names]:
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection(
        [*service_names, health.SERVICE_NAME, reflection.SERVICE_NAME], server
    )
    if server.add_insecure_port(addr) == 0:
        raise RuntimeError(f"cannot listen on {addr}")
    server.start()
    return server


def wait_for_termination(server: grpc.Server, stop: threading.Event | None = None) -> None:
    """Block until SIGTERM/SIGINT, then stop the server with a short grace period."""
    stop = stop or threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop(grace=2).wait()


def configure_logging(name: str) -> logging.Logger:
    logging.basicConfig(
        level=logging.INFO, format=f"%(asctime)s {name} %(levelname)s %(name)s: %(message)s"
    )
    return logging.getLogger(name)
