"""Train a 64-32-10 MLP on the digits data set with plain numpy (a dlaas example job).

Reads DATA_DIR/digits.npz (made by prepare.py), prints loss and accuracy every epoch,
checkpoints every epoch with dlaas.learner.checkpoint and resumes from the newest
checkpoint when the learner is restarted, and writes model.npz and metrics.json to
RESULT_DIR. About a second per 20 epochs on one CPU (`--epoch-sleep S` makes epochs
last longer, for demos and tests of halt and resume).

SIGTERM (the platform halts or preempts the job; the learner wrapper forwards it) is
cooperative: the current mini-batch ends, the state is saved as a checkpoint (with the
position inside the epoch, so the resumed run goes on with the next mini-batch and
trains exactly as an uninterrupted run would), and the script exits 143.

Locally:  python prepare.py --out data && DATA_DIR=data RESULT_DIR=results python train.py
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

try:
    from dlaas.learner import checkpoint
except ImportError:  # run outside the platform without dlaas installed: no checkpoints
    checkpoint = None

SEED = 0
HIDDEN = 32
EXIT_TERMINATED = 128 + signal.SIGTERM


class Stop:
    """Set by SIGTERM; the training loop looks at it between mini-batches."""

    requested = False

    @classmethod
    def install(cls) -> None:
        def handle(_signum, _frame) -> None:
            cls.requested = True

        signal.signal(signal.SIGTERM, handle)

    @classmethod
    def sleep(cls, seconds: float) -> None:
        """Sleep, but wake up at once on SIGTERM."""
        deadline = time.monotonic() + seconds
        while not cls.requested and time.monotonic() < deadline:
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))


def find_data(data_dir: Path) -> Path | None:
    direct = data_dir / "digits.npz"
    if direct.is_file():
        return direct
    return next(iter(sorted(data_dir.rglob("digits.npz"))), None) if data_dir.is_dir() else None


def load(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    with np.load(path) as f:
        x = f["X"].astype(np.float64) / 16.0
        y = f["y"].astype(np.int64)
    order = np.random.default_rng(SEED).permutation(len(x))
    x, y = x[order], y[order]
    cut = int(len(x) * 0.8)
    return x[:cut], y[:cut], x[cut:], y[cut:]


def init_params(rng: np.random.Generator, n_in: int, n_out: int) -> dict[str, np.ndarray]:
    return {
        "w1": rng.normal(0, np.sqrt(2.0 / n_in), (n_in, HIDDEN)),
        "b1": np.zeros(HIDDEN),
        "w2": rng.normal(0, np.sqrt(1.0 / HIDDEN), (HIDDEN, n_out)),
        "b2": np.zeros(n_out),
    }


def forward(p: dict[str, np.ndarray], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    h = np.maximum(0.0, x @ p["w1"] + p["b1"])
    z = h @ p["w2"] + p["b2"]
    z = z - z.max(axis=1, keepdims=True)
    probs = np.exp(z)
    probs /= probs.sum(axis=1, keepdims=True)
    return h, probs


def loss_and_grads(p, x, y) -> tuple[float, dict[str, np.ndarray]]:
    h, probs = forward(p, x)
    n = len(x)
    loss = float(-np.log(probs[np.arange(n), y] + 1e-12).mean())
    dz = probs
    dz[np.arange(n), y] -= 1.0
    dz /= n
    dh = (dz @ p["w2"].T) * (h > 0)
    return loss, {"w1": x.T @ dh, "b1": dh.sum(0), "w2": h.T @ dz, "b2": dz.sum(0)}


def accuracy(p, x, y) -> float:
    return float((forward(p, x)[1].argmax(axis=1) == y).mean())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="numpy MLP on digits")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument(
        "--epoch-sleep", type=float, default=0.0, help="seconds to wait after each epoch"
    )
    args = parser.parse_args(argv)
    Stop.install()

    data_dir = Path(os.environ.get("DATA_DIR", "data"))
    result_dir = Path(os.environ.get("RESULT_DIR", "results"))
    ckpt_dir = os.environ.get("CHECKPOINT_DIR", "checkpoints")
    path = find_data(data_dir)
    if path is None:
        print(
            f"error: no digits.npz in DATA_DIR={data_dir}: make it with "
            "`python examples/digits/prepare.py --out data` and "
            "`dlaas data upload digits-data data/digits.npz`, and name that bucket as "
            "training_data in the manifest",
            file=sys.stderr,
        )
        return 2
    x_train, y_train, x_test, y_test = load(path)
    print(f"data: {len(x_train)} training and {len(x_test)} test images from {path}")

    params = init_params(np.random.default_rng(SEED), x_train.shape[1], 10)
    start, history, batch, losses = 1, [], 0, []
    found = checkpoint.load_latest(ckpt_dir) if checkpoint else None
    if found is not None:
        step, state = found
        params, start = state["params"], step + 1
        history = list(state.get("history", []))
        # A checkpoint taken on SIGTERM also holds how far the next epoch had got.
        batch, losses = state.get("next_batch", 0), list(state.get("losses", []))
        where = f" and {batch} mini-batches of epoch {start}" if batch else ""
        print(f"resuming from the checkpoint of epoch {step}{where}")

    def save(epoch_done: int, **extra) -> None:
        if checkpoint:
            state = {"params": params, "history": history, **extra}
            checkpoint.save(state, step=epoch_done, directory=ckpt_dir)

    started = time.monotonic()
    for epoch in range(start, args.epochs + 1):
        rng = np.random.default_rng(SEED + epoch)  # same order on a resumed run
        order = rng.permutation(len(x_train))
        starts = range(0, len(order), args.batch_size)
        for b in range(batch, len(starts)):
            if Stop.requested:
                save(epoch - 1, next_batch=b, losses=losses)
                print(f"SIGTERM: checkpoint saved at epoch {epoch - 1} + {b} mini-batches")
                return EXIT_TERMINATED
            idx = order[starts[b] : starts[b] + args.batch_size]
            loss, grads = loss_and_grads(params, x_train[idx], y_train[idx])
            for k in params:
                params[k] -= args.lr * grads[k]
            losses.append(loss)
        acc = accuracy(params, x_test, y_test)
        history.append({"epoch": epoch, "loss": float(np.mean(losses)), "accuracy": acc})
        print(f"epoch {epoch}/{args.epochs} loss={np.mean(losses):.4f} accuracy={acc:.4f}")
        save(epoch)
        batch, losses = 0, []
        if epoch < args.epochs:
            Stop.sleep(args.epoch_sleep)
            if Stop.requested:  # the epoch's checkpoint is already saved
                print(f"SIGTERM: checkpoint saved at epoch {epoch}")
                return EXIT_TERMINATED

    final = accuracy(params, x_test, y_test)
    result_dir.mkdir(parents=True, exist_ok=True)
    np.savez(result_dir / "model.npz", **params)
    metrics = {
        "epochs": args.epochs,
        "test_accuracy": final,
        "history": history,
        "train_seconds": round(time.monotonic() - started, 3),
    }
    (result_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    print(f"done: test accuracy {final:.4f}; model.npz and metrics.json in {result_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
