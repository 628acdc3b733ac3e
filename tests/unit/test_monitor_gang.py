"""The job monitor blames the learner that caused a gang's failure, not the one that failed
first waiting for it (services/jobmonitor/gang.py through decide())."""

from __future__ import annotations

from dlaas.domain.ports import Container
from dlaas.domain.status import JobState, Status
from services.jobmonitor.decide import JobView, Requeue, TransitionTo, decide

TIMEOUT = "RuntimeError: [gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 20000ms for recv operation to complete"
RESET = "RuntimeError: Connection reset by peer"


def learner(i: int, state: str = "exited", code: int | None = 1, at: float | None = 5.0):
    return Container(f"l{i}", f"l{i}", "job", "learner", i, state, "", code, finished_at=at)


def running(i: int) -> Container:
    return Container(f"l{i}", f"l{i}", "job", "learner", i, "running")


def judged(learners: list[Container], tails: dict[int, list[str]]):
    helper = Container("h", "h", "job", "helper", None, "running")
    view = JobView(
        state=JobState(Status.PROCESSING, 1.0, "started", seq=3),
        containers=[helper, *learners],
        log_tails=tails,
        now=10.0,
        num_learners=len(learners),
    )
    return decide(view).actions[0]


def test_a_hung_learner_is_named_when_its_peer_times_out_waiting_for_it():
    action = judged([learner(0), running(1)], {0: ["epoch 1", TIMEOUT]})
    assert isinstance(action, Requeue) and action.error_code == "collective_timeout"
    assert action.reason.startswith("learner 1 stopped answering the gang's collectives")
    assert "learner 0 exited with code 1: collective_timeout" in action.reason


def test_a_learner_that_failed_later_on_its_own_is_the_jobs_failure():
    """Learner 1 raised (its own bug); learner 0's reset came first on the clock."""
    own = ["ValueError: bad shape"]
    action = judged([learner(0, at=5.0), learner(1, at=6.0)], {0: [RESET], 1: own})
    assert isinstance(action, TransitionTo) and action.target == Status.FAILED
    assert action.error_code == "exit_code"
    assert action.reason.startswith("learner 1 exited with code 1 (learner 0 failed first, ")
    assert action.reason.endswith("ValueError: bad shape")  # its own last lines


def test_a_learner_that_left_early_is_named():
    action = judged([learner(0), learner(1, code=0, at=3.0)], {0: [TIMEOUT]})
    assert action.reason.startswith("learner 1 left the gang early (exited 0")


def test_every_learner_failed_in_a_collective_names_the_first():
    """The network between them, not a learner: the first failure stands."""
    action = judged([learner(0, at=5.0), learner(1, at=5.5)], {0: [TIMEOUT], 1: [TIMEOUT]})
    assert action.reason.startswith("learner 0 exited with code 1: collective_timeout")


def test_a_failure_of_its_own_is_never_passed_on():
    action = judged([learner(0), running(1)], {0: ["ValueError: bad"]})
    assert action.reason.startswith("learner 0 exited with code 1")
    assert "learner 1" not in action.reason
