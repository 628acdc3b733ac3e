"""Train a small PyTorch MLP on the digits data set, on CPU (a dlaas example job).

The PyTorch counterpart of FfDL's etc/examples/pytorch-model: runs on the platform's
PyTorch image (framework `pytorch`, version 2.13 or latest: torch 2.13.0, CPU). Reads
digits.npz (made by ../digits/prepare.py) from --data, prints loss and accuracy every epoch,
saves a checkpoint every epoch (torch.save'd bytes through dlaas.learner.checkpoint) and
resumes from the newest one when the learner is restarted, and writes the model (--out,
a torch.save'd state_dict) and metrics.json next to it. A few seconds on one CPU.

Locally (with torch installed):
    python ../digits/prepare.py --out data
    python train.py --data data --out results/model.pt
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

try:
    from dlaas.learner import checkpoint
except ImportError:  # run outside the platform without dlaas installed: no checkpoints
    checkpoint = None

SEED = 0


def load(path: Path) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    with np.load(path) as f:
        x = torch.from_numpy(f["X"].astype(np.float32) / 16.0)
        y = torch.from_numpy(f["y"].astype(np.int64))
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(SEED))
    x, y = x[order], y[order]
    cut = int(len(x) * 0.8)
    return x[:cut], y[:cut], x[cut:], y[cut:]


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float((model(x).argmax(dim=1) == y).float().mean())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="PyTorch MLP on digits")
    parser.add_argument("--data", default=os.environ.get("DATA_DIR", "data"))
    parser.add_argument("--out", default=None, help="the model file (default RESULT_DIR/model.pt)")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args(argv)

    out = Path(args.out or Path(os.environ.get("RESULT_DIR", "results")) / "model.pt")
    matches = sorted(Path(args.data).rglob("digits.npz")) if Path(args.data).is_dir() else []
    if not matches:
        print(
            f"error: no digits.npz under --data {args.data}: upload it with "
            "`python examples/digits/prepare.py --out data` and "
            "`dlaas data upload digits-data data/digits.npz`, and name that bucket as "
            "training_data in the manifest",
            file=sys.stderr,
        )
        return 2
    x_train, y_train, x_test, y_test = load(matches[0])
    print(f"torch {torch.__version__}: {len(x_train)} training, {len(x_test)} test images")

    torch.manual_seed(SEED)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    start, history = 1, []
    found = checkpoint.load_latest() if checkpoint else None
    if found is not None:
        step, blob = found
        state = torch.load(io.BytesIO(blob))
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start, history = step + 1, state["history"]
        print(f"resuming from the checkpoint of epoch {step}")

    started = time.monotonic()
    for epoch in range(start, args.epochs + 1):
        order = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(epoch))
        losses = []
        for i in range(0, len(order), args.batch_size):
            idx = order[i : i + args.batch_size]
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x_train[idx]), y_train[idx])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        acc = accuracy(model, x_test, y_test)
        history.append({"epoch": epoch, "loss": sum(losses) / len(losses), "accuracy": acc})
        print(f"epoch {epoch}/{args.epochs} loss={history[-1]['loss']:.4f} accuracy={acc:.4f}")
        if checkpoint:
            buf = io.BytesIO()
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
            torch.save({**state, "history": history}, buf)
            checkpoint.save(buf.getvalue(), step=epoch)

    final = accuracy(model, x_test, y_test)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), out)
    metrics = {
        "framework": f"torch {torch.__version__}",
        "epochs": args.epochs,
        "test_accuracy": final,
        "history": history,
        "train_seconds": round(time.monotonic() - started, 3),
    }
    (out.parent / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    print(f"done: test accuracy {final:.4f}; {out.name} and metrics.json in {out.parent}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
