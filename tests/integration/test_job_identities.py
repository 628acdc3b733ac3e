"""A job's own S3 identity on the real SeaweedFS: it reaches its data and nothing else.

Attack-style: with the job's key, try every other bucket, prefix and the IAM API itself.
"""

from __future__ import annotations

import uuid

import boto3
import botocore.exceptions
import pytest

from dlaas.adapters.job_identities import JobIdentities
from dlaas.domain.namespace import job_policy, team_bucket


def _denied(fn, *args, **kwargs) -> bool:
    try:
        fn(*args, **kwargs)
    except botocore.exceptions.ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return status in (401, 403) or code in ("AccessDenied", "InvalidAccessKeyId", "Unknown")
    return False


@pytest.fixture
def world(s3_server, s3_client):
    tag = uuid.uuid4().hex[:6]
    buckets = {
        "a_data": team_bucket(f"a{tag}", "data"),
        "a_results": team_bucket(f"a{tag}", "results"),
        "b_data": team_bucket(f"b{tag}", "data"),
        "code": f"code{tag}",
    }
    for b in buckets.values():
        s3_client.create_bucket(Bucket=b)
    s3_client.put_object(Bucket=buckets["a_data"], Key="train/x.npz", Body=b"a-data")
    s3_client.put_object(Bucket=buckets["b_data"], Key="secret.npz", Body=b"b-data")
    s3_client.put_object(Bucket=buckets["a_results"], Key="job-other/model.npz", Body=b"theirs")
    s3_client.put_object(Bucket=buckets["code"], Key="code/job-x.tar.gz", Body=b"mine")
    s3_client.put_object(Bucket=buckets["code"], Key="code/job-y.tar.gz", Body=b"not mine")
    return buckets


def test_job_identity_reaches_only_its_own_data(s3_server, s3_client, world):
    ids = JobIdentities(s3_server.endpoint, s3_server.access_key, s3_server.secret_key)
    job = f"job-{uuid.uuid4().hex[:12]}"
    policy = job_policy(
        job,
        data=(world["a_data"], "train/"),
        results=(world["a_results"], f"{job}/"),
        code=(world["code"], "code/job-x.tar.gz"),
    )
    key, secret = ids.issue(job, policy)
    assert key != s3_server.access_key
    mine = s3_server.client(key, secret)

    # Allowed: its data, its code, its own results prefix.
    assert mine.get_object(Bucket=world["a_data"], Key="train/x.npz")["Body"].read() == b"a-data"
    listed = mine.list_objects_v2(Bucket=world["a_data"], Prefix="train/")
    assert [o["Key"] for o in listed["Contents"]] == ["train/x.npz"]
    assert mine.get_object(Bucket=world["code"], Key="code/job-x.tar.gz")["Body"].read() == b"mine"
    mine.put_object(Bucket=world["a_results"], Key=f"{job}/model.npz", Body=b"m")
    mine.delete_object(Bucket=world["a_results"], Key=f"{job}/model.npz")

    # Refused: another team's data, another job's results and code, writing data.
    assert _denied(mine.get_object, Bucket=world["b_data"], Key="secret.npz")
    assert _denied(mine.list_objects_v2, Bucket=world["b_data"])
    assert _denied(mine.get_object, Bucket=world["a_results"], Key="job-other/model.npz")
    assert _denied(mine.list_objects_v2, Bucket=world["a_results"])
    assert _denied(mine.put_object, Bucket=world["a_results"], Key="job-other/model.npz", Body=b"x")
    assert _denied(mine.delete_object, Bucket=world["a_results"], Key="job-other/model.npz")
    assert _denied(mine.get_object, Bucket=world["code"], Key="code/job-y.tar.gz")
    assert _denied(mine.put_object, Bucket=world["code"], Key="code/job-x.tar.gz", Body=b"evil")
    assert _denied(mine.put_object, Bucket=world["a_data"], Key="train/x.npz", Body=b"evil")
    assert _denied(mine.create_bucket, Bucket=f"evil{uuid.uuid4().hex[:6]}")
    assert _denied(mine.delete_bucket, Bucket=world["b_data"])
    names = {b["Name"] for b in mine.list_buckets().get("Buckets", [])}
    assert world["b_data"] not in names and world["code"] not in names

    # The IAM API refuses the job's key: no new users, no wider policy.
    job_iam = boto3.client(
        "iam", endpoint_url=s3_server.endpoint, aws_access_key_id=key,
        aws_secret_access_key=secret, region_name="us-east-1",
    )  # fmt: skip
    assert _denied(job_iam.create_user, UserName="evil")
    wide = (
        '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"}]}'
    )
    assert _denied(job_iam.put_user_policy, UserName=job, PolicyName="x", PolicyDocument=wide)

    # A's objects are byte-identical afterwards.
    assert (
        s3_client.get_object(Bucket=world["b_data"], Key="secret.npz")["Body"].read() == b"b-data"
    )
    assert (
        s3_client.get_object(Bucket=world["a_results"], Key="job-other/model.npz")["Body"].read()
        == b"theirs"
    )
    assert job in ids.job_users()

    # Revoked: the key fails at once; revoking again is a no-op.
    assert ids.revoke(job)
    assert _denied(mine.get_object, Bucket=world["a_data"], Key="train/x.npz")
    assert not ids.revoke(job)
    assert job not in ids.job_users()


def test_issue_is_idempotent_and_keeps_earlier_keys_working(s3_server, world):
    ids = JobIdentities(s3_server.endpoint, s3_server.access_key, s3_server.secret_key)
    job = f"job-{uuid.uuid4().hex[:12]}"
    policy = job_policy(job, data=(world["a_data"], ""), results=None, code=None)
    k1 = ids.issue(job, policy)
    k2 = ids.issue(job, policy)
    assert k1 != k2
    for key, secret in (k1, k2):
        c = s3_server.client(key, secret)
        assert c.get_object(Bucket=world["a_data"], Key="train/x.npz")["Body"].read() == b"a-data"
    assert ids.revoke(job)
    for key, secret in (k1, k2):
        assert _denied(s3_server.client(key, secret).get_object, Bucket=world["a_data"],
                       Key="train/x.npz")  # fmt: skip
