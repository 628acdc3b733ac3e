"""Builds the job container images locally, with no registry: `ensure_images(client)`.

Every helper, and the learners of a job whose framework is plain Python, run
`dlaas/learner:latest`, which is `images/Dockerfile.learner` on top of `dlaas/base:bookworm`
(Debian + python3, numpy, boto3). Where no registry can be reached, the base image is made
with debootstrap and `docker import`; the learner image is then built with the legacy
builder from a context that holds only the files the Dockerfile COPYs.

A framework with an image of its own (dlaas.domain.frameworks.FRAMEWORK_VERSIONS: PyTorch 2.13,
TensorFlow 2.21, OpenMPI 4.1) gets two more: its layer on the base (FRAMEWORK_LAYERS, e.g.
`images/Dockerfile.pytorch` as dlaas/base-pytorch:2.13, minutes) and the same learner
Dockerfile on that layer (dlaas/learner-pytorch:2.13, seconds), so a change to the
in-container code never reinstalls PyTorch. The pip packages of a layer are resolved on the
host and served to its build (dlaas/local/wheelhouse.py). They are built on request
(`frameworks=`, `dlaas images build`), not by `dlaas up`.

Every built image carries a hash of its Dockerfile, build arguments, copied files and wheels
and the id of its base, so a second call with nothing changed returns in well under a second
and a changed source rebuilds only what is above it.

With a registry, build the images the ordinary way (see images/README.md).
CLI: `python -m dlaas.local.images [--force] [--learner-only | --framework NAME[:VERSION]]`.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors

from dlaas.domain.errors import ImageUnavailable
from dlaas.domain.frameworks import (
    FRAMEWORK_ALIASES,
    FRAMEWORK_VERSIONS,
    framework_image,
    framework_version,
)
from dlaas.local import wheelhouse

BASE_IMAGE = "dlaas/base:bookworm"
LEARNER_IMAGE = "dlaas/learner:latest"
LABEL_SOURCE_HASH = "dlaas.source-hash"
LABEL_BASE_ID = "dlaas.base-id"

DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = ("python3", "python3-numpy", "python3-boto3", "ca-certificates")

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
IMAGES_DIR = REPO_ROOT / "images"
LEARNER_DOCKERFILE = IMAGES_DIR / "Dockerfile.learner"


@dataclass(frozen=True)
class FrameworkLayer:
    """How one framework version's layer on the base is built."""

    dockerfile: str  # under images/
    note: str  # for the progress line: what it installs, how long it takes here
    wheels: tuple[str, ...] = ()  # pip requirements, resolved on the host (wheelhouse.py)
    no_deps: tuple[str, ...] = ()  # pip requirements installed without their dependencies
    buildargs: dict[str, str] = field(default_factory=dict)


# Every (framework, version) of FRAMEWORK_VERSIONS (dlaas.domain.frameworks), and nothing else
# (a unit test keeps the two in step). Times as measured on this machine (2 cores).
FRAMEWORK_LAYERS = {
    ("pytorch", "2.13"): FrameworkLayer(
        "Dockerfile.pytorch", "pip, torch 2.13.0 CPU, under 2 minutes", ("torch==2.13.0+cpu",)
    ),
    ("tensorflow", "2.21"): FrameworkLayer(
        "Dockerfile.tensorflow",
        "pip, tensorflow-cpu 2.21.0 and tf_keras, under 2 minutes",
        # Keras 2 beside Keras 3: MultiWorkerMirroredStrategy fits with it (TF_USE_LEGACY_KERAS=1,
        # examples/keras); Keras 3 cannot (keras-team/keras#20585). Without its dependency
        # `tensorflow`: a second TensorFlow (600 MB) into the same directory as tensorflow-cpu.
        wheels=("tensorflow-cpu==2.21.0",),
        no_deps=("tf_keras==2.21.0",),
    ),
    ("mpi", "4.1"): FrameworkLayer(
        "Dockerfile.mpi",
        "Debian's OpenMPI, mpi4py, OpenSSH, seconds",
        buildargs={"OPENMPI_VERSION": "4.1"},
    ),
}

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ImageSpec:
    """One image to build: `dockerfile` FROM `base` (passed as the BASE_IMAGE build arg)."""

    tag: str
    dockerfile: Path
    base: str
    note: str  # for the progress line: how long it takes
    buildargs: dict[str, str] = field(default_factory=dict)
    needs_network: bool = False  # a RUN step downloads packages (or reads the wheelhouse)
    wheels: tuple[str, ...] = ()  # pip requirements served to the build (wheelhouse.py)
    no_deps: tuple[str, ...] = ()  # served too, installed without their dependencies


def learner_spec(base: str = BASE_IMAGE, tag: str = LEARNER_IMAGE) -> ImageSpec:
    return ImageSpec(tag, LEARNER_DOCKERFILE, base, "seconds")


