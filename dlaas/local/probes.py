"""Readiness probes of the local platform's components: does this address answer as it should?

Each returns a bool and never raises for "not answering" (except `grpc_serving`, which
lets the gRPC error through for callers that wait on it).
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request


def redis_answers(address: str) -> bool:
    """Whether Redis answers a PING. Without the password it says NOAUTH: that answers too
    (the password stays in secrets.json, out of this probe)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=2.0) as sock:
            sock.sendall(b"PING\r\n")
            reply = sock.recv(64)
    except (OSError, ValueError):
        return False
    return reply.startswith((b"+PONG", b"-NOAUTH"))


def grpc_answers(address: str) -> bool:
    import grpc

    try:
        return grpc_serving(address)
    except grpc.RpcError:
        return False


def grpc_serving(address: str) -> bool:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=1
        )
        return reply.status == health_pb2.HealthCheckResponse.SERVING


# The URLs below are the platform's own servers', built by the callers as http://host:port.


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:  # noqa: S310
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def http_json(url: str) -> dict:
    """The JSON object `url` answers with (a fresh connection each time); {} if none."""
    try:
        with urllib.request.urlopen(url, timeout=1) as r:  # noqa: S310
            body = json.loads(r.read()) if r.status == 200 else {}
    except (urllib.error.URLError, OSError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def etcd_ok(endpoint: str) -> bool:
    return http_ok(f"http://{endpoint}/health")


def s3_ok(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(endpoint, timeout=1) as r:  # noqa: S310
            return r.status < 500
    except urllib.error.HTTPError as e:
        return e.code < 500
    except (urllib.error.URLError, OSError):
        return False
