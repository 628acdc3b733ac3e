"""Checks a user's code archive and turns it into the one format the helper unpacks.

Pure logic on bytes, no I/O: the API reads the upload with a bounded read, hands the
bytes here, and uploads what comes back (`code/<job_id>.tar.gz`). A `.tar.gz`/`.tgz`/
`.tar` or `.zip` is accepted; every member must stay inside the archive's root: no
absolute paths, no `..`, no link that points outside, no device files. A refusal names
the offending member, so the user knows what to fix.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
import zipfile

from dlaas.domain.errors import InvalidRequest, PayloadTooLarge

FIELD = "code"


def _refuse(member: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"{FIELD}: archive member {member!r} {why}")


def _check_path(name: str) -> str:
    """The member's normalized relative path; refuse one that leaves the archive root."""
    if not name or "\x00" in name:
        raise _refuse(name, "has an empty or invalid name")
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise _refuse(name, "is an absolute path")
    parts = name.replace("\\", "/").split("/")
    if ".." in parts:
        raise _refuse(name, "contains '..' and would escape the job's code directory")
    return posixpath.normpath(name.replace("\\", "/"))


def _check_link(name: str, target: str, hard: bool) -> None:
    """A link may only point at something inside the archive."""
    if not target or target.startswith("/"):
        raise _refuse(name, f"is a link to an absolute path ({target!r})")
    base = "" if hard else posixpath.dirname(posixpath.normpath(name))
    resolved = posixpath.normpath(posixpath.join(base, target))
    if resolved == ".." or resolved.startswith("../"):
        raise _refuse(name, f"is a link that escapes the archive ({target!r})")


def _normalized_tar(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def _check_unpacked(total: int, limit: int | None) -> None:
    # A small archive can unpack to a huge tree (a "bomb") that would fill the job volume.
    if limit is not None and total > limit:
        raise PayloadTooLarge(f"{FIELD}: the archive unpacks to more than {limit // 2**20} MiB")


def _from_tar(data: bytes, limit: int | None) -> bytes:
    try:
        tar = tarfile.open(fileobj=io.BytesIO(data), mode="r:*")  # noqa: SIM115 - closed below
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise InvalidRequest(f"{FIELD}: not a readable tar archive ({exc})") from None
    with tar:
        try:
            infos = tar.getmembers()
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise InvalidRequest(f"{FIELD}: the tar archive is corrupt ({exc})") from None
        for info in infos:
            _check_path(info.name)
            if info.issym() or info.islnk():
                _check_link(info.name, info.linkname, hard=info.islnk())
            elif not (info.isfile() or info.isdir()):
                raise _refuse(info.name, "is a device, fifo or other special file")
        _check_unpacked(sum(i.size for i in infos if i.isfile()), limit)
        if data[:2] == b"\x1f\x8b":
            return data  # already gzip'd and checked: keep the user's bytes as they are
        members = []
        for info in infos:
            f = tar.extractfile(info) if info.isfile() else None
            members.append((info, f.read() if f is not None else None))
    return _normalized_tar(members)


def _from_zip(data: bytes, limit: int | None) -> bytes:
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError) as exc:
        raise InvalidRequest(f"{FIELD}: not a readable zip archive ({exc})") from None
    members: list[tuple[tarfile.TarInfo, bytes | None]] = []
    with zf:
        _check_unpacked(sum(zi.file_size for zi in zf.infolist()), limit)
        for zi in zf.infolist():
            path = _check_path(zi.filename)
            mode = (zi.external_attr >> 16) & 0o170000
            info = tarfile.TarInfo(path)
            info.mtime = 0
            if mode == 0o120000:  # a symlink stored in a zip: its target is the content
                target = zf.read(zi).decode("utf-8", "replace")
                _check_link(zi.filename, target, hard=False)
                info.type, info.linkname = tarfile.SYMTYPE, target
                members.append((info, None))
            elif zi.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                members.append((info, None))
            else:
                try:
                    content = zf.read(zi)
                except (zipfile.BadZipFile, OSError, RuntimeError) as exc:
                    raise _refuse(zi.filename, f"cannot be read ({exc})") from None
                info.size = len(content)
                info.mode = ((zi.external_attr >> 16) & 0o777) or 0o644
                members.append((info, content))
    return _normalized_tar(members)


def normalize_archive(data: bytes, filename: str = "", max_unpacked: int | None = None) -> bytes:
    """Check `data` (tar, tar.gz or zip) and return it as a safe tar.gz.

    Raise InvalidRequest naming the offending member, or PayloadTooLarge when the
    archive would unpack to more than `max_unpacked` bytes.
    """
    if not data:
        raise InvalidRequest(f"{FIELD}: the archive is empty")
    if data[:4] == b"PK\x03\x04" or filename.lower().endswith(".zip"):
        return _from_zip(data, max_unpacked)
    return _from_tar(data, max_unpacked)
