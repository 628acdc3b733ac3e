"""The dashboard's serving, without a browser or a server: the page and every file it loads
are served under a self-only Content-Security-Policy, none of them names another host
(nothing is fetched at run time), the data routes still need a token, and GET /v1/nodes
sums what placed jobs hold per node and passes on what the LCM measured of each (unknown
as null, and in /metrics as an absent series).

The app is the real one (create_app), made once for the module, on an in-memory SQLite
store; the LCM is a stub answering only `cluster()`, the one call these routes make of it.
"""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from offline_settings import offline_settings
from prometheus_client.parser import text_string_to_metric_families

from dlaas.adapters.store.base import JobRecord
from dlaas.clients.sdk import NodeInfo, NodeUtilization
from dlaas.config import ApiSettings
from dlaas.domain.accounts import TokenRecord, User, token_hash
from dlaas.domain.status import Status
from services.api.app import create_app
from services.api.dashboard import CSP, STATIC
from services.api.dashboard.nodes import Placed, allocation, placed_job

ADMIN, ALICE, BOB = "tok-admin", "tok-alice", "tok-bob"
# XML namespace names: identifiers inside the DOM libraries, never fetched.
NAMESPACES = (
    "http://www.w3.org/2000/svg",
    "http://www.w3.org/1999/xhtml",
    "http://www.w3.org/1998/Math/MathML",
)
# Anything that would make the browser reach another host: a URL with a scheme, or a
# scheme-relative one (`//cdn...`) in an attribute, a CSS url() or an import.
EXTERNAL = re.compile(
    r"""(?:https?|wss?|ftp):\\?/\\?/[^\s"'`)]*"""
    r"""|(?:src|href|action)\s*=\s*["']//"""
    r"""|url\(\s*["']?//"""
    r"""|(?:import|from)\s*\(?\s*["'](?:https?:)?//"""
)
LOADED = (".html", ".js", ".css")  # what the page loads; READMEs and licenses are not


def external_refs(text: str) -> list[str]:
    return [m for m in EXTERNAL.findall(text) if m not in NAMESPACES]


class StubLcm:
    """Answers `cluster()` as the LCM's gRPC Cluster call does; nothing else is called."""

    def __init__(self, nodes: list[NodeInfo]):
        self.nodes = nodes

    def cluster(self) -> list[NodeInfo]:
        return self.nodes


def manifest(learners: int, cpus: float, memory: str, gpus: int = 0) -> str:
    return (
        f"name: m\nlearners: {learners}\ncpus: {cpus}\nmemory: {memory}\ngpus: {gpus}\n"
        "framework: {name: python, command: 'true'}\n"
    )


@pytest.fixture(scope="module")
def client(module_job_store, tmp_path_factory):
    """The app, made once for the module (its first request builds every route). Its
    tests read it; the one that adds jobs takes `job_store`, which deletes them after. The
    bad tokens of test_data_routes_still_need_a_token (one per path) stay below the limit
    of failed checks."""
    job_store = module_job_store
    settings = offline_settings(f"sqlite:///{tmp_path_factory.mktemp('unused') / 'jobs.db'}")
    for name, token in (("alice", ALICE), ("bob", BOB)):
        job_store.add_user(User(name, "", False, 1.0))
        job_store.add_token(TokenRecord(token_hash(token), name, token[:6], 1.0))
    lcm = StubLcm(
        [
            # n1 measured (GPU use unknown: no telemetry); n2 not measured at all.
            NodeInfo(
                "n1",
                8,
                16384,
                2,
                "t4",
                True,
                utilization=NodeUtilization(1.25, 300, None, 3, 1000.0),
            ),
            NodeInfo("n2", 4, 8192, 0, "", False),
        ]
    )
    app = create_app(
        settings,
        ApiSettings(admin_token=ADMIN),
        store=job_store,
        lcm=lcm,
        s3=object(),
        docker=False,
        scheduler=object(),
        tasks=object(),
        failure_counts=False,  # no Redis: each replica counts failed token checks itself
    )
    with TestClient(app) as c:
        yield c


