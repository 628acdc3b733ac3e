"""The `dlaas` CLI when the platform is not up: an API address where nothing listens (a
real closed port on this machine) is exit 3 with a hint, no traceback. No client file at
all is tests/unit/test_cli_offline.py.
"""

from __future__ import annotations

import json

from typer.testing import CliRunner

from dlaas.clients.cli import app
from dlaas.local.processes import free_port

runner = CliRunner()


def test_an_api_nobody_answers_is_exit_3_with_a_hint(tmp_path):
    home = tmp_path / "h"
    home.mkdir()
    url = f"http://127.0.0.1:{free_port()}"
    (home / "client.json").write_text(json.dumps({"url": url, "token": "t"}))
    r = runner.invoke(app, ["--home", str(home), "list"])
    assert r.exit_code == 3 and "cannot reach" in r.output and "Traceback" not in r.output
