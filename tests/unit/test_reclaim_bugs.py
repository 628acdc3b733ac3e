"""Bugs a new user hit (issue 24, item 7), the control plane's: a platform fault must never be
reported as the user's, neither as their credentials nor as their exit code.

- An elastic job moved by another team's reclaim (the scheduler preempts it and starts it
  again, smaller, in the same round) FAILED `store_refused` on the platform's own S3: the
  teardown of its old run, on a thread of its own, removed the new run's containers and
  revoked the S3 identity the new run had just been given.
- A job whose node's engine died under it FAILED "learner 0 exited with code 128": Docker's
  code for a container its engine failed to start (or lost) counted as the program's.
- The chaos benchmark's misses: a helper killed after its learners finished restarted the
  whole job; a node back after the swarm manager's restart was watched again only after a
  backoff grown to 8 s.

The REAL LCM over the port fakes (tests/lcm_fakes.py), and the monitor's pure decide().
"""

from __future__ import annotations

import threading
import time

from lcm_fakes import FakeEngine, fake_lcm

from dlaas.domain.jobspec import ROLE_HELPER, ROLE_LEARNER
from dlaas.domain.ports import Container, EngineUnreachable
from dlaas.domain.status import JobState, Status
from dlaas.v1 import scheduler_pb2
from services.jobmonitor.actions import Requeue, RestartHelper, TransitionTo
from services.jobmonitor.decide import JobView, decide
from services.jobmonitor.main import MonitorSettings
from services.jobmonitor.watchers import Reachability, Watchers

ELASTIC = (
    "name: e\nframework: {name: python, command: python3 train.py}\n"
    "learners: 2\nmin_learners: 1\nmax_learners: 2\n"
)


class SlowHelperEngine(FakeEngine):
    """FAKE engine whose helper takes until `synced` is set to store checkpoints and logs."""

    def __init__(self) -> None:
        super().__init__()
        self.synced = threading.Event()
        self.waiting = threading.Event()

    def wait_helper(self, job_id: str, timeout_s: float) -> bool:
        self.waiting.set()
        return self.synced.wait(10)


def _decision(action: str, learners: int) -> scheduler_pb2.Decision:
    return scheduler_pb2.Decision(
        job_id="job-e",
        action=action,
        cause="team nlp reclaims its guarantee",
        allocations=[
            scheduler_pb2.LearnerAllocation(learner=i, node="local") for i in range(learners)
        ],
    )


def _until(check, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.01)
    return check()


def test_a_reclaimed_elastic_job_keeps_the_identity_and_containers_of_its_new_run(job_store):
    lcm = fake_lcm(job_store)
    engine = lcm.deployers["local"] = SlowHelperEngine()
    lcm.submit("job-e", "alice", ELASTIC, "")
    lcm.scheduler.decisions = [_decision("start", 2)]
    lcm.place_round()
    assert lcm.keeper.get("job-e").status == Status.DOWNLOADING
    # The reclaim: preempted, and started again on one learner in the same round (a move).
    lcm.scheduler.decisions = [_decision("preempt", 1), _decision("start", 1)]
    lcm.place_round()
    assert engine.waiting.wait(5), "the old run's teardown never waited for its helper"
    engine.synced.set()  # the old helper has stored its checkpoint and logs
    assert _until(lambda: lcm.keeper.get("job-e").status == Status.DOWNLOADING)
    assert _until(lambda: "job-e" in lcm.identities.issued), (
        "the new run's S3 identity was revoked by the old run's teardown"
    )
    time.sleep(0.1)  # nothing of the old teardown may still be on its way
    assert "job-e" in lcm.identities.issued
    assert engine.containers("job-e"), "the new run's containers were removed"
    # The new run was deployed once its predecessor was gone, with one learner.
    assert engine.removed == ["job-e"] and len(engine.plans[-1].learners) == 1


def _dead_learner(exit_code: int, finished_at: float) -> list[Container]:
    helper = Container("h", "job-x-helper", "job-x", ROLE_HELPER, None, "running", "node-1")
    learner = Container("l0", "job-x-learner-0", "job-x", ROLE_LEARNER, 0, "exited", "node-1",
                        exit_code=exit_code, finished_at=finished_at)  # fmt: skip
    return [helper, learner]


