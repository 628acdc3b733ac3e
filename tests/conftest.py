"""Shared test fixtures: real servers on free ports, started once per session.

etcd, SeaweedFS S3, Redis and the Docker engine are the real things (dlaas.local starts them);
each is stopped by PID in teardown, also when tests fail. The Docker engine is the
machine's engine and is left running (it holds the image cache). Tests stay independent
through unique names: a key prefix per test in etcd, a bucket per test in S3.

The session also sets the garbage collector's thresholds (pytest_configure, below).
"""

from __future__ import annotations

import contextlib
import gc
import os
import secrets
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from dlaas.local import dockerd, etcd, processes, redis, seaweedfs

# The cyclic garbage collector's first threshold for the session: 50,000 allocations, not
# CPython's 700. A test session holds a large heap (every test module, the product, FastAPI,
# hypothesis), and at 700 the collector ran 15 full collections over all of it in one
# tests/unit run: about 4 s of a 27 s run (load 5), more than any test. At 50,000 it runs
# a few dozen young collections (under 1 s) and the run's memory stays as it was (about
# 250 MB). Unreachable cycles are still collected, only less often. Restored after.
GC_THRESHOLD_0 = 50_000
_gc_thresholds: tuple[int, int, int] | None = None


def pytest_configure(config):
    global _gc_thresholds
    _gc_thresholds = gc.get_threshold()
    gc.set_threshold(GC_THRESHOLD_0, *_gc_thresholds[1:])


def pytest_unconfigure(config):
    if _gc_thresholds is not None:
        gc.set_threshold(*_gc_thresholds)


def _start_or_skip(what: str, start):
    """Start a server; a missing binary skips the tests that need it, with the reason."""
    try:
        return start()
    except processes.ServerError as e:
        pytest.skip(f"{what} unavailable: {e}")


# --------------------------------------------------------------------------- etcd


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory) -> Iterator[etcd.EtcdServer]:
    """One etcd member for the session (.host, .port, .endpoint "host:port")."""
    server = _start_or_skip("etcd", lambda: etcd.start_etcd(tmp_path_factory.mktemp("etcd")))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def etcd_prefix() -> str:
    """A key prefix unique to this test ("/t-<hex>"), so tests never see each other's keys."""
    return f"/t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def etcd_client(etcd_server, etcd_prefix):
    """A pyetcd client on the session etcd; everything under `etcd_prefix` is removed after."""
    import pyetcd

    client = pyetcd.client(host=etcd_server.host, port=etcd_server.port, timeout=5)
    try:
        yield client
    finally:
        try:
            client.delete_prefix(etcd_prefix)
        finally:
            client.close()


# --------------------------------------------------------------------------- S3


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> Iterator[seaweedfs.S3Server]:
    """SeaweedFS S3 for the session with generated credentials (.endpoint, .access_key, ...).

    Bound on 0.0.0.0 so that containers reach it through the Docker bridge gateway.
    """
    access_key = "test-" + secrets.token_hex(6)
    secret_key = secrets.token_urlsafe(24)
    server = _start_or_skip(
        "SeaweedFS S3",
        lambda: seaweedfs.start_seaweedfs(
            tmp_path_factory.mktemp("seaweedfs"), access_key, secret_key
        ),
    )
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_client(s3_server):
    """boto3 client (path style) with the session server's valid credentials."""
    return s3_server.client()


@pytest.fixture
def s3_bucket(s3_client) -> str:
    """A fresh bucket for this test (objects are left; the server's dir is temporary)."""
    name = f"t-{uuid.uuid4().hex[:16]}"
    s3_client.create_bucket(Bucket=name)
    return name


# --------------------------------------------------------------------------- Redis


@pytest.fixture
def redis_server(tmp_path_factory) -> Iterator[redis.RedisServer]:
    """A Redis of this test's own (.url with its password), stopped after.

    Per test, not per session: a broker holds queued and unacknowledged tasks, which
    must not leak from one test into the next.
    """
    server = _start_or_skip(
        "Redis",
        lambda: redis.start_redis(tmp_path_factory.mktemp("redis"), password=secrets.token_hex(12)),
    )
    try:
        yield server
    finally:
        server.stop()


# --------------------------------------------------------------------------- Docker


@pytest.fixture(scope="session")
def docker_client():
    """docker.DockerClient on the machine's engine, started if needed; skip if none can run."""
    import docker

    try:
        # A dockerd started here outlives the session: its log goes to a lasting place.
        host = dockerd.ensure_dockerd(Path(tempfile.gettempdir()) / "dlaas-dockerd")
    except processes.ServerError as e:
        pytest.skip(f"no Docker engine: {e}")
    client = docker.DockerClient(base_url=host, timeout=60)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def learner_image(docker_client) -> str:
    """The job image (python3, numpy, boto3 and the platform's in-container code), built
    locally on first use (about a minute on a new machine) and reused after."""
    from dlaas.local.images import ensure_images

    return ensure_images(docker_client, progress=lambda _line: None)


