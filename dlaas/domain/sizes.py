"""Sizes as people write them ("512MiB", "2Gb", "10GiB", "50GB"): one parser for the
manifest's `memory` and `disk`, the platform's disk settings and the teams' storage quotas.
Pure.

FfDL's units are accepted: `Gb` and `GB` are 10^9 bytes, `GiB` 2^30; a trailing `b`/`B`
is optional. A bare number is in MiB for the manifest's sizes (as FfDL's `memory`) and in
bytes where a caller says so (a storage quota).
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import BeforeValidator

MIB = 1024**2
MAX_SIZE_MB = 2**30  # 1 PiB: far above any node or disk, far below int64 bytes
MAX_SIZE_BYTES = MAX_SIZE_MB * MIB

_UNITS = {
    "": 1,
    "k": 1000,
    "m": 1000**2,
    "g": 1000**3,
    "t": 1000**4,
    "p": 1000**5,
    "ki": 1024,
    "mi": 1024**2,
    "gi": 1024**3,
    "ti": 1024**4,
    "pi": 1024**5,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]i?)?b?\s*$", re.IGNORECASE)
_EXAMPLE = "512MiB or 2Gb"


def parse_size_bytes(value: Any, bare: str = "mi") -> float:
    """Bytes from a size; a bare number is in `bare` units ("mi": MiB, "": bytes).

    ValueError (what pydantic reports as a field error) saying the accepted form; never
    more than MAX_SIZE_BYTES, never zero or less, never NaN."""
    if isinstance(value, bool):
        raise ValueError(f"must be a size such as {_EXAMPLE}, not a boolean")  # noqa: TRY004
    if isinstance(value, int | float):
        try:
            size = float(value) * _UNITS[bare]
        except OverflowError:  # an int beyond any float
            raise ValueError(f"must be at most {MAX_SIZE_MB} MiB (1 PiB)") from None
    elif isinstance(value, str):
        m = _SIZE_RE.match(value)
        if not m:
            raise ValueError(
                f"{value[:40]!r} is not a size; use a number with a unit such as {_EXAMPLE}"
            )
        unit = m.group(2).lower() if m.group(2) else bare
        size = float(m.group(1)) * _UNITS[unit]
    else:
        raise ValueError(f"must be a size such as {_EXAMPLE}")  # noqa: TRY004
    if math.isnan(size):
        raise ValueError(f"must be a size such as {_EXAMPLE}, not NaN")
    if size <= 0:
        raise ValueError("must be greater than zero")
    if size > MAX_SIZE_BYTES:  # also infinity
        raise ValueError(f"must be at most {MAX_SIZE_MB} MiB (1 PiB)")
    return size


def parse_memory_mb(value: Any) -> int:
    """MiB from a size (`1Gb`, `16GB`, `1000MiB`, `512M`) or a number of MiB; at least 1."""
    return max(1, round(parse_size_bytes(value) / MIB))


def parse_quota_bytes(value: Any) -> int:
    """Bytes from a size (`50GiB`, `1TB`) or a number of bytes."""
    return round(parse_size_bytes(value, bare=""))


def size_text(n_bytes: float) -> str:
    """A size for people: "10 GiB", "1.5 MiB", "512 B"."""
    for unit, scale in (("PiB", 1024**5), ("TiB", 1024**4), ("GiB", 1024**3), ("MiB", MIB)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.4g} {unit}"
    if n_bytes >= 1024:
        return f"{n_bytes / 1024:.4g} KiB"
    return f"{n_bytes:.0f} B"


def _disk_mb(value: Any) -> int:
    return 0 if value in (0, None) else parse_memory_mb(value)


# A manifest's `disk` (per learner: its writable layer, and its share of the job volume):
# a size as `memory`; 0 or absent: the platform's default (DLAAS_LEARNER_DISK_MB).
DiskMb = Annotated[int, BeforeValidator(_disk_mb)]
