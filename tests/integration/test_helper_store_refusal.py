"""The helper's S3 client asks again after a refusal before calling it the job's fault.

Chaos run on the swarm, seed 1 (2026-11-24): a job FAILED with "the data store refused the
credentials" on its own code archive, its fresh identity valid: SeaweedFS reloads every
identity on each IAM change (the platform makes and deletes one per job), refusing valid
keys for a moment. A FAKE S3 (a local HTTP handler, no SeaweedFS) refuses, then serves.
"""

from __future__ import annotations

import http.server
import threading

import botocore.endpoint
import botocore.exceptions
import pytest

from dlaas.domain.jobspec import HELPER_EXIT_STORE_REFUSED
from services.learner_helper import store

REFUSED = (
    b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
    b"<Message>Access Denied</Message></Error>"
)


@pytest.fixture
def fake_s3(monkeypatch):
    """FAKE S3: GET refuses with AccessDenied `refusals[0]` times, then serves b"code"."""
    refusals = [0]
    seen: list[int] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(403 if refusals[0] else 200)
            if refusals[0]:
                refusals[0] -= 1
                self.send_response(403)
                body = REFUSED
            else:
                self.send_response(200)
                body = b"code"
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_HEAD(self):
            seen.append(403)  # the job's identity may not ask about the bucket itself
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    # The waits between tries are the hook's own (asserted below); the test need not sleep.
    monkeypatch.setattr(botocore.endpoint.time, "sleep", lambda s: None)
    client = store.make_client(f"http://127.0.0.1:{server.server_port}", "key", "secret")
    yield client, refusals, seen
    server.shutdown()


def test_a_refusal_for_a_moment_is_asked_again(fake_s3):
    client, refusals, seen = fake_s3
    refusals[0] = 3  # an identity reload refusing a valid key
    body = client.get_object(Bucket="dlaas", Key="code/job-1.tar.gz")["Body"].read()
    assert body == b"code" and seen == [403, 403, 403, 200]


def test_a_refusal_that_lasts_is_the_stores_answer(fake_s3):
    client, refusals, seen = fake_s3
    refusals[0] = 100  # really not allowed: refused after the retries, as before
    with pytest.raises(botocore.exceptions.ClientError) as e:
        client.get_object(Bucket="dlaas", Key="code/job-1.tar.gz")
    err = store.classify(e.value, "s3://dlaas/code/job-1.tar.gz")
    assert err.exit_code == HELPER_EXIT_STORE_REFUSED
    assert len(seen) == 1 + store.REFUSAL_RETRIES


def test_a_refused_head_is_an_answer_and_not_asked_again(fake_s3):
    # ensure_bucket reads a HEAD's 403 as "the bucket is there", at every checkpoint sync:
    # asked again, each sync would take 7.75 s (a chaos run's helper then missed its 30 s).
    client, _refusals, seen = fake_s3
    store.ensure_bucket(client, "dlaas")
    assert seen == [403]


def test_the_waits_grow_and_other_errors_are_left_to_the_standard_retries():
    refused = (None, {"Error": {"Code": "AccessDenied"}})
    waits = [store.retry_refusal(refused, attempts=n) for n in range(1, 7)]
    assert waits == [0.25, 0.5, 1.0, 2.0, 4.0, None]
    assert store.retry_refusal((None, {"Error": {"Code": "NoSuchKey"}}), attempts=1) is None
    assert store.retry_refusal((None, {"Error": {"Code": "403"}}), attempts=1) is None  # HEAD
    assert store.retry_refusal(None, attempts=1) is None  # a connection error: not ours
