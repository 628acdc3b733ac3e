"""One learner's metrics read from large metric files: memory and time of the API's reads.

Issue 24: one metrics request of a job with six metric files under the 64 MiB per-file
limit (16 M points) cost an API replica 2.3 GB and 228 s. This writes `--files` JSON-lines
metric files of `--mb` MB each (three series per line), serves them from a stand-in for
S3 that copies from local disk (boto3's `download_file` writes to disk as well), and
asks for the learner's series the way the REST route does
(dlaas.adapters.metric_files.MetricFileReader, then dlaas.domain.metric_query.select):
the first request (it waits at most WAIT_S for the background parse, then answers with
what is parsed), a page every `--every` seconds while the parse goes on, and pages once
it is done (the parse reused). Targets: RSS growth <= 100 MB, a page <= 2 s.

Usage: python benchmarks/metric_reads.py [--files 6] [--mb 60] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
from pathlib import Path

from dlaas.adapters.metric_files import WAIT_S, MetricFileReader, ParsedFiles
from dlaas.domain import jobspec
from dlaas.domain.locations import S3Location
from dlaas.domain.metric_query import merge_series, metric_query, select


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class DiskS3:
    """Stand-in for S3 (named as such): objects are files of a local folder."""

    def __init__(self, root: Path):
        self.root = root

    def get_paginator(self, _name):
        root = self.root

        class Pages:
            def paginate(self, Bucket, Prefix):
                contents = [
                    {
                        "Key": Prefix + p.name,
                        "ETag": f'"{p.stat().st_mtime_ns}"',
                        "Size": p.stat().st_size,
                    }
                    for p in sorted(root.iterdir())
                ]
                return [{"Contents": contents}]

        return Pages()

    def download_file(self, bucket, key, path):
        shutil.copyfile(self.root / key.rsplit("/", 1)[-1], path)


def write_file(path: Path, mb: int, seed: int) -> int:
    """A JSON-lines metric file of about `mb` MB; returns its points (three per line: the
    step is not a series)."""
    size, step = 0, 0
    target = mb * 10**6  # 60 MB: under the 64 MiB per-file limit
    with open(path, "w") as f:
        while size < target:
            chunk = "".join(
                f'{{"step": {s}, "loss": {1 / (s + 1 + seed):.6f}, "acc": {s % 997 / 997:.6f}, '
                f'"lr": {0.001 * (1 + seed):.6f}}}\n'
                for s in range(step, step + 10_000)
            )
            f.write(chunk)
            size += len(chunk)
            step += 10_000
    return step * 3


def page(reader: MetricFileReader, query) -> tuple[float, int, list[str]]:
    started = time.monotonic()
    found = reader.read()
    if found.left_out:
        raise SystemExit(f"files left out: {found.left_out}")
    parts = [part.snapshot() for part in found.parts.values()]
    selection = select(merge_series(parts), query)
    points = sum(len(v) for v in selection.series.values())
    return time.monotonic() - started, points, found.reading


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=6)
    ap.add_argument("--mb", type=int, default=60)
    ap.add_argument("--every", type=float, default=5.0, help="seconds between pages")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    root = Path(tempfile.mkdtemp(prefix="dlaas-metric-reads-"))
    try:
        points = sum(write_file(root / f"m{i}.jsonl", args.mb, i) for i in range(args.files))
        print(f"{args.files} files of {args.mb} MB, {points / 1e6:.1f} M points", flush=True)
        base = rss_mb()
        peak = [base]
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.1):
                peak[0] = max(peak[0], rss_mb())

        threading.Thread(target=sample, daemon=True).start()
        reader = MetricFileReader(
            DiskS3(root), S3Location("", "", "", "res"), "job-1", 0, parsed=ParsedFiles()
        )
        reader.prefix = jobspec.metrics_prefix("job-1")
        query = metric_query(max_points=1000)
        started = time.monotonic()
        first_s, first_points, reading = page(reader, query)
        print(
            f"first page: {first_s:.2f} s, {first_points} points, {len(reading)} files being read"
        )
        during: list[float] = []
        while reading:
            time.sleep(args.every)
            took, _, reading = page(reader, query)
            during.append(took)
        parsed_s = time.monotonic() - started
        cached = [page(reader, query) for _ in range(5)]
        cached_s = max(t for t, _, _ in cached)
        last_points = cached[-1][1]
        full = metric_query(limit=100_000)
        full_s, full_points, _ = page(reader, full)
        stop.set()
        result = {
            "files": args.files,
            "mb_each": args.mb,
            "points_in_files": points,
            "rss_growth_mb": round(peak[0] - base, 1),
            "first_page_s": round(first_s, 3),
            "page_while_parsing_max_s": round(max(during), 3) if during else None,
            "parsed_all_s": round(parsed_s, 1),
            "page_cached_max_s": round(cached_s, 3),
            "points_per_page_downsampled": last_points,
            "page_of_100k_s": round(full_s, 3),
            "points_page_of_100k": full_points,
            "wait_s": WAIT_S,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for k, v in result.items():
        print(f"{k:28} {v}")
    print("targets: rss_growth_mb <= 100, every page <= 2 s")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
