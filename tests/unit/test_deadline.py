"""Deadlines: a job's max_duration counts its running time only (QUEUED, PENDING and HALTED
not), and at the deadline the job is stopped like a halt (its learners get SIGTERM and
checkpoint, then its helper stores results and logs) and fails `deadline_exceeded`. The
REAL monitor over the FAKES of its ports (tests/lcm_fakes.py) and a fake clock."""

from __future__ import annotations

import time

from lcm_fakes import FakeEngine, InMemoryStatusRepo

from dlaas.adapters.store.base import JobRecord
from dlaas.domain import jobspec
from dlaas.domain.accounts import Quota, Team
from dlaas.domain.errors import InvalidManifest
from dlaas.domain.manifest import parse_manifest
from dlaas.domain.status import JobState, Status, Transition
from services.jobmonitor import activity, limits
from services.jobmonitor.activity import Limits
from services.jobmonitor.monitor import JobMonitor

T0 = 1_000_000.0
BASE = "name: d\nframework: {name: python, version: '3', command: python3 train.py}\n"


def test_running_time_leaves_out_queued_pending_and_halted_spans():
    h = [
        Transition(Status.QUEUED, 0.0, ""),
        Transition(Status.PENDING, 100.0, ""),  # 100 s queued: not counted
        Transition(Status.DOWNLOADING, 110.0, ""),  # 10 s pending: not counted
        Transition(Status.PROCESSING, 120.0, ""),
        Transition(Status.HALTED, 200.0, ""),  # 90 s running so far
        Transition(Status.QUEUED, 500.0, ""),  # halted 300 s, then queued 100 s
        Transition(Status.PENDING, 600.0, ""),
        Transition(Status.DOWNLOADING, 605.0, ""),
    ]
    state = JobState(Status.PROCESSING, 610.0, "", seq=8)  # live, not yet in the store
    assert limits.running_s(h, state, now=640.0) == 90 + 5 + 30


def test_max_duration_takes_seconds_or_a_duration_and_is_bounded():
    assert parse_manifest(BASE + "max_duration: 1h30m\n").max_duration == 5400
    assert parse_manifest(BASE + "max_duration: 90\n").max_duration == 90
    assert parse_manifest(BASE + "max_duration: 2d\n").max_duration == 2 * 86400
    for bad, words in (
        ("soon", "max_duration: 'soon' is not a duration"),
        ("400d", "max_duration: Input should be less than or equal to"),
        ("-5", "max_duration: Input should be greater than or equal to 0"),
        ("yes", "max_duration: must be seconds or a duration"),
    ):
        try:
            parse_manifest(BASE + f"max_duration: {bad}\n")
        except InvalidManifest as exc:
            assert words in str(exc), exc
        else:
            raise AssertionError(f"max_duration {bad} accepted")


class World:
    def __init__(self, store, max_duration: str, platform_max: float = 0, team: str = ""):
        self.now = T0
        self.store = store
        self.repo = InMemoryStatusRepo(store, clock=lambda: self.now)
        self.engine = FakeEngine()
        self.released: list[tuple[str, bool]] = []
        self.monitor = JobMonitor(
            {"local": self.engine}, self.repo, store,
            lambda job_id, ended: self.released.append((job_id, ended)),
            clock=lambda: self.now, limits=Limits(max_duration_s=platform_max),
        )  # fmt: skip
        text = BASE + "learners: 2\n" + (f"max_duration: {max_duration}\n" if max_duration else "")
        store.create(JobRecord("job", "alice", "d", text, self.now, team=team))
        self.repo.create("job")
        self.now += 600  # queued 10 minutes: not counted
        self.repo.transition("job", Status.PENDING, "placed")
        self.helper = self.engine.add("job", jobspec.ROLE_HELPER)
        self.learners = [self.engine.add("job", jobspec.ROLE_LEARNER, i) for i in range(2)]
        self.now += 5
        self.repo.transition("job", Status.DOWNLOADING, "started")
        self.started = self.now

    def step_to(self, at: float) -> None:
        """Reconcile at every time the monitor asked for, up to `at`."""
        due = self.now
        while due <= at:
            self.now = due
            decision = self.monitor.reconcile_job("job")
            due = (decision and decision.recheck_at) or at + 1


