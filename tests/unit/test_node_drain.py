"""Draining a node: which jobs shrink and which move (the pure rule), and the REAL LCM's
drain, activate and external-drain handling over the in-memory port fakes (tests/lcm_fakes.py)
with a FAKE swarm node (an engine that has an availability, as SwarmNodeView does)."""

from __future__ import annotations

import threading
import time

import pytest
from lcm_fakes import FakeEngine, fake_lcm

from dlaas.adapters.nodes import NodeSpec
from dlaas.domain.errors import InvalidRequest
from dlaas.domain.status import Status
from services.lcm.node_health import PlacedGang, drain_moves

FIXED = "name: j\nframework: {name: python, command: python3 train.py}\n"
ELASTIC = FIXED + "learners: 4\nmin_learners: 2\nmax_learners: 4\n"


class FakeSwarmNode(FakeEngine):
    """FAKE swarm node view: an availability the LCM sets (as SwarmNodeView does through
    the manager), a state, and a manager that answers while the node is down."""

    answers_for_down_node = True

    def __init__(self, node: str):
        super().__init__(node=node)
        self.state = "ready"
        self.avail = "active"
        self.availability_calls: list[str] = []

    def node_state(self) -> str | None:
        return self.state

    def availability(self) -> str:
        return self.avail

    def set_availability(self, availability: str) -> None:
        self.availability_calls.append(availability)
        self.avail = availability


@pytest.mark.parametrize(
    ("nodes", "min_learners", "action"),
    [
        (("n1", "n1"), 2, None),  # nothing on the drained node
        (("n2",), 1, "move"),  # fixed size, wholly there
        (("n1", "n2"), 2, "move"),  # fixed size across nodes: moves whole
        (("n1", "n1", "n2", "n2"), 2, "shrink"),  # elastic, keeps its min elsewhere
        (("n1", "n2", "n2", "n2"), 2, "move"),  # elastic, would fall below its min
        (("n2", "n2"), 1, "move"),  # elastic, no learner left elsewhere
        (("n1", "n2"), 1, "shrink"),  # elastic down to one learner
    ],
    ids=[
        "elsewhere",
        "fixed-here",
        "fixed-span",
        "elastic-keeps-min",
        "elastic-below-min",
        "elastic-all-here",
        "elastic-to-one",
    ],
)
def test_drain_shrinks_elastic_gangs_that_keep_their_min_and_moves_the_others(
    nodes, min_learners, action
):
    moves = drain_moves("n2", [PlacedGang("j", nodes, min_learners)])
    assert [m.action for m in moves] == ([action] if action else [])
    for m in moves:
        assert m.job_id == "j" and "node n2 drained" in m.reason


class QuickStop(threading.Event):
    """The LCM's stop event with its timed waits cut to 20 ms: the drain looks for the moved
    gangs every 0.5 s, here every 20 ms. Only how often it looks changes; what it waits
    for (the gangs gone, then `drain`) is what the tests check."""

    def wait(self, timeout: float | None = None) -> bool:
        return super().wait(None if timeout is None else min(timeout, 0.02))


_made: list = []


@pytest.fixture(autouse=True)
def _stop_the_lcms():
    """Stop every LCM a test made: a drain still waiting for gangs ends with its test."""
    yield
    while _made:
        _made.pop()._stop.set()


def _lcm(job_store):
    nodes = [NodeSpec(name=n, cpus=8, memory_mb=16384) for n in ("n1", "n2")]
    lcm = fake_lcm(job_store, nodes=nodes, cpus=16)
    lcm.deployers = {n.name: FakeSwarmNode(n.name) for n in nodes}
    lcm._stop = QuickStop()
    lcm._leading.set()
    _made.append(lcm)
    return lcm


def _running(lcm, job_id: str, manifest: str, nodes: list[str]) -> None:
    lcm.submit(job_id, "alice", manifest, "")
    lcm.keeper.transition(job_id, Status.PENDING, "placed")
    lcm.keeper.transition(job_id, Status.DOWNLOADING, "helper started")
    lcm.keeper.transition(job_id, Status.PROCESSING, "learners running")
    lcm.keeper.set_placement(
        job_id, [{"learner": i, "node": n, "gpu_indices": []} for i, n in enumerate(nodes)]
    )
    for n in set(nodes):
        lcm.deployers[n].containers_of[job_id] = [f"{job_id}-learner"]


