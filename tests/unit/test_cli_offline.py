"""The `dlaas` CLI where no API server is involved: `validate`, the queue's wording, the
code archive, and the hint when the platform was never set up here (no client file).

The commands that talk to the API are in tests/integration/test_cli.py; the hint when
nothing answers at the API's address (a real closed port) in
tests/integration/test_cli_not_up.py.
"""

from __future__ import annotations

import io
import json
import tarfile
from datetime import datetime

import pytest
import yaml
from cli_runner import CliRunner
from sample_manifests import MANIFEST

from dlaas.clients.cli import _when_short, app, eta_text, queue_reason

runner = CliRunner()


REASON = (
    "needs 8 GPUs on one node; largest free block is 4; expected to start in 20 min-40 min; "
    "would start now as 2x4 GPUs"
)


# --------------------------------------------------------------------------- validate


def test_validate_prints_the_normalized_manifest(tmp_path):
    path = tmp_path / "m.yml"
    path.write_text(MANIFEST.format(learners=2, results="r"))
    r = runner.invoke(app, ["validate", str(path)])
    assert r.exit_code == 0, r.output
    assert "valid" in r.output and "memory_mb: 512" in r.output
    assert "s3cr3t-never-shown" not in r.output


def test_validate_prints_yaml_that_reads_back_however_long_its_lines(tmp_path):
    # A terminal-wide wrap would break a long line into YAML that no longer parses.
    path = tmp_path / "m.yml"
    words = " ".join(f"word{i}" for i in range(40))
    path.write_text(MANIFEST.format(learners=2, results="r") + f"description: {words}\n")
    r = runner.invoke(app, ["validate", str(path)], terminal_width=60)
    assert r.exit_code == 0, r.output
    printed = yaml.safe_load(r.stdout.split("\n", 1)[1])
    assert printed["description"] == words and printed["learners"] == 2


def test_validate_prints_the_path_on_one_line_in_a_narrow_terminal(tmp_path, monkeypatch):
    # The console takes its width from COLUMNS: a path wider than it was wrapped onto the
    # next line, which the YAML below then began with.
    monkeypatch.setenv("COLUMNS", "40")
    path = tmp_path / ("x" * 60) / "[bold]m.yml"
    path.parent.mkdir()
    path.write_text(MANIFEST.format(learners=2, results="r"))
    r = runner.invoke(app, ["validate", str(path)])
    assert r.exit_code == 0, r.output
    first, rest = r.stdout.split("\n", 1)
    assert first == f"valid: {path}"
    assert yaml.safe_load(rest)["learners"] == 2


def test_table_times_are_short_and_say_the_day_when_it_is_not_today():
    now = datetime(2026, 11, 24, 15, 5, 26).timestamp()  # local time, as the CLI prints
    assert _when_short(now - 60, now) == "15:04:26"
    assert _when_short(datetime(2026, 11, 23, 23, 59).timestamp(), now) == "Nov 23 23:59"
    assert _when_short(datetime(2025, 12, 31, 12, 0).timestamp(), now) == "2025-12-31"
    assert _when_short(None, now) == "-"


def test_validate_json(tmp_path):
    path = tmp_path / "m.yml"
    path.write_text(MANIFEST.format(learners=2, results="r"))
    r = runner.invoke(app, ["validate", "--json", str(path)])
    data = json.loads(r.stdout)
    assert data["valid"] is True and data["manifest"]["learners"] == 2


def test_validate_lists_every_problem_and_exits_1(tmp_path):
    path = tmp_path / "m.yml"
    text = MANIFEST.format(learners=0, results="r").replace("cpus: 1", "cpus: -1")
    path.write_text(text)
    r = runner.invoke(app, ["validate", str(path)])
    assert r.exit_code == 1
    assert "learners:" in r.output and "cpus:" in r.output
    assert "Traceback" not in r.output


def test_validate_refuses_a_framework_without_an_image(tmp_path):
    path = tmp_path / "m.yml"
    path.write_text(MANIFEST.format(learners=1, results="r").replace("name: python", "name: caffe"))
    r = runner.invoke(app, ["validate", str(path)])
    assert r.exit_code == 1
    assert "framework.name:" in r.output and "caffe" in r.output
    assert "framework.image" in r.output  # the fix


def test_validate_missing_file_is_a_clear_error(tmp_path):
    r = runner.invoke(app, ["validate", str(tmp_path / "nope.yml")])
    assert r.exit_code == 1
    assert f"cannot read {tmp_path / 'nope.yml'}: no such file or directory" in r.output
    assert "Errno" not in r.output
    binary = tmp_path / "m.yml"
    binary.write_bytes(b"name: \xff\xfe")
    r = runner.invoke(app, ["validate", str(binary)])
    assert r.exit_code == 1 and "not UTF-8 text (byte 6)" in r.output


# --------------------------------------------------------------------------- queue wording


@pytest.mark.parametrize(
    ("low", "high", "text"),
    [
        (1200, 2400, "20–40 min"),
        (0, 0, "now"),
        (0, 20, "under 20 s"),
        (45, 600, "1–10 min"),
        (1200, 1230, "about 20 min"),
        (5400, 9000, "1.5–2.5 h"),
        (3 * 86400, 5 * 86400, "3–5 d"),
        (60, None, "unknown (does not fit the cluster as it is now)"),
    ],
)
def test_eta_ranges_in_human_units(low, high, text):
    assert eta_text(low, high) == text


def test_queue_reason_drops_the_schedulers_own_eta_words():
    assert queue_reason(REASON) == (
        "needs 8 GPUs on one node; largest free block is 4; would start now as 2x4 GPUs"
    )
    assert queue_reason("starts in this round") == "starts in this round"


# --------------------------------------------------------------------------- no platform, code archive


def test_platform_not_up_is_exit_3_with_a_hint(tmp_path):
    """No client file: `dlaas up` was never run here. (An address where nothing answers is
    tests/integration/test_cli_not_up.py: it needs a real closed port.)"""
    home = tmp_path / "h"
    home.mkdir()
    r = runner.invoke(app, ["--home", str(home), "list"])
    assert r.exit_code == 3 and "dlaas up" in r.output


def test_pack_code_refuses_links_outside(tmp_path):
    from dlaas.clients.client import ClientError, pack_code

    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "ok.py").write_text("x")
    data, name = pack_code(tmp_path / "code")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert tar.getnames() == ["ok.py"]
    assert name == "code.tar.gz"
    (tmp_path / "code" / "evil").symlink_to("/etc/passwd")
    with pytest.raises(ClientError, match="links outside"):
        pack_code(tmp_path / "code")
