"""Durations in manifests: seconds, or "90s", "30m", "2h", "1h30m", "2d". Pure."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator

_DURATION_RE = re.compile(
    r"^\s*(?:(\d{1,6})d)?\s*(?:(\d{1,7})h)?\s*(?:(\d{1,9})m)?\s*(?:(\d{1,10})s?)?\s*$"
)


def parse_duration_s(value: str) -> int:
    """Seconds from "90", "90s", "30m", "2h", "1h30m", "2d"; ValueError saying the form."""
    m = _DURATION_RE.match(value)
    if not value.strip() or not m or not any(m.groups()):
        raise ValueError(
            f"{value[:40]!r} is not a duration; use seconds or e.g. 30m, 2h, 1h30m, 2d"
        )
    d, h, mins, secs = (int(g or 0) for g in m.groups())
    return d * 86400 + h * 3600 + mins * 60 + secs


def _duration_input(v: Any) -> Any:
    if isinstance(v, bool):  # YAML's yes/no would pass as 1/0 seconds
        raise ValueError("must be seconds or a duration such as 30m or 2h")  # noqa: TRY004
    return parse_duration_s(v) if isinstance(v, str) else v


# A field of seconds that also takes a duration such as "30m", "2h", "1h30m".
Seconds = Annotated[int, BeforeValidator(_duration_input)]
