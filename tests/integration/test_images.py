"""ensure_images against the real Docker engine: builds once, then reuses in well under a
second; the image holds the in-container code and nothing it cannot import.

The first run on a fresh machine builds dlaas/base:bookworm with debootstrap (about a
minute, needs root and network access to deb.debian.org); later runs reuse it.
"""

from __future__ import annotations

import time

import pytest

from dlaas import images

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
    assert "./dlaas/jobspec.py" in out and "./services/learner_helper/main.py" in out
    assert "manifest.py" not in out and "services/lcm" not in out and "examples" not in out
