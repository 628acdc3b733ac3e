"""FfDL's example shapes (tests/fixtures/manifests/ffdl-*.yml, written by us in FfDL's
format): folded commands run as one shell line; PyTorch 2.13 (or FfDL's "latest") selects
the platform's PyTorch image; underscore bucket names, framework versions with no image and
frameworks with no image are refused by `dlaas validate` with the field, the reason and
the fix."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_runner import CliRunner

from dlaas.clients.cli import app
from dlaas.domain.errors import ImageUnavailable, InvalidManifest
from dlaas.domain.frameworks import resolve_image
from dlaas.domain.manifest import parse_manifest
from dlaas.domain.manifest_yaml import join_folded

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "manifests"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
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


def test_underscore_buckets_of_an_own_store_are_refused_naming_the_name_to_use():
    # FfDL's manifest names its own store (connection.auth_url): S3 there takes no '_'.
    with pytest.raises(InvalidManifest) as info:
        parse_manifest(text("ffdl-pytorch-model.yml"))
    (problem,) = info.value.problems
    assert problem.startswith("data_stores[0]: training_data.container:")
    assert "'_' is not allowed" in problem and "'mnist-training-data'" in problem


def test_underscore_buckets_in_the_platforms_store_are_accepted_as_written():
    body = text("ffdl-pytorch-model.yml")
    body = body[: body.index("    connection:")] + body[body.index("framework:") :]
    store = parse_manifest(body).data_store()
    assert store.training_data.container == "mnist_training_data"
    assert store.training_results.container == "mnist_trained_model"


def test_validate_refuses_underscore_buckets_of_an_own_store_in_one_line(tmp_path):
    r = validate(tmp_path, text("ffdl-horovod.yml"))
    assert r.exit_code == 1
    assert "training_data.container" in r.output
    assert "'horovod-mnist-data'" in r.output
    assert "Traceback" not in r.output


# --------------------------------------------------------------------------- frameworks


@pytest.mark.parametrize(
    ("name", "library"), [("ffdl-horovod.yml", "Horovod"), ("ffdl-pytorch-model.yml", "Caffe")]
)
def test_a_framework_with_no_image_says_so_and_the_fix(name, library):
    body = fixed(name).replace("name: python\n", f"name: {library.lower()}\n")
    with pytest.raises(ImageUnavailable) as info:
        resolve_image(parse_manifest(body), "dlaas/learner:latest")
    message = info.value.message
    assert message.startswith("framework.name: the platform has no " + library + " image")
    assert "set framework.image" in message and "framework name 'python'" in message
    # What it does have.
    assert "framework pytorch 2.13, tensorflow 2.21, mpi 4.1" in message


@pytest.mark.parametrize(
    ("name", "version"), [("pytorch", "latest"), ("pytorch", "2.13"), ("pytorch", "2.13.0"),
                          ("PyTorch", "LATEST"), ("torch", "2.13")],
)  # fmt: skip
def test_pytorch_2_13_selects_the_pytorch_image(name, version):
    body = fixed("ffdl-pytorch-model.yml").replace("name: python\n", f"name: {name}\n")
    m = parse_manifest(
        body.replace('version: "1.0"\n  command', f'version: "{version}"\n  command')
    )
    assert resolve_image(m, "dlaas/learner:latest") == "dlaas/learner-pytorch:2.13"
    # A registry's learner image carries its prefix over to the framework's image.
    assert resolve_image(m, "reg.example:5000/ml/dlaas/learner:v7") == (
        "reg.example:5000/ml/dlaas/learner-pytorch:2.13"
    )
    assert resolve_image(m, "reg.example/dlaas/learner@sha256:" + "0" * 64) == (
        "reg.example/dlaas/learner-pytorch:2.13"
    )


def test_a_pytorch_framework_without_a_version_is_the_newest():
    m = parse_manifest("name: x\nframework: {name: pytorch, command: python t.py}\n")
    assert resolve_image(m, "dlaas/learner:latest") == "dlaas/learner-pytorch:2.13"


@pytest.mark.parametrize("version", ["1.0", "0.4.1", "2.3", "1.13", "2.13x", "2"])
def test_a_pytorch_version_with_no_image_is_refused_naming_the_versions_there_are(version):
    m = parse_manifest(
        f"name: x\nframework: {{name: pytorch, version: '{version}', command: python t.py}}\n"
    )
    with pytest.raises(ImageUnavailable) as info:
        resolve_image(m, "dlaas/learner:latest")
    message = info.value.message
    assert message.startswith(f"framework.version: the platform has no PyTorch {version} image")
    assert "PyTorch versions with an image: 2.13 ('latest' is 2.13)" in message
    assert "Set framework.version to one of them" in message and "framework.image" in message


def test_an_explicit_image_wins_over_the_pytorch_version():
    m = parse_manifest(
        "name: x\nframework: {name: pytorch, version: '0.4', image: 'my/torch:0.4', "
        "command: python t.py}\n"
    )
    assert resolve_image(m, "dlaas/learner:latest") == "my/torch:0.4"


def test_validate_refuses_ffdl_pytorch_1_0_at_the_version_with_the_fix(tmp_path):
    body = fixed("ffdl-pytorch-model.yml").replace("name: python\n", "name: pytorch\n")
    r = validate(tmp_path, body, "--json")
    assert r.exit_code == 1
    (problem,) = json.loads(r.output)["problems"]
    assert problem.startswith("framework.version: the platform has no PyTorch 1.0 image")
    assert "2.13" in problem and "Traceback" not in r.output


def test_the_runnable_pytorch_fixture_validates_as_written(tmp_path):
    r = validate(tmp_path, text("ffdl-pytorch-digits.yml"), "--json")
    assert r.exit_code == 0, r.output
    m = parse_manifest(text("ffdl-pytorch-digits.yml"))
    assert m.framework.command == (
        "python train.py --data ${DATA_DIR} --epochs 8 --lr 0.05 --out ${RESULT_DIR}/model.pt"
    )
    assert resolve_image(m, "dlaas/learner:latest") == "dlaas/learner-pytorch:2.13"
    store = m.data_stores[0]
    assert store.connection.endpoint == "http://s3.lab.example:9000"  # FfDL's auth_url
    assert store.training_data.container == "pytorch-digits-data"


def test_the_pytorch_example_validates_and_selects_the_pytorch_image(tmp_path):
    body = (EXAMPLES / "pytorch" / "manifest.yaml").read_text()
    assert validate(tmp_path, body).exit_code == 0
    m = parse_manifest(body)
    assert resolve_image(m, "dlaas/learner:latest") == "dlaas/learner-pytorch:2.13"
    assert m.framework.command.startswith("python train.py --data ${DATA_DIR} --epochs 10")


def test_validate_refuses_the_tf_model_with_the_reason_and_the_fix(tmp_path):
    r = validate(tmp_path, text("ffdl-tf-model.yml"))
    assert r.exit_code == 1
    assert "no TensorFlow 1.5.0-py3 image" in r.output and "framework.image" in r.output
    assert "Traceback" not in r.output
    r = validate(tmp_path, text("ffdl-tf-model.yml"), "--json")
    assert r.exit_code == 1
    answer = json.loads(r.output)
    assert answer["valid"] is False
    assert answer["problems"][0].startswith(
        "framework.version: the platform has no TensorFlow 1.5.0-py3 image; "
        "TensorFlow versions with an image: 2.21 ('latest' is 2.21)"
    )


@pytest.mark.parametrize(
    "name", ["ffdl-pytorch-model.yml", "ffdl-tf-model.yml", "ffdl-horovod.yml"]
)
def test_with_the_fixes_applied_each_example_validates(tmp_path, name):
    r = validate(tmp_path, fixed(name))
    assert r.exit_code == 0, r.output
    assert parse_manifest(fixed(name)).data_stores[0].connection.endpoint.startswith("http://")


def test_a_sealed_ffdl_manifest_keeps_its_folded_command_on_one_line():
    # The LCM stores a manifest with a connection password sealed (re-serialised): the
    # stored text must run the folded command as FfDL ran it, not as three shell lines.
    from dlaas.domain.secretbox import SecretBox, new_key

    box = SecretBox(new_key())
    body = text("ffdl-pytorch-digits.yml")
    sealed = box.seal(body)
    assert "password: test" not in sealed
    for stored in (sealed, box.open(sealed)):
        command = parse_manifest(box.open(stored)).framework.command
        assert command == parse_manifest(body).framework.command
        assert "\n" not in command


# --------------------------------------------------------------------------- FfDL's examples
# tests/fixtures/ffdl/<name>: FfDL's pytorch-model, keras-test and pytorch-launch-dist in
# their shapes (manifest and code written for these tests, on the digits); each manifest says
# what had to change from FfDL's. They run on the host in
# tests/integration/test_framework_examples.py.

FFDL = FIXTURES.parent / "ffdl"


def ffdl(name: str) -> str:
    return (FFDL / name / "manifest.yml").read_text()


@pytest.mark.parametrize(
    ("name", "image"),
    [
        ("pytorch-model", "dlaas/learner-pytorch:"),
        ("pytorch-launch-dist", "dlaas/learner-pytorch:"),
        ("keras-test", "dlaas/learner-tensorflow:2.21"),
    ],
)
def test_each_ffdl_fixture_validates_as_written_and_selects_its_framework_image(
    tmp_path, name, image
):
    r = validate(tmp_path, ffdl(name), "--json")
    assert r.exit_code == 0, r.output
    assert resolve_image(parse_manifest(ffdl(name)), "dlaas/learner:latest").startswith(image)


@pytest.mark.parametrize("name", ["pytorch-model", "pytorch-launch-dist"])
def test_ffdl_bucket_names_with_underscores_are_kept_as_written(name):
    store = parse_manifest(ffdl(name)).data_store()
    assert store.training_data.container == "tf_training_data"
    assert store.training_results.container == "tf_trained_model"


@pytest.mark.parametrize(
    ("name", "command", "files"),
    [
        ("pytorch-model", "python mnist.py --epochs 5", ["mnist.py"]),
        (
            "keras-test",
            (
                "pip install keras && python3 keras-test/mnist_cnn.py "
                "--mnistData ${DATA_DIR}/digits.npz"
            ),
            ["keras-test/mnist_cnn.py"],
        ),
        (
            "pytorch-launch-dist",
            (
                "./setup.sh; . ./env_file; python -m torch.distributed.launch "
                "--nproc_per_node=$NUM_GPUS --nnodes=$NUM_LEARNERS --node_rank=$node_rank "
                "--master_addr=$master_node --master_port=1234 train_dist_launcher.py "
                "--batch_size=256;"
            ),
            ["setup.sh", "train_dist_launcher.py"],
        ),
    ],
)
def test_ffdl_fixtures_run_ffdls_commands_over_their_own_files(name, command, files):
    m = parse_manifest(ffdl(name))
    assert m.framework.command == command
    assert m.framework.launcher == "none"  # FfDL's commands start their own launchers
    for f in files:
        assert (FFDL / name / f).is_file(), f
    assert os.access(FFDL / "pytorch-launch-dist" / "setup.sh", os.X_OK)  # run as ./setup.sh


def test_the_distributed_ffdl_fixture_has_two_learners_on_cpus():
    m = parse_manifest(ffdl("pytorch-launch-dist"))
    assert (m.learners, m.gpus) == (2, 0)


# --------------------------------------------------------------------------- our examples


@pytest.mark.parametrize(
    ("path", "launcher", "processes"),
    [
        ("pytorch-ddp/manifest.yaml", "none", None),
        ("pytorch-ddp/manifest-torchrun.yaml", "torchrun", 2),
        ("mpi/manifest.yaml", "mpi", None),
        ("keras/manifest.yaml", "none", None),
    ],
)
def test_each_framework_example_validates_with_two_learners(tmp_path, path, launcher, processes):
    body = (EXAMPLES / path).read_text()
    r = validate(tmp_path, body)
    assert r.exit_code == 0, r.output
    m = parse_manifest(body)
    assert m.learners == 2
    assert (m.framework.launcher, m.framework.processes_per_learner) == (launcher, processes)
    assert m.framework.command.startswith("python train.py --epochs ")
    assert (EXAMPLES / path).parent.joinpath("train.py").is_file()
    assert m.data_store().training_data.container == "digits-data"


def test_no_example_tells_users_to_upload_with_keys():
    # The README's `dlaas data upload` is the way; a user never holds an S3 key.
    for path in [*EXAMPLES.rglob("*.yaml"), *EXAMPLES.rglob("*.py"), EXAMPLES / "README.md"]:
        text = path.read_text()
        assert "--endpoint" not in text and "AWS_SECRET_ACCESS_KEY" not in text, path
