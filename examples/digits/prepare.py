"""Put the digits data set where a job can read it (runs on YOUR machine, not in the job).

Loads scikit-learn's bundled 8x8 digits (1797 images, no download), saves it as
digits.npz (X: uint8 [n, 64] with values 0..16, y: uint8 [n]) and uploads it to a bucket:

    AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... \\
        python examples/digits/prepare.py --endpoint http://127.0.0.1:8333 --bucket digits-data

or just writes it into a directory (for running train.py locally):

    python examples/digits/prepare.py --out ./data

The endpoint defaults to $DLAAS_S3_ENDPOINT; the bucket is created if missing.
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


def upload(endpoint: str, bucket: str, key: str = OBJECT_KEY) -> None:
    import boto3
    from botocore.config import Config

    s3 = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        config=Config(s3={"addressing_style": "path"}),
    )  # credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY from the env
    existing = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
    if bucket not in existing:
        s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key=key, Body=digits_npz())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--endpoint", default=os.environ.get("DLAAS_S3_ENDPOINT"), help="S3 URL")
    parser.add_argument("--bucket", default="digits-data")
    parser.add_argument("--key", default=OBJECT_KEY)
    parser.add_argument("--out", help="write digits.npz into this directory instead of uploading")
    args = parser.parse_args(argv)
    if args.out:
        print(f"wrote {write_local(args.out)}")
        return 0
    if not args.endpoint:
        print("error: give --endpoint (or set DLAAS_S3_ENDPOINT)", file=sys.stderr)
        return 2
    if not (os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY")):
        print("error: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", file=sys.stderr)
        return 2
    try:
        upload(args.endpoint, args.bucket, args.key)
    except Exception as exc:  # noqa: BLE001 - one clear line, no traceback, no secrets
        print(
            f"error: upload to {args.endpoint} failed: {exc.__class__.__name__}: {exc}",
            file=sys.stderr,
        )
        return 1
    print(f"uploaded s3://{args.bucket}/{args.key} to {args.endpoint}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
