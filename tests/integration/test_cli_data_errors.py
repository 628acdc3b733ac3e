"""`dlaas data upload` to an FfDL-style bucket name (underscores: not an S3 name) against
the real API and S3 (test_cli's `server`): one clear line naming the bucket and the fix,
no traceback, nothing uploaded."""

from __future__ import annotations

from test_cli import ALICE, server  # noqa: F401 - server is a fixture


def test_a_bad_bucket_name_gets_one_clear_line_and_ffdls_underscores_map(server, tmp_path):  # noqa: F811
    made = server.cli("users", "add", "dana", "--team", "vision")
    vision = made.stdout.splitlines()[1].strip()
    (tmp_path / "a.npz").write_bytes(b"AAA")
    for token in (vision, ALICE):  # in a team's namespace, and in none
        r = server.cli("--token", token, "data", "upload", "MNIST..data",
                       str(tmp_path / "a.npz"))  # fmt: skip
        assert r.exit_code != 0
        lines = [line for line in r.output.splitlines() if line.strip()]
        assert len(lines) == 1, r.output
        assert "MNIST..data" in lines[0] and "not a valid bucket name" in lines[0]
        assert "Traceback" not in r.output and "botocore" not in r.output
    # FfDL's names hold '_': in the platform's store '_' is '-' (dlaas.domain.namespace).
    r = server.cli("--token", vision, "data", "upload", "mnist_training_data",
                   str(tmp_path / "a.npz"))  # fmt: skip
    assert r.exit_code == 0, r.output
    names = [b["Name"] for b in server.s3.list_buckets()["Buckets"]]
    assert "vision--mnist-training-data" in names
    assert not [n for n in names if "_" in n]