def _framework_image(docker_host: str, name: str) -> str:
    """The learner image of framework `name`'s newest version, built on first use (minutes
    on a new machine, see images/README.md) and reused after: each is built once per
    session at most; the tests that need one carry a timeout that allows for it."""
    import docker

    from dlaas.domain.frameworks import FRAMEWORK_VERSIONS
    from dlaas.local.images import ensure_framework_image

    # A pip or apt step can be quiet for longer than the session client's 60 s timeout.
    client = docker.DockerClient(base_url=docker_host, timeout=900)
    try:
        version = FRAMEWORK_VERSIONS[name][-1]
        return ensure_framework_image(client, name, version, progress=lambda _line: None)
    finally:
        client.close()


@pytest.fixture(scope="session")
def pytorch_image(docker_host) -> str:
    """dlaas/learner-pytorch:2.13: torch 2.13.0 (CPU), torchrun, pip, the learner's code."""
    return _framework_image(docker_host, "pytorch")


@pytest.fixture(scope="session")
def tensorflow_image(docker_host) -> str:
    """dlaas/learner-tensorflow:2.21: tensorflow-cpu 2.21.0 with Keras, pip, the learner's code."""
    return _framework_image(docker_host, "tensorflow")


@pytest.fixture(scope="session")
def mpi_image(docker_host) -> str:
    """dlaas/learner-mpi:4.1: Debian's OpenMPI 4.1, mpi4py, numpy, OpenSSH, the learner's code."""
    return _framework_image(docker_host, "mpi")


@pytest.fixture(scope="session")
def docker_host(docker_client) -> str:
    """The engine's address, for processes and clients a test starts itself."""
    return dockerd.ensure_dockerd(Path(tempfile.gettempdir()) / "dlaas-dockerd")


@pytest.fixture(scope="session")
def docker_gateway(docker_client) -> str:
    """The host's IP as containers see it (the default bridge gateway)."""
    return dockerd.docker_gateway_ip(docker_client)


# --------------------------------------------------------------------------- job store


@pytest.fixture
def job_store(tmp_path: Path):
    """A fresh SqliteJobStore in this test's tmp dir."""
    from dlaas.adapters.store import open_store

    store = open_store(f"sqlite:///{tmp_path / 'jobs.db'}")
    try:
        yield store
    finally:
        store.close()


# Where a module's swarm lab keeps its nodes' data: in memory (tmpfs). Each node holds its
# own copy of the job images (GB), and on this machine's disk loading them into two nodes
# and removing them again took 66.5 s and 10.0 s; on /dev/shm 41.9 s and 3.5 s (load 4-5).
RAM_ROOT = Path("/dev/shm")
RAM_MIN_FREE = 8 << 30  # two nodes' copies of the learner, PyTorch and MPI images, and room
RAM_PREFIX = "dlaas-test-"


def _ram_usable() -> bool:
    try:
        st = os.statvfs(RAM_ROOT)
    except OSError:
        return False
    # A dockerd's overlay layers need device nodes (whiteouts) and executables.
    blocked = st.f_flag & (os.ST_NODEV | os.ST_NOEXEC)
    return not blocked and st.f_bavail * st.f_frsize >= RAM_MIN_FREE


def _sweep_ram_dirs() -> None:
    """Remove what a killed test session left in RAM_ROOT (its pid is in the name)."""
    for path in RAM_ROOT.glob(f"{RAM_PREFIX}*"):
        pid = path.name.removeprefix(RAM_PREFIX).split("-", 1)[0]
        if pid.isdigit() and not processes.pid_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _ram_dir(tmp_path_factory) -> Iterator[Path]:
    """A fresh directory in memory (see RAM_ROOT), removed afterwards; a temporary directory
    on disk where /dev/shm is missing, mounted nodev/noexec or short of room."""
    if not _ram_usable():
        yield tmp_path_factory.mktemp("lab")
        return
    _sweep_ram_dirs()
    path = Path(tempfile.mkdtemp(prefix=f"{RAM_PREFIX}{os.getpid()}-", dir=RAM_ROOT))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def ram_path(tmp_path_factory) -> Iterator[Path]:
    """A module's directory in memory, for a swarm lab whose nodes hold copies of the job
    images."""
    with _ram_dir(tmp_path_factory) as path:
        yield path


@pytest.fixture(scope="session")
def session_ram_path(tmp_path_factory) -> Iterator[Path]:
    """The session's directory in memory, for the integration tests' shared swarm lab."""
    with _ram_dir(tmp_path_factory) as path:
        yield path
