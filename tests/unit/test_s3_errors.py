"""How the S3 adapter turns botocore's errors into the domain's (dlaas.adapters.s3), so
that no service classifies them itself: a store's refusal is the user's to fix (422, the
connection named), its failure or silence temporary (503); only the store's host is shown."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from dlaas.adapters.s3 import bucket_answers, missing_bucket, store_error
from dlaas.domain.errors import InvalidRequest, TemporaryError

ENDPOINT = "http://key:secret@store.example:9000/path"


def client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "ListObjectsV2",
    )


def test_a_refusal_is_the_users_to_fix_and_names_only_the_host():
    err = store_error(client_error("AccessDenied", 403), ENDPOINT, "list the results")
    assert isinstance(err, InvalidRequest)
    assert "store.example refused to list the results (AccessDenied)" in err.message
    assert "secret" not in err.message and "key:" not in err.message


@pytest.mark.parametrize(
    "exc", [client_error("InternalError", 500), EndpointConnectionError(endpoint_url=ENDPOINT)]
)
def test_a_failure_or_no_answer_is_temporary(exc):
    err = store_error(exc, ENDPOINT, "read the log")
    assert isinstance(err, TemporaryError)
    assert "store.example" in err.message and "secret" not in err.message


def test_only_no_such_bucket_is_a_missing_bucket():
    assert missing_bucket(client_error("NoSuchBucket", 404))
    assert not missing_bucket(client_error("NoSuchKey", 404))
    assert not missing_bucket(EndpointConnectionError(endpoint_url=ENDPOINT))


class Head:
    def __init__(self, exc: Exception | None):
        self.exc = exc

    def head_bucket(self, Bucket):  # boto3 names it so
        if self.exc:
            raise self.exc


@pytest.mark.parametrize(
    ("exc", "answers"),
    [
        (None, True),
        (client_error("NoSuchBucket", 404), True),  # it answers: the bucket comes later
        (client_error("InternalError", 503), False),
        (EndpointConnectionError(endpoint_url=ENDPOINT), False),
    ],
)
def test_the_health_probe_counts_any_answer_below_500(exc, answers):
    assert bucket_answers(Head(exc), "dlaas")[0] is answers
