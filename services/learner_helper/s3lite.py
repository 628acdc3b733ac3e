"""A few S3 calls in the standard library only, for the helper's fast start (resume.py).

boto3 takes most of a helper's start (its import and its client: 0.25 s of CPU, over a
second on a loaded node, measured in the chaos run), and a gang's restart waits for the
helper. The fast start needs three calls, made here with http.client and Signature V4:
HEAD an object, list a prefix (one page), PUT a small object with user metadata. Path-style
addressing, as services.learner_helper.store. Any failure is an `S3LiteError`: the caller
then takes the ordinary, boto3 path, which retries and classifies errors. Never logs or
raises the credentials.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import http.client
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

TIMEOUT_S = 5.0
# The platform's store (SeaweedFS) refuses a fresh identity for a moment while it reloads
# its identities (store.retry_refusal), and every deploy makes one: a refusal is asked again
# after 0.1, 0.2 and 0.4 s before the caller gives up on the fast start.
REFUSAL_WAITS_S = (0.1, 0.2, 0.4)
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


class S3LiteError(Exception):
    """A call that did not succeed (status, transport); the message names no secret."""


@dataclass(frozen=True)
class Credentials:
    endpoint: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"

    def __repr__(self) -> str:  # never show the secret
        return f"Credentials(endpoint={self.endpoint!r}, ...)"


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def canonical_query(query: dict[str, str]) -> str:
    return "&".join(
        f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(query.items())
    )


def sign(
    method: str,
    host: str,
    path: str,
    query: dict[str, str],
    headers: dict[str, str],
    payload_sha256: str,
    creds: Credentials,
    now: dt.datetime,
) -> dict[str, str]:
    """`headers` plus host, x-amz-date, x-amz-content-sha256 and Authorization (SigV4 for
    s3; every header given is signed). `path` is already URI-encoded. Pure."""
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    day = amz_date[:8]
    signed = {k.lower(): " ".join(str(v).split()) for k, v in headers.items()}
    signed.update({"host": host, "x-amz-date": amz_date, "x-amz-content-sha256": payload_sha256})
    names = sorted(signed)
    canonical = "\n".join(
        [
            method,
            path,
            canonical_query(query),
            "".join(f"{n}:{signed[n]}\n" for n in names),
            ";".join(names),
            payload_sha256,
        ]
    )
    scope = f"{day}/{creds.region}/s3/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = _hmac(f"AWS4{creds.secret_key}".encode(), day)
    for part in (creds.region, "s3", "aws4_request"):
        key = _hmac(key, part)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    out = {**headers, "host": host, "x-amz-date": amz_date, "x-amz-content-sha256": payload_sha256}
    out["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={creds.access_key}/{scope}, "
        f"SignedHeaders={';'.join(names)}, Signature={signature}"
    )
    return out


def object_path(bucket: str, key: str = "") -> str:
    """The URI-encoded path of a bucket or an object, path-style."""
    return "/" + quote(bucket, safe="") + ("/" + quote(key, safe="/") if key else "")


def request(
    creds: Credentials,
    method: str,
    bucket: str,
    key: str = "",
    *,
    query: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    body: bytes = b"",
) -> tuple[int, dict[str, str], bytes]:
    """One signed call: (status, lower-cased response headers, body). Raise S3LiteError on
    a transport failure only (the caller judges the status)."""
    url = urlsplit(creds.endpoint)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise S3LiteError(f"not an S3 endpoint: {creds.endpoint!r}")
    query = query or {}
    path = object_path(bucket, key)
    payload = hashlib.sha256(body).hexdigest() if body else EMPTY_SHA256
    send = dict(headers or {})
    if method == "PUT":
        send["content-length"] = str(len(body))
    send = sign(method, url.netloc, path, query, send, payload, creds, dt.datetime.now(dt.UTC))
    cls = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
    conn = cls(url.hostname, url.port, timeout=TIMEOUT_S)
    target = path + ("?" + canonical_query(query) if query else "")
    try:
        conn.request(method, target, body=body or None, headers=send)
        res = conn.getresponse()
        data = res.read()
        return res.status, {k.lower(): v for k, v in res.getheaders()}, data
    except (OSError, http.client.HTTPException) as exc:
        raise S3LiteError(f"{method} s3://{bucket}/{key}: {type(exc).__name__}") from None
    finally:
        conn.close()


def call(
    creds: Credentials, method: str, bucket: str, key: str = "", **kwargs
) -> tuple[int, dict[str, str], bytes]:
    """`request`, asked again after a refusal (403) as REFUSAL_WAITS_S says."""
    for wait in REFUSAL_WAITS_S:
        status, headers, body = request(creds, method, bucket, key, **kwargs)
        if status != 403:
            return status, headers, body
        time.sleep(wait)
    return request(creds, method, bucket, key, **kwargs)


def head(creds: Credentials, bucket: str, key: str) -> dict[str, str] | None:
    """The object's headers (lower-cased), None if it does not exist. Raise S3LiteError."""
    status, headers, _ = call(creds, "HEAD", bucket, key)
    if status == 404:
        return None
    if status != 200:
        raise S3LiteError(f"HEAD s3://{bucket}/{key}: {status}")
    return headers


def list_sizes(creds: Credentials, bucket: str, prefix: str) -> dict[str, int]:
    """Key -> size of every object under `prefix` (a missing bucket holds nothing). Raise
    S3LiteError, also for a listing longer than one page (the caller takes the long way)."""
    status, _, body = call(creds, "GET", bucket, query={"list-type": "2", "prefix": prefix})
    if status == 404:
        return {}
    if status != 200:
        raise S3LiteError(f"listing s3://{bucket}/{prefix}: {status}")
    try:
        # The job's own S3 answers; expat (>= 2.4) refuses entity-amplification bombs anyway.
        root = ET.fromstring(body)  # noqa: S314
    except ET.ParseError:
        raise S3LiteError(f"listing s3://{bucket}/{prefix}: not XML") from None
    ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
    if (root.findtext(f"{ns}IsTruncated") or "").strip().lower() == "true":
        raise S3LiteError(f"listing s3://{bucket}/{prefix}: more than one page")
    out = {}
    for item in root.iter(f"{ns}Contents"):
        out[item.findtext(f"{ns}Key") or ""] = int(item.findtext(f"{ns}Size") or 0)
    return out


def put(creds: Credentials, bucket: str, key: str, body: bytes, metadata: dict[str, str]) -> None:
    """Store a small object with user metadata (x-amz-meta-*). Raise S3LiteError."""
    headers = {f"x-amz-meta-{k}": v for k, v in metadata.items()}
    status, _, _ = call(creds, "PUT", bucket, key, headers=headers, body=body)
    if status != 200:
        raise S3LiteError(f"PUT s3://{bucket}/{key}: {status}")
