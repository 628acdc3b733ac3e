"""How the CLI shows a job's progress (the job view's `progress` object, REST's
services.api.models.ProgressPublic): a cell for `dlaas list`, a line for `dlaas show`."""

from __future__ import annotations

from datetime import UTC, datetime


def _clock(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).astimezone().strftime("%H:%M")


def _left(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _position(p: dict) -> str:
    done, total, unit = p.get("done") or 0, p.get("total"), p.get("unit") or "step"
    done_text = f"{done:g}" if float(done).is_integer() else f"{done:.1f}"
    return f"{unit} {done_text}/{total:g}" if total else f"{unit} {done_text}"


def progress_cell(p: dict | None) -> str:
    """`45% · ETA 12:03`; `epoch 3` without a total; "" without progress."""
    if not p:
        return ""
    if p.get("percent") is None:
        return _position(p)
    cell = f"{p['percent']:.0f}%"
    if p.get("finish_at"):
        cell += f" · ETA {_clock(p['finish_at'])}"
    return cell


def progress_line(p: dict | None) -> str:
    """`progress: epoch 9/20 (45%), 0.05 epoch/s, expected to finish at 12:03 (in 3 min)`."""
    if not p:
        return ""
    line = f"progress: {_position(p)}"
    if p.get("percent") is not None:
        line += f" ({p['percent']:g}%)"
    if p.get("rate_per_s"):
        line += f", {p['rate_per_s']:.3g} {p.get('unit') or 'step'}/s"
    if p.get("finish_at") is not None:
        line += f", expected to finish at {_clock(p['finish_at'])}"
        line += f" (in {_left(p.get('remaining_s') or 0.0)})"
    elif p.get("total"):
        line += ", finish not estimated yet (it needs two moves)"
    return line
