"""The Swarm adapter's teardown and change polling (dlaas/adapters/engines/swarm_engine.py) against a FAKE
manager API (services and tasks as the Docker API returns them, counted calls): a helper
that finishes by itself is not signalled (a signal costs the engine's 2 s delay); one that
does not is; every node's event stream shares one listing of the manager's tasks."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dlaas.adapters.engines import swarm_engine as swarm
from dlaas.adapters.engines.swarm_engine import SwarmEngine
from dlaas.domain import jobspec

JOB = "job-1"


class FakeApi:
    """FAKE manager API: one job's learner and helper services, each with one task whose
    state the test sets; `scaled` records the services scaled (the finish signal)."""

    def __init__(self):
        self.states = {"learner": "failed", "helper": "running"}
        self.scaled: list[tuple[str, int]] = []
        self.states_when_scaled: list[dict] = []  # the task states at each scale
        self.listings = 0
        self.task_listings = 0
        # Called at each look at the tasks: lets a test end the helper after some looks.
        self.on_tasks = lambda api: None

    def _service(self, role: str) -> dict:
        labels = {jobspec.LABEL_JOB: JOB, jobspec.LABEL_ROLE: role, "dlaas.node": "n1"}
        if role == "learner":
            labels[jobspec.LABEL_LEARNER] = "0"
        return {"ID": role, "Spec": {"Name": f"{JOB}-{role}", "Labels": labels,
                                     "Mode": {"Replicated": {"Replicas": 1}}}}  # fmt: skip

    def services(self, filters=None) -> list[dict]:
        self.listings += 1
        return [self._service("learner"), self._service("helper")]

    def tasks(self, filters=None) -> list[dict]:
        self.task_listings += 1
        self.on_tasks(self)
        codes = {"failed": 137, "complete": 0, "running": None, "shutdown": 143}
        return [
            {"ID": f"t-{role}", "ServiceID": role, "CreatedAt": "1",
             "Spec": {"ContainerSpec": {"Labels": {jobspec.LABEL_JOB: JOB}}},
             "Status": {"State": state, "ContainerStatus": {"ExitCode": codes[state]}}}
            for role, state in self.states.items()
        ]  # fmt: skip


@pytest.fixture
def engine(monkeypatch):
    api = FakeApi()
    eng = SwarmEngine(SimpleNamespace(api=api), "p1")

    def scale(name: str, replicas: int) -> None:
        api.scaled.append((name, replicas))
        api.states_when_scaled.append(dict(api.states))

    eng.scale = scale  # type: ignore[method-assign]
    monkeypatch.setattr(swarm.time, "sleep", lambda s: None)  # the polls' pauses
    return eng, api


def test_a_helper_that_finishes_by_itself_is_not_signalled(engine):
    # Its learner was SIGKILLed: the helper saw its wrapper's alive lock go and stores.
    eng, api = engine
    looks = []

    def helper_done_after_three_looks(api):
        looks.append(1)
        if len(looks) >= 3:
            api.states["helper"] = "complete"

    api.on_tasks = helper_done_after_three_looks
    eng.node("n1").signal_helper(JOB)
    assert api.scaled == []


def test_a_helper_still_running_after_the_grace_gets_the_finish_signal(engine, monkeypatch):
    eng, api = engine
    clock = iter(range(10_000))  # each look one second later: the grace runs out
    monkeypatch.setattr(swarm.time, "monotonic", lambda: float(next(clock)))
    eng.node("n1").signal_helper(JOB)
    assert api.scaled == [(f"{JOB}-helper", 0)]


def test_every_nodes_stream_shares_one_listing_per_period(engine):
    eng, api = engine
    eng.poll_s = 3600.0  # one period covers the whole test
    first = eng.shared_fingerprint()
    again = eng.shared_fingerprint()
    assert first == again and api.task_listings == 1
    # One call a look: the tasks, each naming its job (no listing of the services).
    assert set(first) == {JOB} and len(first[JOB]) == 2 and api.listings == 0
    eng.poll_s = 0.0  # every call is a new period
    eng.shared_fingerprint()
    assert api.task_listings == 2


def _two_learners(api: FakeApi) -> None:
    """A ddp gang: learner 0 (killed) and learner 1 (still running)."""
    base = api._service

    def service(role: str) -> dict:
        return base(role)

    api.states = {"learner": "failed", "learner1": "running", "helper": "running"}

    def services(filters=None):
        api.listings += 1
        one = base("learner")
        one = {**one, "ID": "learner1", "Spec": {**one["Spec"], "Name": f"{JOB}-learner-1",
               "Labels": {**one["Spec"]["Labels"], jobspec.LABEL_LEARNER: "1"}}}  # fmt: skip
        return [service("learner"), one, service("helper")]

    api.services = services  # type: ignore[method-assign]


def test_the_learners_of_a_broken_gang_ending_by_themselves_are_not_stopped_while_they_end(
    engine,
):
    # Learner 0 was killed; learner 1 loses its peer and exits 1 by itself a moment later.
    eng, api = engine
    _two_learners(api)
    looks = []

    def learner1_ends(api):
        looks.append(1)
        if len(looks) >= 3:
            api.states["learner1"] = "failed"

    api.on_tasks = learner1_ends
    eng.node("n1").stop_learners(JOB)
    assert all(states["learner1"] == "failed" for states in api.states_when_scaled)


def test_a_learner_of_a_broken_gang_that_runs_on_is_stopped(engine, monkeypatch):
    eng, api = engine
    _two_learners(api)
    clock = iter(range(10_000))  # each look one second later: the wait runs out

    def ends_once_scaled(api):
        if (f"{JOB}-learner-1", 0) in api.scaled:
            api.states["learner1"] = "shutdown"

    api.on_tasks = ends_once_scaled
    monkeypatch.setattr(swarm.time, "monotonic", lambda: float(next(clock)))
    eng.node("n1").stop_learners(JOB)
    assert (f"{JOB}-learner-1", 0) in api.scaled
