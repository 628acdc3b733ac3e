"""The helper's adapter to S3: download a bucket/prefix, fetch one object, upload a tree.

boto3 with path-style addressing (SeaweedFS, MinIO and friends). Every failure becomes a
`StoreError` carrying the helper exit code and event code from dlaas.domain.jobspec, with a
message that names the bucket and key but never the credentials. Downloads stream each
object in chunks and check `should_stop` between chunks, so a finish signal that comes
mid-download is honoured within a chunk. Object keys are untrusted: a key that would land
outside the target directory is skipped. Runs on boto3 1.26 (Debian bookworm).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable
from pathlib import Path

import boto3
import botocore.exceptions
from botocore.config import Config

from dlaas.domain.jobspec import (
    HELPER_EXIT_DATA_NOT_FOUND,
    HELPER_EXIT_REASONS,
    HELPER_EXIT_STORE_REFUSED,
    HELPER_EXIT_STORE_UNREACHABLE,
    HELPER_EXIT_UPLOAD_FAILED,
)
from services.learner_helper.config import folder_prefix
from services.learner_helper.volume import drop_unless_regular, open_below, real_dirs

# Not in dlaas.domain.jobspec (yet): the store could not be reached at all.
CHUNK = 1 << 20

_REFUSED = {
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "InvalidToken",
    "ExpiredToken",
    "AllAccessDisabled",
    "403",
}
_NOT_FOUND = {"NoSuchBucket", "NoSuchKey", "404", "NotFound"}


class StoreError(Exception):
    def __init__(self, exit_code: int, code: str, message: str):
        super().__init__(message)
        self.exit_code = exit_code
        self.code = code
        self.message = message


class Interrupted(Exception):
    """The finish signal came while downloading."""


def _error(exit_code: int, message: str) -> StoreError:
    code = HELPER_EXIT_REASONS[exit_code][0]
    return StoreError(exit_code, code, message)


def classify(exc: Exception, what: str, *, upload: bool = False) -> StoreError:
    """Turn a boto error into a StoreError; `what` names the bucket/key for the message."""
    if isinstance(exc, botocore.exceptions.ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if upload:
            return _error(HELPER_EXIT_UPLOAD_FAILED, f"storing {what} failed: {code or status}")
        if code in _REFUSED or status == 403:
            return _error(
                HELPER_EXIT_STORE_REFUSED,
                f"the object store refused access to {what} ({code or status}): "
                "check the data store's access key and secret",
            )
        if code in _NOT_FOUND or status == 404:
            return _error(HELPER_EXIT_DATA_NOT_FOUND, f"{what} does not exist")
        return _error(
            HELPER_EXIT_STORE_REFUSED, f"the object store answered {code or status} for {what}"
        )
    if isinstance(
        exc, botocore.exceptions.NoCredentialsError | botocore.exceptions.PartialCredentialsError
    ):
        return _error(HELPER_EXIT_STORE_REFUSED, f"no credentials for {what}")
    if upload:
        return _error(HELPER_EXIT_UPLOAD_FAILED, f"storing {what} failed: {exc.__class__.__name__}")
    return _error(
        HELPER_EXIT_STORE_UNREACHABLE,
        f"the object store could not be reached for {what}: {exc.__class__.__name__}",
    )


# A refusal is asked again this many times, after 0.25, 0.5, 1, 2, 4 s (7.75 s in all).
REFUSAL_RETRIES = 5


def retry_refusal(response=None, attempts: int = 1, **_kwargs) -> float | None:
    """botocore's needs-retry hook: seconds to wait before asking again after AccessDenied,
    None to let the error stand (or the standard retries decide). Pure.

    The platform's store (SeaweedFS) reloads its identities on every IAM change, and the
    platform makes and deletes one per job at each deploy and end: meanwhile a valid key is
    refused for a moment (a real SeaweedFS refused an identity that worked in 18 of 240 reads
    while others were made and deleted; a fresh one in 5 of 40). Read as the job's bad
    credentials, that failed a job in the chaos run; a real refusal ends the same way, later.
    A HEAD's refusal (a bare 403, no error body) is never asked again: `ensure_bucket` takes
    that answer as "the bucket is there" (asked once a helper, and after a failed upload:
    sync.KnownBucket).
    """
    if not response or attempts > REFUSAL_RETRIES:
        return None
    parsed = response[1] if isinstance(response, tuple) and len(response) > 1 else {}
    if str((parsed or {}).get("Error", {}).get("Code", "")) != "AccessDenied":
        return None
    return 0.25 * 2 ** (attempts - 1)


def make_client(endpoint: str, access_key: str, secret_key: str, region: str = "us-east-1"):
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name=region,
        config=Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 5, "mode": "standard"},
            connect_timeout=5,
            read_timeout=60,
        ),
    )
    client.meta.events.register("needs-retry.s3", retry_refusal)
    return client


def local_name(key: str, prefix: str) -> str | None:
    """Where an object goes below the target dir, or None for folder markers and unsafe keys."""
    if not key.startswith(prefix):
        return None
    rel = key[len(prefix) :]
    if not rel or rel.endswith("/") or "\x00" in rel:
        return None
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return posixpath.join(*parts)


def list_keys(client, bucket: str, prefix: str) -> list[tuple[str, int]]:
    keys: list[tuple[str, int]] = []
    where = f"bucket {bucket!r}" + (f" prefix {prefix!r}" if prefix else "")
    try:
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            keys.extend((o["Key"], o.get("Size", 0)) for o in page.get("Contents", []))
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
        raise classify(exc, where) from None
    return keys


def download_object(
    client,
    bucket: str,
    key: str,
    dest: Path,
    should_stop: Callable[[], bool],
    root: Path | None = None,
) -> int:
    """Stream one object to `dest` (via a temporary file); return its size. With `root` (a
    folder of the job volume, which the learners share), every folder from it to `dest`
    is made a real one first and no link is written through (volume.real_dirs)."""
    what = f"s3://{bucket}/{key}"
    if root is not None:
        real_dirs(root, dest.parent)
    else:
        dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".part-{dest.name}")
    size = 0
    try:
        body = client.get_object(Bucket=bucket, Key=key)["Body"]
        drop_unless_regular(tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as f:
            for chunk in body.iter_chunks(CHUNK):
                if should_stop():
                    raise Interrupted()
                f.write(chunk)
                size += len(chunk)
        os.replace(tmp, dest)  # a link named `dest` is replaced, not followed
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
        raise classify(exc, what) from None
    finally:
        tmp.unlink(missing_ok=True)
    return size


def download_prefix(
    client,
    bucket: str,
    prefix: str,
    dest: Path,
    should_stop: Callable[[], bool],
    say: Callable[[str], None] = print,
) -> tuple[int, int]:
    """Download every object under bucket/prefix into dest; return (objects, bytes)."""
    prefix = folder_prefix(prefix)
    where = f"s3://{bucket}/{prefix}"
    keys = list_keys(client, bucket, prefix)
    wanted = []
    for key, _size in keys:
        name = local_name(key, prefix)
        if name is None:
            if not key.endswith("/"):
                say(f"skipping object {key!r}: its name would land outside the data directory")
            continue
        wanted.append((key, name))
    if not wanted:
        raise _error(HELPER_EXIT_DATA_NOT_FOUND, f"no training data: {where} holds no objects")
    total = 0
    for key, name in wanted:
        if should_stop():
            raise Interrupted()
        total += download_object(client, bucket, key, dest / name, should_stop, root=dest)
    return len(wanted), total


def ensure_bucket(client, bucket: str) -> None:
    """Make the bucket if it is missing.

    In the platform's S3 the job's own identity may write only under its prefix: the
    platform made the bucket, and asking about the bucket itself is refused (403). Writing
    then tells whether the identity really may.
    """
    try:
        client.head_bucket(Bucket=bucket)
        return
    except botocore.exceptions.ClientError as exc:
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status == 403:
            return
        if status != 404 and exc.response.get("Error", {}).get("Code") not in _NOT_FOUND:
            raise classify(exc, f"bucket {bucket!r}", upload=True) from None
    except botocore.exceptions.BotoCoreError as exc:
        raise classify(exc, f"bucket {bucket!r}", upload=True) from None
    try:
        client.create_bucket(Bucket=bucket)
    except botocore.exceptions.ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in (
            "BucketAlreadyOwnedByYou",
            "BucketAlreadyExists",
        ):
            raise classify(exc, f"bucket {bucket!r}", upload=True) from None
    except botocore.exceptions.BotoCoreError as exc:
        raise classify(exc, f"bucket {bucket!r}", upload=True) from None


def head_object(client, bucket: str, key: str) -> dict | None:
    """The object's HEAD (size, user metadata), or None if it (or its bucket) does not exist."""
    try:
        return client.head_object(Bucket=bucket, Key=key)
    except botocore.exceptions.ClientError as exc:
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status == 404 or exc.response.get("Error", {}).get("Code") in _NOT_FOUND:
            return None
        raise classify(exc, f"s3://{bucket}/{key}") from None
    except botocore.exceptions.BotoCoreError as exc:
        raise classify(exc, f"s3://{bucket}/{key}") from None


