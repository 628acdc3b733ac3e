"""Team namespaces in the platform's S3, and what one job may touch there. Pure.

A bucket named in a manifest (or by `dlaas data`) for the platform's own S3 lives in the
submitting team's namespace: `digits-data` of team `vision` is the bucket
`vision--digits-data`. "--" separates a team from its bucket and may not appear in a name a
user gives, so no name can reach another team's buckets or the platform's own (the code
archives' bucket has no team prefix). Jobs from before teams existed (team "") keep their
buckets as named.

`job_policy` is the IAM policy of a job's own S3 identity: read its training data, read its
own code archive, and read/write only under its own prefix of its results bucket.
"""

from __future__ import annotations

import re
from typing import Any

SEPARATOR = "--"
DEFAULT_RESULTS = "results"
# S3 bucket names: 3-63 lowercase letters, digits, dots and hyphens.
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$")


class NamespaceError(ValueError):
    """A bucket name a user may not use; the message names what is wrong."""


def s3_name(name: str) -> str:
    """A bucket name as S3 takes it: FfDL's names hold '_' (its object store allowed it),
    which becomes '-' (`mnist_data` is the bucket `mnist-data`). Two names of one job that
    map to one bucket are refused (dlaas.domain.locations.check_buckets)."""
    return name.replace("_", "-")


def team_bucket(team: str, name: str) -> str:
    """The real bucket behind `name` in `team`'s namespace."""
    name = s3_name(name)
    return f"{team}{SEPARATOR}{name}" if team else name


def user_bucket(team: str, bucket: str) -> str:
    """The name a team's member sees for one of its real buckets."""
    prefix = f"{team}{SEPARATOR}"
    return bucket[len(prefix) :] if team and bucket.startswith(prefix) else bucket


def user_text(team: str, text: str) -> str:
    """`text` (a helper's error, say) with the team's real bucket names as its members see
    them: each `team--` that starts a name (no name character before it) goes."""
    if not team:
        return text
    return re.sub(rf"(?<![a-z0-9.-]){re.escape(team + SEPARATOR)}", "", text)


def check_bucket(team: str, name: str) -> str:
    """`name` if a member of `team` may use it; else NamespaceError saying why."""
    if SEPARATOR in name:
        owner = name.split(SEPARATOR, 1)[0]
        whose = (
            "your own team's bucket by its full name"
            if owner == team
            else f"a bucket of team {owner!r}"
        )
        raise NamespaceError(
            f"{name!r} names {whose}: '--' is reserved; give the bucket's name "
            "without a team prefix (buckets resolve inside your team's namespace)"
        )
    full = team_bucket(team, name)
    mapped = s3_name(name)
    if not (3 <= len(full) <= 63) or not _BUCKET_RE.match(mapped) or ".." in mapped:
        raise NamespaceError(
            f"{name!r} is not a valid bucket name: lowercase letters, digits, dots, hyphens "
            "and underscores, "
            f"at most {63 - len(team_bucket(team, ''))} characters in your team's namespace"
        )
    return name


def _arn(bucket: str, key: str = "") -> str:
    return f"arn:aws:s3:::{bucket}/{key}" if key else f"arn:aws:s3:::{bucket}"


def job_policy(
    job_id: str,
    *,
    data: tuple[str, str] | None,
    results: tuple[str, str] | None,
    code: tuple[str, str] | None,
) -> dict[str, Any]:
    """The IAM policy of one job's identity; each argument is (bucket, prefix-or-key) or None.

    `data`: read-only, the whole bucket or one prefix. `results`: read, write and delete under
    the job's own prefix only (its results, checkpoints and logs). `code`: one object, read.
    """
    statements: list[dict[str, Any]] = []
    if data is not None:
        bucket, prefix = data
        listing: dict[str, Any] = {"Effect": "Allow", "Action": ["s3:ListBucket"],
                                   "Resource": [_arn(bucket)]}  # fmt: skip
        if prefix:
            listing["Condition"] = {"StringLike": {"s3:prefix": [f"{prefix}*"]}}
        statements.append(listing)
        statements.append(
            {"Effect": "Allow", "Action": ["s3:GetObject"],
             "Resource": [_arn(bucket, f"{prefix}*")]}
        )  # fmt: skip
    if results is not None:
        bucket, prefix = results
        statements.append(
            {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": [_arn(bucket)],
             "Condition": {"StringLike": {"s3:prefix": [f"{prefix}*"]}}}
        )  # fmt: skip
        statements.append(
            {"Effect": "Allow",
             "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject",
                        "s3:AbortMultipartUpload"],
             "Resource": [_arn(bucket, f"{prefix}*")]}
        )  # fmt: skip
    if code is not None:
        bucket, key = code
        statements.append(
            {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": [_arn(bucket, key)]}
        )
    return {"Version": "2012-10-17", "Statement": statements}
