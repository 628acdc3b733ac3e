"""A recorded swarm lab whose manager does not answer is not reused, and the log says why;
a bug in asking it is not taken for "not answering". No lab is built: the manager's answer
is replaced."""

from __future__ import annotations

import logging

import docker
import pytest

from dlaas.local import processes
from dlaas.local.swarm import SwarmLab

RECORD = {"nodes": [{"name": "node-1", "pid": 1, "pidfile": "/nonexistent"}]}


def _lab(tmp_path, monkeypatch, answer) -> SwarmLab:
    monkeypatch.setattr(processes, "pid_matches", lambda _pid, _pidfile: True)
    lab = SwarmLab(tmp_path, nodes=1)
    monkeypatch.setattr(lab, "node_state", answer)
    return lab


def _raises(exc: Exception):
    def answer(_name: str) -> str:
        raise exc

    return answer


def test_a_ready_manager_means_healthy(tmp_path, monkeypatch) -> None:
    assert _lab(tmp_path, monkeypatch, lambda _name: "ready")._healthy(RECORD)


@pytest.mark.parametrize(
    "exc",
    [
        docker.errors.APIError("500 Server Error"),
        ConnectionRefusedError("connection refused"),
        KeyError("Description"),
    ],
)
def test_a_manager_that_does_not_answer_means_not_usable(
    tmp_path, monkeypatch, caplog, exc
) -> None:
    lab = _lab(tmp_path, monkeypatch, _raises(exc))
    with caplog.at_level(logging.INFO, logger="dlaas.local.swarm"):
        assert not lab._healthy(RECORD)
    assert type(exc).__name__ in caplog.text


def test_a_bug_in_asking_is_not_swallowed(tmp_path, monkeypatch) -> None:
    lab = _lab(tmp_path, monkeypatch, _raises(TypeError("a bug")))
    with pytest.raises(TypeError):
        lab._healthy(RECORD)
