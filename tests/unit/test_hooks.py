"""Webhooks: which transitions are events, URL and event checks, signatures, one attempt.

The attempt runs against a real SQLite store with the POST replaced by a function (the
receiver and the worker are real in tests/integration/test_hooks_delivery.py).
"""

from __future__ import annotations

import json

import httpx
import pytest

from dlaas.domain import egress, hooks
from dlaas.domain.errors import InvalidRequest
from dlaas.domain.status import TRANSITIONS, Status, Transition
from services.worker import hooks as delivery
from services.worker.hooks import attempt

S = Status


def tr(status: Status, reason: str = "r") -> Transition:
    return Transition(status, 100.0, reason)


# --------------------------------------------------------------------------- events


@pytest.mark.parametrize(
    ("previous", "status", "reason", "event"),
    [
        (None, S.QUEUED, "submitted", hooks.QUEUED),
        (S.PROCESSING, S.QUEUED, "preempted: team a needs its share", hooks.PREEMPTED),
        (S.PROCESSING, S.QUEUED, "shrink: lend 2 GPUs back", hooks.SHRUNK),
        (S.PROCESSING, S.QUEUED, "grow: 2 more GPUs free", hooks.GROWN),
        (S.PROCESSING, S.QUEUED, "rescaled to 4 learner(s) by the user", hooks.RESCALED),
        (
            S.DOWNLOADING,
            S.QUEUED,
            "restart 1/3 from the last checkpoint at once: OOM",
            hooks.RESTARTED,
        ),
        (S.PENDING, S.QUEUED, "node n2 lost: its engine is not answering", hooks.RESTARTED),
        (S.HALTED, S.QUEUED, "resumed by the user", hooks.RESUMED),
        (S.DOWNLOADING, S.PROCESSING, "helper reported data and code ready", hooks.STARTED),
        (S.STORING, S.COMPLETED, "helper stored results and logs", hooks.COMPLETED),
        (S.PROCESSING, S.FAILED, "learner 0 exited 1", hooks.FAILED),
        (S.PROCESSING, S.HALTED, "halted by the user", hooks.HALTED),
        (S.QUEUED, S.PENDING, "placed on local", None),
        (S.PENDING, S.DOWNLOADING, "deployed", None),
        (S.PROCESSING, S.STORING, "all 2 learner(s) exited 0", None),
    ],
)
def test_a_transition_is_the_event_its_owner_waits_for(previous, status, reason, event):
    assert hooks.event_for(previous, tr(status, reason)) == event


def test_every_edge_of_the_table_maps_to_a_known_event_or_none():
    for source, targets in TRANSITIONS.items():
        for target in targets:
            event = hooks.event_for(source, tr(target, "some reason"))
            assert event is None or event in hooks.EVENTS, (source, target, event)


# --------------------------------------------------------------------------- checks


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9000/hook", "https://example.com/x?y=1", "http://[::1]:80/"]
)
def test_http_and_https_urls_are_taken(url):
    assert hooks.check_url(url) == url


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("", "must not be empty"),
        ("ftp://example.com/x", "http:// or https://"),
        ("file:///etc/passwd", "http:// or https://"),
        ("example.com/hook", "http:// or https://"),
        ("http:///nohost", "names no host"),
        ("http://u:p@example.com/", "user name or password"),
        ("http://example.com/a b", "spaces"),
        ("http://example.com:http/", "not a URL"),
        ("http://example.com/" + "a" * hooks.MAX_URL, f"at most {hooks.MAX_URL}"),
    ],
)
def test_bad_urls_are_refused_naming_the_field(url, words):
    with pytest.raises(InvalidRequest, match=r"^url: .*") as exc:
        hooks.check_url(url)
    assert words in exc.value.message


def test_events_are_checked_deduplicated_and_ordered():
    assert hooks.check_events(["failed", "completed", "FAILED "]) == ("completed", "failed")
    with pytest.raises(InvalidRequest, match="events: unknown finished"):
        hooks.check_events(["completed", "finished"])
    with pytest.raises(InvalidRequest, match="events: name at least one"):
        hooks.check_events([" "])


# --------------------------------------------------------------------------- signing


