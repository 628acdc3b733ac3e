"""Builds the job container image locally, with no registry: `ensure_images(client)`.

Every job container (the helper and the learners) runs `dlaas/learner:latest`, which is
`images/Dockerfile.learner` on top of `dlaas/base:bookworm` (Debian + python3, numpy,
boto3). Where no registry can be reached, the base image is made with debootstrap and
`docker import`; the learner image is then built with the legacy builder from a context
that holds only the files the Dockerfile COPYs. The learner image carries a hash of
those files and the id of its base, so a second call with nothing changed returns in
well under a second and a changed source rebuilds in seconds.

With a registry, build both images the ordinary way (see images/README.md).
CLI: `python -m dlaas.images [--force]`.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import docker.errors

from dlaas.errors import ImageUnavailable

BASE_IMAGE = "dlaas/base:bookworm"
LEARNER_IMAGE = "dlaas/learner:latest"
LABEL_SOURCE_HASH = "dlaas.source-hash"
LABEL_BASE_ID = "dlaas.base-id"

DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = ("python3", "python3-numpy", "python3-boto3", "ca-certificates")

REPO_ROOT = Path(__file__).resolve().parent.parent
LEARNER_DOCKERFILE = REPO_ROOT / "images" / "Dockerfile.learner"

Progress = Callable[[str], None]


# --- the build context (pure apart from reading files) ---------------------------------


def copy_sources(dockerfile_text: str) -> list[str]:
    """The repository paths the Dockerfile COPYs (one place says what goes in the image)."""
    sources: list[str] = []
    logical = dockerfile_text.replace("\\\n", " ")
    for line in logical.splitlines():
        words = line.split()
        if len(words) >= 3 and words[0].upper() == "COPY" and not words[1].startswith("--"):
            sources.extend(words[1:-1])
    return sources


def context_files(root: Path, sources: list[str]) -> list[str]:
    """Every file behind `sources` (dirs recursively, no bytecode), sorted, relative to root."""
    files: set[str] = set()
    for src in sources:
        path = root / src
        if path.is_dir():
            for p in path.rglob("*"):
                if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc":
                    files.add(p.relative_to(root).as_posix())
        elif path.is_file():
            files.add(path.relative_to(root).as_posix())
        else:
            raise ImageUnavailable(f"{LEARNER_DOCKERFILE.name} copies {src}, which does not exist")
    return sorted(files)


def source_hash(dockerfile: bytes, root: Path, files: list[str]) -> str:
    digest = hashlib.sha256()
    digest.update(b"Dockerfile\0" + dockerfile + b"\0")
    for name in files:
        digest.update(name.encode() + b"\0" + (root / name).read_bytes() + b"\0")
    return digest.hexdigest()


def context_tar(dockerfile: bytes, root: Path, files: list[str]) -> io.BytesIO:
    """A build context with the Dockerfile and only the listed files (a few dozen KiB)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
        for name in files:
            data = (root / name).read_bytes()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


# --- Docker adapters ----------------------------------------------------------------


def _image(client: docker.DockerClient, name: str):
    try:
        return client.images.get(name)
    except docker.errors.ImageNotFound:
        return None


def _chunks(stream, size: int = 1 << 20) -> Iterator[bytes]:
    while chunk := stream.read(size):
        yield chunk


