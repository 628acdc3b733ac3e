"""Settings given to `dlaas up` on a running platform are refused with a message saying to
run `dlaas down` first, not silently ignored.

The bug: `DLAAS_HOOKS_ALLOW_NETWORKS=... dlaas up` on a running platform found every
component running and changed nothing; the setting never reached the services.
Nothing is started here: the step after the check (the Docker engine) stands in for
"up went on", and a stand-in process holds the supervisor's record ("the platform runs").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dlaas.local import platform
from dlaas.local.state import StateDir
from dlaas.local.up_steps import UpSteps


class WentOn(Exception):
    """`up` passed the settings check and went on to start the platform."""


@pytest.fixture
def home(tmp_path, monkeypatch):
    def docker(self):
        raise WentOn

    monkeypatch.setattr(UpSteps, "docker", docker)
    for name in [n for n in os.environ if n.startswith("DLAAS_")]:
        monkeypatch.delenv(name)
    return tmp_path / "home"


@pytest.fixture
def running(home):
    """The platform in `home` runs: its supervisor's record names a live process."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "supervisor"])
    state = StateDir(home)
    state.prepare()
    state.write_pid("supervisor", {"pid": proc.pid, "match": "supervisor", "address": ""})
    yield state
    proc.kill()
    proc.wait()


def _up(home) -> None:
    platform.up(home, progress=lambda line: None, build_images=False)


def _record(state: StateDir) -> None:
    """What the `up` that started the platform recorded: the settings it was given."""
    path = state.root / "platform.json"
    config = json.loads(path.read_text()) if path.exists() else {}
    config["settings"] = platform.given_settings(dict(os.environ))
    path.write_text(json.dumps(config))


def test_a_new_setting_on_a_running_platform_is_refused_naming_it(home, running, monkeypatch):
    _record(running)
    monkeypatch.setenv("DLAAS_EGRESS_ALLOW_NETWORKS", "10.0.0.0/8")
    with pytest.raises(platform.PlatformError) as refused:
        _up(home)
    message = str(refused.value)
    assert "DLAAS_EGRESS_ALLOW_NETWORKS (new)" in message
    assert "dlaas down" in message
    assert "10.0.0.0/8" not in message  # names the setting, never its value (may be a secret)


def test_a_changed_or_dropped_setting_is_refused_too(home, running, monkeypatch):
    monkeypatch.setenv("DLAAS_HOOKS_ALLOW_NETWORKS", "10.0.0.0/8")
    monkeypatch.setenv("DLAAS_RESULTS_RETENTION_DAYS", "7")
    _record(running)
    monkeypatch.setenv("DLAAS_HOOKS_ALLOW_NETWORKS", "192.168.0.0/16")
    monkeypatch.delenv("DLAAS_RESULTS_RETENTION_DAYS")
    with pytest.raises(platform.PlatformError) as refused:
        _up(home)
    assert "DLAAS_HOOKS_ALLOW_NETWORKS (changed)" in str(refused.value)
    assert "DLAAS_RESULTS_RETENTION_DAYS (not given now)" in str(refused.value)


def test_the_same_settings_or_a_stopped_platform_go_on(home, running, monkeypatch):
    monkeypatch.setenv("DLAAS_EGRESS_ALLOW_NETWORKS", "10.0.0.0/8")
    monkeypatch.setenv("DLAAS_HOME", str(home))  # which platform: not a setting
    _record(running)
    monkeypatch.setenv("DLAAS_HOME", "/elsewhere")
    with pytest.raises(WentOn):
        _up(home)  # what the supervisor runs: the settings the platform started with
    running.forget("supervisor")  # `down`
    monkeypatch.setenv("DLAAS_EGRESS_ALLOW_NETWORKS", "192.168.0.0/16")
    with pytest.raises(WentOn):
        _up(home)


def test_settings_are_recorded_as_digests_never_values():
    got = platform.given_settings({"DLAAS_S3_SECRET_KEY": "hunter2", "PATH": "/bin"})
    assert list(got) == ["DLAAS_S3_SECRET_KEY"] and "hunter2" not in json.dumps(got)
