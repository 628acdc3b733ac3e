"""End to end in a real browser: the web dashboard at /ui on a real platform.

Debian's Chromium, headless, driven by Playwright (PyPI `playwright`; its own browser
download is never used). The platform comes up once for the module with `dlaas.local.platform.up`
(real Docker engine, etcd, SeaweedFS, the services as processes), as in
test_platform_e2e.py. The user logs in with the token `dlaas up` made, submits a job in
the page, watches its metric chart fill while it runs and its status reach COMPLETED,
reads its log, downloads its results, halts and deletes jobs with the buttons; the
administrator sees the admin pages. Screenshots go to $DLAAS_TEST_ARTIFACTS/dashboard (or
the test's tmp dir); the path is printed.

Skipped, saying why, where Chromium or Playwright is missing, except in CI (CI=true),
where scripts/install.sh installs both and a missing one is a failure.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from chromium import browser_or_skip, launched

from dlaas.local import platform

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

# Two points, then a pause long enough to see the chart hold them while the job still
# runs, then three more. `key=value` lines are the default metrics convention.
JOB = """\
name: dash-e2e
cpus: 0.5
memory: 128MiB
framework:
  name: python
  command: >-
    echo "epoch 1/5 loss=0.90 accuracy=0.40"; echo "epoch 2/5 loss=0.70 accuracy=0.55";
    sleep 15;
    echo "epoch 3/5 loss=0.50 accuracy=0.70"; echo "epoch 4/5 loss=0.35 accuracy=0.80";
    echo "epoch 5/5 loss=0.30 accuracy=0.85"
"""
LONG_JOB = (
    "name: dash-long\ncpus: 0.5\nmemory: 128MiB\n"
    'framework: {name: python, command: "echo started; sleep 300"}\n'
)


@pytest.fixture(scope="module")
def home(tmp_path_factory, docker_client):
    """The platform's state dir: up for the whole module, down afterwards."""
    browser_or_skip()  # before minutes of platform start, not after
    home = tmp_path_factory.mktemp("platform")
    platform.up(home, progress=lambda line: None)
    try:
        yield home
    finally:
        platform.down(home, progress=lambda line: None)


@pytest.fixture(scope="module")
def creds(home) -> dict:
    user = json.loads((home / "client.json").read_text())
    admin = json.loads((home / "admin.json").read_text())
    return {"url": user["url"], "user": user["token"], "admin": admin["admin_token"]}


@pytest.fixture
def shots(tmp_path) -> Path:
    """Where this test's screenshots go (printed, so a run's log says where to look)."""
    root = os.environ.get("DLAAS_TEST_ARTIFACTS")
    folder = Path(root) / "dashboard" if root else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    print(f"dashboard screenshots: {folder}")
    return folder


@pytest.fixture
def browser():
    with launched() as b:
        yield b


class Watched:
    """A page with every request it makes and every script error it hits recorded."""

    def __init__(self, browser, base: str):
        self.base = base
        self.context = browser.new_context(
            accept_downloads=True, viewport={"width": 1400, "height": 1000}
        )
        self.page = self.context.new_page()
        self.page.set_default_timeout(30_000)
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", lambda d: d.accept())  # the delete button asks first

    def login(self, token: str) -> None:
        self.page.goto(f"{self.base}/ui/")
        self.page.fill("#token", token)
        self.page.click("button[type=submit]")
        self.page.wait_for_selector("header nav")

    def chart_points(self, name: str) -> int:
        """How many points the uPlot chart of series `name` really holds (-1: no chart)."""
        return self.page.evaluate(
            "n => window.dlaasCharts[n] ? window.dlaasCharts[n].data[0].length : -1", name
        )

    def status(self) -> str:
        return self.page.inner_text("#job-status").strip()

    def close(self) -> None:
        self.context.close()


def _api(creds, token_key="user"):
    return httpx.Client(
        base_url=creds["url"], headers={"Authorization": f"Bearer {creds[token_key]}"}, timeout=30
    )


