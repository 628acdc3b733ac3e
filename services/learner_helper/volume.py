"""What the helper reads of the job volume by itself: hidden names, file listings, lines.

Standard library only: both the sync (sync.py) and the fast start (resume.py, before boto3
is imported) use it.
"""

from __future__ import annotations

from pathlib import Path

Stat = tuple[int, int]  # (size, mtime_ns): what "unchanged since last seen" compares


def hidden(rel: str) -> bool:
    """Temporary and half-written files: any path part that starts with a dot."""
    return any(part.startswith(".") for part in rel.split("/"))


def count_lines(data: bytes) -> int:
    """Lines as dlaas.adapters.logs.split_lines counts them: a last line without newline counts."""
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def scan(directory: Path) -> dict[str, Stat]:
    """Every regular, non-hidden file below `directory` by relative path."""
    found: dict[str, Stat] = {}
    if not directory.is_dir():
        return found
    for path in directory.rglob("*"):
        rel = path.relative_to(directory).as_posix()
        if hidden(rel) or path.is_symlink():
            continue
        try:
            st = path.stat()
        except FileNotFoundError:  # deleted by the learner while we looked
            continue
        if path.is_file():
            found[rel] = (st.st_size, st.st_mtime_ns)
    return found