def _until(check, what: str) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_drain_moves_the_nodes_jobs_then_drains_it_on_the_swarm_and_activate_undoes_it(
    job_store,
):
    lcm = _lcm(job_store)
    _running(lcm, "job-fixed", FIXED, ["n2"])
    _running(lcm, "job-elastic", ELASTIC, ["n1", "n1", "n2", "n2"])
    _running(lcm, "job-too-few", ELASTIC, ["n1", "n2", "n2", "n2"])
    _running(lcm, "job-away", FIXED, ["n1"])
    row = lcm.set_node_availability("n2", "drain", "admin")
    assert row.spec.name == "n2" and not row.healthy
    assert lcm.keeper.unhealthy_nodes() == {"n2"}  # the scheduler places nothing there
    reasons = {j: lcm.keeper.get(j).reason for j in ("job-fixed", "job-elastic", "job-too-few")}
    assert all(lcm.keeper.get(j).status == Status.QUEUED for j in reasons)
    assert "shrunk off it" in reasons["job-elastic"]
    assert "moved from its checkpoint" in reasons["job-fixed"]
    assert "below its min of 2" in reasons["job-too-few"]
    assert "drained by admin" in reasons["job-fixed"]
    assert lcm.keeper.get("job-away").status == Status.PROCESSING  # not on n2: untouched
    # Not counted as restarts: a drain is the platform's doing, not the job's failure.
    assert all(not job_store.get(j).info.get("restarts") for j in reasons)
    n2 = lcm.deployers["n2"]
    # The swarm is paused first and drained only once the moved gangs are gone (their
    # helpers stored checkpoints), so the swarm itself never stops a task of ours.
    assert n2.availability_calls[0] == "pause"
    _until(lambda: n2.availability_calls == ["pause", "drain"], "the swarm drained the node")
    assert not n2.containers_of.get("job-fixed") and "job-fixed" in n2.stopped

    lcm.set_node_availability("n2", "active", "admin")
    assert n2.avail == "active" and lcm.keeper.unhealthy_nodes() == set()
    assert [r.healthy for r in lcm.node_rows()] == [True, True]


def test_the_leader_follows_an_availability_set_on_the_swarm_directly(job_store):
    lcm = _lcm(job_store)
    _running(lcm, "job-fixed", FIXED, ["n2"])
    lcm.check_nodes()  # first look: both active
    assert lcm.keeper.unhealthy_nodes() == set()
    lcm.deployers["n2"].avail = "pause"  # `docker node update --availability pause n2`
    lcm._last_probe = 0.0
    lcm.check_nodes()
    assert lcm.keeper.unhealthy_nodes() == {"n2"}
    assert lcm.keeper.get("job-fixed").status == Status.PROCESSING  # pause moves nothing
    lcm.deployers["n2"].avail = "drain"
    lcm._last_probe = 0.0
    lcm.check_nodes()
    assert lcm.keeper.get("job-fixed").status == Status.QUEUED
    assert lcm.keeper.nodes["n2"]["availability"] == "drain"
    lcm.deployers["n2"].avail = "active"
    lcm._last_probe = 0.0
    lcm.check_nodes()
    assert lcm.keeper.unhealthy_nodes() == set()


def test_a_lost_swarm_node_has_its_jobs_services_removed_through_the_manager(job_store):
    now = [0.0]
    lcm = _lcm(job_store)
    lcm.clock = lambda: now[0]
    _running(lcm, "job-fixed", FIXED, ["n2"])
    n2 = lcm.deployers["n2"]
    n2.up = False  # the swarm sees n2 down
    for _ in range(2):
        now[0] += 1
        lcm.check_nodes()
    assert lcm.keeper.get("job-fixed").status == Status.QUEUED
    assert "node n2 lost" in lcm.keeper.get("job-fixed").reason
    assert "job-fixed" in n2.removed  # its service names are free for the restart
    n2.up = True
    now[0] += 1
    lcm.check_nodes()
    assert lcm.keeper.unhealthy_nodes() == set()


def test_drain_is_refused_on_an_engine_of_its_own_before_anything_moves(job_store):
    lcm = fake_lcm(job_store)
    lcm._leading.set()
    _running(lcm, "job-fixed", FIXED, ["local"])
    with pytest.raises(InvalidRequest, match="availability: a node can be drained only on a"):
        lcm.set_node_availability("local", "drain", "admin")
    assert lcm.keeper.get("job-fixed").status == Status.PROCESSING
    assert lcm.keeper.unhealthy_nodes() == set()
    row = lcm.node_rows()[0]
    assert (row.state, row.availability, row.healthy) == ("ready", "active", True)


@pytest.mark.parametrize(
    ("node", "availability", "message"),
    [
        ("n9", "drain", "node: no node 'n9' (nodes: n1, n2)"),
        ("n2", "offline", "availability: must be one of active, pause, drain, got 'offline'"),
    ],
)
def test_a_bad_node_or_availability_is_refused_naming_the_field(
    job_store, node, availability, message
):
    lcm = _lcm(job_store)
    with pytest.raises(InvalidRequest) as e:
        lcm.set_node_availability(node, availability, "admin")
    assert e.value.message == message
    assert lcm.deployers["n2"].availability_calls == []
