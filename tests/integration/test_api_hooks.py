"""Webhooks over the REST API: register (secret shown once), list, remove, delivery log;
owner-only, every bad input named. Same fakes as test_api.py; delivery itself is tested
in test_hooks_delivery.py."""

from __future__ import annotations

import pytest
from pydantic import SecretStr
from test_api import ADMIN, ALICE, BOB, auth, env  # noqa: F401 - env is a fixture

from dlaas.domain import hooks
from dlaas.domain.secretbox import new_key

URL = "http://93.184.216.34:9999/hook"  # a public address: no lookup, never called


@pytest.fixture
def keyed(env):  # noqa: F811
    """The API of test_api.py, on a platform with a key to sign deliveries with."""
    deps = env.client.app.state.deps
    key = new_key()
    deps.settings = deps.settings.model_copy(update={"secrets_key": SecretStr(key)})
    return env, key


def add(env, token=ALICE, **body):  # noqa: F811
    return env.client.post(
        "/v1/hooks", json={"url": URL, "events": ["completed", "failed"], **body},
        headers=auth(token),
    )  # fmt: skip


def test_a_hook_is_registered_with_its_secret_shown_once(keyed):
    api, key = keyed
    r = add(api, events=["failed", "queued", "failed"])
    assert r.status_code == 201, r.text
    made = r.json()
    assert made["events"] == ["queued", "failed"]
    assert made["user"] == "alice" and made["url"] == URL
    assert made["secret"] == hooks.hook_secret(key, made["id"])
    listed = api.client.get("/v1/hooks", headers=auth(ALICE)).json()
    assert [h["id"] for h in listed] == [made["id"]]
    assert "secret" not in listed[0] and made["secret"] not in str(listed)
    assert api.client.get("/v1/hooks", headers=auth(BOB)).json() == []
    assert [h["id"] for h in api.client.get("/v1/hooks", headers=auth(ADMIN)).json()] == [
        made["id"]
    ]
    assert api.store.get_hook(made["id"]).events == ("queued", "failed")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "ftp://example.com/x"}, "url"),
        ({"url": "http://u:p@example.com/"}, "url"),
        ({"url": "http://example.com/" + "a" * hooks.MAX_URL}, "url"),
        ({"events": ["finished"]}, "events"),
        ({"events": []}, "events"),
        ({"events": "completed"}, "events"),
    ],
)
def test_bad_hooks_are_refused_naming_the_field(keyed, body, field):
    api, _ = keyed
    r = add(api, **body)
    assert r.status_code == 422, r.text
    assert any(p.startswith(field) or f"{field}" in p for p in r.json()["problems"]), r.json()
    assert api.store.list_hooks() == []


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:6379/", "http://169.254.169.254/latest", "http://[::1]:2379/",
     "http://localhost:8333/", "https://10.0.0.1/hook"],
)  # fmt: skip
def test_a_hook_the_worker_would_refuse_is_refused_at_add(keyed, url):
    # The same rule (and words) as the worker's at delivery: nothing waits to fail later.
    api, _ = keyed
    r = add(api, url=url)
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "address_refused"
    assert "is not an address the platform connects to" in r.json()["message"]
    assert api.store.list_hooks() == []


def test_a_hook_inside_an_allowed_network_is_accepted(keyed):
    api, _ = keyed
    deps = api.client.app.state.deps
    deps.settings = deps.settings.model_copy(update={"egress_allow_networks": "127.0.0.0/8"})
    assert add(api, url="http://127.0.0.1:9999/hook").status_code == 201


def test_without_a_platform_key_no_hook_is_made(env):  # noqa: F811
    deps = env.client.app.state.deps
    deps.settings = deps.settings.model_copy(update={"secrets_key": SecretStr("")})
    r = add(env)
    assert r.status_code == 422
    assert "DLAAS_SECRETS_KEY" in r.json()["message"]
    assert env.store.list_hooks() == []


def test_only_the_owner_sees_the_log_or_removes_a_hook(keyed):
    api, _ = keyed
    hook_id = add(api).json()["id"]
    api.store.record_delivery(
        hooks.Delivery(f"{hook_id}.job-1.4", hook_id, "job-1", "failed", 3, hooks.DELIVERED,
                       200, "", 50.0)
    )  # fmt: skip
    for path in (f"/v1/hooks/{hook_id}/deliveries", "/v1/hooks/hook-nope/deliveries"):
        r = api.client.get(path, headers=auth(BOB))
        assert r.status_code == 404 and r.json()["error"] == "hook_not_found"
    assert api.client.delete(f"/v1/hooks/{hook_id}", headers=auth(BOB)).status_code == 404
    log = api.client.get(f"/v1/hooks/{hook_id}/deliveries", headers=auth(ALICE)).json()
    assert log["total"] == 1
    assert log["deliveries"][0] == {
        "idempotency_key": f"{hook_id}.job-1.4", "job_id": "job-1", "event": "failed",
        "attempts": 3, "state": "delivered", "last_status": 200, "last_error": "", "at": 50.0,
    }  # fmt: skip
    assert api.client.delete(f"/v1/hooks/{hook_id}", headers=auth(ALICE)).status_code == 204
    assert api.store.get_hook(hook_id) is None
    assert api.client.delete(f"/v1/hooks/{hook_id}", headers=auth(ALICE)).status_code == 404


def test_a_user_has_a_bounded_number_of_hooks(keyed):
    api, _ = keyed
    for _ in range(hooks.MAX_HOOKS_PER_USER):
        assert add(api).status_code == 201
    r = add(api)
    assert r.status_code == 422 and "remove one first" in r.json()["message"]
    assert add(api, token=BOB).status_code == 201