def framework_specs(name: str, version: str) -> tuple[ImageSpec, ImageSpec]:
    """(the framework's layer on the base, the learner image on that layer) for a version
    listed in FRAMEWORK_VERSIONS: dlaas/base-pytorch:2.13, dlaas/learner-pytorch:2.13."""
    layer = FRAMEWORK_LAYERS.get((name, version))
    if layer is None or version not in FRAMEWORK_VERSIONS.get(name, ()):
        known = ", ".join(f"{n} {'/'.join(v)}" for n, v in FRAMEWORK_VERSIONS.items())
        raise ImageUnavailable(f"no image is built for framework {name} {version}; known: {known}")
    buildargs = dict(layer.buildargs)
    if layer.wheels:
        buildargs["REQUIREMENTS"] = " ".join(layer.wheels)
    if layer.no_deps:
        buildargs["NO_DEPS_REQUIREMENTS"] = " ".join(layer.no_deps)
    spec = ImageSpec(
        framework_image(BASE_IMAGE, name, version),
        IMAGES_DIR / layer.dockerfile,
        BASE_IMAGE,
        layer.note,
        buildargs=buildargs,
        needs_network=True,
        wheels=layer.wheels,
        no_deps=layer.no_deps,
    )
    return spec, learner_spec(base=spec.tag, tag=framework_image(LEARNER_IMAGE, name, version))


def all_frameworks() -> list[tuple[str, str]]:
    """Every (framework, version) the platform has an image for."""
    return [(name, v) for name, versions in FRAMEWORK_VERSIONS.items() for v in versions]


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
            raise ImageUnavailable(f"a Dockerfile copies {src}, which does not exist")
    return sorted(files)


def source_hash(
    dockerfile: bytes,
    root: Path,
    files: list[str],
    buildargs: dict[str, str] | None = None,
    wheels: list[tuple[str, int]] = (),
) -> str:
    """What an image was built from: Dockerfile, build arguments, copied files, and the
    wheels served to it by name and size (wheelhouse.listing)."""
    digest = hashlib.sha256()
    digest.update(b"Dockerfile\0" + dockerfile + b"\0")
    for name, value in sorted((buildargs or {}).items()):
        digest.update(f"ARG {name}={value}\0".encode())
    for name in files:
        digest.update(name.encode() + b"\0" + (root / name).read_bytes() + b"\0")
    for name, size in wheels:
        digest.update(f"WHEEL {name} {size}\0".encode())
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


def ensure_base_image(
    client: docker.DockerClient, progress: Progress = print, force: bool = False
) -> str:
    """The id of dlaas/base:bookworm, made with debootstrap if it is missing (or `force`).
    Every image built here stands on it: the learners' and the platform's own stack
    (dlaas/local/stack.py)."""
    base = None if force else _image(client, BASE_IMAGE)
    return base.id if base is not None else build_base_image(client, progress)


def _build(
    client: docker.DockerClient,
    spec: ImageSpec,
    base_id: str,
    digest: str,
    files: list[str],
    progress: Progress,
    house: Path | None = None,
) -> str:
    dockerfile = spec.dockerfile.read_bytes()
    progress(f"building {spec.tag} from {spec.dockerfile.name} on {spec.base} ({spec.note})...")
    started = time.monotonic()
    image_id = None
    with wheelhouse.serve(house) if house is not None else nullcontext(None) as wheels_url:
        # pip in the build reads these: the served wheelhouse and nothing else.
        pip_args = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": wheels_url} if wheels_url else {}
        for chunk in client.api.build(
            fileobj=context_tar(dockerfile, REPO_ROOT, files),
            custom_context=True,
            tag=spec.tag,
            buildargs={"BASE_IMAGE": spec.base, **spec.buildargs, **pip_args},
            labels={LABEL_SOURCE_HASH: digest, LABEL_BASE_ID: base_id},
            rm=True,
            forcerm=True,
            decode=True,
            # apt-get in a RUN step needs the archive; with `dockerd --iptables=false` (this
            # machine, CI) the default bridge reaches nothing, the host's network does (and
            # the wheelhouse on the host's 127.0.0.1: the engine must run on this host).
            network_mode="host" if spec.needs_network else None,
        ):
            if "error" in chunk:
                raise ImageUnavailable(f"building {spec.tag} failed: {chunk['error'].strip()}")
            line = chunk.get("stream", "").strip()
            # apt's and pip's summary lines say what a minutes-long step is doing.
            if line.startswith(
                (
                    "Step ",
                    "Need to get",
                    "After this operation",
                    "Fetched ",
                    "Successfully installed",
                )
            ):
                progress("  " + line)
            if "aux" in chunk and "ID" in chunk["aux"]:
                image_id = chunk["aux"]["ID"]
    if image_id is None:
        image_id = client.images.get(spec.tag).id
    progress(f"{spec.tag} ready ({time.monotonic() - started:.0f} s)")
    return image_id


