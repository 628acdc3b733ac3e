"""The wheelhouse of a framework image (dlaas/local/wheelhouse.py): one directory per set of
requirements, reused without pip once complete, a failed download refused with pip's reason,
the command resolving for the image's Python. No network: pip is replaced where it would run
(tests/integration/test_images.py serves a house and builds from it)."""

from __future__ import annotations

import subprocess

import pytest

from dlaas.domain.errors import ImageUnavailable
from dlaas.local import wheelhouse

TORCH = ("torch==2.13.0+cpu",)


def test_each_set_of_requirements_has_its_own_house(tmp_path):
    assert wheelhouse.house_for(TORCH, tmp_path) == wheelhouse.house_for(TORCH, tmp_path)
    assert wheelhouse.house_for(TORCH, tmp_path) != wheelhouse.house_for(
        ("torch==2.14.0+cpu",), tmp_path
    )
    assert wheelhouse.house_for(TORCH, tmp_path).parent == tmp_path


def test_the_listing_is_the_wheels_by_name_and_size(tmp_path):
    (tmp_path / "b-1.0-py3-none-any.whl").write_bytes(b"bb")
    (tmp_path / "a-1.0-py3-none-any.whl").write_bytes(b"a")
    (tmp_path / wheelhouse.COMPLETE).write_text("x\n")
    assert wheelhouse.listing(tmp_path) == [
        ("a-1.0-py3-none-any.whl", 1),
        ("b-1.0-py3-none-any.whl", 2),
    ]


def test_a_complete_house_is_reused_without_pip(tmp_path, monkeypatch):
    house = wheelhouse.house_for(TORCH, tmp_path)
    house.mkdir(parents=True)
    (house / wheelhouse.COMPLETE).write_text("torch\n")

    def no_pip(*args, **kwargs):
        raise AssertionError("pip ran for a complete wheelhouse")

    monkeypatch.setattr(subprocess, "run", no_pip)
    assert wheelhouse.ensure_wheelhouse(TORCH, lambda _l: None, root=tmp_path) == house


def test_pip_download_resolves_for_the_images_python_from_the_local_wheels_first(
    tmp_path, monkeypatch
):
    local = tmp_path / "local"
    local.mkdir()
    monkeypatch.setenv(wheelhouse.WHEEL_DIR_ENV, str(local))
    ran = []

    def fake_run(cmd, **kwargs):
        ran.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    house = wheelhouse.ensure_wheelhouse(TORCH, lambda _l: None, root=tmp_path / "cache")
    (cmd,) = ran
    assert cmd[1:4] == ["-m", "pip", "download"] and cmd[-1] == "torch==2.13.0+cpu"
    assert cmd[cmd.index("--find-links") + 1] == str(local)
    assert "--python-version=3.11" in cmd and "--platform=manylinux_2_36_x86_64" in cmd
    assert (house / wheelhouse.COMPLETE).is_file()


def test_a_failed_download_says_why_and_leaves_the_house_incomplete(tmp_path, monkeypatch):
    monkeypatch.setenv(wheelhouse.WHEEL_DIR_ENV, str(tmp_path / "none"))

    def failing(cmd, **kwargs):
        assert "--find-links" not in cmd  # the local wheel dir does not exist
        return subprocess.CompletedProcess(
            cmd, 1, "", "ERROR: No matching distribution found for torch==2.13.0+cpu\n"
        )

    monkeypatch.setattr(subprocess, "run", failing)
    with pytest.raises(ImageUnavailable) as info:
        wheelhouse.ensure_wheelhouse(TORCH, lambda _l: None, root=tmp_path)
    message = info.value.message
    assert message.startswith("pip download of torch==2.13.0+cpu failed (exit 1)")
    assert "$DLAAS_WHEEL_DIR" in message and "No matching distribution" in message
    assert not (wheelhouse.house_for(TORCH, tmp_path) / wheelhouse.COMPLETE).exists()


def test_a_no_deps_requirement_is_downloaded_without_its_dependencies(tmp_path, monkeypatch):
    # tf_keras asks for `tensorflow`: resolved with it, a second TensorFlow would be served.
    monkeypatch.setenv(wheelhouse.WHEEL_DIR_ENV, str(tmp_path / "none"))
    ran = []

    def fake_run(cmd, **kwargs):
        ran.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    tf = ("tensorflow-cpu==2.21.0",)
    house = wheelhouse.ensure_wheelhouse(
        tf, lambda _l: None, root=tmp_path, no_deps=("tf_keras==2.21.0",)
    )
    assert [cmd[-1] for cmd in ran] == ["tensorflow-cpu==2.21.0", "tf_keras==2.21.0"]
    assert "--no-deps" not in ran[0] and ran[1][-2] == "--no-deps"
    assert house != wheelhouse.house_for(tf, tmp_path)  # its own house
    assert (house / wheelhouse.COMPLETE).read_text() == "tensorflow-cpu==2.21.0\ntf_keras==2.21.0\n"
