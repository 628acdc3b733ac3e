"""Stalled jobs: the REAL job monitor (observe -> decide -> act) over the FAKES of its ports
(tests/lcm_fakes.py) and a fake clock. A learner that hangs after epoch 2, and a 2-learner
gang where one learner's process dies and the other blocks in a collective, are each seen
within stall_after + 10 s (the monitor's poll of the learners' last lines is 10 s) and
handled as the manifest's on_stall says."""

from __future__ import annotations

import pytest
from lcm_fakes import FakeEngine, InMemoryStatusRepo

from dlaas.adapters.notify import Notifier
from dlaas.adapters.store.base import JobRecord
from dlaas.domain import jobspec
from dlaas.domain.manifest import parse_manifest
from dlaas.domain.ports import Container
from dlaas.domain.status import JobState, Status
from services.jobmonitor import limits
from services.jobmonitor.activity import Limits
from services.jobmonitor.decide import JobView, MarkStalled, decide
from services.jobmonitor.monitor import JobMonitor

T0 = 1_000_000.0
STALL_AFTER = 30


class Hooks(Notifier):
    def __init__(self):
        self.events: list[tuple[str, str, str, str]] = []

    def transition(self, job_id, previous, seq, t) -> None:
        return None

    def event(self, job_id, event, seq, t, occurrence) -> None:
        self.events.append((job_id, event, t.reason, occurrence))


class Sim:
    """One job on the fakes; `run` steps the clock 1 s at a time and reconciles the job
    whenever the monitor asked to look again (and at least every 15 s, its resync)."""

    def __init__(self, store, learners: int, on_stall: str):
        self.now = T0
        self.store = store
        self.repo = InMemoryStatusRepo(store, clock=lambda: self.now)
        self.engine = FakeEngine()
        self.hooks = Hooks()
        self.requeued: list[str] = []
        self.monitor = JobMonitor(
            {"local": self.engine}, self.repo, store, lambda job_id, ended: None,
            clock=lambda: self.now,
            requeue=lambda job_id, reason, is_restart=False: self.requeued.append(reason),
            limits=Limits(poll_s=10), notifier=self.hooks,
        )  # fmt: skip
        text = (
            f"name: s\nlearners: {learners}\nstall_after: {STALL_AFTER}\non_stall: {on_stall}\n"
            "framework: {name: python, version: '3', command: python3 train.py}\n"
        )
        store.create(JobRecord("job", "alice", "s", text, self.now))
        self.repo.create("job")
        self.repo.transition("job", Status.PENDING, "placed")
        self.helper = self.engine.add("job", jobspec.ROLE_HELPER)
        self.learners = [self.engine.add("job", jobspec.ROLE_LEARNER, i) for i in range(learners)]
        self.repo.transition("job", Status.DOWNLOADING, "started")
        self.repo.transition("job", Status.PROCESSING, "data ready")

    def run(self, script, until_s: float = 300) -> float | None:
        """Play `script` ({second: what happens}); the time the stall was marked, or None."""
        due = self.now
        for second in range(int(until_s)):
            self.now = T0 + second
            if second in script:
                before = dict(self.engine.boxes)
                script[second](self)
                if self.engine.boxes != before:
                    due = self.now  # an engine event (a learner exited) marks the job
                # A printed line is no event: the monitor sees it at its next poll.
            if self.now >= due:
                decision = self.monitor.reconcile_job("job")
                due = min(self.now + 15, (decision and decision.recheck_at) or self.now + 15)
            stall = self.store.get("job").info.get("stall")
            if stall:
                return stall["at"] - T0
        return None

    def say(self, i: int, line: str):
        return lambda sim: sim.engine.print(sim.learners[i], line + "\n")


def hang_after_epoch_2(sim: Sim) -> dict:
    # Epochs every 7 s, then nothing more: its last line at second 14, between two polls.
    return {7 * k: sim.say(0, f"epoch {k}/10 loss 0.{9 - k}") for k in (1, 2)}


def test_a_learner_that_hangs_after_epoch_2_is_marked_and_notified(job_store):
    sim = Sim(job_store, 1, "notify")
    seen_at = sim.run(hang_after_epoch_2(sim))
    assert seen_at is not None and seen_at - 14 <= STALL_AFTER + 10, seen_at
    info = job_store.get("job").info
    (learner,) = info["stall"]["learners"]
    assert learner["last_line"] == "epoch 2/10 loss 0.7" and learner["state"] == "running"
    assert T0 + 14 <= learner["last_line_at"] <= T0 + 24  # seen within a poll of its print
    assert info["stalls"] == [info["stall"]]
    # The `stalled` hook event, with the evidence; the job keeps running (notify).
    ((job, event, reason, _key),) = sim.hooks.events
    assert (job, event) == ("job", "stalled")
    assert "stalled: no learner logged for" in reason and "'epoch 2/10 loss 0.7'" in reason
    assert sim.repo.get("job").status == Status.PROCESSING and sim.requeued == []
    # Marked once per stall: more looks at the silent job add nothing.
    sim.run({}, until_s=120)
    assert len(sim.hooks.events) == 1


