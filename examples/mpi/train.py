"""Data-parallel training of a numpy MLP on the digits with mpi4py (a dlaas example).

Ordinary MPI code, run by `mpirun -np N python train.py`: ranks and size come from
COMM_WORLD; rank 0 broadcasts the initial weights (comm.Bcast), every rank computes the
gradients of its shard's mini-batch and comm.Allreduce sums them, so every rank applies the
same update and the weights stay identical. Rank 0 prints `epoch E/N loss=... acc=...`,
saves a checkpoint every epoch (dlaas.learner.checkpoint where the platform has it, else
an .npz under CHECKPOINT_DIR) and broadcasts the newest one when the job starts again; it
writes model.npz and metrics.json to RESULT_DIR, and at the end one line
`rank R weights_sha256=<hex>` per rank, of the weights that rank holds.

Locally, with the digits in ./data (../digits/prepare.py --out data):
    DATA_DIR=data mpirun -np 2 python train.py --epochs 10
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

try:
    from dlaas.learner import checkpoint
except ImportError:  # outside the platform: plain .npz files under CHECKPOINT_DIR
    checkpoint = None

SEED = 0
HIDDEN = 32
KEEP_CHECKPOINTS = 3
SHAPES = {"w1": (64, HIDDEN), "b1": (HIDDEN,), "w2": (HIDDEN, 10), "b2": (10,)}


def flatten(p: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([p[k].ravel() for k in SHAPES])


def unflatten(vec: np.ndarray) -> dict[str, np.ndarray]:
    out, i = {}, 0
    for k, shape in SHAPES.items():
        n = int(np.prod(shape))
        out[k] = vec[i : i + n].reshape(shape).copy()
        i += n
    return out


def init_params(rng: np.random.Generator) -> np.ndarray:
    return flatten(
        {
            "w1": rng.normal(0, np.sqrt(2.0 / 64), SHAPES["w1"]),
            "b1": np.zeros(HIDDEN),
            "w2": rng.normal(0, np.sqrt(1.0 / HIDDEN), SHAPES["w2"]),
            "b2": np.zeros(10),
        }
    )


def forward(p, x):
    h = np.maximum(0.0, x @ p["w1"] + p["b1"])
    z = h @ p["w2"] + p["b2"]
    z = z - z.max(axis=1, keepdims=True)
    probs = np.exp(z)
    return h, probs / probs.sum(axis=1, keepdims=True)


def summed_loss_and_grads(p, x, y) -> tuple[float, np.ndarray]:
    """Summed (not averaged) loss and gradients, so the ranks' shards add up exactly."""
    h, probs = forward(p, x)
    n = len(x)
    loss = float(-np.log(probs[np.arange(n), y] + 1e-12).sum())
    dz = probs
    dz[np.arange(n), y] -= 1.0
    dh = (dz @ p["w2"].T) * (h > 0)
    return loss, flatten({"w1": x.T @ dh, "b1": dh.sum(0), "w2": h.T @ dz, "b2": dz.sum(0)})


def load(data_dir: Path):
    matches = sorted(data_dir.rglob("digits.npz")) if data_dir.is_dir() else []
    if not matches:
        return None
    with np.load(matches[0]) as f:
        x, y = f["X"].astype(np.float64) / 16.0, f["y"].astype(np.int64)
    order = np.random.default_rng(SEED).permutation(len(x))
    x, y = x[order], y[order]
    cut = int(len(x) * 0.8)
    return x[:cut], y[:cut], x[cut:], y[cut:]


def save_checkpoint(state: dict, epoch: int, directory: Path) -> None:
    if checkpoint is not None:
        checkpoint.save(state, step=epoch, directory=directory)
        return
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".ckpt-{epoch:06d}.tmp.npz"
    np.savez(tmp, weights=state["weights"], history=json.dumps(state["history"]))
    os.replace(tmp, directory / f"ckpt-{epoch:06d}.npz")  # atomic: a kill leaves the old one
    for old in sorted(directory.glob("ckpt-*.npz"))[:-KEEP_CHECKPOINTS]:
        old.unlink()


