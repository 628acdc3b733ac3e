"""The framework examples as their users run them on a host, no containers, no platform:
examples/pytorch-ddp under torchrun (2 nodes x 2 processes, the way the platform starts
it) and as 2 plain processes with RANK/WORLD_SIZE set by hand, examples/mpi under mpirun,
examples/keras as 2 workers with TF_CONFIG. Every rank must end with the same weights, the
DDP example must resume after a kill (SIGKILL: from its last epoch; SIGTERM: from the step
the ranks agreed to stop at), and the MPI example from its last epoch. FfDL's examples
(tests/fixtures/ffdl) run their manifests' commands as written, under `sh -c`.

The project's virtualenv has none of torch, mpi4py or TensorFlow: the tests run the examples
with $DLAAS_EXAMPLES_PYTHON (an interpreter that has them: a virtualenv with torch, mpi4py,
tensorflow-cpu and tf_keras; mpirun from OpenMPI on PATH) or else this interpreter, and are
skipped, saying what is missing, where it lacks them. The platform runs the same examples
end to end in tests/e2e.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dlaas.local.processes import free_port

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
PYTHON = os.environ.get("DLAAS_EXAMPLES_PYTHON") or sys.executable
HASH_RE = re.compile(r"^(?:rank|worker) (\d+) weights_sha256=([0-9a-f]{64})$", re.MULTILINE)
EPOCH_RE = re.compile(r"^epoch (\d+)/(\d+) loss=([\d.]+) acc=([\d.]+)", re.MULTILINE)
TIMEOUT_S = 180


@functools.cache
def importable(module: str) -> bool:
    probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    return subprocess.run([PYTHON, "-c", probe], check=False).returncode == 0


def needs(*modules: str, program: str | None = None):
    missing = [m for m in modules if not importable(m)]
    if program and shutil.which(program) is None:
        missing.append(f"the program {program}")
    return pytest.mark.skipif(
        bool(missing),
        reason=f"{PYTHON} lacks {', '.join(missing)} (set DLAAS_EXAMPLES_PYTHON to one that has "
        "them; the platform's e2e tests run the examples in its images)",
    )


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    spec = importlib.util.spec_from_file_location("prepare", EXAMPLES / "digits" / "prepare.py")
    prepare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prepare)
    d = tmp_path_factory.mktemp("data")
    prepare.write_local(d)
    return d


def learner_env(base: Path, data_dir: Path, **extra: str) -> dict[str, str]:
    """The paths a learner gets, dlaas.learner importable (as in the images), one thread."""
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "DATA_DIR": str(data_dir),
        "RESULT_DIR": str(base / "results"),
        "CHECKPOINT_DIR": str(base / "checkpoints"),
        **extra,
    }


def finish(procs: list[subprocess.Popen]) -> list[tuple[int, str]]:
    out = []
    for p in procs:
        try:
            text, _ = p.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        out.append((p.returncode, text))
    return out


def hashes(*outputs: str) -> dict[int, str]:
    found = [m for text in outputs for m in HASH_RE.findall(text)]
    by_rank = {int(r): h for r, h in found}
    assert len(by_rank) == len(found), f"a rank reported twice: {found}"
    return by_rank


# --------------------------------------------------------------------------- PyTorch DDP


def ddp_ranks(tmp: Path, data_dir: Path, world: int, *args: str) -> list[subprocess.Popen]:
    """`world` plain processes with the env:// contract set by hand, one per 'learner'."""
    port = str(free_port())
    procs = []
    for rank in range(world):
        env = learner_env(
            tmp / "rank0" if rank == 0 else tmp / f"rank{rank}",
            data_dir,
            RANK=str(rank),
            WORLD_SIZE=str(world),
            LOCAL_RANK="0",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
        )
        procs.append(
            subprocess.Popen(
                [PYTHON, "train.py", *args],
                cwd=EXAMPLES / "pytorch-ddp",
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    return procs


def read_until(proc: subprocess.Popen, pattern: str) -> str:
    """Rank 0's output up to and including the first line that matches `pattern`."""
    seen, deadline = [], time.monotonic() + TIMEOUT_S
    for line in proc.stdout:
        seen.append(line)
        if re.match(pattern, line) or time.monotonic() > deadline:
            break
    text = "".join(seen)
    assert re.search(pattern, text, re.MULTILINE), text
    return text


@needs("torch")
def test_ddp_under_torchrun_two_nodes_of_two_processes_agree(tmp_path, data_dir):
    # What the platform runs on learner i for launcher torchrun, processes_per_learner 2.
    port = str(free_port())
    torchrun = [PYTHON, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=2",
                "--master_addr=127.0.0.1", f"--master_port={port}", "--max_restarts=0"]  # fmt: skip
    procs = [
        subprocess.Popen(
            [*torchrun, f"--node_rank={node}", "train.py", "--epochs", "3"],
            cwd=EXAMPLES / "pytorch-ddp",
            env=learner_env(tmp_path / f"node{node}", data_dir),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for node in range(2)
    ]
    (rc0, out0), (rc1, out1) = finish(procs)
    assert (rc0, rc1) == (0, 0), out0 + out1
    assert "gloo on cpu: world 4" in out0
    epochs = EPOCH_RE.findall(out0)
    assert [int(e[0]) for e in epochs] == [1, 2, 3]
    assert float(epochs[-1][2]) < float(epochs[0][2])  # the loss went down
    by_rank = hashes(out0, out1)
    assert sorted(by_rank) == [0, 1, 2, 3]
    assert len(set(by_rank.values())) == 1, by_rank
    assert re.search(r"^steps=\d+ seconds=[\d.]+ steps_per_s=[\d.]+$", out0, re.MULTILINE)
    # Rank 0 (node 0) alone writes the results and the checkpoints.
    metrics = json.loads((tmp_path / "node0" / "results" / "metrics.json").read_text())
    assert metrics["world_size"] == 4 and metrics["epochs"] == 3
    assert (tmp_path / "node0" / "results" / "model.pt").is_file()
    assert not (tmp_path / "node1" / "results").exists()
    assert sorted(p.name for p in (tmp_path / "node0" / "checkpoints").iterdir()) == [
        f"ckpt-{e:012d}.bin" for e in (1, 2, 3)
    ]


@needs("torch")
def test_ddp_as_two_plain_processes_resumes_after_a_kill_and_after_sigterm(tmp_path, data_dir):
    # A kill -9 after epoch 2: the restarted ranks resume from rank 0's newest checkpoint.
    procs = ddp_ranks(tmp_path, data_dir, 2, "--epochs", "400")
    read_until(procs[0], r"^epoch 2/400 ")
    for p in procs:
        p.kill()
    finish(procs)
    newest = max(p.name for p in (tmp_path / "rank0" / "checkpoints").iterdir())
    done = int(newest.split("-")[1].split(".")[0])
    assert done >= 2

    # SIGTERM mid-run: the ranks stop after the same step, rank 0 saves where, all exit 143.
    procs = ddp_ranks(tmp_path, data_dir, 2, "--epochs", "400")
    head = read_until(procs[0], rf"^epoch {done + 2}/400 ")
    assert f"resuming from the checkpoint of epoch {done}\n" in head
    for p in procs:
        p.send_signal(signal.SIGTERM)
    (rc0, out0), (rc1, out1) = finish(procs)
    assert (rc0, rc1) == (143, 143), out0 + out1
    stop = re.search(r"SIGTERM: checkpoint saved at epoch (\d+) \+ (\d+) steps", out0)
    assert stop, out0
    epoch, steps = int(stop[1]), int(stop[2])
    assert epoch >= done + 2

    # The next start goes on from that step and finishes with the same weights on both ranks.
    procs = ddp_ranks(tmp_path, data_dir, 2, "--epochs", str(epoch + 2))
    (rc0, out0), (rc1, out1) = finish(procs)
    assert (rc0, rc1) == (0, 0), out0 + out1
    inside = f" and {steps} steps of epoch {epoch + 1}" if steps else ""
    assert f"resuming from the checkpoint of epoch {epoch}{inside}\n" in out0
    assert [int(e[0]) for e in EPOCH_RE.findall(out0)] == [epoch + 1, epoch + 2]
    by_rank = hashes(out0, out1)
    assert sorted(by_rank) == [0, 1] and by_rank[0] == by_rank[1]
    assert float(EPOCH_RE.findall(out0)[-1][3]) > 0.9  # it learned: test accuracy


@needs("torch")
def test_ddp_max_steps_caps_the_run(tmp_path, data_dir):
    procs = ddp_ranks(tmp_path, data_dir, 1, "--epochs", "50", "--steps-per-epoch", "5",
                      "--max-steps", "12")  # fmt: skip
    ((rc, out),) = finish(procs)
    assert rc == 0, out
    assert [int(e[0]) for e in EPOCH_RE.findall(out)] == [1, 2, 3]
    assert "steps=12 " in out
    assert json.loads((tmp_path / "rank0" / "results" / "metrics.json").read_text())["steps"] == 12


# --------------------------------------------------------------------------- MPI


def mpirun(tmp: Path, data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = learner_env(tmp, data_dir)
    forwarded = [f"-x {n}" for n in ("PYTHONPATH", "DATA_DIR", "RESULT_DIR", "CHECKPOINT_DIR")]
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    command = ["mpirun", *root, "--oversubscribe", "-np", "2",
               *" ".join(forwarded).split(), PYTHON, "train.py", *args]  # fmt: skip
    return subprocess.run(
        command,
        cwd=EXAMPLES / "mpi",
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


@needs("mpi4py", "numpy", program="mpirun")
def test_mpi_allreduce_training_agrees_and_resumes(tmp_path, data_dir):
    done = mpirun(tmp_path, data_dir, "--epochs", "10")
    assert done.returncode == 0, done.stdout + done.stderr
    epochs = EPOCH_RE.findall(done.stdout)
    assert [int(e[0]) for e in epochs] == list(range(1, 11))
    assert float(epochs[-1][3]) > 0.9
    by_rank = hashes(done.stdout)
    assert sorted(by_rank) == [0, 1] and by_rank[0] == by_rank[1]
    assert (tmp_path / "results" / "model.npz").is_file()

    again = mpirun(tmp_path, data_dir, "--epochs", "12")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resuming from the checkpoint of epoch 10" in again.stdout
    assert [int(e[0]) for e in EPOCH_RE.findall(again.stdout)] == [11, 12]
    by_rank_again = hashes(again.stdout)
    assert by_rank_again[0] == by_rank_again[1] != by_rank[0]


# --------------------------------------------------------------------------- Keras


@needs("tensorflow", "tf_keras")
def test_keras_multi_worker_mirrored_two_workers_agree(tmp_path, data_dir):
    ports = [free_port(), free_port()]
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = [
        subprocess.Popen(
            [PYTHON, "train.py", "--epochs", "3"],
            cwd=EXAMPLES / "keras",
            env=learner_env(
                tmp_path / f"worker{i}",
                data_dir,
                TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}),
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    (rc0, out0), (rc1, out1) = finish(procs)
    assert (rc0, rc1) == (0, 0), out0 + out1
    assert "worker 0 of 2, 2 replicas, global batch 64" in out0
    assert "Epoch 3/3" in out0 and "Epoch 3/3" in out1
    accuracy = float(re.search(r"^test loss=[\d.]+ accuracy=([\d.]+)$", out0, re.MULTILINE)[1])
    assert accuracy > 0.8
    by_worker = hashes(out0, out1)
    assert sorted(by_worker) == [0, 1] and by_worker[0] == by_worker[1]
    # The chief keeps the model; the other worker's copy went to a temporary directory.
    assert (tmp_path / "worker0" / "results" / "model.keras").is_file()
    assert not (tmp_path / "worker1" / "results").exists()


# --------------------------------------------------------------------------- FfDL's examples
# tests/fixtures/ffdl: each manifest's command, as written, through `sh -c` in a copy of its
# directory (the learner's working directory), with the env a learner gets.

FFDL = REPO / "tests" / "fixtures" / "ffdl"


def ffdl_learner(name: str, tmp: Path, data_dir: Path, **extra: str) -> subprocess.Popen:
    from dlaas.domain.manifest import parse_manifest

    command = parse_manifest((FFDL / name / "manifest.yml").read_text()).framework.command
    if "MASTER_PORT" in extra:  # FfDL's fixed 1234 may be taken on a shared host
        command = command.replace("--master_port=1234", f"--master_port={extra['MASTER_PORT']}")
    code = tmp / "code"
    shutil.copytree(FFDL / name, code)
    env = learner_env(tmp, data_dir, **extra)
    env["PATH"] = f"{Path(PYTHON).parent}{os.pathsep}{env['PATH']}"  # python, python3, pip
    return subprocess.Popen(
        ["sh", "-c", command],
        cwd=code,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@needs("torch")
def test_ffdl_pytorch_model_runs_its_command(tmp_path, data_dir):
    ((rc, out),) = finish([ffdl_learner("pytorch-model", tmp_path, data_dir)])
    assert rc == 0, out
    tests = re.findall(r"Test set: Average loss: [\d.]+, Accuracy: \d+/\d+ \((\d+)%\)", out)
    assert len(tests) == 5 and int(tests[-1]) > 60, out
    assert (tmp_path / "results" / "model" / "model.dat").is_file()
    assert (tmp_path / "results" / "saved_model.tar.gz").is_file()


@needs("tensorflow", "keras")
def test_ffdl_keras_test_runs_its_command(tmp_path, data_dir):
    ((rc, out),) = finish([ffdl_learner("keras-test", tmp_path, data_dir)])
    assert rc == 0, out
    assert float(re.search(r"^Test accuracy: ([\d.]+)$", out, re.MULTILINE)[1]) > 0.7, out
    assert (tmp_path / "results" / "keras_mnist_cnn.hdf5").is_file()


@needs("torch")
def test_ffdl_pytorch_launch_dist_runs_on_two_learners_and_agrees(tmp_path, data_dir):
    port = str(free_port())
    procs = [
        ffdl_learner(
            "pytorch-launch-dist",
            tmp_path / f"learner{i}",
            data_dir,
            LEARNER_ID=str(i),
            NUM_LEARNERS="2",
            RANK=str(i),
            WORLD_SIZE="2",
            NODE_RANK=str(i),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
            GPU_COUNT="0",
        )
        for i in range(2)
    ]
    (rc0, out0), (rc1, out1) = finish(procs)
    assert (rc0, rc1) == (0, 0), out0 + out1
    assert "Process  0 , epoch  9 :" in out0 and "Process  1 , epoch  9 :" in out1
    by_rank = hashes(out0, out1)
    assert sorted(by_rank) == [0, 1] and by_rank[0] == by_rank[1]
