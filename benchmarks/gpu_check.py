"""The learner wrapper on real training, with no container: bare vs wrapped steps/s, and a
SIGTERM -> checkpoint -> resume. Made for a lent accelerator machine (PyTorch and CUDA, no
Docker), where it runs the PyTorch DDP example on the GPU; it runs on a CPU too (gloo).

    python benchmarks/gpu_check.py [--epochs 6] [--runs 3] [--json]

For each run it trains examples/pytorch-ddp/train.py
- bare: `torchrun --standalone --nproc_per_node P train.py ...`, in a plain folder;
- wrapped: `python -m dlaas.learner.run -- python train.py ...` with the env a learner gets
  (dlaas.domain.launch.learner_env, launcher torchrun, P processes, the GPUs as CUDA reads
  them), in a job folder laid out as the helper leaves it (DLAAS_JOB_DIR), so the wrapper
  starts torchrun with the platform's flags as it does in a container;
alternating the two, and reads the example's `steps_per_s` line. Then a wrapped run is sent
SIGTERM after its second epoch (as a halt or a preemption sends it): the example saves a
checkpoint at that step and exits 143; a second wrapped run resumes from it and completes.
Wrapped runs have the learner images' sitecustomize on PYTHONPATH (dlaas.learner.torch_hooks),
and two checks look at it: torch's default process-group timeouts (gloo's and NCCL's) read the
platform's collective timeout, and a 2-rank gloo all_reduce whose peer hangs fails within it.
P is the GPU count (NCCL wants a GPU per rank), or 2 on a CPU. Needs torch and numpy, and
the digits (scikit-learn, as examples/digits/prepare.py makes them).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dlaas.domain import launch

EXAMPLE = REPO / "examples" / "pytorch-ddp" / "train.py"
RATE = re.compile(r"steps_per_s=([0-9.]+)")
SEEN: dict[str, str] = {}  # the example's first line of a wrapped run: backend and device
# What the learner images' /opt/dlaas/sitecustomize.py holds (images/Dockerfile.learner).
SITECUSTOMIZE = "import dlaas.learner.torch_hooks\ndlaas.learner.torch_hooks.install()\n"
HANG_TIMEOUT_S = (
    20  # the collective timeout of the hanging-peer check (it bounds the rendezvous too)
)

# Rank 1 never reaches the all_reduce; rank 0 must fail within the platform's timeout.
HANG = """
import os, sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    time.sleep(120)
    sys.exit(0)
start = time.monotonic()
try:
    dist.all_reduce(torch.ones(4))
    print("all_reduce returned")
except Exception as exc:
    print(f"all_reduce failed after {time.monotonic() - start:.1f} s: {type(exc).__name__}")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def digits(folder: Path) -> None:
    spec = importlib.util.spec_from_file_location("prepare", REPO / "examples/digits/prepare.py")
    prepare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prepare)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "digits.npz").write_bytes(prepare.digits_npz())


def torchrun_on_path(tmp: Path) -> str:
    """A PATH with `torchrun` on it (a shim to `python -m torch.distributed.run` where the
    interpreter's scripts folder is not on PATH)."""
    path = os.environ.get("PATH", "")
    if shutil.which("torchrun"):
        return path
    shim = tmp / "bin"
    shim.mkdir(exist_ok=True)
    (shim / "torchrun").write_text(
        f'#!/bin/sh\nexec {sys.executable} -m torch.distributed.run "$@"\n'
    )
    (shim / "torchrun").chmod(0o755)
    return f"{shim}:{path}"


def job_dir(root: Path, data: Path) -> Path:
    """A job volume as the helper leaves it: data, code, the ready mark."""
    job = root / "job"
    (job / "code").mkdir(parents=True)
    shutil.copytree(data, job / "data")
    shutil.copy(EXAMPLE, job / "code" / "train.py")
    (job / ".data_ready").write_text("")
    return job


def hooks_dir(job: Path) -> Path:
    """A folder with the images' sitecustomize, first on a wrapped run's PYTHONPATH."""
    folder = job / ".site"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return folder


def wrapped_env(job: Path, procs: int, gpus: int, path: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        launch.learner_env(
            "gpu-check",
            0,
            1,
            framework="pytorch",
            launcher="torchrun",
            processes=procs,
            gpus=gpus,
            gpu_indices=tuple(range(gpus)),
        )
    )
    port = str(free_port())
    env.update(
        MASTER_ADDR="127.0.0.1", PET_MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
        PET_MASTER_PORT=port, DLAAS_JOB_DIR=str(job), DATA_DIR=str(job / "data"),
        RESULT_DIR=str(job / "results"), CHECKPOINT_DIR=str(job / "checkpoints"),
        LOG_DIR=str(job / "logs"), PYTHONPATH=f"{hooks_dir(job)}{os.pathsep}{REPO}", PATH=path,
    )  # fmt: skip
    if not gpus:
        env.pop("CUDA_VISIBLE_DEVICES", None)  # "" would hide nothing on a CPU anyway
    return env


def run(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float) -> tuple[int, str]:
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def rate_of(output: str) -> float:
    found = RATE.findall(output)
    if not found:
        raise RuntimeError(f"no steps_per_s line in:\n{output[-3000:]}")
    return float(found[-1])


def bare(tmp: Path, data: Path, procs: int, args, path: str) -> float:
    folder = Path(tempfile.mkdtemp(dir=tmp))
    env = dict(os.environ, DATA_DIR=str(data), RESULT_DIR=str(folder / "results"),
               CHECKPOINT_DIR=str(folder / "checkpoints"), PATH=path)  # fmt: skip
    cmd = ["torchrun", "--standalone", f"--nproc_per_node={procs}", str(EXAMPLE),
           f"--epochs={args.epochs}"]  # fmt: skip
    code, out = run(cmd, env, folder, args.timeout)
    if code != 0:
        raise RuntimeError(f"bare run exited {code}:\n{out[-3000:]}")
    return rate_of(out)


