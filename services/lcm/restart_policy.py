"""The LCM's restart policy: how long a restart waits, and when restarts run out.

Pure logic (no I/O, no clock): `requeue` (use_cases.py) asks it and acts on the answer.
"""

from __future__ import annotations

# Restart backoff: the first restart at once (a one-off infrastructure failure costs no
# waiting), then 1 s, 2 s, 4 s ... capped.
MAX_BACKOFF_S = 60.0


def backoff_s(restart: int) -> float:
    """Seconds before restart number `restart` (1, 2, ...)."""
    return 0.0 if restart <= 1 else min(MAX_BACKOFF_S, 2.0 ** (restart - 2))
