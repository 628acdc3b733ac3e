"""The helper's watch on its node's job volume: how many bytes it holds, against the disk
size of the learners on this node (DLAAS_VOLUME_LIMIT_MB, from dlaas/domain/plan.py).

The volume is a directory of the engine's (Docker's local driver), with no quota of its
own on overlay2/ext4: this walk is the bound. Every `DISK_POLL_S` seconds a thread adds up
the blocks allocated to every file below /job (st_blocks: a sparse file counts what it
holds, not its length); past the limit it prints the `disk_full` event once, and the job
monitor fails the job (services/jobmonitor/disk.py). A walk stops counting as soon as it
is past the limit, so its cost is bounded by the files that fit within the limit, and a
directory that vanishes while walked is skipped. Standard library only.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

from dlaas.domain.jobspec import ENV_VOLUME_LIMIT_MB, EVENT_DISK_FULL

DISK_POLL_S = 5.0
MIB = 1024**2


def used_bytes(root: Path, stop_above: int | None = None) -> int:
    """Bytes allocated below `root` (no symlink followed), or a number past `stop_above`
    as soon as the walk gets there."""
    total = 0
    pending = [str(root)]
    while pending:
        try:
            with os.scandir(pending.pop()) as entries:
                for e in entries:
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:  # removed while we looked
                        continue
                    total += st.st_blocks * 512
                    if e.is_dir(follow_symlinks=False):
                        pending.append(e.path)
                    if stop_above is not None and total > stop_above:
                        return total
        except OSError:
            continue
    return total


def limit_from_env(env: dict[str, str]) -> int:
    """The volume's limit in bytes; 0: not watched (unset, empty or not a number)."""
    raw = env.get(ENV_VOLUME_LIMIT_MB, "").strip()
    return int(raw) * MIB if raw.isdigit() else 0


def watch(
    root: Path,
    limit: int,
    emit: Callable[..., None],
    stop: threading.Event,
    poll_s: float = DISK_POLL_S,
) -> None:
    """Measure `root` every `poll_s` until `stop`; print the event once past `limit`."""
    while not stop.wait(poll_s):
        used = used_bytes(root, stop_above=limit)
        if used > limit:
            emit(EVENT_DISK_FULL, bytes=used, limit=limit)
            return


def start(
    root: Path, env: dict[str, str], emit: Callable[..., None], stop: threading.Event
) -> None:
    """Watch in a daemon thread until `stop` (the finish signal); none without a limit."""
    limit = limit_from_env(env)
    if limit:
        threading.Thread(
            target=watch, args=(root, limit, emit, stop), name="diskwatch", daemon=True
        ).start()
