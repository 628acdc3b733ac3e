"""The wheels a framework image installs, resolved on the host and served to its build.

A framework layer (images/Dockerfile.pytorch, Dockerfile.tensorflow) runs `pip install` in a
build step, but the build cannot reach PyPI the way the host does (no index, proxy or
certificate of the host's pip configuration is in the image), and torch's CPU build is not on
PyPI at all (PyPI's torch is a multi-GB CUDA build). So the host resolves the requirements
once into a wheelhouse, `pip download` for the image's Python (CPython 3.11, glibc 2.36,
x86_64), taking wheels from $DLAAS_WHEEL_DIR (default /opt/wheels, where torch's CPU wheel
lies) before PyPI, and `serve()` offers that directory to the build on 127.0.0.1 while it
runs (the build's RUN steps use the host's network), as pip's --find-links. No wheel is sent
in the build context, so none stays behind in an image layer.

The wheelhouse lives under $XDG_CACHE_HOME/dlaas/wheels (default ~/.cache), one directory
per set of requirements; once complete it is reused without asking any index.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from dlaas.domain.errors import ImageUnavailable

WHEEL_DIR_ENV = "DLAAS_WHEEL_DIR"
DEFAULT_WHEEL_DIR = "/opt/wheels"
COMPLETE = ".complete"  # written once pip download succeeded
DOWNLOAD_TIMEOUT_S = 1800

# The interpreter of the images (bookworm: CPython 3.11, glibc 2.36): pip download resolves
# for it, not for the host. pip expands none of the manylinux_2_x tags, so all are listed.
TARGET = (
    "--only-binary=:all:",
    "--python-version=3.11",
    "--implementation=cp",
    "--abi=cp311",
    *(f"--platform=manylinux_2_{minor}_x86_64" for minor in range(36, 16, -1)),
    "--platform=manylinux2014_x86_64",
    "--platform=manylinux2010_x86_64",
    "--platform=manylinux1_x86_64",
)

Progress = Callable[[str], None]


def wheel_dir() -> Path:
    """Local wheels pip takes before PyPI's ($DLAAS_WHEEL_DIR, default /opt/wheels)."""
    return Path(os.environ.get(WHEEL_DIR_ENV) or DEFAULT_WHEEL_DIR)


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dlaas" / "wheels"


def house_for(
    requirements: tuple[str, ...], root: Path | None = None, no_deps: tuple[str, ...] = ()
) -> Path:
    """The wheelhouse directory of a set of requirements (one per set, so a changed pin
    never mixes its wheels with the old ones)."""
    words = (*requirements, *(("--no-deps", *no_deps) if no_deps else ()), *TARGET)
    key = hashlib.sha256("\0".join(words).encode()).hexdigest()[:16]
    return (root or cache_root()) / key


def listing(house: Path) -> list[tuple[str, int]]:
    """(name, size) of every wheel in the house, sorted: what an image's hash covers. Not the
    contents (a 190 MB wheel would be read on every call) and not the mtime (a re-download
    after the cache was cleared makes new copies of the same files)."""
    return sorted((p.name, p.stat().st_size) for p in house.glob("*.whl"))


def ensure_wheelhouse(
    requirements: tuple[str, ...],
    progress: Progress = print,
    force: bool = False,
    root: Path | None = None,
    no_deps: tuple[str, ...] = (),
) -> Path:
    """The complete wheelhouse of `requirements` and their dependencies, and of `no_deps`
    without theirs (tf_keras, whose `tensorflow` would install a second TensorFlow beside
    tensorflow-cpu); downloaded now if it is not complete (or `force`: pip then checks the
    index again and keeps the files it already has)."""
    house = house_for(requirements, root, no_deps)
    if not force and (house / COMPLETE).is_file():
        return house
    house.mkdir(parents=True, exist_ok=True)
    (house / COMPLETE).unlink(missing_ok=True)
    progress(f"resolving {' '.join((*requirements, *no_deps))} into {house} (pip download)...")
    started = time.monotonic()
    if requirements:
        _download(house, requirements)
    if no_deps:
        _download(house, ("--no-deps", *no_deps))
    (house / COMPLETE).write_text("\n".join((*requirements, *no_deps)) + "\n")
    wheels = listing(house)
    megabytes = sum(size for _name, size in wheels) / 2**20
    progress(f"  {len(wheels)} wheels, {megabytes:.0f} MB ({time.monotonic() - started:.0f} s)")
    return house


def _download(house: Path, args: tuple[str, ...]) -> None:
    local = wheel_dir()
    find_links = ("--find-links", str(local)) if local.is_dir() else ()
    cmd = [
        sys.executable, "-m", "pip", "download", "--dest", str(house), "--no-cache-dir",
        "--disable-pip-version-check", "--progress-bar=off", *find_links, *TARGET, *args,
    ]  # fmt: skip
    what = " ".join(arg for arg in args if not arg.startswith("-"))
    try:
        done = subprocess.run(
            cmd, check=False, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise ImageUnavailable(f"pip download of {what} took over {DOWNLOAD_TIMEOUT_S} s") from None
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:])
        raise ImageUnavailable(
            f"pip download of {what} failed (exit {done.returncode}); "
            f"local wheels are taken from {local} (${WHEEL_DIR_ENV}):\n{tail}"
        )


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass  # a build fetches dozens of files; the build's own log says what pip did


@contextmanager
def serve(house: Path) -> Iterator[str]:
    """Serve the wheelhouse on 127.0.0.1 (a free port) while the block runs; yields the URL
    of its index page, which pip reads as --find-links."""
    handler = functools.partial(_Handler, directory=str(house))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="wheelhouse", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
