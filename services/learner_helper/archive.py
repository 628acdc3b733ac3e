"""Safe extraction of a user's code archive (.tar.gz) into CODE_DIR.

The archive is untrusted: a member may try to write outside the target directory with
an absolute name, a `..` component, or a link that points outside and is then written
through. `check_members` refuses all of that by looking at the names alone, before
anything touches the disk; `safe_extract` then extracts member by member (no
`tarfile.extractall`: Debian's python3.11.2 has no extraction filters), creates
symbolic links last so no write ever goes through one, and finally re-checks every link
against the real file system (a chain of links can escape where each alone looks fine).
Devices, FIFOs and other special files are refused. Hard links become copies.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import tarfile
from pathlib import Path

MAX_MEMBERS = 100_000


class UnsafeArchive(ValueError):
    """The archive is malformed or tries to escape the target directory."""


def _normalize(name: str) -> str:
    """The member's path relative to the target, or raise if it is absolute or climbs out."""
    if not name or "\x00" in name:
        raise UnsafeArchive(f"member {name!r}: empty or invalid name")
    if name.startswith("/") or posixpath.isabs(name) or (len(name) > 1 and name[1] == ":"):
        raise UnsafeArchive(f"member {name!r}: absolute paths are not allowed")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchive(f"member {name!r}: '..' in a path is not allowed")
    return "/".join(parts)


def _link_target_inside(member_path: str, target: str) -> bool:
    """Whether a symlink at `member_path` pointing to `target` stays inside (by name)."""
    if target.startswith("/"):
        return False
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(member_path), target))
    return joined != ".." and not joined.startswith("../")


def check_members(members: list[tarfile.TarInfo]) -> list[tuple[str, tarfile.TarInfo]]:
    """Validate every member by name; return (relative path, member) for those to extract."""
    if len(members) > MAX_MEMBERS:
        raise UnsafeArchive(f"too many members ({len(members)} > {MAX_MEMBERS})")
    out: list[tuple[str, tarfile.TarInfo]] = []
    regular: set[str] = set()
    links: set[str] = set()
    for m in members:
        rel = _normalize(m.name)
        if m.issym():
            if not _link_target_inside(rel, m.linkname):
                raise UnsafeArchive(
                    f"member {m.name!r}: symbolic link to {m.linkname!r} points outside the archive"
                )
            links.add(rel)
        elif m.islnk():
            target = _normalize(m.linkname)
            if target not in regular:
                raise UnsafeArchive(
                    f"member {m.name!r}: hard link to {m.linkname!r}, which is not a file "
                    "earlier in the archive"
                )
            regular.add(rel)
        elif m.isfile():
            regular.add(rel)
        elif not m.isdir():
            raise UnsafeArchive(
                f"member {m.name!r}: devices, FIFOs and special files are not allowed"
            )
        if rel:  # "." itself is the target directory
            out.append((rel, m))
    for rel, m in out:
        # Writing to "a/b" when "a" is a link in the archive would write through the link.
        parents = rel.split("/")[:-1]
        for i in range(1, len(parents) + 1):
            if "/".join(parents[:i]) in links:
                raise UnsafeArchive(f"member {m.name!r}: its path goes through a symbolic link")
    return out


def _inside(root: Path, path: Path) -> bool:
    real = Path(os.path.realpath(path))
    return real == root or root in real.parents


def safe_extract(archive: str | os.PathLike, dest: str | os.PathLike) -> int:
    """Extract a tar(.gz) archive into `dest`; return the number of files. Raise UnsafeArchive."""
    root = Path(os.path.realpath(dest))
    root.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive, mode="r:*") as tar:
            members = check_members(tar.getmembers())
            files = 0
            symlinks: list[tuple[Path, str, str]] = []
            for rel, m in members:
                path = root / rel
                if not _inside(root, path.parent):
                    raise UnsafeArchive(f"member {m.name!r}: resolves outside the target directory")
                if m.isdir():
                    path.mkdir(parents=True, exist_ok=True)
                elif m.issym():
                    symlinks.append((path, m.linkname, m.name))
                else:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    if path.is_symlink() or path.exists():
                        if path.is_dir() and not path.is_symlink():
                            raise UnsafeArchive(
                                f"member {m.name!r}: a directory of that name exists"
                            )
                        path.unlink()
                    if m.islnk():
                        shutil.copyfile(root / _normalize(m.linkname), path)
                    else:
                        src = tar.extractfile(m)
                        # O_NOFOLLOW|O_EXCL: never write through a link or over a file we did not make.
                        fd = os.open(
                            path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600
                        )
                        with os.fdopen(fd, "wb") as f:
                            shutil.copyfileobj(src, f)
                    os.chmod(path, 0o755 if m.mode & 0o111 else 0o644)
                    files += 1
            for path, target, name in symlinks:
                path.parent.mkdir(parents=True, exist_ok=True)
                if path.is_symlink() or path.exists():
                    raise UnsafeArchive(f"member {name!r}: a file of that name exists")
                os.symlink(target, path)
            for path, target, name in symlinks:
                if not _inside(root, path):
                    for made, _, _ in symlinks:  # leave no way out behind
                        made.unlink(missing_ok=True)
                    raise UnsafeArchive(
                        f"member {name!r}: symbolic link to {target!r} resolves outside the archive"
                    )
            return files
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise UnsafeArchive(
            f"the archive cannot be extracted: {exc.__class__.__name__}: {exc}"
        ) from None
