"""A stand-in for "any host service" in the network-isolation tests."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def host_listener() -> Iterator[int]:
    """A TCP listener on the host's 0.0.0.0 that accepts and closes; its port."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", 0))
    server.listen(16)

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return  # closed at teardown
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()
