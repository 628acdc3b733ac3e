"""Per-job S3 identities in the platform's object store (the IAM adapter).

Every job's containers get an S3 identity of their own, never the platform's root key:
an IAM user named after the job, with one access key and one inline policy
(dlaas.domain.namespace.job_policy) that lets it read its training data and its code archive and
write only under its own results prefix. SeaweedFS serves an IAM API on its S3 port (the
server runs with `-s3.iam.readOnly=false`); only the platform's admin identity may create
users or attach policies there, and an identity survives a restart of the store.

`issue` is idempotent per job (the user and policy are put again; a new key is added, so a
helper still running with an older key keeps working); `revoke` deletes the keys, the
policy and the user. Identities of jobs that ended are found by `job_users` and swept by
the LCM leader, so a revoke missed in a crash is done later.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import boto3
import botocore.exceptions
from botocore.config import Config

from dlaas.domain.errors import TemporaryError

log = logging.getLogger(__name__)

POLICY_NAME = "dlaas-job"
JOB_USER_PREFIX = "job-"


def _code(exc: botocore.exceptions.ClientError) -> str:
    return exc.response.get("Error", {}).get("Code", "")


class JobIdentities:
    def __init__(self, endpoint: str, access_key: str, secret_key: str, timeout_s: float = 10.0):
        self._iam = boto3.client(
            "iam",
            endpoint_url=endpoint,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            region_name="us-east-1",
            config=Config(
                connect_timeout=timeout_s, read_timeout=timeout_s, retries={"max_attempts": 2}
            ),
        )

    def issue(self, job_id: str, policy: dict[str, Any]) -> tuple[str, str]:
        """(access key, secret key) of the job's identity, with `policy` as its rights."""
        try:
            try:
                self._iam.create_user(UserName=job_id)
            except botocore.exceptions.ClientError as exc:
                if _code(exc) != "EntityAlreadyExists":
                    raise
            self._iam.put_user_policy(
                UserName=job_id, PolicyName=POLICY_NAME, PolicyDocument=json.dumps(policy)
            )
            key = self._iam.create_access_key(UserName=job_id)["AccessKey"]
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            # The store's message names the operation, never a key.
            raise TemporaryError(f"could not make the S3 identity of {job_id}: {exc}") from None
        return key["AccessKeyId"], key["SecretAccessKey"]

    def revoke(self, job_id: str) -> bool:
        """Delete the job's keys, policy and user; True if it had an identity."""
        try:
            keys = self._iam.list_access_keys(UserName=job_id)["AccessKeyMetadata"]
            for k in keys:
                self._iam.delete_access_key(UserName=job_id, AccessKeyId=k["AccessKeyId"])
            try:
                self._iam.delete_user_policy(UserName=job_id, PolicyName=POLICY_NAME)
            except botocore.exceptions.ClientError as exc:
                if _code(exc) != "NoSuchEntity":
                    raise
            try:
                self._iam.delete_user(UserName=job_id)
            except botocore.exceptions.ClientError as exc:
                if _code(exc) != "NoSuchEntity":
                    raise
                return bool(keys)  # no user (left): revoked before, or concurrently
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            raise TemporaryError(f"could not revoke the S3 identity of {job_id}: {exc}") from None
        return True

    def job_users(self) -> set[str]:
        """Job ids that have an identity now."""
        try:
            users = self._iam.list_users()["Users"]
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as exc:
            raise TemporaryError(f"could not list S3 identities: {exc}") from None
        return {u["UserName"] for u in users if u["UserName"].startswith(JOB_USER_PREFIX)}