def test_user_submits_watches_a_job_complete_with_a_live_loss_chart(browser, creds, shots):
    started = time.monotonic()
    w = Watched(browser, creds["url"])
    try:
        page = w.page
        w.login(creds["user"])
        assert page.locator("header nav a", has_text="Admin").count() == 0  # not an admin
        page.screenshot(path=shots / "01-jobs.png", full_page=True)

        # Submit in the page; it goes to the job's own page.
        page.click("header nav a:has-text('Submit')")
        page.fill("#manifest", JOB)
        page.click("form.submit button[type=submit]")
        page.wait_for_url(lambda url: "#/job/" in url)
        job_id = page.url.rsplit("/", 1)[1]
        assert job_id.startswith("job-")

        # While the job runs (its learner sleeps 15 s after two epochs), the loss chart
        # already holds those two points: the metrics stream brought them live.
        page.wait_for_function(
            """() => window.dlaasCharts.loss?.data[0].length >= 2
                && document.querySelector('#job-status')?.innerText.trim() === 'PROCESSING'""",
            timeout=120_000,
        )
        assert w.chart_points("loss") < 5
        page.screenshot(path=shots / "02-job-running.png", full_page=True)

        page.wait_for_function(
            "() => document.querySelector('#job-status')?.innerText.trim() === 'COMPLETED'",
            timeout=120_000,
        )
        page.wait_for_function("() => window.dlaasCharts.loss?.data[0].length === 5")
        loss = page.evaluate("() => window.dlaasCharts.loss.data")
        assert loss == [[1, 2, 3, 4, 5], [0.9, 0.7, 0.5, 0.35, 0.3]]
        assert w.chart_points("accuracy") == 5
        # The page shows the path the job took, its learner and its log.
        history = page.inner_text("table.history")
        for status in ("QUEUED", "PENDING", "PROCESSING", "COMPLETED"):
            assert status in history
        page.wait_for_function(
            "() => document.querySelector('#log-0')?.innerText.includes('epoch 5/5 loss=0.30')"
        )
        assert page.locator("table.learners tbody tr").count() == 1
        page.screenshot(path=shots / "03-job-completed.png", full_page=True)

        # Results: fetched with the token, handed to the browser as a download.
        with page.expect_download() as download:
            page.click("#download")
        saved = shots / download.value.suggested_filename
        download.value.save_as(saved)
        assert saved.name == f"{job_id}-results.tar.gz" and saved.stat().st_size > 0

        # The job list finds it by text and by status filter.
        page.click("header nav a:has-text('Jobs')")
        page.fill("#text-filter", "dash-e2e")
        page.select_option("#status-filter", "COMPLETED")
        page.wait_for_selector(f"tr[data-job='{job_id}']")
        page.fill("#text-filter", "no-such-job-name")
        page.wait_for_selector(f"tr[data-job='{job_id}']", state="detached")
        page.screenshot(path=shots / "04-jobs-filtered.png", full_page=True)

        # Queue and nodes pages answer from the real scheduler and LCM.
        page.click("header nav a:has-text('Queue')")
        page.wait_for_selector("text=The queue is empty")
        page.click("header nav a:has-text('Nodes')")
        page.wait_for_selector("table.nodes tbody tr")
        assert "healthy" in page.inner_text("table.nodes")
        assert "CPUs used" in page.inner_text("table.nodes thead")
        page.screenshot(path=shots / "05-nodes.png", full_page=True)

        assert w.errors == []
        _assert_only_own_origin(w, creds)
    finally:
        w.close()
    print(f"dashboard browser test took {time.monotonic() - started:.1f} s")


