"""The job state machine, walked exhaustively: every status, every pair of statuses."""

from __future__ import annotations

import itertools

import pytest

from dlaas.domain.errors import InvalidTransition
from dlaas.domain.status import (
    ACTIVE,
    DEPLOYED,
    FINAL,
    HAPPY_PATH,
    LOSS_ONLY,
    REQUEUEABLE,
    RESTARTABLE,
    TERMINAL,
    TRANSITIONS,
    USER_ONLY,
    JobState,
    Status,
    Transition,
    advance,
    between,
    can_transition,
    forward_path,
    initial,
)

S = Status

# Written out by hand on purpose: a change to the table must change this test too.
EXPECTED_EDGES = {
    (S.QUEUED, S.PENDING),
    (S.QUEUED, S.HALTED),
    (S.QUEUED, S.FAILED),
    (S.PENDING, S.DOWNLOADING),
    (S.PENDING, S.FAILED),
    (S.PENDING, S.HALTED),
    (S.DOWNLOADING, S.PROCESSING),
    (S.DOWNLOADING, S.FAILED),
    (S.DOWNLOADING, S.HALTED),
    (S.PROCESSING, S.STORING),
    (S.PROCESSING, S.FAILED),
    (S.PROCESSING, S.HALTED),
    (S.STORING, S.COMPLETED),
    (S.STORING, S.FAILED),
    (S.STORING, S.HALTED),
    # requeue: restart, node lost, preempted, rescaled; and the user's resume
    (S.PENDING, S.QUEUED),
    (S.DOWNLOADING, S.QUEUED),
    (S.PROCESSING, S.QUEUED),
    (S.HALTED, S.QUEUED),
    # the node holding a STORING job's results was lost: restart from the last checkpoint
    (S.STORING, S.QUEUED),
}
ALL_PAIRS = list(itertools.product(Status, Status))
VALID = [p for p in ALL_PAIRS if p in EXPECTED_EDGES]
INVALID = [p for p in ALL_PAIRS if p not in EXPECTED_EDGES]


def pair_id(p: tuple[Status, Status]) -> str:
    return f"{p[0]}->{p[1]}"


def state(status: Status, seq: int = 3) -> JobState:
    return JobState(status, 10.0, "before", seq=seq)


def test_table_covers_every_status_and_only_known_edges():
    assert set(TRANSITIONS) == set(Status)
    table_edges = {(a, b) for a, nxt in TRANSITIONS.items() for b in nxt}
    assert table_edges == EXPECTED_EDGES
    assert all(a != b for a, b in table_edges), "no status may transition to itself"


def test_final_statuses_map_to_nothing_but_a_halted_job_may_be_resumed():
    assert {S.COMPLETED, S.FAILED, S.HALTED} == FINAL
    for s in FINAL:
        assert TRANSITIONS[s] == ({S.QUEUED} if s == S.HALTED else frozenset())
        assert JobState(s, 0.0, "done").final
    assert {(S.HALTED, S.QUEUED)} == USER_ONLY
    assert set(Status) - FINAL == ACTIVE
    for s in ACTIVE:
        assert TRANSITIONS[s], f"{s} is active but has no way out"
        assert not JobState(s, 0.0, "x").final


def test_every_active_status_can_fail_and_be_halted():
    for s in ACTIVE:
        assert can_transition(s, S.FAILED) and can_transition(s, S.HALTED)