def delete_object(client, bucket: str, key: str) -> None:
    try:
        client.delete_object(Bucket=bucket, Key=key)
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
        raise classify(exc, f"deleting s3://{bucket}/{key}", upload=True) from None


class _Snapshot:
    """The first `size` bytes of an open file, as a seekable stream for one upload. A file
    cut short under the upload ends it at once (`cut`; the caller's next scan sees the
    change and sends the file again): sending fewer bytes than announced would leave the
    store waiting for the rest until the client's read timeout, and padding them would not
    match the checksum taken before the send."""

    def __init__(self, fd: int, size: int):
        self._fd, self._size, self._pos = fd, size, 0
        self.cut = False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self._size}[whence]
        self._pos = min(max(base + offset, 0), self._size)
        return self._pos

    def close(self) -> None:
        """The descriptor is upload_file's to close."""

    def read(self, n: int | None = -1) -> bytes:
        left = self._size - self._pos
        want = left if n is None or n < 0 else min(n, left)
        parts, got = [], 0
        while got < want:
            data = os.pread(self._fd, want - got, self._pos + got)
            if not data:
                self.cut = True
                raise OSError("the file was cut short while it was sent")
            parts.append(data)
            got += len(data)
        self._pos += want
        return b"".join(parts)


def upload_file(
    client, root: Path, rel: str, bucket: str, key: str, metadata: dict[str, str] | None = None
) -> int | None:
    """Upload the regular file `rel` below `root`; `metadata` becomes the object's user
    metadata (x-amz-meta-*). The bytes stored, or None when there is no such regular file
    any more (gone, or a link, a pipe, a directory) or it was cut short while sent: the file
    is opened as `open_below` says and sized by that open file, never by its path again."""
    fd = open_below(root, rel)
    if fd is None:
        return None
    size = os.fstat(fd).st_size
    body = _Snapshot(fd, size)
    try:
        extra = {"Metadata": metadata} if metadata else None
        client.upload_fileobj(body, bucket, key, ExtraArgs=extra)
        return size
    except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError, OSError) as exc:
        if body.cut:
            return None
        raise classify(exc, f"s3://{bucket}/{key}", upload=True) from None
    except boto3.exceptions.S3UploadFailedError as exc:
        if body.cut:
            return None
        raise _error(
            HELPER_EXIT_UPLOAD_FAILED, f"storing s3://{bucket}/{key} failed: {exc}"
        ) from None
    finally:
        os.close(fd)


def upload_tree(client, src: Path, bucket: str, prefix: str) -> tuple[int, int]:
    """Upload every regular file below src to bucket/prefix<relative path>; (files, bytes)."""
    count = total = 0
    if not src.is_dir():
        return 0, 0
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src).as_posix()
        size = upload_file(client, src, rel, bucket, prefix + rel)
        if size is None:
            continue  # a link could point anywhere in the container: store real files only
        count += 1
        total += size
    return count, total