def test_halt_and_delete_buttons_and_nodes_allocation(browser, creds, shots):
    with _api(creds) as http:
        r = http.post("/v1/jobs", content=LONG_JOB, headers={"Content-Type": "application/yaml"})
        assert r.status_code == 201, r.text
        job_id = r.json()["job_id"]
    w = Watched(browser, creds["url"])
    try:
        page = w.page
        w.login(creds["user"])
        page.goto(f"{creds['url']}/ui/#/job/{job_id}")
        page.wait_for_function(
            "() => document.querySelector('#job-status')?.innerText.trim() === 'PROCESSING'",
            timeout=120_000,
        )
        page.wait_for_function(
            "() => document.querySelector('#log-0')?.innerText.includes('started')"
        )
        # The running job holds its allocation on the node it runs on.
        page.click("header nav a:has-text('Nodes')")
        page.wait_for_selector(f"table.nodes a:has-text('{job_id}')")
        # And what its containers use, measured by the LCM every few seconds (a meter once
        # known; "unknown" until the second sample).
        page.wait_for_selector("table.nodes td.used-cpus meter", timeout=60_000)
        page.wait_for_selector("table.nodes td.used-memory meter")
        page.screenshot(path=shots / "06-nodes-allocated.png", full_page=True)

        page.goto(f"{creds['url']}/ui/#/job/{job_id}")
        page.click("#halt")
        page.wait_for_function(
            "() => document.querySelector('#job-status')?.innerText.trim() === 'HALTED'",
            timeout=60_000,
        )
        assert page.is_enabled("#resume")
        page.screenshot(path=shots / "07-job-halted.png", full_page=True)
        # The DELETE's answer, so a failure says what the API answered (or that none came).
        with page.expect_response(
            lambda r: r.request.method == "DELETE" and r.url.endswith(f"/v1/jobs/{job_id}"),
            timeout=60_000,
        ) as deleted:
            page.click("#delete")
        assert deleted.value.status == 200, (deleted.value.status, deleted.value.text())
        page.wait_for_url(lambda url: url.endswith("#/jobs"))
        with _api(creds) as http:
            assert http.get(f"/v1/jobs/{job_id}").status_code == 404
        assert w.errors == []
        _assert_only_own_origin(w, creds)
    finally:
        w.close()


def test_admin_sees_users_teams_and_audit(browser, creds, shots):
    w = Watched(browser, creds["url"])
    try:
        page = w.page
        w.login(creds["admin"])
        page.click("header nav a:has-text('Admin')")
        with _api(creds) as http:
            me = http.get("/v1/me").json()["user"]  # the user `dlaas up` made
        page.wait_for_selector(f"table.users tbody td:text-is('{me}')")
        page.wait_for_selector("table.teams tbody td:text-is('default')")
        # Adding a user shows its token once, and the list has it.
        page.fill("form.inline input[name=name]", "dash-newcomer")
        page.click("form.inline button[type=submit]")
        issued = page.wait_for_selector(".issued code").inner_text()
        page.wait_for_selector("table.users tbody td:text-is('dash-newcomer')")
        with httpx.Client(
            base_url=creds["url"], headers={"Authorization": f"Bearer {issued}"}
        ) as http:
            assert http.get("/v1/me").json()["user"] == "dash-newcomer"
        page.screenshot(path=shots / "08-admin.png", full_page=True)
        # Logging out forgets the token: a reload asks for one again.
        page.click("#logout")
        page.reload()
        page.wait_for_selector("#token")
        assert page.evaluate("() => sessionStorage.length") == 0
        assert w.errors == []
    finally:
        w.close()


def _assert_only_own_origin(w: Watched, creds: dict) -> None:
    """Every request went to the API's own origin (or a blob: the download), none with a
    token in its URL."""
    origin = urlsplit(creds["url"])
    for url in w.requests:
        parts = urlsplit(url)
        if parts.scheme in ("blob", "data"):
            continue
        assert (parts.scheme, parts.netloc) == (origin.scheme, origin.netloc), url
        assert creds["user"] not in url and creds["admin"] not in url, "a token in a URL"
