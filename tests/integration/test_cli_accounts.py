"""`dlaas users`, `dlaas teams`, `dlaas audit` and `dlaas data` against the API (over the
fakes of test_api.py, with the real store and the real S3)."""

from __future__ import annotations

import json

from test_cli import MANIFEST, server  # noqa: F401 - a fixture
from typer.testing import CliRunner

from dlaas.clients.cli import app
from dlaas.domain.namespace import team_bucket


def teams_table(server) -> str:  # noqa: F811
    """`dlaas teams list` on a terminal wide enough that no header wraps."""
    out = CliRunner().invoke(
        app, ["--home", str(server.home), "teams", "list"], env={"COLUMNS": "200"}
    )
    assert out.exit_code == 0, out.output
    return out.stdout


def test_users_add_list_revoke(server):  # noqa: F811
    made = server.cli("users", "add", "dave", "--team", "nlp")
    assert made.exit_code == 0, made.output
    token = made.stdout.splitlines()[1].strip()
    assert token.startswith("dlt_")
    me = server.cli("--token", token, "teams", "list", "--json")
    assert [t["name"] for t in json.loads(me.stdout)] == ["nlp"]
    listing = server.cli("users", "list", "--json")
    assert {u["name"]: u["valid_tokens"] for u in json.loads(listing.stdout)}["dave"] == 1
    revoked = server.cli("users", "revoke", "dave")
    assert revoked.exit_code == 0 and "revoked 1 token(s)" in revoked.stdout
    refused = server.cli("--token", token, "list")
    assert refused.exit_code != 0 and "revoked" in refused.output
    # A user's token cannot manage users: a clear refusal, no traceback.
    denied = server.cli("--token", "tok-alice", "users", "add", "eve")
    assert denied.exit_code != 0 and "administrators only" in denied.output
    assert "Traceback" not in denied.output


def test_teams_quota_and_audit(server):  # noqa: F811
    assert server.cli("teams", "add", "vision", "--gpus", "8", "--cpus", "16").exit_code == 0
    r = server.cli("teams", "set-quota", "vision", "--gpus", "4")
    assert r.exit_code == 0 and "4 GPUs" in r.stdout
    table = server.cli("teams", "list")
    assert table.exit_code == 0 and "vision" in table.stdout
    audit = server.cli("audit", "--json")
    actions = [e["action"] for e in json.loads(audit.stdout)["entries"]]
    assert actions[:2] == ["set-quota", "add-team"]
    bad = server.cli("teams", "add", "Bad_Name")
    assert bad.exit_code != 0 and "name:" in bad.output


def test_data_upload_and_ls_stay_in_the_team_namespace(server, tmp_path):  # noqa: F811
    made = server.cli("users", "add", "carl", "--team", "vision")
    token = made.stdout.splitlines()[1].strip()
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.npz").write_bytes(b"AAA")
    up = server.cli("--token", token, "data", "upload", "mnist", str(tmp_path / "d"))
    assert up.exit_code == 0, up.output
    assert "uploaded mnist/a.npz (3 bytes)" in up.stdout
    real = team_bucket("vision", "mnist")
    assert server.s3.get_object(Bucket=real, Key="a.npz")["Body"].read() == b"AAA"
    ls = server.cli("--token", token, "data", "ls", "mnist", "--json")
    assert [o["key"] for o in json.loads(ls.stdout)["objects"]] == ["a.npz"]
    assert "mnist" in server.cli("--token", token, "data", "ls").stdout
    other = server.cli("--token", token, "data", "ls", "nlp--mnist")
    assert other.exit_code != 0 and "team 'nlp'" in other.output
    missing = server.cli("--token", token, "data", "upload", "mnist", str(tmp_path / "nope"))
    assert missing.exit_code != 0 and "no such file" in missing.output


def test_teams_priority_ceiling(server):  # noqa: F811
    made = server.cli("teams", "add", "speech", "--max-priority", "1000")
    assert made.exit_code == 0 and "priority at most 1000" in made.stdout, made.output
    r = server.cli("teams", "set", "speech", "--max-priority", "50")
    assert r.exit_code == 0 and "speech: priority at most 50" in r.stdout, r.output
    listed = json.loads(server.cli("teams", "list", "--json").stdout)
    assert {t["name"]: t["max_priority"] for t in listed}["speech"] == 50
    table = teams_table(server)
    assert "max priority" in table and "50" in table
    nothing = server.cli("teams", "set", "speech")
    assert nothing.exit_code != 0 and "--max-priority" in nothing.output


