"""boto3 clients for S3 locations and the platform's own S3 (path-style addressing).

`client_for(loc)` is for a location a manifest names: a user's own store, reached from
the platform's hosts. Such an endpoint may be slow, or a tarpit that accepts and never
answers, so its client gets short timeouts and no retries: a caller waits seconds, not
minutes, and a botocore error it can map (see `STORE_UNREACHABLE`) instead of a hang.
It connects only where dlaas.domain.egress allows, to the address it checked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from dlaas.adapters import egress as egress_pin
from dlaas.config import PlatformSettings
from dlaas.domain import egress, errors, jobspec
from dlaas.domain.locations import S3Location

# Bounds for a user's store (read at call time, so a test can shorten them).
USER_CONNECT_TIMEOUT_S = 3.0
USER_READ_TIMEOUT_S = 10.0

# What botocore raises when a store does not answer (connect or read timeout, refused
# or reset connection, unknown host): the store is unreachable, not the request bad.
STORE_UNREACHABLE = (BotoConnectionError, HTTPClientError)


# Every error a call to a store may raise that `store_error` turns into the domain's.
STORE_ERRORS = (ClientError, *STORE_UNREACHABLE)


def missing_bucket(exc: Exception) -> bool:
    """Whether the store answered that the bucket does not exist."""
    return isinstance(exc, ClientError) and (
        exc.response.get("Error", {}).get("Code") == "NoSuchBucket"
    )


def store_error(exc: Exception, endpoint: str, what: str) -> errors.DlaasError:
    """A job's results store's failure (one of STORE_ERRORS) as a domain error naming what
    the user can look at: a refusal (4xx) is the user's to fix, anything else temporary.

    Only the store's host is named: an endpoint URL may carry credentials.
    """
    host = urlsplit(endpoint).hostname or "?"
    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code") or "an error"
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 500
        if 400 <= status < 500:  # the store refuses these credentials or this bucket
            return errors.InvalidRequest(
                f"data_stores[0].connection: the results store at {host} refused to {what} "
                f"({code}); check the store's credentials and bucket"
            )
        return errors.TemporaryError(
            f"the results store at {host} failed ({code}); try again later"
        )
    # Timeouts and refused connections: the store is down, or a tarpit. Not retried here.
    return errors.TemporaryError(
        f"data_stores[0].connection.endpoint: the results store at {host} did not answer "
        f"({type(exc).__name__}); try again later",
        delay_s=10.0,
    )


def client(
    endpoint: str,
    access_key: str,
    secret_key: str,
    *,
    connect_timeout: float = 60.0,
    read_timeout: float = 60.0,
    attempts: int = 3,
):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name="us-east-1",
        config=Config(
            s3={"addressing_style": "path"},
            retries={"total_max_attempts": attempts, "mode": "standard"},
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
        ),
    )


def client_for(loc: S3Location, *, resolve: egress_pin.Resolve = egress_pin.resolve):
    """A client for a store named in a manifest: short timeouts, one attempt, and only to
    an address the egress rule allows (dlaas.domain.egress; EgressRefused, one message
    whatever listens there), pinned: it connects to the address checked, under the
    store's name (the Host header it signs and sends, the name TLS verifies)."""
    allowed = egress.allowed_networks(loc.allow_networks)
    try:
        pinned = egress_pin.pin(jobspec.STORE_ENDPOINT_FIELD, loc.endpoint, allowed, resolve)
    except egress_pin.Unresolved as exc:
        raise errors.TemporaryError(f"{exc}; try again later", delay_s=10.0) from None
    c = client(
        pinned.url,
        loc.access_key,
        loc.secret_key,
        connect_timeout=USER_CONNECT_TIMEOUT_S,
        read_timeout=USER_READ_TIMEOUT_S,
        attempts=1,
    )

    def named(request: Any, **_: Any) -> None:
        request.headers["Host"] = pinned.netloc  # signed, then sent, as the store's name

    c.meta.events.register_first("before-sign.s3", named)
    if pinned.https:
        # botocore has no option for the name TLS presents and verifies; its pool manager
        # (urllib3) has: the certificate is checked against the store's name, not the address.
        pool = c._endpoint.http_session._manager
        pool.connection_pool_kw.update(
            server_hostname=pinned.hostname, assert_hostname=pinned.hostname
        )
    return c


def platform_client(settings: PlatformSettings):
    return client(
        settings.s3_endpoint, settings.s3_access_key, settings.s3_secret_key.get_secret_value()
    )


def client_for_location(loc: S3Location, platform: Callable[[], Any]):
    """The client for a job's location: the platform's (`platform()`) for the platform's S3,
    a fresh one for a user's own store. Only a location that IS the platform's (resolved in
    the team namespace) gets the platform's key: a manifest naming the platform's endpoint
    and key id as its "own" store still signs with the key it gave."""
    if loc.platform:
        return platform()
    try:
        return client_for(loc)  # short timeouts: the store is the user's, maybe a tarpit
    except ValueError:  # botocore refuses the endpoint (stored under older rules)
        raise errors.InvalidRequest(
            "data_stores[0].connection.endpoint: not a URL the platform can call"
        ) from None


def ensure_bucket(s3, bucket: str) -> None:
    """Make `bucket` unless it exists (a job's results bucket, a team's data bucket, the
    platform's own for code archives). The store not answering, or refusing to make it,
    raises TemporaryError (its message names the operation, never a key)."""
    try:
        s3.head_bucket(Bucket=bucket)
    except ClientError:
        try:
            s3.create_bucket(Bucket=bucket)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in (
                "BucketAlreadyOwnedByYou",
                "BucketAlreadyExists",
            ):
                raise errors.TemporaryError(f"bucket {bucket}: {exc}") from None
        except BotoCoreError as exc:
            raise errors.unavailable("the platform's S3", exc) from exc
    except BotoCoreError as exc:
        raise errors.unavailable("the platform's S3", exc) from exc


def list_page(s3, bucket: str, prefix: str, limit: int) -> dict | None:
    """One page of `list_objects_v2` (at most `limit` keys); None when there is no such
    bucket. Any other refusal is raised as the client raised it."""
    try:
        return s3.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=limit)
    except ClientError as exc:
        if missing_bucket(exc):
            return None
        raise


def bucket_answers(s3, bucket: str) -> tuple[bool, str]:
    """Whether the store answers a HEAD of `bucket`, and how (the API's health probe). Any
    answer below 500 counts, "no such bucket" included: the bucket comes with the first
    upload."""
    try:
        s3.head_bucket(Bucket=bucket)
    except ClientError as exc:
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 500
        if status < 500:
            return True, f"answers (bucket {bucket}: HTTP {status})"
        return False, f"failing (HTTP {status})"
    except STORE_UNREACHABLE as exc:
        return False, f"not answering ({type(exc).__name__})"
    return True, "answers"
