"""A swarm whose manager is away: the REAL LCM's node probes (node_health) over the REAL
SwarmNodeView, with a FAKE manager behind it (node objects, answering or not).

What the chaos run showed: with the manager's engine down, every node read as lost, every
job was requeued, though the workers' tasks ran on. The platform sees the cluster only
through the manager: a manager that cannot say is "unknown", and nothing is judged.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import requests.exceptions
from lcm_fakes import fake_lcm

from dlaas.adapters.engines.swarm_node import SwarmNodeView
from dlaas.adapters.nodes import NodeSpec, SwarmNode
from dlaas.domain.status import Status

FIXED = "name: j\nframework: {name: python, command: python3 train.py}\n"


class FakeManager:
    """FAKE swarm manager (what SwarmNodeView asks of SwarmEngine): `states` (node -> the
    swarm's word for it), `up` (whether the manager answers at all), `removed` (jobs whose
    services were removed), `placed` ((job, node) pairs that have services). Jobs run on
    every node it was told of."""

    # The manager's images (a submit checks the job's image is there): every one.
    client = SimpleNamespace(images=SimpleNamespace(get=lambda image: None))

    def __init__(self, nodes: list[str]):
        self.up = True
        self.states = dict.fromkeys(nodes, "ready")
        self.removed: list[str] = []
        self.placed: set[tuple[str, str]] = set()

    def _answer(self) -> None:
        if not self.up:
            raise requests.exceptions.ConnectionError("the manager's engine is down (fake)")

    def nodes(self, max_age_s: float = 0.5) -> dict[str, SwarmNode]:
        self._answer()
        return {
            n: SwarmNode(id=f"id-{n}", name=n, state=s, availability="active", cpus=8,
                         memory_mb=16384, gpus=0)
            for n, s in self.states.items()
        }  # fmt: skip

    def job_containers(self, job_id: str, node: str | None = None) -> list:
        self._answer()
        return []

    def jobs(self, node: str | None = None) -> set[str]:
        self._answer()
        return {j for j, n in self.placed if node in (None, n)}

    def remove_job(self, job_id: str, keep_network: bool = False) -> None:
        self._answer()
        self.removed.append(job_id)
        self.placed = {(j, n) for j, n in self.placed if j != job_id}

    def remove_job_on(self, job_id: str, node: str) -> None:
        self._answer()
        self.placed.discard((job_id, node))

    def wait_stopped(self, job_id: str, role: str, timeout_s: float) -> bool:
        return True


@pytest.fixture
def swarm(job_store):
    names = ["n1", "n2", "n3"]
    manager = FakeManager(names)
    lcm = fake_lcm(job_store, nodes=[NodeSpec(name=n, cpus=8, memory_mb=16384) for n in names])
    lcm.deployers = {n: SwarmNodeView(manager, n) for n in names}  # type: ignore[arg-type]
    lcm._leading.set()
    now = [1000.0]
    lcm.clock = lambda: now[0]

    def probe(times: int = 3) -> None:
        for _ in range(times):
            now[0] += 1
            lcm.check_nodes()

    for i, n in enumerate(names):
        job_id = f"job-{i}"
        lcm.submit(job_id, "alice", FIXED, "")
        for status in (Status.PENDING, Status.DOWNLOADING, Status.PROCESSING):
            lcm.keeper.transition(job_id, status, "on its way")
        lcm.keeper.set_placement(job_id, [{"learner": 0, "node": n, "gpu_indices": []}])
    return lcm, manager, probe


def _statuses(lcm) -> set:
    return {lcm.keeper.get(f"job-{i}").status for i in range(3)}


def test_a_manager_that_does_not_answer_loses_no_node_and_restarts_no_job(swarm):
    lcm, manager, probe = swarm
    probe()
    manager.up = False  # the manager's dockerd crashed: the workers' tasks run on
    assert {v.probe() for v in lcm.deployers.values()} == {"unknown"}
    probe(5)
    assert lcm.keeper.unhealthy_nodes() == set()
    assert _statuses(lcm) == {Status.PROCESSING}
    # Listed as nobody can tell, still schedulable: a deploy meanwhile fails and is retried.
    assert {(r.state, r.healthy) for r in lcm.node_rows()} == {("unknown", True)}
    manager.up = True  # back: the jobs go on where they ran
    probe()
    assert _statuses(lcm) == {Status.PROCESSING} and manager.removed == []


def test_a_node_the_restarted_manager_has_not_heard_from_yet_is_not_lost(swarm):
    lcm, manager, probe = swarm
    probe()
    manager.states = dict.fromkeys(manager.states, "unknown")  # the manager just restarted
    probe(5)
    assert lcm.keeper.unhealthy_nodes() == set() and _statuses(lcm) == {Status.PROCESSING}
    # Its worker n2 died meanwhile: the swarm says so once the heartbeat's grace is over.
    manager.states.update(n1="ready", n2="down", n3="ready")
    probe()
    assert lcm.keeper.unhealthy_nodes() == {"n2"}
    assert lcm.keeper.get("job-1").status == Status.QUEUED
    assert "node n2 lost" in lcm.keeper.get("job-1").reason
    assert lcm.keeper.get("job-0").status == lcm.keeper.get("job-2").status == Status.PROCESSING


@pytest.mark.parametrize(
    ("state", "up", "seen"),
    [
        ("ready", True, "up"),
        ("down", True, "down"),
        ("disconnected", True, "down"),
        ("unknown", True, "unknown"),
        ("ready", False, "unknown"),
    ],
)
def test_a_swarm_nodes_probe_is_the_managers_word_or_unknown(state, up, seen):
    manager = FakeManager(["n1"])
    manager.states["n1"], manager.up = state, up
    view = SwarmNodeView(manager, "n1")  # type: ignore[arg-type]
    assert view.probe() == seen
    assert view.ping() == (seen == "up")
    assert SwarmNodeView(manager, "gone").probe() == ("down" if up else "unknown")


def test_a_storing_job_on_a_lost_swarm_node_restarts_and_its_return_spares_the_new_run(swarm):
    # The chaos run (a 3-node swarm): worker n2 died under a job that had just gone STORING.
    lcm, manager, probe = swarm
    lcm.keeper.transition("job-1", Status.STORING, "all 1 learner(s) exited 0")
    probe()
    manager.states["n2"] = "down"
    probe()
    state = lcm.keeper.get("job-1")
    assert state.status == Status.QUEUED and "node n2 lost while storing" in state.reason
    assert manager.removed == ["job-1"]  # its services go at once (the manager answers)
    # Placed again on n3 and running; the dead node's task was still listed there.
    lcm.keeper.transition("job-1", Status.PENDING, "placed")
    lcm.keeper.set_placement("job-1", [{"learner": 0, "node": "n3", "gpu_indices": []}])
    lcm.keeper.transition("job-1", Status.DOWNLOADING, "helper and learners started")
    manager.placed = {("job-1", "n2"), ("job-1", "n3")}
    manager.states["n2"] = "ready"
    probe()
    assert manager.placed == {("job-1", "n3")}  # only the dead node's leftovers removed
    assert lcm.keeper.get("job-1").status == Status.DOWNLOADING