def build_base_image(client: docker.DockerClient, progress: Progress = print) -> str:
    """Make dlaas/base:bookworm with debootstrap + docker import (root, about 45 s)."""
    if shutil.which("debootstrap") is None:
        raise ImageUnavailable(
            f"{BASE_IMAGE} is missing and debootstrap is not installed: "
            "run `apt-get install -y debootstrap` (or build images/Dockerfile.base where a "
            "registry is reachable, see images/README.md)"
        )
    if os.geteuid() != 0:
        raise ImageUnavailable(f"{BASE_IMAGE} is missing: building it with debootstrap needs root")
    root_dir = Path(tempfile.mkdtemp(prefix="dlaas-base-"))
    try:
        progress(f"building {BASE_IMAGE} with debootstrap ({DEBIAN_SUITE}, about a minute)...")
        started = time.monotonic()
        cmd = [
            "debootstrap",
            "--variant=minbase",
            "--include=" + ",".join(BASE_PACKAGES),
            DEBIAN_SUITE,
            str(root_dir),
            DEBIAN_MIRROR,
        ]
        done = subprocess.run(cmd, check=False, capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-10:])
            raise ImageUnavailable(f"debootstrap failed (exit {done.returncode}):\n{tail}")
        # Package caches are dead weight in every container.
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for p in (root_dir / junk).glob("*"):
                if p.is_file():
                    p.unlink()
        progress(f"debootstrap done in {time.monotonic() - started:.0f} s; importing...")
        tar = subprocess.Popen(["tar", "-C", str(root_dir), "-c", "."], stdout=subprocess.PIPE)
        try:
            repo, tag = BASE_IMAGE.split(":")
            client.api.import_image_from_stream(
                _chunks(tar.stdout),
                repository=repo,
                tag=tag,
                changes=["ENV LANG=C.UTF-8", 'CMD ["python3"]'],
            )
        finally:
            tar.stdout.close()
            if tar.wait() != 0:
                raise ImageUnavailable(
                    f"tar of the {BASE_IMAGE} root failed (exit {tar.returncode})"
                )
        progress(f"{BASE_IMAGE} ready ({time.monotonic() - started:.0f} s)")
        return client.images.get(BASE_IMAGE).id
    finally:
        shutil.rmtree(root_dir, ignore_errors=True)


def build_learner_image(
    client: docker.DockerClient, base_id: str, digest: str, files: list[str], progress: Progress
) -> str:
    dockerfile = LEARNER_DOCKERFILE.read_bytes()
    progress(f"building {LEARNER_IMAGE} ({len(files)} files from the repository)...")
    image_id = None
    for chunk in client.api.build(
        fileobj=context_tar(dockerfile, REPO_ROOT, files),
        custom_context=True,
        tag=LEARNER_IMAGE,
        buildargs={"BASE_IMAGE": BASE_IMAGE},
        labels={LABEL_SOURCE_HASH: digest, LABEL_BASE_ID: base_id},
        rm=True,
        forcerm=True,
        decode=True,
    ):
        if "error" in chunk:
            raise ImageUnavailable(f"building {LEARNER_IMAGE} failed: {chunk['error'].strip()}")
        line = chunk.get("stream", "").strip()
        if line.startswith("Step "):
            progress("  " + line)
        if "aux" in chunk and "ID" in chunk["aux"]:
            image_id = chunk["aux"]["ID"]
    if image_id is None:
        image_id = client.images.get(LEARNER_IMAGE).id
    progress(f"{LEARNER_IMAGE} ready")
    return image_id


def ensure_images(
    client: docker.DockerClient, progress: Progress = print, force: bool = False
) -> str:
    """Make sure the job image exists and matches the sources; return its tag.

    Builds the base image if it is missing (or `force`), and the learner image if it is
    missing, was built from other sources or another base, or `force`.
    """
    base = None if force else _image(client, BASE_IMAGE)
    base_id = base.id if base is not None else build_base_image(client, progress)

    dockerfile = LEARNER_DOCKERFILE.read_bytes()
    files = context_files(REPO_ROOT, copy_sources(dockerfile.decode()))
    digest = source_hash(dockerfile, REPO_ROOT, files)
    learner = _image(client, LEARNER_IMAGE)
    labels = (learner.labels or {}) if learner is not None else {}
    if (
        not force
        and labels.get(LABEL_SOURCE_HASH) == digest
        and labels.get(LABEL_BASE_ID) == base_id
    ):
        progress(f"{LEARNER_IMAGE} is up to date")
        return LEARNER_IMAGE
    new_id = build_learner_image(client, base_id, digest, files, progress)
    if learner is not None and learner.id != new_id:
        _remove_quietly(client, learner.id)
    return LEARNER_IMAGE


def _remove_quietly(client: docker.DockerClient, image_id: str) -> None:
    """Drop the image a rebuild replaced, unless a container still uses it."""
    try:
        client.images.remove(image_id)
    except docker.errors.APIError:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dlaas.images", description=f"Build {LEARNER_IMAGE} locally (no registry)."
    )
    parser.add_argument("--force", action="store_true", help="rebuild both images")
    args = parser.parse_args(argv)
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        print(f"error: cannot reach the Docker engine: {exc}", file=sys.stderr)
        return 1
    try:
        ensure_images(client, force=args.force)
    except ImageUnavailable as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
