"""FfDL's example shapes (tests/fixtures/manifests/ffdl-*.yml, written by us in FfDL's
format): folded commands run as one shell line, underscore bucket names and frameworks
with no image are refused by `dlaas validate` with the field, the reason and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dlaas.cli import app
from dlaas.errors import ImageUnavailable, InvalidManifest
from dlaas.manifest import join_folded, parse_manifest, resolve_image

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "manifests"
runner = CliRunner()


def text(name: str) -> str:
    return (FIXTURES / name).read_text()


def fixed(name: str) -> str:
    """The fixture with the fixes the refusals name: S3 bucket names, the python image."""
    out = text(name)
    for bad in ("mnist_training_data", "mnist_trained_model", "horovod_mnist_data",
                "horovod_mnist_results"):  # fmt: skip
        out = out.replace(bad, bad.replace("_", "-"))
    for framework in ("pytorch", "tensorflow", "horovod"):
        out = out.replace(f"name: {framework}\n", "name: python\n")
    return out


def validate(tmp_path, body: str, *args: str):
    path = tmp_path / "m.yml"
    path.write_text(body)
    return runner.invoke(app, ["validate", str(path), *args])


# --------------------------------------------------------------------------- folded commands


@pytest.mark.parametrize(
    "name", ["ffdl-pytorch-model.yml", "ffdl-tf-model.yml", "ffdl-horovod.yml"]
)
def test_a_folded_command_with_indented_lines_is_one_shell_line(name):
    command = parse_manifest(fixed(name)).framework.command
    assert "\n" not in command
    assert command.startswith("python")


def test_the_folded_pytorch_command_is_joined_as_ffdl_ran_it():
    command = parse_manifest(fixed("ffdl-pytorch-model.yml")).framework.command
    assert command == (
        "python pytorch_mnist.py --data ${DATA_DIR} --epochs 2 --lr 0.01 "
        "--out ${RESULT_DIR}/model.pt"
    )


def test_a_literal_block_keeps_its_lines():
    m = parse_manifest(
        "name: x\nframework:\n  name: python\n  command: |\n"
        "    for i in 1 2; do\n      echo $i\n    done\n"
    )
    assert m.framework.command == "for i in 1 2; do\n  echo $i\ndone\n"


def test_join_folded_keeps_a_break_the_writer_asked_for():
    # A blank line inside `>` gives an unindented line break: two commands, as written.
    assert join_folded("make data\n  --quiet\npython train.py\n") == (
        "make data --quiet\npython train.py"
    )


# --------------------------------------------------------------------------- bucket names


def test_underscore_buckets_are_refused_naming_the_field_and_the_name_to_use():
    with pytest.raises(InvalidManifest) as info:
        parse_manifest(text("ffdl-pytorch-model.yml"))
    problems = info.value.problems
    assert len(problems) == 2
    data, results = problems
    assert data.startswith("data_stores[0].training_data.container:")
    assert "'_' is not allowed" in data and "'mnist-training-data'" in data
    assert results.startswith("data_stores[0].training_results.container:")
    assert "'mnist-trained-model'" in results


def test_validate_refuses_underscore_buckets_in_one_line_each(tmp_path):
    r = validate(tmp_path, text("ffdl-horovod.yml"))
    assert r.exit_code == 1
    assert "data_stores[0].training_data.container" in r.output
    assert "'horovod-mnist-data'" in r.output
    assert "Traceback" not in r.output


# --------------------------------------------------------------------------- frameworks


@pytest.mark.parametrize(
    ("name", "library"),
    [("ffdl-tf-model.yml", "TensorFlow"), ("ffdl-pytorch-model.yml", "PyTorch")],
)
def test_a_framework_with_no_image_says_so_and_the_fix(name, library):
    body = fixed(name).replace("name: python\n", f"name: {name.split('-')[1]}\n")
    body = body.replace("name: tf\n", "name: tensorflow\n")
    with pytest.raises(ImageUnavailable) as info:
        resolve_image(parse_manifest(body), "dlaas/learner:latest")
    message = info.value.message
    assert message.startswith("framework.name: the platform has no " + library + " image")
    assert "set framework.image" in message and "framework name 'python'" in message


def test_validate_refuses_the_tf_model_with_the_reason_and_the_fix(tmp_path):
    r = validate(tmp_path, text("ffdl-tf-model.yml"))
    assert r.exit_code == 1
    assert "no TensorFlow image" in r.output and "framework.image" in r.output
    assert "Traceback" not in r.output
    r = validate(tmp_path, text("ffdl-tf-model.yml"), "--json")
    assert r.exit_code == 1
    answer = json.loads(r.output)
    assert answer["valid"] is False
    assert answer["problems"][0].startswith("framework.name: the platform has no TensorFlow")


@pytest.mark.parametrize(
    "name", ["ffdl-pytorch-model.yml", "ffdl-tf-model.yml", "ffdl-horovod.yml"]
)
def test_with_the_fixes_applied_each_example_validates(tmp_path, name):
    r = validate(tmp_path, fixed(name))
    assert r.exit_code == 0, r.output
    assert parse_manifest(fixed(name)).data_stores[0].connection.endpoint.startswith("http://")