def ensure_built(
    client: docker.DockerClient,
    spec: ImageSpec,
    base_id: str,
    progress: Progress = print,
    force: bool = False,
) -> str:
    """Build `spec` unless an image of that tag was built from the same sources on the same
    base (by its labels); return the image's id."""
    dockerfile = spec.dockerfile.read_bytes()
    files = context_files(REPO_ROOT, copy_sources(dockerfile.decode()))
    house = None
    if spec.wheels or spec.no_deps:
        house = wheelhouse.ensure_wheelhouse(spec.wheels, progress, force, no_deps=spec.no_deps)
    wheels = wheelhouse.listing(house) if house is not None else []
    digest = source_hash(dockerfile, REPO_ROOT, files, spec.buildargs, wheels)
    current = _image(client, spec.tag)
    labels = (current.labels or {}) if current is not None else {}
    if (
        not force
        and current is not None
        and labels.get(LABEL_SOURCE_HASH) == digest
        and labels.get(LABEL_BASE_ID) == base_id
    ):
        progress(f"{spec.tag} is up to date")
        return current.id
    new_id = _build(client, spec, base_id, digest, files, progress, house)
    if current is not None and current.id != new_id:
        _remove_quietly(client, current.id)
    return new_id


def ensure_images(
    client: docker.DockerClient,
    progress: Progress = print,
    force: bool = False,
    frameworks: Iterable[tuple[str, str]] = (),
) -> str:
    """Make sure the job image exists and matches the sources; return its tag.

    Builds the base image if it is missing (or `force`), and the learner image if it is
    missing, was built from other sources or another base, or `force`; then the images of
    `frameworks` ((name, version) pairs of FRAMEWORK_VERSIONS, e.g. ("pytorch", "2.13")).
    """
    base_id = ensure_base_image(client, progress, force)
    ensure_built(client, learner_spec(), base_id, progress, force)
    for name, version in frameworks:
        ensure_framework_image(client, name, version, progress, force, base_id=base_id)
    return LEARNER_IMAGE


def ensure_framework_image(
    client: docker.DockerClient,
    name: str,
    version: str,
    progress: Progress = print,
    force: bool = False,
    base_id: str | None = None,
) -> str:
    """Make sure the learner image of framework `name` `version` is built; return its tag.

    Two images: the framework's layer on the base (minutes, rebuilt only when its
    Dockerfile or the base changes) and the learner Dockerfile on top of it (seconds).
    """
    layer, learner = framework_specs(name, version)
    if base_id is None:
        base_id = ensure_base_image(client, progress, force)
    layer_id = ensure_built(client, layer, base_id, progress, force)
    ensure_built(client, learner, layer_id, progress, force)
    return learner.tag


def _remove_quietly(client: docker.DockerClient, image_id: str) -> None:
    """Drop the image a rebuild replaced, unless a container still uses it."""
    with contextlib.suppress(docker.errors.APIError):  # still in use: it stays
        client.images.remove(image_id)


def chosen_frameworks(asked: list[str]) -> list[tuple[str, str]]:
    """The (name, version) pairs `--framework` options name: `pytorch` (every version),
    `pytorch:2.13`, `torch:latest`; none named: all of them."""
    if not asked:
        return all_frameworks()
    chosen: list[tuple[str, str]] = []
    for item in asked:
        name, _, version = item.partition(":")
        name = FRAMEWORK_ALIASES.get(name.lower(), name.lower())
        versions = FRAMEWORK_VERSIONS.get(name)
        if versions is None:
            raise ImageUnavailable(
                f"--framework {item}: no image is built for framework {name}; "
                f"known: {', '.join(FRAMEWORK_VERSIONS)}"
            )
        picked = versions if not version else (framework_version(version, versions),)
        if None in picked:
            raise ImageUnavailable(
                f"--framework {item}: no {name} {version} image; versions: {', '.join(versions)}"
            )
        chosen.extend((name, v) for v in picked if (name, v) not in chosen)
    return chosen


def main(argv: list[str] | None = None) -> int:
    frameworks = all_frameworks()
    parser = argparse.ArgumentParser(
        prog="python -m dlaas.local.images",
        description=(
            f"Build {LEARNER_IMAGE} and the framework images "
            f"({', '.join(framework_image(LEARNER_IMAGE, n, v) for n, v in frameworks)}) "
            "locally (no registry)."
        ),
    )
    parser.add_argument("--force", action="store_true", help="rebuild every image")
    only = parser.add_mutually_exclusive_group()
    only.add_argument(
        "--learner-only",
        action="store_true",
        help="build the learner image only (what `dlaas up` does), not the framework images",
    )
    only.add_argument(
        "--framework",
        action="append",
        default=[],
        metavar="NAME[:VERSION]",
        help="build this framework's image only (repeatable), e.g. pytorch or mpi:4.1",
    )
    args = parser.parse_args(argv)
    try:
        chosen = [] if args.learner_only else chosen_frameworks(args.framework)
    except ImageUnavailable as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    try:
        client = docker.from_env(timeout=900)
        client.ping()
    except docker.errors.DockerException as exc:
        print(f"error: cannot reach the Docker engine: {exc}", file=sys.stderr)
        return 1
    try:
        ensure_images(client, force=args.force, frameworks=chosen)
    except ImageUnavailable as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