def wrapped(tmp: Path, data: Path, procs: int, gpus: int, args, path: str) -> float:
    job = job_dir(Path(tempfile.mkdtemp(dir=tmp)), data)
    cmd = [sys.executable, "-m", "dlaas.learner.run", "--",
           f"python train.py --epochs {args.epochs}"]  # fmt: skip
    code, out = run(cmd, wrapped_env(job, procs, gpus, path), job, args.timeout)
    if code != 0:
        raise RuntimeError(f"wrapped run exited {code}:\n{out[-3000:]}")
    SEEN.setdefault("wrapped_first_line", next(iter(out.splitlines()), ""))
    return rate_of(out)


def sigterm_resume(tmp: Path, data: Path, procs: int, gpus: int, args, path: str) -> dict:
    """SIGTERM after epoch 2 -> a checkpoint at that step, exit 143 -> a run that resumes."""
    job = job_dir(Path(tempfile.mkdtemp(dir=tmp)), data)
    env = wrapped_env(job, procs, gpus, path)
    epochs = args.epochs * 20
    cmd = [sys.executable, "-m", "dlaas.learner.run", "--", f"python train.py --epochs {epochs}"]
    proc = subprocess.Popen(cmd, env=env, cwd=job, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    lines: list[str] = []
    sent = None
    for line in proc.stdout:
        lines.append(line.rstrip())
        if sent is None and line.startswith("epoch 2/"):
            proc.send_signal(signal.SIGTERM)
            sent = time.monotonic()
    first_exit = proc.wait(timeout=args.timeout)
    stopped_in = time.monotonic() - sent if sent else None
    saved = [x for x in lines if x.startswith("SIGTERM: checkpoint saved")]
    # The second run: the same volume, as a restarted gang finds it.
    code, out = run([*cmd[:-1], f"python train.py --epochs {args.epochs + 2}"],
                    wrapped_env(job, procs, gpus, path), job, args.timeout)  # fmt: skip
    resumed = [x for x in out.splitlines() if x.startswith("resuming from the checkpoint")]
    return {
        "sigterm_exit": first_exit,
        "sigterm_to_exit_s": round(stopped_in, 2) if stopped_in else None,
        "checkpoint_line": saved[-1] if saved else None,
        "resume_line": resumed[-1] if resumed else None,
        "resume_exit": code,
        "ok": first_exit == 143 and bool(saved) and bool(resumed) and code == 0,
        "tail": out.splitlines()[-3:] if code != 0 or not resumed else [],
    }


def hooks(tmp: Path, procs: int, gpus: int, args, path: str) -> dict:
    """torch's defaults under the hooks, and a hanging peer's all_reduce under a short timeout."""
    job = Path(tempfile.mkdtemp(dir=tmp))
    env = wrapped_env(job, procs, gpus, path)
    read = "import torch.distributed.constants as c; print(c.default_pg_timeout, c.default_pg_nccl_timeout)"
    code, out = run([sys.executable, "-c", read], env, job, args.timeout)
    defaults = out.strip().splitlines()[-1] if code == 0 and out.strip() else out[-500:]
    port = str(free_port())
    procs_out: list[str] = []
    ranks = []
    for rank in range(2):
        renv = dict(env, DLAAS_COLLECTIVE_TIMEOUT=str(HANG_TIMEOUT_S), RANK=str(rank),
                    LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                    MASTER_PORT=port)  # fmt: skip
        ranks.append(subprocess.Popen([sys.executable, "-c", HANG], env=renv, cwd=job,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))  # fmt: skip
    try:
        procs_out.append(ranks[0].communicate(timeout=HANG_TIMEOUT_S + 60)[0])
    finally:
        for p in ranks:
            p.kill()
    line = next((x for x in procs_out[0].splitlines() if x.startswith("all_reduce")), "")
    took = re.search(r"after ([0-9.]+) s", line)
    return {
        "platform_timeout_s": int(env["DLAAS_COLLECTIVE_TIMEOUT"]),
        "torch_defaults_gloo_nccl": defaults,
        "hang_timeout_s": HANG_TIMEOUT_S,
        "hanging_peer": line or procs_out[0][-500:],
        "ok": bool(took) and float(took.group(1)) <= HANG_TIMEOUT_S + 5,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    import torch

    gpus = torch.cuda.device_count()
    procs = gpus or 2
    tmp = Path(tempfile.mkdtemp(prefix="dlaas-gpu-check-"))
    try:
        path = torchrun_on_path(tmp)
        data = tmp / "data"
        digits(data)
        bare_rates, wrapped_rates = [], []
        for _ in range(args.runs):
            bare_rates.append(bare(tmp, data, procs, args, path))
            wrapped_rates.append(wrapped(tmp, data, procs, gpus, args, path))
        result = {
            "device": torch.cuda.get_device_name(0) if gpus else "cpu",
            "torch": torch.__version__,
            "processes": procs,
            "epochs": args.epochs,
            "bare_steps_per_s": bare_rates,
            "wrapped_steps_per_s": wrapped_rates,
            "wrapped_over_bare": round(
                statistics.median(wrapped_rates) / statistics.median(bare_rates), 3
            ),
            "sigterm_resume": sigterm_resume(tmp, data, procs, gpus, args, path),
            "collective_timeout": hooks(tmp, procs, gpus, args, path),
            **SEEN,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0 if result["sigterm_resume"]["ok"] and result["collective_timeout"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