@pytest.fixture
def job_store(module_job_store):
    """The app's store, for a test that adds jobs: every job is deleted after the test."""
    yield module_job_store
    for job in list(module_job_store.each()):
        module_job_store.delete(job.job_id)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# --------------------------------------------------------------------------- serving


def test_ui_redirects_to_the_page_which_loads_only_its_own_files(client):
    r = client.get("/ui", follow_redirects=False)
    assert r.status_code == 308 and r.headers["location"] == "/ui/"
    page = client.get("/ui/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.headers["content-security-policy"] == CSP
    # Every file the page names, and every module app.js imports, is served from here.
    names = re.findall(r'(?:src|href)="(static/[^"]+)"', page.text)
    app_js = (STATIC / "app.js").read_text()
    names += ["static/" + m.removeprefix("./") for m in re.findall(r'from "(\./[^"]+)"', app_js)]
    assert {"static/app.js", "static/app.css", "static/vendor/vendor.min.js"} <= set(names)
    for name in names:
        r = client.get(f"/ui/{name}")
        assert r.status_code == 200, name
        assert r.headers["content-security-policy"] == CSP, name
        assert r.headers["x-content-type-options"] == "nosniff"
        kind = "javascript" if name.endswith(".js") else "css"
        assert kind in r.headers["content-type"], name
    # No inline script: every <script> loads a file (the CSP would refuse inline code).
    assert all("src=" in tag for tag in re.findall(r"<script[^>]*>", page.text))


def test_csp_allows_nothing_but_the_own_origin():
    sources = set()
    for directive in CSP.split(";"):
        _directive, *values = directive.split()
        sources.update(values)
    assert sources <= {"'self'", "'none'", "data:", "blob:"}
    assert "'unsafe-inline'" not in CSP and "'unsafe-eval'" not in CSP
    assert "frame-ancestors 'none'" in CSP


def test_static_files_name_no_other_host():
    files = [p for p in STATIC.rglob("*") if p.suffix in LOADED]
    assert len(files) >= 4  # index.html, app.js, app.css, the vendor bundle and its CSS
    found = {str(p.relative_to(STATIC)): external_refs(p.read_text()) for p in files}
    assert {name: refs for name, refs in found.items() if refs} == {}


@pytest.mark.parametrize(
    "text",
    [
        '<script src="https://cdn.example.com/preact.js"></script>',
        '<link href="//fonts.example.com/a.css">',
        "body { background: url(//img.example.com/x.png) }",
        'import("https://esm.example.com/htm")',
        'fetch("http:\\/\\/tracker.example.com")',
    ],
)
def test_the_external_url_check_catches_what_it_must(text):
    assert external_refs(text)


def test_the_external_url_check_lets_namespaces_and_relative_paths_be():
    text = 'createElementNS("http://www.w3.org/2000/svg","g"); import x from "./vendor/v.js"'
    assert external_refs(text) == []


@pytest.mark.parametrize(
    "path",
    ["/v1/jobs", "/v1/jobs/job-x", "/v1/jobs/job-x/metrics", "/v1/queue", "/v1/me", "/v1/nodes"],
)
def test_data_routes_still_need_a_token(client, path):
    assert client.get(path).status_code == 401
    assert client.get(path, headers=auth("not-a-token")).status_code == 401
    # The page's own session (a cookie, were there one) opens nothing either.
    client.get("/ui/")
    assert client.get(path).status_code == 401


# --------------------------------------------------------------------------- /v1/nodes


def _placed(job_store, job_id: str, user: str, status: Status, nodes: list[str], yaml: str):
    learners = [{"id": i, "node": n, "state": "running"} for i, n in enumerate(nodes)]
    job_store.create(
        JobRecord(job_id, user, "m", yaml, 1.0, status=status, info={"learners": learners})
    )


def test_nodes_sum_what_placed_jobs_hold_and_list_only_the_callers_jobs(client, job_store):
    _placed(
        job_store, "job-a", "alice", Status.PROCESSING, ["n1", "n1"], manifest(2, 1.5, "1GiB", 1)
    )
    _placed(job_store, "job-b", "bob", Status.DOWNLOADING, ["n1"], manifest(1, 2, "512MiB"))
    # Ended or still queued: holds nothing.
    _placed(job_store, "job-c", "alice", Status.COMPLETED, ["n1"], manifest(1, 4, "4GiB"))
    _placed(job_store, "job-d", "alice", Status.QUEUED, [], manifest(1, 4, "4GiB"))

    r = client.get("/v1/nodes", headers=auth(ALICE))
    assert r.status_code == 200, r.text
    nodes = {n["name"]: n for n in r.json()["nodes"]}
    n1 = nodes["n1"]
    assert n1["capacity"] == {"cpus": 8, "memory_mb": 16384, "gpus": 2, "learners": 0}
    assert n1["allocated"] == {"cpus": 5.0, "memory_mb": 2560, "gpus": 2, "learners": 3}
    assert n1["jobs"] == ["job-a"]  # bob's job counts in the totals, but is not named
    assert nodes["n2"]["healthy"] is False and nodes["n2"]["allocated"]["learners"] == 0

    admin = {n["name"]: n for n in client.get("/v1/nodes", headers=auth(ADMIN)).json()["nodes"]}
    assert admin["n1"]["jobs"] == ["job-a", "job-b"]


def test_allocation_adds_learners_per_node():
    use = allocation(
        [
            Placed("a", "u", 1.0, 100, 1, ("x", "y", "x")),
            Placed("b", "u", 0.5, 50, 0, ("y",)),
        ]
    )
    assert (use["x"].cpus, use["x"].memory_mb, use["x"].gpus, use["x"].learners) == (2.0, 200, 2, 2)
    assert (use["y"].cpus, use["y"].learners, use["y"].jobs) == (1.5, 2, {"a", "b"})


def test_a_record_without_placed_learners_or_a_readable_manifest_counts_for_nothing():
    yaml = manifest(1, 1, "1GiB")
    assert placed_job(JobRecord("j", "u", "m", yaml, 1.0, info={}), yaml) is None
    no_node = {"learners": [{"id": 0, "state": "created"}]}
    assert placed_job(JobRecord("j", "u", "m", yaml, 1.0, info=no_node), yaml) is None
    placed = {"learners": [{"id": 0, "node": "x"}]}
    assert placed_job(JobRecord("j", "u", "m", "name: [", 1.0, info=placed), "name: [") is None
    assert placed_job(JobRecord("j", "u", "m", yaml, 1.0, info=placed), yaml).nodes == ("x",)


def test_nodes_show_the_measured_use_and_unknown_as_null(client):
    nodes = {n["name"]: n for n in client.get("/v1/nodes", headers=auth(ALICE)).json()["nodes"]}
    assert nodes["n1"]["utilization"] == {
        "cpus": 1.25,
        "memory_mb": 300,
        "gpu_percent": None,
        "containers": 3,
        "sampled_at": 1000.0,
    }
    assert nodes["n2"]["utilization"] == {
        "cpus": None,
        "memory_mb": None,
        "gpu_percent": None,
        "containers": 0,
        "sampled_at": None,
    }
    schema = client.get("/openapi.json").json()["components"]["schemas"]
    assert set(schema["NodeUtilizationPublic"]["properties"]) == {
        "cpus", "memory_mb", "gpu_percent", "containers", "sampled_at"
    }  # fmt: skip
    assert "utilization" in schema["NodePublic"]["required"]


def test_metrics_export_the_measured_use_per_node_and_nothing_for_unknown(client):
    samples = {
        (s.name, s.labels["node"]): s
        for family in text_string_to_metric_families(client.get("/metrics").text)
        for s in family.samples
        if s.name in ("dlaas_node_used_cpus", "dlaas_node_used_memory_bytes",
                      "dlaas_node_job_containers")
    }  # fmt: skip
    # n2 was never measured: no series at all rather than a 0.
    assert set(samples) == {
        ("dlaas_node_used_cpus", "n1"),
        ("dlaas_node_used_memory_bytes", "n1"),
        ("dlaas_node_job_containers", "n1"),
    }
    assert samples["dlaas_node_used_cpus", "n1"].value == 1.25
    assert samples["dlaas_node_used_memory_bytes", "n1"].value == 300 * 2**20
    assert samples["dlaas_node_job_containers", "n1"].value == 3
    assert all("replica" in s.labels for s in samples.values())
