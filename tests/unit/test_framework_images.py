"""`framework: {name, version}` selects the framework images dlaas/local/images.py builds:
PyTorch 2.13, TensorFlow 2.21 and OpenMPI 4.1 under their names and aliases; a version
with no image is refused naming the versions there are; and the two tables (the manifest's
FRAMEWORK_VERSIONS, the builder's FRAMEWORK_LAYERS) name the same images."""

from __future__ import annotations

import pytest

from dlaas.domain.errors import ImageUnavailable
from dlaas.domain.frameworks import FRAMEWORK_VERSIONS, resolve_image
from dlaas.domain.manifest import parse_manifest
from dlaas.local import images


def manifest(name: str, version: str | None = None):
    version_field = f", version: '{version}'" if version is not None else ""
    return parse_manifest(
        f"name: x\nframework: {{name: {name}{version_field}, command: python t.py}}\n"
    )


@pytest.mark.parametrize(
    ("name", "version", "image"),
    [
        ("pytorch", None, "dlaas/learner-pytorch:2.13"),
        ("torch", "2.13.0", "dlaas/learner-pytorch:2.13"),
        ("tensorflow", "latest", "dlaas/learner-tensorflow:2.21"),
        ("tensorflow", "2.21.0", "dlaas/learner-tensorflow:2.21"),
        ("TF", "2.21", "dlaas/learner-tensorflow:2.21"),
        ("keras", "latest", "dlaas/learner-tensorflow:2.21"),
        ("mpi", "4.1", "dlaas/learner-mpi:4.1"),
        ("openmpi", "4.1.4", "dlaas/learner-mpi:4.1"),
        ("OpenMPI", None, "dlaas/learner-mpi:4.1"),
    ],
)
def test_each_framework_and_alias_selects_its_image(name, version, image):
    assert resolve_image(manifest(name, version), "dlaas/learner:latest") == image


@pytest.mark.parametrize(
    ("name", "version", "library", "versions"),
    [
        ("pytorch", "1.13", "PyTorch", "2.13"),
        ("tensorflow", "1.15", "TensorFlow", "2.21"),
        ("keras", "2.20", "TensorFlow", "2.21"),
        ("mpi", "3.1", "OpenMPI", "4.1"),
        ("openmpi", "5.0", "OpenMPI", "4.1"),
    ],
)
def test_a_version_with_no_image_is_refused_naming_the_versions_there_are(
    name, version, library, versions
):
    with pytest.raises(ImageUnavailable) as info:
        resolve_image(manifest(name, version), "dlaas/learner:latest")
    assert info.value.message.startswith(
        f"framework.version: the platform has no {library} {version} image; "
        f"{library} versions with an image: {versions} ('latest' is {versions})."
    )


def test_the_builder_has_a_layer_for_every_version_a_manifest_may_name_and_no_other():
    named = {(n, v) for n, versions in FRAMEWORK_VERSIONS.items() for v in versions}
    assert set(images.FRAMEWORK_LAYERS) == named
    for layer in images.FRAMEWORK_LAYERS.values():
        assert (images.IMAGES_DIR / layer.dockerfile).is_file()


def test_torch_is_pinned_to_the_local_cpu_build_never_pypis():
    # A local version (+cpu) matches no wheel on PyPI, whose torch is a multi-GB CUDA build.
    layer, learner = images.framework_specs("pytorch", "2.13")
    assert layer.wheels == ("torch==2.13.0+cpu",)
    assert layer.buildargs == {"REQUIREMENTS": "torch==2.13.0+cpu"}
    assert "ARG REQUIREMENTS=torch==2.13.0+cpu" in layer.dockerfile.read_text()
    assert (layer.tag, learner.tag) == ("dlaas/base-pytorch:2.13", "dlaas/learner-pytorch:2.13")


@pytest.mark.parametrize(
    ("asked", "chosen"),
    [
        ([], images.all_frameworks()),
        (["torch"], [("pytorch", "2.13")]),
        (["mpi:4.1", "tf:latest", "openmpi"], [("mpi", "4.1"), ("tensorflow", "2.21")]),
    ],
)
def test_the_framework_option_names_images_by_name_alias_and_version(asked, chosen):
    assert images.chosen_frameworks(asked) == chosen


@pytest.mark.parametrize(
    ("asked", "problem"),
    [
        ("caffe", "--framework caffe: no image is built for framework caffe; known: pytorch, "),
        ("pytorch:1.13", "--framework pytorch:1.13: no pytorch 1.13 image; versions: 2.13"),
    ],
)
def test_the_framework_option_refuses_what_has_no_image(asked, problem):
    with pytest.raises(ImageUnavailable) as info:
        images.chosen_frameworks([asked])
    assert info.value.message.startswith(problem)


def test_dlaas_images_build_passes_its_frameworks_to_the_builder(monkeypatch):
    from cli_runner import CliRunner

    from dlaas.clients.cli import app

    calls: list[list[str]] = []
    monkeypatch.setattr(images, "main", lambda argv: calls.append(argv) or 0)
    args = ["images", "build", "--force", "--framework", "torch", "--framework", "mpi:4.1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert calls == [["--force", "--framework", "torch", "--framework", "mpi:4.1"]]
    assert CliRunner().invoke(app, ["images", "build", "--learner-only"]).exit_code == 0
    assert calls[-1] == ["--learner-only"]


def test_tensorflow_brings_tf_keras_without_a_second_tensorflow():
    layer, _learner = images.framework_specs("tensorflow", "2.21")
    assert (layer.wheels, layer.no_deps) == (("tensorflow-cpu==2.21.0",), ("tf_keras==2.21.0",))
    assert layer.buildargs == {
        "REQUIREMENTS": "tensorflow-cpu==2.21.0",
        "NO_DEPS_REQUIREMENTS": "tf_keras==2.21.0",
    }
    text = layer.dockerfile.read_text()
    assert "--no-deps ${NO_DEPS_REQUIREMENTS}" in text and "ARG REQUIREMENTS=tensorflow-cpu" in text
