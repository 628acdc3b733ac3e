"""A tiny checkpoint library for training code running in a learner container.

    from dlaas.learner import checkpoint
    found = checkpoint.load_latest()          # None, or (step, state)
    ...
    checkpoint.save({"w": w, "epoch": e}, step=e)

Checkpoints live in CHECKPOINT_DIR (env; the job volume's /job/checkpoints by default),
so they survive a learner restart. A save is atomic (write a temporary file, fsync,
rename): a learner killed mid-save leaves the previous checkpoint intact. Only the last
`keep` checkpoints are kept. A dict state is pickled (numpy arrays inside are fine);
bytes are stored as they are. Checkpoints are read back only by the job that wrote
them, from its own volume, which is why pickle is acceptable here.

Stdlib only: this runs on Debian's python3.11 inside the job image.
"""

from __future__ import annotations

import logging
import os
import pickle
import re
from pathlib import Path

from dlaas.domain.jobspec import CHECKPOINT_DIR

log = logging.getLogger(__name__)

DEFAULT_KEEP = 3
_NAME_RE = re.compile(r"^ckpt-(\d{1,12})\.(pkl|bin)$")


def checkpoint_dir(directory: str | os.PathLike | None = None) -> Path:
    return Path(directory or os.environ.get("CHECKPOINT_DIR") or CHECKPOINT_DIR)


def list_checkpoints(directory: str | os.PathLike | None = None) -> list[tuple[int, Path]]:
    """(step, path) of every complete checkpoint, oldest first."""
    d = checkpoint_dir(directory)
    if not d.is_dir():
        return []
    found = []
    for p in d.iterdir():
        m = _NAME_RE.match(p.name)
        if m:
            found.append((int(m.group(1)), p))
    return sorted(found)


def save(
    state: dict | bytes,
    step: int,
    directory: str | os.PathLike | None = None,
    keep: int = DEFAULT_KEEP,
) -> Path:
    """Write `state` as the checkpoint of `step` atomically; keep the last `keep`."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a non-negative integer, got {step!r}")
    if keep < 1:
        raise ValueError(f"keep must be at least 1, got {keep!r}")
    if isinstance(state, bytes | bytearray):
        data, ext = bytes(state), "bin"
    elif isinstance(state, dict):
        data, ext = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL), "pkl"
    else:
        raise TypeError(f"state must be a dict or bytes, got {type(state).__name__}")
    d = checkpoint_dir(directory)
    d.mkdir(parents=True, exist_ok=True)
    final = d / f"ckpt-{step:012d}.{ext}"
    tmp = d / f".tmp-{final.name}-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    # A step saved twice (e.g. once as bytes, once as dict) keeps only the newest form.
    for _, p in list_checkpoints(d):
        if p.name != final.name and _NAME_RE.match(p.name).group(1) == f"{step:012d}":
            p.unlink(missing_ok=True)
    os.replace(tmp, final)
    _fsync_dir(d)
    for _, old in list_checkpoints(d)[:-keep]:
        old.unlink(missing_ok=True)
    return final


def load_latest(directory: str | os.PathLike | None = None) -> tuple[int, dict | bytes] | None:
    """(step, state) of the newest readable checkpoint, or None if there is none."""
    for step, path in reversed(list_checkpoints(directory)):
        try:
            data = path.read_bytes()
            # This job's own checkpoints, written by save() below into its own volume.
            state = pickle.loads(data) if path.suffix == ".pkl" else data  # noqa: S301
        # Broad: unpickling damaged bytes raises nearly anything (UnpicklingError, EOFError,
        # ValueError, AttributeError, ...), and any damage means "not usable". Unreadable
        # should not happen with atomic saves: say so (on stderr without logging set up).
        except Exception as exc:  # noqa: BLE001 - broad: bad pickles raise anything; logged
            log.warning("checkpoint %s is unreadable (%r); trying an older one", path.name, exc)
            continue
        return step, state
    return None


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
