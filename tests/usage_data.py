"""The data of the usage tests (tests/unit/test_usage_api.py, tests/integration/test_usage_page.py):
alice (ateam) and bob (bteam) with their tokens, jobs that ran yesterday, and FAKE platform
services the usage route never asks, and the real app over them."""

from __future__ import annotations

import datetime as dt

from offline_settings import offline_settings

from dlaas.adapters.store.base import JobRecord
from dlaas.config import ApiSettings
from dlaas.domain.accounts import Team, TokenRecord, User, token_hash
from dlaas.domain.status import Status, Transition
from dlaas.domain.usage import ALLOCATIONS_INFO, MEASURED_INFO
from services.api.app import create_app

ADMIN, ALICE, BOB = "tok-admin", "tok-alice", "tok-bob"
H = 3600.0
TODAY = dt.datetime.now(dt.UTC).date()
YESTERDAY = TODAY - dt.timedelta(days=1)
NOON = dt.datetime.combine(YESTERDAY, dt.time(12), dt.UTC).timestamp()
MANIFEST = "name: a\nlearners: 2\ngpus: 1\ncpus: 2\nmemory: 1Gi\nframework: {name: python, command: 'true'}\n"


class Unused:
    """FAKE LCM, scheduler and S3: the usage route asks none of them."""

    def cluster(self):
        return []

    def __getattr__(self, name):
        raise AssertionError(f"usage asked the {name} of a platform service")


def ran(store, job_id, user, team, hours, learners, used=None):
    """A job placed at noon yesterday with `learners`, ended `hours` later; `used`: what
    its learners used, as the monitor records it ({learner: {"cpu_s", "memory_peak_mib"}})."""
    steps = [(Status.QUEUED, NOON - 60), (Status.PENDING, NOON), (Status.PROCESSING, NOON + 1)]
    steps.append((Status.COMPLETED, NOON + hours * H))
    history = [Transition(s, at, "r") for s, at in steps]
    store.create(JobRecord(job_id, user, "n", MANIFEST, NOON - 60, history=history[:1], team=team))
    for seq, t in enumerate(history[1:], start=1):
        store.record_transition(job_id, seq, t)
    store.update_info(job_id, {ALLOCATIONS_INFO: {"1": learners}})
    if used is not None:  # the run queued at seq 0
        store.update_info(job_id, {MEASURED_INFO: {"0": used}})


def usage_app(store, tmp_path):
    """The real app on `store`, alice and bob in it with their tokens, no job yet."""
    settings = offline_settings(f"sqlite:///{tmp_path / 'jobs.db'}")
    for team in ("ateam", "bteam"):
        store.add_team(Team(team, created_at=1.0))
    for name, team, token in (("alice", "ateam", ALICE), ("bob", "bteam", BOB)):
        store.add_user(User(name, team, False, 1.0))
        store.add_token(TokenRecord(token_hash(token), name, token[:6], 1.0))
    return create_app(
        settings, ApiSettings(admin_token=ADMIN), store=store, lcm=Unused(),
        s3=Unused(), docker=False, scheduler=Unused(), tasks=object(),
    )  # fmt: skip