def test_a_stalled_job_with_on_stall_fail_fails_stalled_and_stops(job_store):
    sim = Sim(job_store, 1, "fail")
    seen_at = sim.run(hang_after_epoch_2(sim))
    assert seen_at is not None and seen_at - 14 <= STALL_AFTER + 10
    record = job_store.get("job")
    assert (record.status, record.error_code) == (Status.FAILED, "stalled")
    assert "'epoch 2/10 loss 0.7'" in record.reason  # the evidence, in the history
    assert record.history[-1].reason == record.reason
    assert [e[1] for e in sim.hooks.events] == ["stalled"]


def test_a_gang_whose_peer_died_while_the_other_blocks_in_a_collective_restarts(job_store):
    sim = Sim(job_store, 2, "restart")
    script = {
        3: lambda s: (s.engine.print(s.learners[0], "epoch 1\n"), s.engine.print(s.learners[1], "epoch 1\n")),
        8: lambda s: s.engine.print(s.learners[1], "worker process exited\n"),
        # Learner 1's process is gone (its container ended 0 without finishing: a
        # crashed worker its wrapper did not report); learner 0 waits in all_reduce.
        9: lambda s: s.engine.set_state(s.learners[1], "exited", 0, finished_at=s.now),
    }  # fmt: skip
    seen_at = sim.run(script)
    assert seen_at is not None and seen_at - 9 <= STALL_AFTER + 10, seen_at
    (reason,) = sim.requeued  # the LCM counts it against max_restarts
    assert reason.startswith("stalled: no learner logged for")
    assert "learner 0 (running): last line 'epoch 1'" in reason
    assert (
        "learner 1 (exited): last line 'worker process exited'" in reason and "exited 0" in reason
    )


def test_a_job_that_keeps_logging_is_never_stalled(job_store):
    sim = Sim(job_store, 2, "fail")
    script = {k: sim.say(k % 2, f"step {k}") for k in range(0, 300, 20)}
    assert sim.run(script) is None
    assert sim.repo.get("job").status == Status.PROCESSING


# ---- the pure rule, a fake clock --------------------------------------------------------


def running(i: int) -> Container:
    return Container(f"l{i}", f"l{i}", "job", "learner", i, "running")


def view(now: float, activity: dict, **kw) -> JobView:
    helper = Container("h", "h", "job", "helper", None, "running")
    return JobView(
        state=JobState(Status.PROCESSING, 0.0, "", seq=3),
        containers=[helper, *(running(i) for i in activity)],
        now=now,
        learner_activity=activity,
        stall_after_s=30,
        **kw,
    )


def test_the_rule_looks_again_when_the_stall_would_be_due():
    quiet = {0: limits.Activity(100.0, "epoch 2"), 1: limits.Activity(110.0, "epoch 2")}
    dec = decide(view(125.0, quiet))
    assert dec.actions == [] and dec.recheck_at == 135.0  # the next poll, 10 s on
    assert decide(view(139.0, quiet)).recheck_at == 140.0  # due at the last activity + 30
    (mark,) = decide(view(140.0, quiet)).actions
    assert isinstance(mark, MarkStalled) and mark.since == 110.0
    marked = decide(view(141.0, quiet, stall_marked_for=110.0))
    # Marked: nothing more, and the next look is the next poll (not at once, again and again).
    assert marked.actions == [] and marked.recheck_at == 151.0


@pytest.mark.parametrize("status", [Status.DOWNLOADING, Status.STORING])
def test_only_training_can_stall(status):
    quiet = {0: limits.Activity(0.0, "")}
    v = view(1000.0, quiet)
    v = JobView(**{**v.__dict__, "state": JobState(status, 0.0, "", seq=3)})
    assert not any(isinstance(a, MarkStalled) for a in decide(v).actions)


def test_the_platform_bounds_a_manifests_limits():
    def of(fields: str, **platform):
        m = parse_manifest(
            f"name: b\n{fields}framework: {{name: python, version: '3', command: python3 t.py}}\n"
        )
        return Limits(**platform).of(m)

    # No stall_after: the platform's default; more than its maximum: the maximum.
    assert of("", stall_after_s=600)["stall_after_s"] == 600
    assert of("stall_after: 30\n", stall_after_s=600)["stall_after_s"] == 30
    assert of("stall_after: 9000\n", max_stall_after_s=3600)["stall_after_s"] == 3600
    assert of("")["stall_after_s"] == 0  # the default of 0: not watched
    assert of("on_stall: restart\n")["on_stall"] == "restart"
    # A deadline past the platform's maximum run time, or none: the maximum, said so.
    assert of("max_duration: 2h\n", max_duration_s=3600) == {
        "stall_after_s": 0, "on_stall": "notify", "max_duration_s": 3600,
        "deadline_source": "the platform's maximum run time",
        "disk_limit_bytes": 0, "disk_poll_s": 10.0,
    }  # fmt: skip
    assert of("max_duration: 30m\n", max_duration_s=3600)["deadline_source"] == "max_duration"
    assert of("")["max_duration_s"] == 0
