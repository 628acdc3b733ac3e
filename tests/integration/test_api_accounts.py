"""Accounts over the REST API: users, tokens (hashed, revocable, expiring), teams, audit,
and bucket names resolved in the caller's team namespace. Same fakes as test_api.py."""

from __future__ import annotations

import time

from test_api import ADMIN, ALICE, CAROL, auth, env  # noqa: F401 - env is a fixture

from dlaas.domain.accounts import TokenRecord, token_hash


def add_user(env, name: str, team: str = "nlp", **kw):  # noqa: F811
    r = env.client.post("/v1/users", json={"name": name, "team": team, **kw}, headers=auth(ADMIN))
    assert r.status_code == 201, r.text
    return r.json()


def test_admin_adds_a_user_whose_token_works_and_is_stored_hashed(env):  # noqa: F811
    made = add_user(env, "dave", "nlp")
    assert made["token"].startswith("dlt_") and made["team"] == "nlp"
    me = env.client.get("/v1/me", headers=auth(made["token"])).json()
    assert me == {"user": "dave", "team": "nlp", "admin": False}
    stored = env.store.list_tokens("dave")
    assert [t.hash for t in stored] == [token_hash(made["token"])]
    assert made["token"] not in repr(stored)
    # Audit names the user, never the token.
    entries = env.client.get("/v1/audit", headers=auth(ADMIN)).json()["entries"]
    assert any(e["action"] == "add-user" and e["target"] == "dave" for e in entries)
    assert made["token"] not in str(entries)
    # A team made on the way, without a quota.
    teams = env.client.get("/v1/teams", headers=auth(ADMIN)).json()
    assert "nlp" in [t["name"] for t in teams]


def test_account_routes_are_for_admins_only(env):  # noqa: F811
    for method, path, body in (
        ("post", "/v1/users", {"name": "eve"}),
        ("get", "/v1/users", None),
        ("post", "/v1/revoke", {"who": "alice"}),
        ("post", "/v1/teams", {"name": "evil"}),
        ("put", "/v1/teams/default/quota", {"gpus": 99}),
        ("get", "/v1/audit", None),
    ):
        r = getattr(env.client, method)(
            path, headers=auth(ALICE), **({"json": body} if body else {})
        )
        assert r.status_code == 403, (path, r.text)
        assert r.json()["error"] == "forbidden"
    assert env.store.get_user("eve") is None and env.store.get_team("evil") is None


def test_revoked_token_fails_at_once(env):  # noqa: F811
    made = add_user(env, "dave")
    second = env.client.post("/v1/users/dave/tokens", json={}, headers=auth(ADMIN)).json()
    assert env.client.get("/v1/me", headers=auth(second["token"])).status_code == 200
    # One token by value: only that one stops working.
    r = env.client.post("/v1/revoke", json={"who": second["token"]}, headers=auth(ADMIN))
    assert r.json() == {"revoked": 1}
    bad = env.client.get("/v1/jobs", headers=auth(second["token"]))
    assert bad.status_code == 401 and "revoked" in bad.json()["message"]
    assert env.client.get("/v1/jobs", headers=auth(made["token"])).status_code == 200
    # By user name: all of them.
    assert env.client.post("/v1/revoke", json={"who": "dave"}, headers=auth(ADMIN)).json() == {
        "revoked": 1
    }
    assert env.client.get("/v1/jobs", headers=auth(made["token"])).status_code == 401
    listing = env.client.get("/v1/users", headers=auth(ADMIN)).json()
    assert {u["name"]: u["valid_tokens"] for u in listing}["dave"] == 0


def test_expired_token_is_refused(env):  # noqa: F811
    add_user(env, "dave")
    env.store.add_token(TokenRecord(token_hash("dlt_old"), "dave", "dlt_old", 1.0, expires_at=2.0))
    r = env.client.get("/v1/jobs", headers=auth("dlt_old"))
    assert r.status_code == 401 and "expired" in r.json()["message"]
    fresh = env.client.post(
        "/v1/users/dave/tokens", json={"expires_days": 1}, headers=auth(ADMIN)
    ).json()
    assert time.time() + 86_000 < fresh["expires_at"] < time.time() + 86_500
    assert env.client.get("/v1/jobs", headers=auth(fresh["token"])).status_code == 200


