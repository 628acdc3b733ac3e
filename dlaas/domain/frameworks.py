"""The learner images of the deep-learning frameworks, and which one a manifest runs on.

Pure logic, no I/O: `resolve_image(manifest, learner_image)` names the image for the
manifest's framework and version, or raises `ImageUnavailable` saying which images there
are. dlaas/local/images.py builds the images listed here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlaas.domain.errors import ImageUnavailable

if TYPE_CHECKING:
    from dlaas.domain.manifest import Manifest

# Framework names the platform's own learner image serves (any version).
BUILTIN_FRAMEWORKS = frozenset({"python", "python3", "numpy", "dlaas"})

# Deep-learning frameworks with a learner image of their own, by the versions built, oldest
# first: dlaas/local/images.py builds `<learner image>-<name>:<version>` (there is no registry
# here), e.g. dlaas/learner-pytorch:2.13 (torch 2.13.0, CPU build), dlaas/learner-tensorflow:2.21
# (tensorflow-cpu 2.21.0), dlaas/learner-mpi:4.1 (Debian's OpenMPI 4.1, mpi4py). FfDL's
# "latest" means the newest version listed. Horovod and Caffe have none.
FRAMEWORK_VERSIONS: dict[str, tuple[str, ...]] = {
    "pytorch": ("2.13",),
    "tensorflow": ("2.21",),
    "mpi": ("4.1",),
}
FRAMEWORK_ALIASES = {
    "torch": "pytorch",
    "tf": "tensorflow",
    "keras": "tensorflow",
    "openmpi": "mpi",
}
LATEST = "latest"


def resolve_image(manifest: Manifest, learner_image: str) -> str:
    """The image for the manifest's framework; raise ImageUnavailable when none is known."""
    fw = manifest.framework
    if fw.image:
        return fw.image
    name = fw.name.lower()
    if name in BUILTIN_FRAMEWORKS:
        return learner_image
    name = FRAMEWORK_ALIASES.get(name, name)
    library = _LIBRARIES.get(name, fw.name)
    if name in FRAMEWORK_VERSIONS:
        versions = FRAMEWORK_VERSIONS[name]
        version = framework_version(fw.version, versions)
        if version is None:
            listed = ", ".join(versions)
            raise ImageUnavailable(
                f"framework.version: the platform has no {library} {fw.version} image; "
                f"{library} versions with an image: {listed} ({LATEST!r} is {versions[-1]}). "
                f"Set framework.version to one of them if the script runs there, or set "
                f"framework.image to an image with {library} {fw.version} present on the nodes"
            )
        return framework_image(learner_image, name, version)
    if name in _LIBRARIES:  # and not built
        # FfDL picked an image by framework name and version; these libraries are not in
        # Debian, so the platform cannot build their images without a registry.
        raise ImageUnavailable(
            f"framework.name: the platform has no {library} image (its images: the learner "
            f"image with Python 3, numpy and boto3, and framework {_built_frameworks()}), so "
            f"framework {fw.name} {fw.version} cannot run as written; set framework.image to an "
            f"image with {library} that is present on the nodes (e.g. built FROM the learner image, "
            f"see images/README.md), or use framework name 'python' for a script that does "
            f"not import {library}"
        )
    raise ImageUnavailable(
        f"framework.name: no image is known for framework {fw.name} {fw.version}; "
        f"use framework name 'python' (the platform's learner image) or one of the framework "
        f"images ({_built_frameworks()}), or set framework.image to an image present on the "
        f"nodes"
    )


def framework_version(asked: str, versions: tuple[str, ...]) -> str | None:
    """The built version `asked` means: itself, a patch release of it (1.13.1 is 1.13), or
    the newest for "latest"; None when none was built."""
    if asked.lower() == LATEST:
        return versions[-1]
    for version in versions:
        if asked == version or asked.startswith(version + "."):
            return version
    return None


def framework_image(learner_image: str, name: str, version: str) -> str:
    """The framework's image, named after the learner image so that a registry prefix
    carries over: dlaas/learner:latest -> dlaas/learner-pytorch:1.13,
    reg:5000/dlaas/learner:v2 -> reg:5000/dlaas/learner-pytorch:1.13."""
    repository = learner_image.split("@", 1)[0]
    if ":" in repository.rsplit("/", 1)[-1]:
        repository = repository.rsplit(":", 1)[0]
    return f"{repository}-{name}:{version}"


def _built_frameworks() -> str:
    """The framework images there are, as a manifest names them: "pytorch 1.13"."""
    return ", ".join(f"{name} {'/'.join(v)}" for name, v in FRAMEWORK_VERSIONS.items())


# Framework names FfDL had images for, by the library the job imports (for messages).
_LIBRARIES = {
    "tensorflow": "TensorFlow",
    "tf": "TensorFlow",
    "keras": "TensorFlow",
    "pytorch": "PyTorch",
    "torch": "PyTorch",
    "mpi": "OpenMPI",
    "openmpi": "OpenMPI",
    "horovod": "Horovod",
    "caffe": "Caffe",
    "caffe2": "Caffe2",
}
