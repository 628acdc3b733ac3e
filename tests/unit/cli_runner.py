"""typer's CliRunner with the app's click command built once per app, for the CLI tests.

typer's runner builds the click command afresh on every `invoke`: 50-100 ms for the dlaas
CLI and its every subcommand, a second or more across tests/unit. A click command keeps
nothing of a run (each `main()` makes its own Context), so one built once runs the same.
"""

from __future__ import annotations

import functools
from unittest import mock

import typer.main
import typer.testing

_command = functools.cache(typer.main.get_command)


class CliRunner(typer.testing.CliRunner):
    def invoke(self, app, args=None, **kwargs):  # type: ignore[override]
        # typer.testing looks the builder up by this name; patched for this call only.
        with mock.patch.object(typer.testing, "_get_command", _command):
            return super().invoke(app, args, **kwargs)