def test_bad_account_input_is_a_clear_4xx(env):  # noqa: F811
    for body, field in (
        ({"name": "Bad Name"}, "name"),
        ({"name": "ok", "team": "a--b"}, "team"),
        ({"name": "x" * 40}, "name"),
        ({"name": "admin"}, "name"),
        ({"name": "ok2", "expires_days": -1}, "expires_days"),
    ):
        r = env.client.post("/v1/users", json=body, headers=auth(ADMIN))
        assert r.status_code == 422, (body, r.text)
        assert r.json()["message"].split(":")[0].endswith(field) or field in r.json()["message"]
    add_user(env, "dave")
    again = env.client.post("/v1/users", json={"name": "dave"}, headers=auth(ADMIN))
    assert again.status_code == 409
    r = env.client.post("/v1/revoke", json={"who": "nobody-or-token"}, headers=auth(ADMIN))
    assert r.status_code == 422 and "no such user or token" in r.json()["message"]


def test_teams_quota_and_members_see_only_their_team(env):  # noqa: F811
    r = env.client.post(
        "/v1/teams", json={"name": "vision", "gpus": 8, "cpus": 16, "memory_mb": 65536},
        headers=auth(ADMIN),
    )  # fmt: skip
    assert r.status_code == 201, r.text
    r = env.client.put("/v1/teams/vision/quota", json={"gpus": 4}, headers=auth(ADMIN))
    assert r.json()["quota"] == {"gpus": 4, "cpus": 0.0, "memory_mb": 0}
    assert env.client.put("/v1/teams/nope/quota", json={}, headers=auth(ADMIN)).status_code == 422
    assert (
        env.client.post("/v1/teams", json={"name": "vision"}, headers=auth(ADMIN)).status_code
        == 409
    )
    # The scheduler enforces quotas: it heard of both changes.
    assert env.sched.quotas["vision"].gpus == 4
    mine = env.client.get("/v1/teams", headers=auth(CAROL)).json()
    assert [t["name"] for t in mine] == ["vision"]
    assert mine[0]["usage"] == {
        "used": {"gpus": 2, "cpus": 0.0, "memory_mb": 0},
        "borrowed": {"gpus": 0, "cpus": 0.0, "memory_mb": 0},
        "queued": 1,
    }
    entries = env.client.get("/v1/audit", headers=auth(ADMIN)).json()["entries"]
    assert [e["action"] for e in entries[:2]] == ["set-quota", "add-team"]


def test_bucket_names_resolve_in_the_team_namespace(env):  # noqa: F811
    text = env.manifest().replace("container: digits-data", "container: nlp--digits-data")
    r = env.submit(token=CAROL, manifest=text)
    assert r.status_code == 422
    problems = r.json()["problems"]
    assert any(
        p.startswith("data_stores[0].training_data.container:") and "team 'nlp'" in p
        for p in problems
    ), problems
    assert env.store.list(user="carol")[1] == 0  # nothing stored
    ok = env.submit(token=CAROL)
    assert ok.status_code == 201, ok.text
    job = env.store.get(ok.json()["job_id"])
    assert job.team == "vision"
    entries = env.client.get("/v1/audit", headers=auth(ADMIN)).json()["entries"]
    assert entries[0]["action"] == "submit" and entries[0]["target"] == job.job_id
    assert "s3cr3t" not in str(entries)


def test_a_priority_above_the_teams_ceiling_is_refused_at_submit(env):  # noqa: F811
    made = add_user(env, "dave", "nlp")  # the team is made on the way, with the default
    teams = {t["name"]: t for t in env.client.get("/v1/teams", headers=auth(ADMIN)).json()}
    assert teams["nlp"]["max_priority"] == 100

    def submit(priority, token=made["token"]):
        return env.submit(token=token, manifest=env.manifest() + f"priority: {priority}\n")

    assert submit("high").status_code == 201
    r = submit("critical")
    assert r.status_code == 422, r.text
    ceiling = "priority: 1000 is above team nlp's ceiling 100; an administrator sets it "
    assert r.json()["problems"] == [ceiling + "(dlaas teams set --max-priority)"]
    assert submit(2147483647).status_code == 422
    # Administrators set the ceiling (audited); the user may then go up to it.
    r = env.client.put(
        "/v1/teams/nlp/max-priority", json={"max_priority": 1000}, headers=auth(ADMIN)
    )
    assert (r.status_code, r.json()["max_priority"]) == (200, 1000), r.text
    assert submit("critical").status_code == 201
    assert submit(1001).status_code == 422
    entries = env.client.get("/v1/audit", headers=auth(ADMIN)).json()["entries"]
    assert any(e["action"] == "set-max-priority" and e["detail"] == "1000" for e in entries)
    # ... and only they: the route is theirs, and their own submits are exempt.
    r = env.client.put("/v1/teams/nlp/max-priority", json={"max_priority": 9}, headers=auth(ALICE))
    assert r.status_code == 403
    assert submit(2147483647, token=ADMIN).status_code == 201


