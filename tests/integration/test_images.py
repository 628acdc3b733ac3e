"""ensure_images against the real Docker engine: builds once, then reuses in well under a
second; the image holds the in-container code and nothing it cannot import. The PyTorch
learner image is that same code on Debian's torch, and is reused the same way.

The first run on a fresh machine builds dlaas/base:bookworm with debootstrap (about a
minute, needs root and network access to deb.debian.org) and the PyTorch image (3 to 5
minutes, 226 MB from deb.debian.org); later runs reuse them.
"""

from __future__ import annotations

import time

import pytest

from dlaas.domain.errors import ImageUnavailable
from dlaas.local import images

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def learner_image(docker_client) -> str:
    return images.ensure_images(docker_client, progress=lambda _line: None)


def test_builds_the_learner_image_labelled_with_its_sources(docker_client, learner_image):
    assert learner_image == images.LEARNER_IMAGE
    image = docker_client.images.get(learner_image)
    dockerfile = images.LEARNER_DOCKERFILE.read_bytes()
    files = images.context_files(images.REPO_ROOT, images.copy_sources(dockerfile.decode()))
    digest = images.source_hash(dockerfile, images.REPO_ROOT, files)
    assert image.labels[images.LABEL_SOURCE_HASH] == digest
    assert image.labels[images.LABEL_BASE_ID] == docker_client.images.get(images.BASE_IMAGE).id


def test_second_call_is_fast_and_does_not_rebuild(docker_client, learner_image):
    before = docker_client.images.get(learner_image).id
    lines: list[str] = []
    started = time.monotonic()
    assert images.ensure_images(docker_client, progress=lines.append) == learner_image
    assert time.monotonic() - started < 5
    assert docker_client.images.get(learner_image).id == before
    assert lines == [f"{learner_image} is up to date"]


def test_image_runs_the_in_container_code(docker_client, learner_image):
    out = docker_client.containers.run(
        learner_image,
        [
            "python3",
            "-c",
            (
                "import dlaas.learner.run, dlaas.learner.checkpoint, services.learner_helper.main;"
                "import numpy, boto3, sys; print('ok', sys.version_info[:2], numpy.__version__)"
            ),
        ],
        remove=True,
        init=True,
    )
    assert out.decode().startswith("ok (3, 11)")


def test_image_holds_only_the_in_container_code(docker_client, learner_image):
    out = docker_client.containers.run(
        learner_image,
        ["sh", "-c", "cd /opt/dlaas && find . -name '*.py' | sort"],
        remove=True,
    ).decode()
    assert "./dlaas/domain/jobspec.py" in out and "./services/learner_helper/main.py" in out
    assert "manifest.py" not in out and "services/lcm" not in out and "examples" not in out


# --------------------------------------------------------------------------- PyTorch


@pytest.mark.timeout(900)  # a new machine builds the image first (a few minutes)
def test_the_pytorch_image_is_the_learner_image_on_debians_torch(docker_client, pytorch_image):
    layer, learner = images.framework_specs("pytorch", "1.13")
    assert pytorch_image == learner.tag == "dlaas/learner-pytorch:1.13"
    assert layer.tag == "dlaas/base-pytorch:1.13"
    image = docker_client.images.get(pytorch_image)
    # The learner Dockerfile on top of the torch layer, labelled with that layer's id.
    assert image.labels[images.LABEL_BASE_ID] == docker_client.images.get(layer.tag).id
    torch_layer = docker_client.images.get(layer.tag)
    assert (
        torch_layer.labels[images.LABEL_BASE_ID] == docker_client.images.get(images.BASE_IMAGE).id
    )
    out = docker_client.containers.run(
        pytorch_image,
        [
            "python",  # FfDL's commands call `python`
            "-c",
            (
                "import torch, numpy, boto3, dlaas.learner.checkpoint, services.learner_helper.main;"
                "x = torch.ones(2, 3, requires_grad=True); (x * 2).sum().backward();"
                "print('ok', torch.__version__, float(x.grad.sum()))"
            ),
        ],
        remove=True,
        init=True,
        network_mode="none",
    )
    assert out.decode().startswith("ok 1.13") and out.decode().split()[-1] == "12.0"


def test_a_second_pytorch_call_rebuilds_nothing(docker_client, pytorch_image):
    before = docker_client.images.get(pytorch_image).id
    lines: list[str] = []
    assert images.ensure_framework_image(docker_client, "pytorch", "1.13", lines.append) == (
        pytorch_image
    )
    assert docker_client.images.get(pytorch_image).id == before
    assert lines == ["dlaas/base-pytorch:1.13 is up to date", f"{pytorch_image} is up to date"]


def test_a_framework_version_that_is_not_built_is_refused_before_any_build(docker_client):
    with pytest.raises(ImageUnavailable, match=r"framework pytorch 0\.4; known: pytorch 1\.13"):
        images.ensure_framework_image(docker_client, "pytorch", "0.4", lambda _line: None)
    assert not docker_client.images.list(name="dlaas/learner-pytorch:0.4")
