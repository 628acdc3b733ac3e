"""Data-parallel training of a small MLP on the digits with PyTorch DDP (a dlaas example).

Ordinary torch.distributed code, as written for torchrun, Kubeflow's PyTorchJob or Slurm:
`init_process_group` from the env:// contract (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
NCCL when CUDA is there and gloo otherwise, a DistributedSampler, DistributedDataParallel,
and the GPU picked by LOCAL_RANK. It runs with one process per learner (the platform sets
the env) and under torchrun with several processes per learner alike.

Rank 0 saves a checkpoint every epoch (dlaas.learner.checkpoint where the platform has it,
else torch.save under CHECKPOINT_DIR) and broadcasts the newest one to every rank when the
job starts again, so a restarted job resumes where it was. SIGTERM (halt, preemption) is
cooperative: the ranks agree to stop after the same step, rank 0 saves that position, and
all exit 143. Rank 0 prints `epoch E/N loss=... acc=...` lines and a steps/s line, and writes
model.pt and metrics.json to RESULT_DIR; every rank ends with `rank R weights_sha256=<hex>`
of its final parameters, the same on every rank.

Locally, with the digits in ./data (../digits/prepare.py --out data):
    DATA_DIR=data torchrun --standalone --nproc_per_node 2 train.py --epochs 3
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

try:
    from dlaas.learner import checkpoint
except ImportError:  # outside the platform: plain torch.save files under CHECKPOINT_DIR
    checkpoint = None

SEED = 0
KEEP_CHECKPOINTS = 3
EXIT_TERMINATED = 128 + signal.SIGTERM
STOP_CHECK_EVERY = 20  # steps between the ranks' agreement on a SIGTERM (one tiny all-reduce)
_STOP = {"requested": False}


def _on_sigterm(_signum, _frame) -> None:
    _STOP["requested"] = True


def load_digits(data_dir: Path) -> tuple[TensorDataset, torch.Tensor, torch.Tensor]:
    matches = sorted(data_dir.rglob("digits.npz")) if data_dir.is_dir() else []
    if not matches:
        raise FileNotFoundError(
            f"no digits.npz under DATA_DIR={data_dir}: make it with "
            "`python examples/digits/prepare.py --out data`, upload it with "
            "`dlaas data upload digits-data data/digits.npz`, and name that bucket as "
            "training_data in the manifest"
        )
    with np.load(matches[0]) as f:
        x = torch.from_numpy(f["X"].astype(np.float32) / 16.0)
        y = torch.from_numpy(f["y"].astype(np.int64))
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(SEED))
    x, y = x[order], y[order]
    cut = int(len(x) * 0.8)
    return TensorDataset(x[:cut], y[:cut]), x[cut:], y[cut:]


# --- checkpoints: the platform's library, or plain files --------------------------------


def save_checkpoint(state: dict, epoch: int, directory: Path) -> None:
    buf = io.BytesIO()
    torch.save(state, buf)
    if checkpoint is not None:
        checkpoint.save(buf.getvalue(), step=epoch, directory=directory)
        return
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".ckpt-{epoch:06d}.pt.tmp"
    tmp.write_bytes(buf.getvalue())
    os.replace(tmp, directory / f"ckpt-{epoch:06d}.pt")  # atomic: a kill leaves the old one
    for old in sorted(directory.glob("ckpt-*.pt"))[:-KEEP_CHECKPOINTS]:
        old.unlink()


def load_latest_checkpoint(directory: Path) -> bytes | None:
    if checkpoint is not None:
        found = checkpoint.load_latest(directory)
        return found[1] if found is not None else None
    files = sorted(directory.glob("ckpt-*.pt")) if directory.is_dir() else []
    return files[-1].read_bytes() if files else None


def weights_sha256(model: nn.Module) -> str:
    digest = hashlib.sha256()
    for _, p in sorted(model.state_dict().items()):
        digest.update(p.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((model(x).argmax(dim=1) == y).float().mean())


def stop_agreed(device: torch.device) -> bool:
    """Whether any rank got SIGTERM: every rank learns it at the same step."""
    flag = torch.tensor([1.0 if _STOP["requested"] else 0.0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item() > 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="PyTorch DDP MLP on digits")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="per process")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument(
        "--steps-per-epoch", type=int, default=0, help="cap each epoch at N steps (0: all)"
    )
    parser.add_argument("--max-steps", type=int, default=0, help="stop after N steps (0: never)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)

    # Started by hand with no launcher at all: a world of one.
    for name, default in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(name, default)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    data_dir = Path(os.environ.get("DATA_DIR", "data"))
    result_dir = Path(os.environ.get("RESULT_DIR", "results"))
    ckpt_dir = Path(os.environ.get("CHECKPOINT_DIR", "checkpoints"))
    try:
        train_set, x_test, y_test = load_digits(data_dir)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        dist.destroy_process_group()
        return 2
    x_test, y_test = x_test.to(device), y_test.to(device)
    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, seed=SEED)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    if rank == 0:
        print(
            f"torch {torch.__version__} {dist.get_backend()} on {device}: world {world}, "
            f"{len(train_set)} training images, {len(loader)} steps per epoch per rank"
        )

    torch.manual_seed(SEED)
    model = nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10))
    model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    # Rank 0 holds the checkpoints; it hands the newest to every rank.
    blob = [load_latest_checkpoint(ckpt_dir) if rank == 0 else None]
    dist.broadcast_object_list(blob, src=0)
    first, skip, steps_done, history = 1, 0, 0, []
    if blob[0] is not None:
        state = torch.load(io.BytesIO(blob[0]), map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        first, steps_done, history = state["epoch"] + 1, state["steps"], state["history"]
        # A position inside an epoch is only the same batches with the same world size.
        skip = state.get("next_step", 0) if state.get("world") == world else 0
        if rank == 0:
            inside = f" and {skip} steps of epoch {first}" if skip else ""
            print(f"resuming from the checkpoint of epoch {first - 1}{inside}")
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if device.type == "cuda" else None)

    def save(epoch_done: int, **extra) -> None:
        if rank == 0:
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
            state.update(epoch=epoch_done, steps=steps_done, history=history, world=world)
            save_checkpoint({**state, **extra}, epoch_done, ckpt_dir)

    started, timed_steps, stopped = time.monotonic(), 0, False
    for epoch in range(first, args.epochs + 1):
        sampler.set_epoch(epoch)
        epoch_started = time.monotonic()
        totals = torch.zeros(3, device=device)  # loss sum, correct, count
        for step, (xb, yb) in enumerate(loader):
            if step < skip:
                continue
            if args.steps_per_epoch and step >= args.steps_per_epoch:
                break
            if args.max_steps and steps_done >= args.max_steps:
                break
            if step % STOP_CHECK_EVERY == 0 and stop_agreed(device):
                save(epoch - 1, next_step=step)
                stopped = True
                break
            xb, yb = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            logits = ddp(xb)
            loss = nn.functional.cross_entropy(logits, yb)
            loss.backward()
            optimizer.step()
            steps_done += 1
            timed_steps += 1
            with torch.no_grad():
                totals[0] += loss.detach() * len(yb)
                totals[1] += (logits.argmax(1) == yb).sum()
                totals[2] += len(yb)
        if stopped:
            break
        skip = 0
        dist.all_reduce(totals)
        loss_avg = float(totals[0] / max(totals[2], 1.0))
        acc = accuracy(model, x_test, y_test)
        seconds = time.monotonic() - epoch_started
        history.append({"epoch": epoch, "loss": loss_avg, "accuracy": acc, "seconds": seconds})
        save(epoch)  # before the epoch's line: a line in the log is an epoch kept
        if rank == 0:
            print(
                f"epoch {epoch}/{args.epochs} loss={loss_avg:.4f} acc={acc:.4f} "
                f"epoch_s={seconds:.3f}",
                flush=True,
            )
        if args.max_steps and steps_done >= args.max_steps:
            break

    elapsed = time.monotonic() - started
    if rank == 0:
        rate = timed_steps / elapsed if elapsed > 0 else 0.0
        print(f"steps={timed_steps} seconds={elapsed:.3f} steps_per_s={rate:.1f}", flush=True)
    if stopped:
        if rank == 0:
            print(f"SIGTERM: checkpoint saved at epoch {epoch - 1} + {step} steps", flush=True)
        dist.destroy_process_group()
        return EXIT_TERMINATED

    if rank == 0:
        result_dir.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), result_dir / "model.pt")
        metrics = {
            "framework": f"torch {torch.__version__}",
            "world_size": world,
            "epochs": args.epochs,
            "steps": steps_done,
            "test_accuracy": accuracy(model, x_test, y_test),
            "history": history,
        }
        (result_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        print(f"done: model.pt and metrics.json in {result_dir}", flush=True)
    print(f"rank {rank} weights_sha256={weights_sha256(model)}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
