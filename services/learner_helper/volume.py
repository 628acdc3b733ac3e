"""What the helper reads of the job volume by itself: hidden names, file listings, lines;
and the folders and files it writes there made its own first.

The learners share the volume and may have left a link (or anything else) wherever the
helper is about to write: to the helper's own files, its Python packages included. Before it
restores or downloads into a folder, `real_dirs` makes every folder on the way a real one
(a link or a file there is removed first), and `drop_unless_regular` removes a link, a pipe
or a folder where it means to write a file. No learner runs while the helper restores.
When it reads a file to upload it, `open_below` opens it following no link on the way.

Standard library only: both the sync (sync.py) and the fast start (resume.py, before boto3
is imported) use it.
"""

from __future__ import annotations

import os
import shutil
import stat
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


def drop_unless_regular(path: Path) -> None:
    """Remove whatever `path` names unless it is a regular file (a link is removed, never
    followed)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(path)
    elif not stat.S_ISREG(mode):
        path.unlink()


def write_mark(path: Path, text: str = "") -> None:
    """Write one of the helper's marks (a file it owns in the volume) as a regular file: a
    link or anything else a learner left there goes first."""
    drop_unless_regular(path)
    path.write_text(text)


def real_dirs(root: Path, target: Path) -> None:
    """Make `target` and every folder between `root` (trusted) and it a real folder: a link,
    a file or anything else on the way is removed first. A target outside `root`: made as
    it is."""
    try:
        parts = target.relative_to(root).parts
    except ValueError:
        target.mkdir(parents=True, exist_ok=True)
        return
    path = root
    path.mkdir(parents=True, exist_ok=True)
    for part in parts:
        path = path / part
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            path.mkdir()
            continue
        if not stat.S_ISDIR(mode):
            path.unlink()
            path.mkdir()


def open_below(root: Path, rel: str) -> int | None:
    """A read-only descriptor of the regular file `rel` below the trusted directory `root`,
    following no link on the way (a learner can swap a directory or the file for a link to
    anything in the helper's file system at any moment); None when there is none."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    flags = os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            mode = os.O_RDONLY | os.O_NONBLOCK if last else os.O_RDONLY | os.O_DIRECTORY
            child = os.open(part, mode | flags, dir_fd=fd)
            os.close(fd)
            fd = child
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("not a regular file")
    except OSError:
        os.close(fd)
        return None
    return fd
