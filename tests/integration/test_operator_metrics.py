"""`/metrics` for operators, over test_api's setup (the REAL LCM use cases on the fakes of
its ports, a real SQLite store and S3): jobs by status, the queue, the wait and deploy
histograms, requeues by cause, failures by code and each node's CPUs/GPUs/memory, every
series labelled with the replica; and deploy/grafana-dashboard.json queries only names
the endpoint exposes.

Two API apps over one store stand for two replicas: their platform series agree, and
each one's request counters are its own series.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from test_api import (
    ALICE,
    CLUSTER_CPUS,
    Env,
    FakeTaskQueue,
    make_settings,
    seed_users,
    start_fakes,
)

from dlaas.clients.sdk import LcmClient, SchedulerClient
from dlaas.config import ApiSettings
from dlaas.domain.status import Status
from services.api.app import create_app

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana-dashboard.json"
MIB = 2**20


@pytest.fixture
def replicas(s3_server, s3_client, job_store, tmp_path):
    """Two API replicas, "api-7" and "api-8", over one store and one LCM."""
    server, addr, lcm, sched = start_fakes(job_store)
    settings, _ = make_settings(s3_server, tmp_path / "jobs.db", addr)
    seed_users(job_store)
    envs, clients = [], []
    try:
        for name in ("api-7", "api-8"):
            app = create_app(
                settings,
                ApiSettings(admin_token="tok-admin", replica=name),
                store=job_store,
                lcm=LcmClient(addr),
                s3=s3_client,
                docker=False,
                scheduler=SchedulerClient(addr),
                tasks=FakeTaskQueue(),
            )
            client = TestClient(app).__enter__()
            clients.append(client)
            envs.append(Env(client, job_store, s3_client, settings, lcm, sched))
        yield envs
    finally:
        for client in clients:
            client.__exit__(None, None, None)
        server.stop(0)


def scrape(env) -> dict[str, list]:
    """Family name -> samples (a counter's family is named without `_total`)."""
    r = env.client.get("/metrics")
    assert r.status_code == 200
    return {f.name: f.samples for f in text_string_to_metric_families(r.text)}


def value(families, sample_name: str, **labels) -> float:
    family = re.sub(r"(_total|_count|_sum|_bucket)$", "", sample_name)
    found = [
        s.value
        for s in families[family]
        if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (sample_name, labels, families.get(family))
    return found[0]


SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}


def exposed_names(text: str) -> set[str]:
    """Every sample name the endpoint declares, also of a family with no sample yet (a
    counter of requeues before the first requeue)."""
    names = set()
    for f in text_string_to_metric_families(text):
        names.add(f.name)
        names.update(f.name + suffix for suffix in SUFFIXES.get(f.type, ()))
        names.update(s.name for s in f.samples)
    return names


def placed_on(env, job_id: str, node: str, learners: int = 1) -> None:
    """What the LCM records on deploying: each learner's node."""
    env.store.update_info(
        job_id, {"learners": [{"index": i, "node": node} for i in range(learners)]}
    )


def test_a_scrape_reports_jobs_queue_nodes_deploys_and_requeues(replicas):
    a, _ = replicas
    running = a.submit(manifest=a.manifest(learners=2)).json()["job_id"]
    placed_on(a, running, "local", learners=2)
    a.finish(running, Status.PROCESSING, reason="training")
    failed = a.submit().json()["job_id"]
    a.finish(failed, Status.FAILED, reason="learner 0 exited 3", error_code="exit", exit_code=3)
    preempted = a.submit().json()["job_id"]
    a.finish(preempted, Status.PROCESSING, reason="training")
    assert a.lcm.keeper.try_transition(preempted, Status.QUEUED, "preempted: by job-x")

    m = scrape(a)
    assert value(m, "dlaas_jobs", status="PROCESSING", replica="api-7") == 1
    assert value(m, "dlaas_jobs", status="FAILED") == 1
    assert value(m, "dlaas_jobs", status="QUEUED") == 1
    assert value(m, "dlaas_jobs", status="COMPLETED") == 0
    assert value(m, "dlaas_queue_length") == 1
    assert value(m, "dlaas_queue_oldest_wait_seconds") >= 0
    # Two jobs were placed and deployed (the failed one never left the queue).
    assert value(m, "dlaas_queue_wait_seconds_count") == 2
    assert value(m, "dlaas_queue_wait_seconds_bucket", le="+Inf") == 2
    assert value(m, "dlaas_deploy_seconds_count") == 2
    assert value(m, "dlaas_job_requeues_total", cause="preempted") == 1
    assert value(m, "dlaas_job_failures_total", error_code="exit") == 1
    # The running job's two learners hold 2 CPUs and 2 x 512 MiB of the fake's one node.
    assert value(m, "dlaas_node_capacity_cpus", node="local") == CLUSTER_CPUS
    assert value(m, "dlaas_node_allocated_cpus", node="local") == 2
    assert value(m, "dlaas_node_free_cpus", node="local") == CLUSTER_CPUS - 2
    assert value(m, "dlaas_node_allocated_memory_bytes", node="local") == 1024 * MIB
    assert value(m, "dlaas_node_free_gpus", node="local") == 0
    assert value(m, "dlaas_node_learners", node="local") == 2
    assert value(m, "dlaas_node_healthy", node="local") == 1
    assert value(m, "dlaas_metrics_source_up", source="lcm") == 1
    assert value(m, "dlaas_api_jobs_submitted_total") == 3
    # Every series says which replica answered.
    assert all(s.labels.get("replica") == "api-7" for samples in m.values() for s in samples)


def test_two_replicas_agree_on_the_platform_and_keep_their_own_request_counts(replicas):
    a, b = replicas
    a.submit()
    a.submit()
    ma, mb = scrape(a), scrape(b)
    for name, labels in (
        ("dlaas_jobs", {"status": "QUEUED"}),
        ("dlaas_queue_length", {}),
        ("dlaas_node_free_cpus", {"node": "local"}),
    ):
        assert value(ma, name, **labels) == value(mb, name, **labels) != 0
    assert value(ma, "dlaas_api_jobs_submitted_total", replica="api-7") == 2
    assert value(mb, "dlaas_api_jobs_submitted_total", replica="api-8") == 0
    assert all(s.labels["replica"] == "api-8" for samples in mb.values() for s in samples)


def test_the_grafana_dashboard_queries_only_exposed_metrics(replicas):
    a, _ = replicas
    job = a.submit().json()["job_id"]
    a.finish(job, Status.FAILED, reason="x", error_code="exit")
    a.client.get("/v1/jobs", headers={"Authorization": f"Bearer {ALICE}"})
    exposed = exposed_names(a.client.get("/metrics").text)
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 8
    for expr in exprs:
        names = set(re.findall(r"\bdlaas_[a-z_]+\b", expr))
        assert names, expr
        assert names <= exposed, (expr, names - exposed)
    # Every platform family is on the dashboard somewhere.
    on_board = {n for e in exprs for n in re.findall(r"\bdlaas_[a-z_]+\b", e)}
    for family in ("dlaas_jobs", "dlaas_queue_length", "dlaas_job_requeues_total"):
        assert family in on_board
