"""Entrypoint of the REST API: `python -m services.api.main`.

Builds the settings once (DLAAS_* and DLAAS_API_* from the environment), wires the real
adapters through `create_app` and serves with uvicorn.
"""

from __future__ import annotations

import gc
import logging
import socket
import sys

import uvicorn
from pydantic import ValidationError

from dlaas.config import ApiSettings, PlatformSettings
from services.api.app import create_app


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        settings = PlatformSettings()
        api_settings = ApiSettings()
    except ValidationError as exc:
        # Name the missing variables, never their values.
        missing = ", ".join(".".join(str(p) for p in e["loc"]) for e in exc.errors())
        print(f"dlaas-api: configuration incomplete or invalid: {missing}", file=sys.stderr)
        return 2
    app = create_app(settings, api_settings)
    # What the imports and the app built (about 100,000 objects) lives as long as the
    # process: out of the collector's reach, a full collection scans only what requests
    # left behind. Each full collection over them paused every request in flight for
    # tens of milliseconds, the largest part of the API's p99 under load.
    gc.collect()
    gc.freeze()
    # uvloop and httptools: C event loop and parser, about half the CPU per request.
    # No access log: /metrics counts every request by route and status, the audit log
    # holds every change; a line per request was a tenth of a read's CPU, and the log
    # file grew without bound (about 8 MB a minute at 1,000 requests/s).
    config = uvicorn.Config(
        app, log_level="info", loop="uvloop", http="httptools", access_log=False
    )
    server = uvicorn.Server(config)
    server.run(sockets=[listen(api_settings.host, api_settings.port)])
    return 0


def listen(host: str, port: int) -> socket.socket:
    """The listening socket, shared with the other API replicas on the same port.

    SO_REUSEPORT lets every replica bind it; the kernel spreads new connections over the
    live ones, so a replica that dies takes nothing down while it is restarted.
    """
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


if __name__ == "__main__":
    sys.exit(main())