def test_the_signature_is_the_hmac_of_the_exact_body_under_the_hook_secret():
    secret = hooks.hook_secret("platform-key", "hook-1")
    assert secret.startswith("whsec_")
    assert secret != hooks.hook_secret("platform-key", "hook-2")
    assert secret != hooks.hook_secret("other-key", "hook-1")
    assert hooks.hook_secret("", "hook-1") == ""
    body = hooks.body_bytes({"b": 1, "a": "x"})
    assert body == b'{"a":"x","b":1}'
    header = hooks.signature(secret, body)
    assert header.startswith("sha256=")
    assert hooks.verify(secret, body, header)
    assert not hooks.verify(secret, body + b" ", header)
    assert not hooks.verify(hooks.hook_secret("platform-key", "hook-2"), body, header)
    assert not hooks.verify(secret, body, "")


def test_the_idempotency_key_names_the_hook_and_the_transition():
    key = hooks.idempotency_key("hook-1", "job-1", 3)
    assert key == hooks.idempotency_key("hook-1", "job-1", 3)
    assert len({key, hooks.idempotency_key("hook-2", "job-1", 3),
                hooks.idempotency_key("hook-1", "job-1", 4)}) == 3  # fmt: skip
    body = hooks.payload(
        "failed", "job-1", 3, Transition(S.FAILED, 5.0, "oom", "oom_killed", 137), key
    )
    assert body["idempotency_key"] == key
    assert (body["status"], body["reason"], body["error_code"], body["exit_code"]) == (
        "FAILED", "oom", "oom_killed", 137,
    )  # fmt: skip


def test_only_no_answer_5xx_408_and_429_are_retried_with_growing_waits():
    assert [s for s in (None, 200, 301, 400, 404, 408, 429, 500, 503) if hooks.retryable(s)] == [
        None, 408, 429, 500, 503,
    ]  # fmt: skip
    assert [hooks.backoff_s(n, 10) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]


# --------------------------------------------------------------------------- one attempt


@pytest.fixture
def store(job_store):
    job_store.add_hook(hooks.Hook("hook-1", "alice", "http://receiver.test/h", ("completed",), 1.0))
    return job_store


BODY = {"event": "completed", "job_id": "job-1", "idempotency_key": "hook-1.job-1.5"}
KEY = "hook-1.job-1.5"


class Receiver:
    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls: list[tuple[str, bytes, dict]] = []

    def __call__(self, url, body, headers, timeout_s):
        self.calls.append((url, body, headers))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def run(store, post, **kw):
    return attempt("hook-1", BODY, KEY, store, "platform-key", 50.0, backoff_cap_s=30,
                   post=post, **kw)  # fmt: skip


def test_an_attempt_posts_the_signed_body_and_logs_it_delivered(store):
    post = Receiver(204)
    assert run(store, post).state == hooks.DELIVERED
    url, body, headers = post.calls[0]
    assert url == "http://receiver.test/h"
    assert json.loads(body) == BODY
    secret = hooks.hook_secret("platform-key", "hook-1")
    assert hooks.verify(secret, body, headers[hooks.SIGNATURE_HEADER])
    assert headers[hooks.IDEMPOTENCY_HEADER] == KEY
    d = store.get_delivery(KEY)
    assert (d.state, d.attempts, d.last_status, d.last_error, d.job_id, d.event) == (
        hooks.DELIVERED, 1, 204, "", "job-1", "completed",
    )  # fmt: skip
    # The task run again (a redelivery after the acknowledgement was lost): nothing sent.
    assert run(store, post).state == hooks.DELIVERED
    assert len(post.calls) == 1


def test_a_receiver_down_or_failing_is_retried_with_backoff_then_delivered(store):
    post = Receiver(httpx.ConnectError("Connection refused"), 503, 200)
    first = run(store, post)
    assert (first.state, first.retry_in_s) == (hooks.PENDING, 1)
    assert store.get_delivery(KEY).last_status is None
    assert "ConnectError" in store.get_delivery(KEY).last_error
    second = run(store, post)
    assert (second.state, second.retry_in_s) == (hooks.PENDING, 2)
    assert store.get_delivery(KEY).last_error == "HTTP 503"
    assert run(store, post).state == hooks.DELIVERED
    assert store.get_delivery(KEY).attempts == 3
    keys = {headers[hooks.IDEMPOTENCY_HEADER] for _, _, headers in post.calls}
    assert keys == {KEY}


