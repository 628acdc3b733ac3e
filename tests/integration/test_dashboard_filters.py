"""The dashboard's job list in a real browser, on the real API with no platform behind it:
its status choices and its "final" rule come from `GET /v1/statuses` (the domain's status
table, not a copy in app.js), and its label filter shows the FAILED jobs of one triage
label.

The API is create_app on a SQLite store in the module's tmp dir, served by uvicorn on a free
port in a thread; the jobs are written into the store as the job monitor would leave them.
The scheduler is a stub whose queue is empty (a QUEUED job's page asks it); nothing else
of the platform is called by the pages visited. Debian's Chromium, headless (tests/chromium.py).
"""

from __future__ import annotations

import threading
import time

import pytest
import uvicorn
from chromium import launched
from offline_settings import offline_settings

from dlaas.adapters.store import open_store
from dlaas.adapters.store.base import JobRecord
from dlaas.config import ApiSettings
from dlaas.domain.accounts import TokenRecord, User, token_hash
from dlaas.domain.status import FINAL, Status, Transition
from dlaas.local.processes import free_port
from services.api.app import create_app

ALICE = "tok-alice-dashboard"


class EmptyQueue:
    """The scheduler as a QUEUED job's page asks it: nothing is queued."""

    def queue(self, remaining_s=None):
        return []


def _job(store, job_id: str, at: float, status: Status = Status.QUEUED, label: str = "") -> None:
    store.create(
        JobRecord(job_id, "alice", job_id, "name: x\n", at, history=[Transition(Status.QUEUED, at, "submitted")])
    )  # fmt: skip
    if status is Status.FAILED:
        reason = f"{label}: learner 0 failed (exit code 1)"
        store.record_transition(job_id, 1, Transition(status, at + 1, reason, label, 1))


@pytest.fixture(scope="module")
def base_url(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("dashboard")
    job_store = open_store(f"sqlite:///{tmp_path / 'jobs.db'}")
    settings = offline_settings(f"sqlite:///{tmp_path / 'jobs.db'}")
    job_store.add_user(User("alice", "", False, 1.0))
    job_store.add_token(TokenRecord(token_hash(ALICE), "alice", ALICE[:6], 1.0))
    _job(job_store, "job-oom-1", 10.0, Status.FAILED, "gpu_oom")
    _job(job_store, "job-disk", 11.0, Status.FAILED, "disk_full")
    _job(job_store, "job-oom-2", 12.0, Status.FAILED, "gpu_oom")
    _job(job_store, "job-waiting", 13.0)
    app = create_app(
        settings, ApiSettings(admin_token="tok-admin"), store=job_store, lcm=object(),
        s3=object(), docker=False, scheduler=EmptyQueue(), tasks=object(),
    )  # fmt: skip
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        job_store.close()


@pytest.fixture(scope="module")
def browser():
    with launched() as b:
        yield b


@pytest.fixture
def page(browser, base_url):
    """A fresh tab, logged in as alice, on the job list; it must hit no script error."""
    context = browser.new_context()
    try:
        page = context.new_page()
        page.set_default_timeout(20_000)
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{base_url}/ui/")
        page.fill("#token", ALICE)
        page.click("button[type=submit]")
        page.wait_for_selector("tr[data-job='job-waiting']")
        yield page
        assert errors == []
    finally:
        context.close()


def options(page, select: str, least: int) -> list[str]:
    """The values of a select's options, once it has at least `least` of them (preact sets
    `value` as a property, so no attribute selector finds them)."""
    page.wait_for_function(
        "([s, n]) => document.querySelectorAll(s + ' option').length >= n", arg=[select, least]
    )
    return page.eval_on_selector_all(f"{select} option", "os => os.map(o => o.value)")


def shown(page) -> list[str]:
    return page.eval_on_selector_all("tr[data-job]", "rows => rows.map(r => r.dataset.job)")


def test_the_status_choices_are_the_servers_table(page):
    assert options(page, "#status-filter", 2) == ["", *[str(s) for s in Status]]


def test_the_label_filter_shows_the_failed_jobs_of_one_label(page):
    # The FAILED jobs' labels, sorted.
    assert options(page, "#label-filter", 3) == ["", "disk_full", "gpu_oom"]
    page.select_option("#label-filter", "gpu_oom")
    page.wait_for_selector("tr[data-job='job-disk']", state="detached")
    assert shown(page) == ["job-oom-2", "job-oom-1"]
    # The other labels stay to choose from while one is shown.
    page.select_option("#label-filter", "disk_full")
    page.wait_for_selector("tr[data-job='job-oom-2']", state="detached")
    assert shown(page) == ["job-disk"]
    page.select_option("#label-filter", "")
    page.wait_for_selector("tr[data-job='job-oom-1']")
    assert sorted(shown(page)) == ["job-disk", "job-oom-1", "job-oom-2", "job-waiting"]


@pytest.mark.parametrize(("job_id", "status"), [("job-oom-1", "FAILED"), ("job-waiting", "QUEUED")])
def test_a_final_jobs_actions_are_off_as_the_server_says(page, job_id, status):
    page.click(f"a[href='#/job/{job_id}']")
    page.wait_for_function(
        "s => document.querySelector('#job-status')?.innerText.trim() === s", arg=status
    )
    assert page.is_disabled("#halt") == (Status(status) in FINAL)
