"""The dashboard's Usage page in a real browser: Debian's Chromium, headless, through Playwright.

The API is the real app (create_app) served by uvicorn on a free local port, over a SQLite
store in the test's tmp dir holding finished jobs of two teams (test_usage_api's data), with
FAKE LCM, scheduler and S3 that the page never reaches. The administrator sees a chart per
team whose points are the days of the range (the job's day at its hours, the others 0) and
the teams' totals; alice sees her own team's chart only; no script error on the way.
Skipped, saying why, where Chromium or Playwright is missing (a failure in CI).
"""

from __future__ import annotations

import datetime as dt
import socket
import threading
import time

import pytest
import uvicorn
from chromium import launched
from usage_data import ADMIN, ALICE, YESTERDAY, ran, usage_app


@pytest.fixture
def base(job_store, tmp_path):
    app = usage_app(job_store, tmp_path)
    ran(job_store, "job-a1", "alice", "ateam", hours=1, learners=2)
    ran(job_store, "job-b1", "bob", "bteam", hours=3, learners=2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the API did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def test_the_usage_page_charts_each_team_the_caller_may_see(base):
    errors: list[str] = []
    with launched() as browser:
        for token, teams in ((ADMIN, ["ateam", "bteam"]), (ALICE, ["ateam"])):
            page = browser.new_page()
            page.set_default_timeout(20_000)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{base}/ui/#/usage")
            page.fill("#token", token)
            page.keyboard.press("Enter")
            page.wait_for_selector(f"div.chart[data-team={teams[-1]}] canvas")
            charts = page.evaluate("Object.keys(window.dlaasCharts).sort()")
            assert charts == [f"usage:{t}" for t in teams]
            rows = page.inner_text("table.usage tbody").splitlines()
            assert [r.split("\t")[0] for r in rows] == teams
            data = page.evaluate("window.dlaasCharts['usage:ateam'].data")
            days, gpu_hours = data[0], data[1]
            assert len(days) == 30  # the default range, every day a point
            at = days.index(dt.datetime.combine(YESTERDAY, dt.time(), dt.UTC).timestamp())
            assert gpu_hours[at] == 2.0 and sum(gpu_hours) == 2.0
            page.close()
    assert errors == []
