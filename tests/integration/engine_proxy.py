"""A stand-in second Docker engine for tests: a Unix socket forwarding to the real one.

stop() refuses new connections and cuts the open ones, as a dead engine does; start()
brings it back at the same address. A real second dockerd would need its own copy of
the job image, which takes long; this tests what crosses the node boundary: the
platform's handling of an engine that stops and comes back.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from pathlib import Path


class EngineProxy:
    """A second node's "engine": a Unix socket forwarding to the real one, that can die.

    A stand-in for the path to another dockerd (a real second engine would need its own
    copy of the test image, too slow here): stop() refuses new connections and cuts the
    open ones, as a dead engine does; start() brings it back at the same address.
    """

    def __init__(self, path: Path, target: str):
        self.path = path
        self.target = target
        self.url = f"unix://{path}"
        self._server: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(self.path))
        server.listen(64)
        server.settimeout(0.1)
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def _accept(self, server: socket.socket) -> None:
        while self._server is server:
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.target)
            with self._lock:
                self._conns += [conn, upstream]
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