def test_the_readme_order_user_then_team_is_named(server):  # noqa: F811
    # `users add --team` makes the team; a later `teams add` of it says what to do instead.
    assert server.cli("users", "add", "erin", "--team", "nlp").exit_code == 0
    again = server.cli("teams", "add", "nlp", "--gpus", "2")
    assert again.exit_code != 0 and "dlaas teams set-quota" in again.output


def test_an_upload_past_the_teams_storage_quota_is_refused(server, tmp_path):  # noqa: F811
    made = server.cli("teams", "add", "audio", "--storage-quota", "10KiB")
    assert made.exit_code == 0 and "storage quota 10 KiB" in made.stdout, made.output
    token = server.cli("users", "add", "ann", "--team", "audio").stdout.splitlines()[1].strip()
    table = teams_table(server)
    assert "storage quota" in table and "10 KiB" in table
    listed = json.loads(server.cli("teams", "list", "--json").stdout)
    assert {t["name"]: t["storage_quota_bytes"] for t in listed}["audio"] == 10240
    (tmp_path / "a.bin").write_bytes(b"a" * 6000)
    (tmp_path / "b.bin").write_bytes(b"b" * 6000)
    first = server.cli("--token", token, "data", "upload", "speech", str(tmp_path / "a.bin"))
    assert first.exit_code == 0, first.output
    # 6,000 bytes held, 6,000 more: past 10 KiB, refused naming the quota and the use.
    second = server.cli("--token", token, "data", "upload", "voice", str(tmp_path / "b.bin"))
    assert second.exit_code != 0 and "Traceback" not in second.output
    assert "storage quota: team audio's buckets hold 5.859 KiB of its 10 KiB quota" in (
        " ".join(second.output.split())
    ), second.output
    names = [b["Name"] for b in server.s3.list_buckets().get("Buckets", [])]
    assert team_bucket("audio", "voice") not in names  # refused before anything was made
    # The administrator lifts it: the upload goes through.
    lifted = server.cli("teams", "set", "audio", "--storage-quota", "none")
    assert lifted.exit_code == 0 and "audio: storage quota -" in lifted.stdout, lifted.output
    again = server.cli("--token", token, "data", "upload", "voice", str(tmp_path / "b.bin"))
    assert again.exit_code == 0, again.output
    actions = [e["action"] for e in json.loads(server.cli("audit", "--json").stdout)["entries"]]
    assert "set-storage-quota" in actions
    bad = server.cli("teams", "set", "audio", "--storage-quota", "lots")
    assert bad.exit_code != 0 and "is not a size" in bad.output


def test_teams_run_times_and_a_submit_above_the_maximum(server, tmp_path):  # noqa: F811
    made = server.cli("teams", "add", "speech", "--max-duration", "8h")
    assert made.exit_code == 0 and "run time (default/max) -/8h" in made.stdout, made.output
    r = server.cli("teams", "set", "speech", "--default-duration", "1h30m")
    assert r.exit_code == 0 and "speech: run time (default/max) 1h 30m/8h" in r.stdout, r.output
    listed = {t["name"]: t for t in json.loads(server.cli("teams", "list", "--json").stdout)}
    assert (listed["speech"]["default_duration_s"], listed["speech"]["max_duration_s"]) == (
        5400, 28800,
    )  # fmt: skip
    table = teams_table(server)
    assert "run time default/max" in table and "1h 30m/8h" in table
    token = server.cli("users", "add", "sam", "--team", "speech").stdout.splitlines()[1].strip()
    manifest = tmp_path / "manifest.yml"
    manifest.write_text(MANIFEST.format(learners=1, results=server.results) + "max_duration: 9h\n")
    refused = server.cli("--token", token, "submit", str(manifest))
    assert refused.exit_code != 0 and "Traceback" not in refused.output
    assert "max_duration: 9h is above team speech's maximum run time 8h" in (
        " ".join(refused.output.split())
    ), refused.output
    # Lifting the maximum (none) and a default above it are said plainly.
    over = server.cli("teams", "set", "speech", "--default-duration", "9h")
    assert over.exit_code != 0 and "default_duration_s: 9h is above" in over.output, over.output
    lifted = server.cli("teams", "set", "speech", "--max-duration", "none")
    assert lifted.exit_code == 0 and "1h 30m/-" in lifted.stdout, lifted.output
    bad = server.cli("teams", "set", "speech", "--max-duration", "soon")
    assert bad.exit_code != 0 and "is not a duration" in bad.output, bad.output
    actions = [e["action"] for e in json.loads(server.cli("audit", "--json").stdout)["entries"]]
    assert actions.count("set-run-times") == 2
