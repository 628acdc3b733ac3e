"""Make the digits data set the examples train on (runs on YOUR machine, not in the job).

Loads scikit-learn's bundled 8x8 digits (1797 images, no download) and saves it as
digits.npz (X: uint8 [n, 64] with values 0..16, y: uint8 [n]) in a directory:

    python examples/digits/prepare.py --out data
    dlaas data upload digits-data data/digits.npz     # into your team's bucket digits-data

The examples' manifests name `digits-data` as their training_data; the platform puts the
bucket's objects in each learner's DATA_DIR. To run an example without the platform, point
DATA_DIR at the directory (see examples/README.md).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from pathlib import Path

import numpy as np

OBJECT_KEY = "digits.npz"


def digits_npz() -> bytes:
    from sklearn.datasets import load_digits

    data = load_digits()
    buf = io.BytesIO()
    np.savez_compressed(buf, X=data.data.astype(np.uint8), y=data.target.astype(np.uint8))
    return buf.getvalue()


def write_local(directory: str | os.PathLike) -> Path:
    path = Path(directory) / OBJECT_KEY
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(digits_npz())
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="data", help="the directory for digits.npz (./data)")
    args = parser.parse_args(argv)
    print(f"wrote {write_local(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