def test_at_the_deadline_learners_stop_first_then_the_job_fails_and_the_helper_stores(job_store):
    w = World(job_store, "2m")
    w.repo.transition("job", Status.PROCESSING, "helper reported data and code ready")
    w.step_to(w.started + 119)
    assert w.engine.stopped_containers == []  # 119 s of running time: not yet

    w.step_to(w.started + 121)  # the monitor asked to look again at the deadline itself
    assert w.repo.get("job").status == Status.PROCESSING
    deadline = time.monotonic() + 10  # the stops run on threads of their own
    while len(w.engine.stopped_containers) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(w.engine.stopped_containers) == [c.name for c in w.learners]  # SIGTERM
    # The helper is told to finish only once the learners have exited (checkpointed).
    assert w.engine.signals == []
    w.now += 2
    w.monitor.reconcile_job("job")  # their exits (143) are the deadline's, not a failure
    record = job_store.get("job")
    assert (record.status, record.error_code) == (Status.FAILED, "deadline_exceeded")
    assert record.reason.startswith("deadline: ran 2m (max_duration; queued, pending and halted")
    assert w.engine.signals == [(w.helper.name, jobspec.HELPER_FINISH_SIGNAL)]
    assert w.released == [("job", True)]


def test_a_job_without_max_duration_gets_the_platforms_maximum(job_store):
    w = World(job_store, "", platform_max=60)
    w.step_to(w.started + 61)  # DOWNLOADING all along: no learner to stop, it just fails
    record = job_store.get("job")
    assert (record.status, record.error_code) == (Status.FAILED, "deadline_exceeded")
    assert "the platform's maximum run time" in record.reason


def test_a_failure_before_the_deadline_keeps_its_own_reason(job_store):
    w = World(job_store, "60")
    w.repo.transition("job", Status.PROCESSING, "helper reported data and code ready")
    w.engine.set_state(w.learners[1], "exited", 2, finished_at=w.started + 30)
    w.now = w.started + 90  # seen late, after the deadline
    w.monitor.reconcile_job("job")
    record = job_store.get("job")
    assert (record.status, record.error_code, record.exit_code) == (Status.FAILED, "exit_code", 2)


def test_a_job_without_max_duration_gets_its_teams_default(job_store):
    job_store.add_team(Team("nlp", Quota(), T0, default_duration_s=60, max_duration_s=3600))
    w = World(job_store, "", platform_max=7200, team="nlp")
    w.step_to(w.started + 59)
    assert job_store.get("job").status == Status.DOWNLOADING  # 59 s of running: not yet
    w.step_to(w.started + 61)
    record = job_store.get("job")
    assert (record.status, record.error_code) == (Status.FAILED, "deadline_exceeded")
    assert record.reason.startswith("deadline: ran 1m (team nlp's default run time;")


def test_a_job_without_max_duration_and_a_team_without_default_gets_the_teams_maximum(
    job_store,
):
    job_store.add_team(Team("nlp", Quota(), T0, max_duration_s=90))
    w = World(job_store, "", team="nlp")
    w.step_to(w.started + 91)
    record = job_store.get("job")
    assert (record.status, record.error_code) == (Status.FAILED, "deadline_exceeded")
    assert "(team nlp's maximum run time;" in record.reason


def test_a_teams_default_changed_meanwhile_reaches_a_running_job(job_store):
    job_store.add_team(Team("nlp", Quota(), T0))  # no run times: the job runs on
    w = World(job_store, "", team="nlp")
    w.now = w.started + 600
    w.monitor.reconcile_job("job")  # the team read (and kept a while)
    assert job_store.get("job").status == Status.DOWNLOADING
    job_store.set_durations("nlp", 300, 0)  # already past
    w.now += activity.TEAM_TTL_S - 1
    w.monitor.reconcile_job("job")
    assert job_store.get("job").status == Status.DOWNLOADING  # the team as read before
    w.now += 1  # read again
    w.monitor.reconcile_job("job")
    record = job_store.get("job")
    assert (record.status, record.error_code) == (Status.FAILED, "deadline_exceeded")
    assert "ran 5m (team nlp's default run time" in record.reason


def test_the_manifests_max_duration_wins_over_its_teams_default(job_store):
    job_store.add_team(Team("nlp", Quota(), T0, default_duration_s=60, max_duration_s=3600))
    w = World(job_store, "2m", team="nlp")
    w.step_to(w.started + 61)
    assert job_store.get("job").status == Status.DOWNLOADING
    w.step_to(w.started + 121)
    assert "(max_duration;" in job_store.get("job").reason