def test_every_status_is_reachable_from_queued():
    seen, todo = {S.QUEUED}, [S.QUEUED]
    while todo:
        for nxt in TRANSITIONS[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    assert seen == set(Status)


@pytest.mark.parametrize("edge", VALID, ids=pair_id)
def test_valid_edge_is_accepted(edge):
    src, dst = edge
    assert can_transition(src, dst)
    new = advance(state(src), dst, 20.0, "because", error_code="ec", exit_code=3)
    assert new == JobState(dst, 20.0, "because", "ec", 3, seq=4)
    assert new.transition() == Transition(dst, 20.0, "because", "ec", 3)


@pytest.mark.parametrize("edge", INVALID, ids=pair_id)
def test_every_other_pair_is_refused(edge):
    src, dst = edge
    assert not can_transition(src, dst)
    before = state(src)
    with pytest.raises(InvalidTransition) as err:
        advance(before, dst, 20.0, "because")
    assert str(src) in err.value.message and str(dst) in err.value.message
    assert before == state(src)  # frozen: nothing changed


@pytest.mark.parametrize("edge", VALID, ids=pair_id)
def test_reason_is_required(edge):
    with pytest.raises(ValueError, match="reason"):
        advance(state(edge[0]), edge[1], 20.0, "")


def test_seq_increments_along_a_whole_life():
    s = initial(1.0)
    assert (s.status, s.seq, s.reason, s.at) == (S.QUEUED, 0, "submitted", 1.0)
    for i, target in enumerate(HAPPY_PATH[1:], start=1):
        s = advance(s, target, 1.0 + i, f"step {i}")
        assert (s.status, s.seq, s.at) == (target, i, 1.0 + i)
    assert s.final and s.seq == len(HAPPY_PATH) - 1
    with pytest.raises(InvalidTransition):
        advance(s, S.HALTED, 99.0, "too late")


def test_happy_path_follows_the_table():
    assert HAPPY_PATH[0] == S.QUEUED and HAPPY_PATH[-1] == S.COMPLETED
    for a, b in itertools.pairwise(HAPPY_PATH):
        assert can_transition(a, b)


@pytest.mark.parametrize(
    ("current", "target", "steps"),
    [
        (S.QUEUED, S.PENDING, [S.PENDING]),
        (S.DOWNLOADING, S.STORING, [S.PROCESSING, S.STORING]),
        (S.QUEUED, S.COMPLETED, [S.PENDING, S.DOWNLOADING, S.PROCESSING, S.STORING, S.COMPLETED]),
        (S.PROCESSING, S.PROCESSING, []),  # already there
        (S.STORING, S.DOWNLOADING, []),  # behind: nothing to walk
        (S.PENDING, S.FAILED, [S.FAILED]),  # off the happy path: one step
        (S.PROCESSING, S.HALTED, [S.HALTED]),
        (S.FAILED, S.COMPLETED, [S.COMPLETED]),  # one step, which advance() then refuses
    ],
)
def test_forward_path(current, target, steps):
    assert forward_path(current, target) == steps


def test_forward_path_steps_are_all_valid_edges():
    for i, current in enumerate(HAPPY_PATH):
        for target in HAPPY_PATH[i + 1 :]:
            s = JobState(current, 0.0, "x")
            for step in forward_path(current, target):
                s = advance(s, step, 1.0, "walk")
            assert s.status == target


def test_job_state_round_trips_through_dict():
    s = JobState(S.FAILED, 12.5, "learner 1 OOM", "oom", 137, seq=4)
    assert JobState.from_dict(s.to_dict()) == s
    assert JobState.from_dict({"status": "QUEUED", "at": 1}) == JobState(S.QUEUED, 1.0, "")
    with pytest.raises(ValueError):
        JobState.from_dict({"status": "RUNNING", "at": 1})


def test_the_named_groupings_are_the_ones_every_service_relies_on():
    # Pinned by value: a change to the table that moves a status between groupings must be
    # a decision (and this test updated), not a side effect.
    assert {S.COMPLETED, S.FAILED} == TERMINAL
    assert {S.COMPLETED, S.FAILED, S.HALTED} == FINAL
    assert {S.QUEUED, S.PENDING, S.DOWNLOADING, S.PROCESSING, S.STORING} == ACTIVE
    assert {S.PENDING, S.DOWNLOADING, S.PROCESSING, S.STORING} == DEPLOYED
    # A lost node (or containers killed) sends a STORING job back too: its checkpoints are
    # in S3, the results only its node had are gone.
    assert {S.PENDING, S.DOWNLOADING, S.PROCESSING, S.STORING} == RESTARTABLE
    # Not STORING: its training is done, no controller moves it on purpose.
    assert {S.PENDING, S.DOWNLOADING, S.PROCESSING} == REQUEUEABLE


def test_the_groupings_follow_the_table():
    assert all(not TRANSITIONS[s] for s in TERMINAL)
    assert all(can_transition(s, S.QUEUED) for s in RESTARTABLE)
    assert {s for s in RESTARTABLE if (s, S.QUEUED) not in LOSS_ONLY} == REQUEUEABLE
    assert REQUEUEABLE <= RESTARTABLE <= DEPLOYED <= ACTIVE
    assert set(Status) == ACTIVE | FINAL and not ACTIVE & FINAL


def test_between_spans_the_happy_path_inclusively():
    assert between(S.DOWNLOADING, S.PROCESSING) == {S.DOWNLOADING, S.PROCESSING}
    assert between(S.PENDING, S.PENDING) == {S.PENDING}
    assert between(S.QUEUED, S.COMPLETED) == set(HAPPY_PATH)
    with pytest.raises(ValueError):
        between(S.STORING, S.PENDING)
    with pytest.raises(ValueError):
        between(S.QUEUED, S.FAILED)  # not on the happy path