def load_latest_checkpoint(directory: Path) -> tuple[int, np.ndarray, list] | None:
    if checkpoint is not None:
        found = checkpoint.load_latest(directory)
        if found is None:
            return None
        return found[0], found[1]["weights"], found[1]["history"]
    files = sorted(directory.glob("ckpt-*.npz")) if directory.is_dir() else []
    if not files:
        return None
    with np.load(files[-1]) as f:
        epoch = int(files[-1].stem.split("-")[1])
        return epoch, f["weights"], json.loads(str(f["history"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="mpi4py data-parallel MLP on digits")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=16, help="per rank")
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args(argv)

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    data_dir = Path(os.environ.get("DATA_DIR", "data"))
    result_dir = Path(os.environ.get("RESULT_DIR", "results"))
    ckpt_dir = Path(os.environ.get("CHECKPOINT_DIR", "checkpoints"))

    data = load(data_dir)
    if data is None:
        print(
            f"error: no digits.npz under DATA_DIR={data_dir}: make it with "
            "`python examples/digits/prepare.py --out data` and upload it with "
            "`dlaas data upload digits-data data/digits.npz`",
            file=sys.stderr,
        )
        comm.Abort(2)
    x_train, y_train, x_test, y_test = data
    shard = np.arange(rank, len(x_train), size)
    # Every rank must run the same number of steps, or an Allreduce waits forever.
    steps = (len(x_train) // size) // args.batch_size
    if rank == 0:
        print(f"MPI {MPI.Get_library_version().splitlines()[0].strip()}: {size} ranks")
        print(f"{len(x_train)} training images, {steps} steps per epoch per rank", flush=True)

    # Rank 0 decides where training starts (fresh or its newest checkpoint) and the weights.
    start = np.zeros(1, dtype=np.int64)
    weights = init_params(np.random.default_rng(SEED))
    history: list[dict] = []
    if rank == 0:
        found = load_latest_checkpoint(ckpt_dir)
        if found is not None:
            start[0], weights, history = found[0], np.asarray(found[1], dtype=np.float64), found[2]
            print(f"resuming from the checkpoint of epoch {start[0]}", flush=True)
    comm.Bcast(start, root=0)
    comm.Bcast(weights, root=0)

    started = time.monotonic()
    for epoch in range(int(start[0]) + 1, args.epochs + 1):
        order = np.random.default_rng([SEED, epoch, rank]).permutation(shard)
        loss_total = seen = 0.0
        for s in range(steps):
            idx = order[s * args.batch_size : (s + 1) * args.batch_size]
            loss, grads = summed_loss_and_grads(unflatten(weights), x_train[idx], y_train[idx])
            local = np.concatenate([grads, [loss, len(idx)]])
            total = np.empty_like(local)
            comm.Allreduce(local, total, op=MPI.SUM)
            weights -= args.lr * total[:-2] / total[-1]
            loss_total += total[-2]
            seen += total[-1]
        probs = forward(unflatten(weights), x_test)[1]
        acc = float((probs.argmax(axis=1) == y_test).mean())
        history.append({"epoch": epoch, "loss": loss_total / seen, "accuracy": acc})
        if rank == 0:  # the checkpoint first: a line in the log is an epoch kept
            save_checkpoint({"weights": weights, "history": history}, epoch, ckpt_dir)
            print(f"epoch {epoch}/{args.epochs} loss={loss_total / seen:.4f} acc={acc:.4f}")
            sys.stdout.flush()

    if rank == 0:
        result_dir.mkdir(parents=True, exist_ok=True)
        np.savez(result_dir / "model.npz", **unflatten(weights))
        metrics = {
            "ranks": size,
            "epochs": args.epochs,
            "test_accuracy": history[-1]["accuracy"] if history else None,
            "history": history,
            "train_seconds": round(time.monotonic() - started, 3),
        }
        (result_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        print(f"done: model.npz and metrics.json in {result_dir}", flush=True)
    # Each rank hashes its own weights; rank 0 prints them, one line per rank (mpirun mixes
    # lines that several ranks print at once).
    digests = comm.gather(hashlib.sha256(weights.tobytes()).hexdigest(), root=0)
    if rank == 0:
        print("\n".join(f"rank {r} weights_sha256={d}" for r, d in enumerate(digests)))
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
