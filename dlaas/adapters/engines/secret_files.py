"""A job's secret files (an MPI job's SSH key) as the tar the Docker adapter copies into a
container before it starts: never in env, labels or the image (pure)."""

from __future__ import annotations

import io
import tarfile
from pathlib import PurePosixPath


def secret_files_tar(files: tuple[tuple[str, bytes], ...]) -> bytes:
    """A tar of the secret files (mode 0400, root's) and their folders, to unpack at /."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        folders = sorted({str(parent) for path, _ in files for parent in PurePosixPath(path).parents}
                         - {"/"})  # fmt: skip
        for folder in folders:
            info = tarfile.TarInfo(folder.lstrip("/"))
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path, content in files:
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode = len(content), 0o400
            tar.addfile(info, io.BytesIO(content))
    return buf.getvalue()