def test_a_team_is_made_with_its_ceiling_and_a_bad_one_is_named(env):  # noqa: F811
    r = env.client.post("/v1/teams", json={"name": "cv", "max_priority": -5}, headers=auth(ADMIN))
    assert (r.status_code, r.json()["max_priority"]) == (201, -5), r.text
    r = env.client.put(
        "/v1/teams/cv/max-priority", json={"max_priority": 2**31}, headers=auth(ADMIN)
    )
    assert r.status_code == 422 and r.json()["problems"][0].startswith("max_priority"), r.text
    r = env.client.put("/v1/teams/nope/max-priority", json={"max_priority": 1}, headers=auth(ADMIN))
    assert r.status_code == 422 and "no team 'nope'" in r.json()["message"], r.text


def test_a_max_duration_above_the_teams_maximum_is_refused_at_submit(env):  # noqa: F811
    made = add_user(env, "dave", "nlp")  # the team is made on the way, without run times
    teams = {t["name"]: t for t in env.client.get("/v1/teams", headers=auth(ADMIN)).json()}
    assert (teams["nlp"]["default_duration_s"], teams["nlp"]["max_duration_s"]) == (0, 0)

    def submit(max_duration, token=made["token"]):
        return env.submit(token=token, manifest=env.manifest() + f"max_duration: {max_duration}\n")

    assert submit("400h").status_code == 201  # no team maximum yet
    r = env.client.put(
        "/v1/teams/nlp/run-times",
        json={"default_duration_s": 7200, "max_duration_s": 28800},
        headers=auth(ADMIN),
    )
    assert r.status_code == 200, r.text
    assert (r.json()["default_duration_s"], r.json()["max_duration_s"]) == (7200, 28800)
    assert submit("8h").status_code == 201
    r = submit("8h1s")
    assert r.status_code == 422, r.text
    refusal = (
        "max_duration: 8h 1s is above team nlp's maximum run time 8h; ask for less, or an "
        "administrator raises it (dlaas teams set --max-duration)"
    )
    assert r.json()["problems"] == [refusal]
    # Naming none is fine: the team's default applies (in the job monitor).
    assert env.submit(token=made["token"]).status_code == 201
    # Administrators are exempt, and only they set the run times (audited).
    assert submit("400h", token=ADMIN).status_code == 201
    r = env.client.put("/v1/teams/nlp/run-times", json={"max_duration_s": 1}, headers=auth(ALICE))
    assert r.status_code == 403
    entries = env.client.get("/v1/audit", headers=auth(ADMIN)).json()["entries"]
    assert any(
        e["action"] == "set-run-times"
        and e["detail"] == "default_duration_s=7200 max_duration_s=28800"
        for e in entries
    )


def test_bad_team_run_times_are_named(env):  # noqa: F811
    r = env.client.post(
        "/v1/teams", json={"name": "cv", "max_duration_s": 3600}, headers=auth(ADMIN)
    )
    assert (r.status_code, r.json()["max_duration_s"]) == (201, 3600), r.text
    for body, field in (
        ({"default_duration_s": 7200}, "default_duration_s: 2h is above the team's maximum"),
        ({"max_duration_s": -1}, "max_duration_s"),
        ({}, "default_duration_s, max_duration_s: name at least one"),
    ):
        r = env.client.put("/v1/teams/cv/run-times", json=body, headers=auth(ADMIN))
        assert r.status_code == 422 and field in str(r.json()), r.text
    r = env.client.put("/v1/teams/nope/run-times", json={"max_duration_s": 1}, headers=auth(ADMIN))
    assert r.status_code == 422 and "no team 'nope'" in r.json()["message"], r.text
