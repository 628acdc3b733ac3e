"""The example jobs as plain host processes, with the env a learner gets (temp dirs).

digits must really learn (test accuracy > 0.9), checkpoint and resume; ddp's two
processes must really exchange gradients over TCP and end with identical weights. The
PyTorch example runs in the PyTorch image instead (torch is not on the host), and must
learn, checkpoint and resume the same way.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dlaas.local.processes import free_port

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "examples" / "digits"
DDP = REPO / "tests" / "fixtures" / "jobs" / "numpy-allreduce"
EPOCH_RE = re.compile(r"^epoch (\d+)/(\d+) loss=([\d.]+) .*accuracy=([\d.]+)", re.MULTILINE)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    spec = importlib.util.spec_from_file_location("prepare", DIGITS / "prepare.py")
    prepare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prepare)
    d = tmp_path_factory.mktemp("data")
    prepare.write_local(d)
    return d


def learner_env(tmp_path: Path, data_dir: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATA_DIR": str(data_dir),
        "RESULT_DIR": str(tmp_path / "results"),
        "CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        "LOG_DIR": str(tmp_path / "logs"),
        **extra,
    }


def run_digits(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "train.py", *args],
        cwd=DIGITS,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_digits_learns_checkpoints_and_writes_results(tmp_path, data_dir):
    env = learner_env(tmp_path, data_dir)
    done = run_digits(env, "--epochs", "20")
    assert done.returncode == 0, done.stderr
    epochs = EPOCH_RE.findall(done.stdout)
    assert [int(e[0]) for e in epochs] == list(range(1, 21))
    assert float(epochs[-1][2]) < float(epochs[0][2])  # the loss went down
    metrics = json.loads((tmp_path / "results" / "metrics.json").read_text())
    assert metrics["test_accuracy"] > 0.9
    with np.load(tmp_path / "results" / "model.npz") as model:
        assert model["w1"].shape == (64, 32) and model["w2"].shape == (32, 10)
    assert max(p.name for p in (tmp_path / "checkpoints").iterdir()) == "ckpt-000000000020.pkl"

    # a restarted learner resumes from the newest checkpoint instead of starting over
    again = run_digits(env, "--epochs", "22")
    assert again.returncode == 0, again.stderr
    assert "resuming from the checkpoint of epoch 20" in again.stdout
    assert [int(e[0]) for e in EPOCH_RE.findall(again.stdout)] == [21, 22]
    assert len(json.loads((tmp_path / "results" / "metrics.json").read_text())["history"]) == 22


def test_digits_without_data_says_so(tmp_path):
    done = run_digits(learner_env(tmp_path, tmp_path / "nothing"))
    assert done.returncode == 2
    assert "no digits.npz in DATA_DIR" in done.stderr and "Traceback" not in done.stderr


def run_ddp_gang(tmp_path: Path, data_dir: Path, epochs: int) -> tuple[list[int], list[str]]:
    """Two ddp learners as host processes; (exit codes, outputs) of (worker, master)."""
    port = str(free_port())
    procs = []
    try:
        for rank in (1, 0):  # the worker first: it has to retry until the master listens
            env = learner_env(
                tmp_path,
                data_dir,
                LEARNER_ID=str(rank),
                NUM_LEARNERS="2",
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
            )
            procs.append(
                subprocess.Popen(
                    [sys.executable, "train.py", "--epochs", str(epochs)],
                    cwd=DDP,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
        outs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    return [p.returncode for p in procs], outs


def test_ddp_learners_exchange_gradients_and_agree(tmp_path, data_dir):
    codes, outs = run_ddp_gang(tmp_path, data_dir, 10)
    assert codes == [0, 0], outs
    done = [re.search(r"done: accuracy=([\d.]+) rounds=(\d+) bytes_sent=(\d+) "
                      r"bytes_received=(\d+) weights_sha256=(\w+)", o) for o in outs]  # fmt: skip
    assert all(done), outs
    worker, master = (m.groups() for m in done)
    assert worker[4] == master[4]  # bit-identical weights
    assert int(worker[1]) == int(master[1]) > 100  # many all-reduce rounds, the same on both
    # what the worker sent is what the master received, and the other way round
    assert worker[2] == master[3] and worker[3] == master[2] and int(worker[2]) > 1_000_000
    assert float(master[0]) > 0.9
    metrics = json.loads((tmp_path / "results" / "metrics.json").read_text())
    assert metrics["learners"] == 2 and metrics["weights_sha256"] == master[4]
    assert "connected to 127.0.0.1" in outs[0]

    # A gang restarted after its last epoch's checkpoint (its node died before it could
    # exit) trains nothing more and ends the same way, on both learners.
    codes, again = run_ddp_gang(tmp_path, data_dir, 10)
    assert codes == [0, 0], again
    assert "learner 0: resuming from the checkpoint of epoch 10" in again[1]
    assert not EPOCH_RE.search(again[1])
    assert all(f"weights_sha256={master[4]}" in o for o in again), again


def test_ddp_worker_gives_up_clearly_without_a_master(tmp_path, data_dir):
    env = learner_env(
        tmp_path,
        data_dir,
        LEARNER_ID="1",
        NUM_LEARNERS="2",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        DDP_TIMEOUT_S="1",
    )
    done = subprocess.run(
        [sys.executable, "train.py", "--epochs", "1"],
        cwd=DDP,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "cannot reach the master 127.0.0.1" in done.stderr and "Traceback" not in done.stderr


# --------------------------------------------------------------------------- pytorch


@pytest.mark.docker
@pytest.mark.timeout(900)  # a new machine builds the PyTorch image first (a few minutes)
def test_pytorch_example_learns_checkpoints_and_resumes_in_the_pytorch_image(
    tmp_path, data_dir, docker_client, pytorch_image
):
    """examples/pytorch/train.py in dlaas/learner-pytorch:2.13 (torch is not on the host),
    with the learner's env, run twice as a restarted learner would be."""
    import shutil

    work = tmp_path / "w"
    shutil.copytree(data_dir, work / "data")
    shutil.copy(REPO / "examples/pytorch/train.py", work / "train.py")

    def run(epochs: int) -> str:
        command = f"python train.py --data $DATA_DIR --epochs {epochs} --out $RESULT_DIR/model.pt"
        env = {"DATA_DIR": "/w/data", "RESULT_DIR": "/w/results", "CHECKPOINT_DIR": "/w/ckpt"}
        return docker_client.containers.run(
            pytorch_image,
            ["sh", "-c", command + " 2>&1"],
            working_dir="/w",
            volumes={str(work): {"bind": "/w", "mode": "rw"}},
            environment=env,
            network_mode="none",
            init=True,
            remove=True,
        ).decode()

    out = run(6)
    epochs = EPOCH_RE.findall(out)
    assert [int(e[0]) for e in epochs] == list(range(1, 7)), out
    assert float(epochs[-1][2]) < float(epochs[0][2])  # the loss went down
    metrics = json.loads((work / "results" / "metrics.json").read_text())
    assert metrics["framework"] == "torch 2.13.0+cpu" and metrics["test_accuracy"] > 0.9
    assert (work / "results" / "model.pt").read_bytes()[:2] == b"PK"
    assert max(p.name for p in (work / "ckpt").iterdir()) == "ckpt-000000000006.bin"

    again = run(8)
    assert "resuming from the checkpoint of epoch 6" in again, again
    assert [int(e[0]) for e in EPOCH_RE.findall(again)] == [7, 8]
    assert len(json.loads((work / "results" / "metrics.json").read_text())["history"]) == 8