def _processing(now: float) -> JobState:
    return JobState(Status.PROCESSING, now - 100, "training", seq=3)


def test_a_learner_that_died_with_its_engine_is_restarted_not_failed():
    # The node's dockerd was killed: its container exited 128 (Docker: the engine could not
    # start or keep it) just before the monitor noticed the engine gone.
    now = 1000.0
    view = JobView(
        state=_processing(now),
        containers=_dead_learner(128, finished_at=now - 12),
        now=now,
        num_learners=1,
        engine_lost_at=now - 10,
    )
    actions = decide(view).actions
    assert not any(isinstance(a, TransitionTo) and a.target == Status.FAILED for a in actions)
    [requeue] = [a for a in actions if isinstance(a, Requeue)]
    assert "engine" in requeue.reason and requeue.error_code == "engine_lost"


def test_a_program_that_exits_128_with_its_engine_up_fails_as_its_own():
    now = 1000.0
    view = JobView(
        state=_processing(now),
        containers=_dead_learner(128, finished_at=now - 12),
        now=now,
        num_learners=1,
        engine_lost_at=None,
    )
    [fail] = [a for a in decide(view).actions if isinstance(a, TransitionTo)]
    assert fail.target == Status.FAILED and "exited with code 128" in fail.reason


def test_a_helper_killed_after_its_learners_finished_is_restarted_alone_to_store():
    # Chaos: the helper was killed just after the learner exited 0. The whole job was
    # restarted (a new run, training again from its last checkpoint) where the results were
    # on the volume, waiting for a helper to store them.
    now = 1000.0
    helper = Container("h", "job-x-helper", "job-x", ROLE_HELPER, None, "exited", "node-1",
                       exit_code=137, finished_at=now - 1)  # fmt: skip
    learner = Container("l0", "job-x-learner-0", "job-x", ROLE_LEARNER, 0, "exited", "node-1",
                        exit_code=0, finished_at=now - 2)  # fmt: skip
    view = JobView(state=_processing(now), containers=[helper, learner], now=now, num_learners=1)
    [action] = decide(view).actions
    assert isinstance(action, RestartHelper) and "killed (SIGKILL)" in action.reason


class _FakeTime:
    """A clock and a stop event whose waits pass fake time at once."""

    def __init__(self) -> None:
        self.now = 0.0
        self.connected_at: float | None = None

    def wait(self, seconds: float) -> bool:
        self.now += seconds
        return self.is_set()

    def is_set(self) -> bool:
        return self.connected_at is not None


class _BackAt(FakeEngine):
    """FAKE engine that does not answer until `back_at` (fake seconds)."""

    def __init__(self, time_: _FakeTime, back_at: float) -> None:
        super().__init__(node="node-2")
        self.time, self.back_at = time_, back_at

    def events(self, since=None):
        if self.time.now < self.back_at:
            raise EngineUnreachable("node-2", "the swarm sees the node down")
        self.time.connected_at = self.time.now
        return iter(())


def test_a_node_back_after_a_manager_restart_is_watched_again_within_two_seconds():
    # Chaos: the manager's dockerd was down 10 s; the monitor's watcher of node-2, its
    # backoff grown to 8 s, saw the node back 9 s late, and a helper killed meanwhile
    # waited for it (the monitor judges no job of a node it does not watch).
    fake = _FakeTime()
    default = MonitorSettings.model_fields["reconnect_max_s"].default
    watchers = Watchers(
        {"node-2": _BackAt(fake, back_at=10.0)},
        Reachability(lambda: fake.now),
        keeper=None,
        on_job=lambda job_id: None,
        on_status_deleted=lambda job_id: None,
        resync=lambda: None,
        stop=fake,
        reconnect_max_s=default,
    )
    watchers._watch_engine("node-2")
    assert fake.connected_at is not None and fake.connected_at - 10.0 <= 2.0
