"""`dlaas data upload` to an FfDL-style bucket name (underscores: not an S3 name) against
the real API and S3 (test_cli's `server`): one clear line naming the bucket and the fix,
no traceback, nothing uploaded."""

from __future__ import annotations

from test_cli import ALICE, server  # noqa: F401 - server is a fixture


def test_an_underscore_bucket_gets_one_clear_line(server, tmp_path):  # noqa: F811
    made = server.cli("users", "add", "dana", "--team", "vision")
    vision = made.stdout.splitlines()[1].strip()
    (tmp_path / "a.npz").write_bytes(b"AAA")
    for token in (vision, ALICE):  # in a team's namespace, and in none
        r = server.cli("--token", token, "data", "upload", "mnist_training_data",
                       str(tmp_path / "a.npz"))  # fmt: skip
        assert r.exit_code != 0
        lines = [line for line in r.output.splitlines() if line.strip()]
        assert len(lines) == 1, r.output
        assert "mnist_training_data" in lines[0] and "not a valid bucket name" in lines[0]
        assert "Traceback" not in r.output and "botocore" not in r.output
    names = [b["Name"] for b in server.s3.list_buckets()["Buckets"]]
    assert not [n for n in names if "mnist_training_data" in n]
