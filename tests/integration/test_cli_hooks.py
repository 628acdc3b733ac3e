"""`dlaas hooks` against the API (over the fakes of test_api.py, with the real store)."""

from __future__ import annotations

import json

import pytest
from test_api import SECRETS_KEY
from test_cli import server  # noqa: F401 - a fixture

from dlaas.domain import hooks


@pytest.fixture
def keyed_server(server):  # noqa: F811
    """The CLI's server: its settings carry test_api's platform key, which signs hooks."""
    return server, SECRETS_KEY


def test_hooks_add_list_deliveries_rm(keyed_server):
    srv, key = keyed_server
    made = srv.cli("hooks", "add", "http://93.184.216.34:9999/h", "--events", "failed,queued")
    assert made.exit_code == 0, made.output
    lines = made.stdout.splitlines()
    hook_id = lines[0].split()[1]
    assert "queued, failed" in lines[0]
    assert lines[2].strip() == hooks.hook_secret(key, hook_id)
    listed = json.loads(srv.cli("hooks", "list", "--json").stdout)
    assert [h["id"] for h in listed] == [hook_id]
    table = srv.cli("hooks", "list")
    assert table.exit_code == 0 and hook_id in table.stdout
    empty = srv.cli("hooks", "deliveries", hook_id)
    assert empty.exit_code == 0 and "delivered nothing yet" in empty.stdout
    srv.store.record_delivery(
        hooks.Delivery(f"{hook_id}.job-1.2", hook_id, "job-1", "failed", 2, hooks.PENDING,
                       None, "ConnectError: refused", 50.0)
    )  # fmt: skip
    log = srv.cli("hooks", "deliveries", hook_id)
    assert log.exit_code == 0 and "ConnectError" in log.stdout and "pending" in log.stdout
    # Another user's hook is not found; bad input is refused naming the field.
    other = srv.cli("--token", "tok-bob", "hooks", "rm", hook_id)
    assert other.exit_code != 0 and "not found" in other.output
    bad = srv.cli("hooks", "add", "ftp://x/y", "--events", "failed")
    assert bad.exit_code != 0 and "url:" in bad.output and "Traceback" not in bad.output
    bad = srv.cli("hooks", "add", "http://x/y", "--events", "finished")
    assert bad.exit_code != 0 and "events: unknown finished" in bad.output
    # An address the worker would never post to is refused now, not at the first delivery.
    inside = srv.cli("hooks", "add", "http://169.254.169.254/latest", "--events", "failed")
    assert inside.exit_code != 0 and "is not an address the platform connects to" in inside.output
    assert srv.cli("hooks", "rm", hook_id).exit_code == 0
    assert json.loads(srv.cli("hooks", "list", "--json").stdout) == []