def test_a_4xx_is_not_retried_and_attempts_run_out(store):
    assert run(store, Receiver(404)).state == hooks.GAVE_UP
    assert store.get_delivery(KEY).last_error == "HTTP 404"
    other = "hook-1.job-1.6"
    post = Receiver(500, 500)
    for expected in (hooks.PENDING, hooks.GAVE_UP):
        out = attempt("hook-1", BODY, other, store, "k", 1.0, backoff_cap_s=1, post=post,
                      max_attempts=2)  # fmt: skip
        assert out.state == expected


def test_no_key_to_sign_with_or_a_deleted_hook_sends_nothing(store):
    post = Receiver()
    out = attempt("hook-1", BODY, KEY, store, "", 1.0, backoff_cap_s=1, post=post)
    assert out.state == hooks.GAVE_UP
    assert "DLAAS_SECRETS_KEY" in store.get_delivery(KEY).last_error
    store.delete_hook("hook-1")
    assert run(store, post).state == hooks.GAVE_UP
    assert post.calls == []


# --------------------------------------------------------------------------- destinations


def test_a_hook_to_a_private_address_is_refused_before_any_post():
    posted = []

    def send(url, body, headers, timeout_s, sni):
        posted.append((url, headers, sni))
        return 204

    with pytest.raises(delivery.Refused) as refused:
        delivery.guarded_post("http://meta.test/latest", b"{}", {}, 1.0, send=send,
                              resolve=lambda host, port: ["169.254.169.254"])  # fmt: skip
    assert refused.value.final
    assert str(refused.value) == egress.refusal("url", "meta.test")
    with pytest.raises(delivery.Refused) as unresolved:
        delivery.guarded_post("http://gone.test/", b"{}", {}, 1.0, send=send,
                              resolve=lambda h, p: [])  # fmt: skip
    assert not unresolved.value.final  # a DNS outage passes: tried again
    assert posted == []


def test_the_post_goes_to_the_address_checked_not_to_the_name_again():
    # DNS rebinding: a name that answers a public address to the check and a private one
    # to the POST. The POST goes to the checked address, the name in Host and over TLS.
    posted, asked = [], []

    def send(url, body, headers, timeout_s, sni):
        posted.append((url, headers["Host"], headers["X"], sni))
        return 204

    def resolve(host, port):
        asked.append((host, port))
        return ["10.0.0.5", "10.0.0.6"]

    allowed = egress.allowed_networks("10.0.0.0/8")
    url = "https://hooks.test:8443/x?a=1"
    assert delivery.guarded_post(url, b"{}", {"X": "1"}, 1.0, allowed=allowed,
                                 resolve=resolve, send=send) == 204  # fmt: skip
    assert asked == [("hooks.test", 8443)]
    assert posted == [("https://10.0.0.5:8443/x?a=1", "hooks.test:8443", "1", "hooks.test")]
    posted.clear()
    delivery.guarded_post("http://[2606:2800::1]/h", b"{}", {"X": "2"}, 1.0, send=send,
                          resolve=lambda host, port: ["10.0.0.9"])  # fmt: skip
    assert posted == [("http://[2606:2800::1]:80/h", "[2606:2800::1]", "2", None)]


def test_a_refused_destination_gives_up_at_once_and_says_why(store):
    refused = delivery.Refused("receiver.test is 127.0.0.1, not a public address: ...")
    assert run(store, Receiver(refused)).state == hooks.GAVE_UP
    d = store.get_delivery(KEY)
    assert (d.attempts, d.last_status) == (1, None)
    assert d.last_error.startswith("receiver.test is 127.0.0.1, not a public address")
    other = "hook-1.job-1.6"
    unresolved = delivery.Refused("receiver.test resolves to no address", final=False)
    out = attempt("hook-1", BODY, other, store, "k", 1.0, backoff_cap_s=1,
                  post=Receiver(unresolved))  # fmt: skip
    assert out.state == hooks.PENDING
