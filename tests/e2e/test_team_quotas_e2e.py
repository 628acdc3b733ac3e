"""End to end: two teams' guaranteed shares on one live platform, borrowing and reclaim.

The platform is brought up once for this module with `dlaas.local.platform.up` in a temporary state
dir, declaring its one node's capacity (DLAAS_NODE_CPUS=4, DLAAS_NODE_MEMORY_MB=4096) so the
test controls the cluster's size whatever the machine has. Teams alpha and beta are each
guaranteed half of it (2 CPUs, 2048 MiB); each has one user, who uploads the training data
into the team's own bucket and submits over REST with their own token.

The story: beta fills the whole cluster (4 checkpointing jobs of 1 CPU; two of them run on
idle capacity borrowed from alpha). Alpha then submits 2 jobs of 1 CPU: inside its
guarantee, so the scheduler reclaims, preempting two of beta's borrowed jobs (they checkpoint
on SIGTERM and go back to the queue with a reason saying so), and alpha's jobs start. While
beta's preempted jobs wait, their pending reason names beta's quota; `GET /v1/teams` and
`dlaas teams list` show each team's usage against its quota. When room frees, beta's
preempted jobs continue from their checkpoints, and all six jobs end COMPLETED.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from dlaas.clients.cli import app
from dlaas.clients.client import pack_code
from dlaas.domain.status import DEPLOYED, FINAL
from dlaas.local import platform

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "examples/digits"
NODE_CPUS, NODE_MEMORY_MB = 4, 4096
SHARE = {"gpus": 0, "cpus": 2, "memory_mb": 2048}  # each team's guarantee: half the node
# Liveness bounds (not performance claims): long enough for a loaded 2-core machine.
START_BOUND_S = 90
END_BOUND_S = 150


def _digits(epochs: int, sleep: float, name: str) -> str:
    """The digits example (1 CPU, 512 MiB, checkpoints every epoch), slowed down."""
    return (
        (DIGITS / "manifest.yaml")
        .read_text()
        .replace("name: digits-mlp", f"name: {name}")
        .replace(
            "python3 train.py --epochs 20",
            f"python3 train.py --epochs {epochs} --epoch-sleep {sleep}",
        )
    )


# Beta's jobs run long enough to still be running after alpha's have come and gone.
BETA_JOB = _digits(40, 0.5, "beta-digits")
ALPHA_JOB = _digits(20, 0.5, "alpha-digits")


@pytest.fixture(scope="module")
def home(tmp_path_factory, docker_client):
    """The platform's state dir with a 4-CPU node: up for the whole module, down afterwards."""
    home = tmp_path_factory.mktemp("platform")
    with pytest.MonkeyPatch.context() as mp:
        # Read by `up`'s services (they inherit the environment): the node's declared size.
        mp.setenv("DLAAS_NODE_CPUS", str(NODE_CPUS))
        mp.setenv("DLAAS_NODE_MEMORY_MB", str(NODE_MEMORY_MB))
        started = time.monotonic()
        platform.up(home, progress=lambda line: None)
        print(f"platform up in {time.monotonic() - started:.1f} s")
        try:
            yield home
        finally:
            platform.down(home, progress=lambda line: None)


def _client(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


@pytest.fixture(scope="module")
def teams(home):
    """(admin, {"alpha": alice's client, "beta": bob's client}), data uploaded for both teams."""
    import importlib.util

    cfg = json.loads((home / "admin.json").read_text())
    admin = _client(cfg["url"], cfg["admin_token"])
    spec = importlib.util.spec_from_file_location("prepare", DIGITS / "prepare.py")
    prepare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prepare)
    data = prepare.digits_npz()
    users = {}
    for team, user in (("alpha", "alice"), ("beta", "bob")):
        reply = admin.post("/v1/teams", json={"name": team, **SHARE})
        assert reply.status_code == 201, reply.text
        reply = admin.post("/v1/users", json={"name": user, "team": team})
        assert reply.status_code == 201, reply.text
        users[team] = _client(cfg["url"], reply.json()["token"])
        # Each team's "digits-data" is its own bucket (the team's namespace).
        reply = users[team].put("/v1/data/digits-data/digits.npz", content=data)
        assert reply.status_code == 200, reply.text
    yield admin, users
    for c in (admin, *users.values()):
        c.close()


def submit(http: httpx.Client, manifest: str) -> str:
    data, name = pack_code(DIGITS)
    files = {
        "manifest": ("manifest.yaml", manifest.encode(), "application/yaml"),
        "code": (name, data, "application/gzip"),
    }
    reply = http.post("/v1/jobs", files=files)
    assert reply.status_code == 201, reply.text
    return reply.json()["job_id"]


def get(http: httpx.Client, job_id: str) -> dict:
    reply = http.get(f"/v1/jobs/{job_id}")
    assert reply.status_code == 200, reply.text
    return reply.json()


def logs(http: httpx.Client, job_id: str) -> list[str]:
    reply = http.get(f"/v1/jobs/{job_id}/logs", params={"learner": 0})
    assert reply.status_code == 200, reply.text
    return reply.text.splitlines()


def history(job: dict) -> list[tuple[str, str]]:
    return [(h["status"], h["reason"]) for h in job["history"]]


def preempted(job: dict) -> list[str]:
    """The reasons of the job's returns to the queue after it had been placed."""
    seen_placed, out = False, []
    for status, reason in history(job):
        if status in DEPLOYED:
            seen_placed = True
        elif status == "QUEUED" and seen_placed:
            out.append(reason)
    return out


def usage(admin: httpx.Client) -> dict[str, dict]:
    reply = admin.get("/v1/teams")
    assert reply.status_code == 200, reply.text
    return {t["name"]: t for t in reply.json()}


def teams_table(home: Path) -> dict[str, list[str]]:
    """`dlaas teams list` as the administrator runs it: team -> its row's cells."""
    # Wide enough that rich does not wrap a cell over two lines.
    out = CliRunner().invoke(app, ["--home", str(home), "teams", "list"], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    print(out.output)
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in out.output.splitlines()]
    # team, guaranteed, in use, borrowed, queued (then the priority ceiling, the storage
    # quota and the run times, not asserted here)
    return {r[0]: r[1:5] for r in rows if len(r) == 8}


def wait_until(what: str, check, bound: float, poll: float = 0.2):
    deadline = time.monotonic() + bound
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {bound} s"
        time.sleep(poll)


def test_a_team_below_its_guarantee_reclaims_borrowed_work_which_resumes_later(home, teams):
    admin, users = teams
    alpha, beta = users["alpha"], users["beta"]
    t0 = time.monotonic()
    timings: dict[str, float] = {}

    def mark(event: str) -> None:
        timings[event] = round(time.monotonic() - t0, 1)
        print(f"{timings[event]:6.1f} s  {event}")

    # 1. Beta fills the cluster: 2 jobs in its guarantee, 2 on capacity borrowed from alpha.
    beta_jobs = [submit(beta, BETA_JOB) for _ in range(4)]
    mark("beta submitted 4 jobs")

    def beta_all_training() -> bool:
        # Epoch 2 printed: each has a checkpoint, and a preemption has work to keep.
        return all(any(line.startswith("epoch 2/") for line in logs(beta, j)) for j in beta_jobs)

    wait_until("beta's 4 jobs training", beta_all_training, START_BOUND_S)
    mark("beta's 4 jobs past epoch 2")
    before = usage(admin)
    assert before["beta"]["quota"] == SHARE
    assert before["beta"]["usage"]["used"]["cpus"] == pytest.approx(4)
    assert before["beta"]["usage"]["borrowed"]["cpus"] == pytest.approx(2)
    assert before["alpha"]["usage"].get("used", {}).get("cpus", 0) == pytest.approx(0)
    # guaranteed, in use, borrowed, queued
    assert teams_table(home)["beta"] == [
        "0 GPUs, 2 CPUs, 2048 MiB", "0 GPUs, 4 CPUs, 2048 MiB", "0 GPUs, 2 CPUs, 1024 MiB", "0"
    ]  # fmt: skip

    # 2. Alpha, below its guarantee, submits 2 jobs of 1 CPU: they start by reclaiming.
    alpha_jobs = [submit(alpha, ALPHA_JOB) for _ in range(2)]
    mark("alpha submitted 2 jobs")

    def alpha_started() -> bool:
        return all(get(alpha, j)["status"] != "QUEUED" for j in alpha_jobs)

    wait_until("alpha's jobs placed", alpha_started, START_BOUND_S)
    mark("alpha's 2 jobs placed")
    for j in alpha_jobs:
        placed = [r for s, r in history(get(alpha, j)) if s == "PENDING"]
        assert placed and "preempting" in placed[0], history(get(alpha, j))

    def beta_preempted() -> list[str]:
        hit = [j for j in beta_jobs if preempted(get(beta, j))]
        return hit if len(hit) == 2 else []

    victims = wait_until("two of beta's jobs preempted", beta_preempted, START_BOUND_S, 0.1)
    mark(f"beta's {' '.join(victims)} preempted")
    for j in victims:
        reason = preempted(get(beta, j))[0]
        assert "preempted" in reason and "reclaimed" in reason and "team alpha" in reason, reason

    # 3. While beta's preempted jobs wait: their reason names beta's quota, and the teams view
    # shows each team at its guarantee.
    def waiting_reason() -> str:
        for j in victims:
            job = get(beta, j)
            if job["status"] == "QUEUED" and job.get("queue"):
                return job["queue"]["reason"]
        return ""

    reason = wait_until("a pending reason for beta's preempted jobs", waiting_reason, 30, 0.1)
    mark("beta's pending reason seen")
    print("pending reason:", reason)
    assert "team beta" in reason and "guaranteed CPUs" in reason, reason
    during = usage(admin)
    print("teams while reclaimed:", json.dumps({t: during[t]["usage"] for t in during}))
    for team in ("alpha", "beta"):
        assert during[team]["quota"] == SHARE
        assert during[team]["usage"]["used"]["cpus"] <= SHARE["cpus"] + 1e-9, during
        assert during[team]["usage"]["borrowed"]["cpus"] == pytest.approx(0), during
    assert during["beta"]["usage"]["queued"] >= 1
    table = teams_table(home)
    for team in ("alpha", "beta"):
        assert table[team][0] == "0 GPUs, 2 CPUs, 2048 MiB", table  # the guarantee
        assert table[team][2] == "0 GPUs, 0 CPUs, 0 MiB", table  # nothing borrowed now
    assert table["alpha"][1] == "0 GPUs, 2 CPUs, 1024 MiB", table

    # 4. Everything ends COMPLETED; the preempted jobs continued from their checkpoints.
    def all_final() -> dict[str, dict]:
        jobs = {j: get(beta if j in beta_jobs else alpha, j) for j in beta_jobs + alpha_jobs}
        return jobs if all(job["status"] in FINAL for job in jobs.values()) else {}

    jobs = wait_until("all six jobs final", all_final, END_BOUND_S, 0.5)
    mark("all six jobs final")
    for j, job in jobs.items():
        assert job["status"] == "COMPLETED", (j, history(job))
    for j in victims:
        lines = logs(beta, j)
        saved = [int(m.group(1)) for x in lines if (m := re.match(r"SIGTERM: checkpoint saved at epoch (\d+)", x))]  # fmt: skip
        resumed = [int(m.group(1)) for x in lines if (m := re.match(r"resuming from the checkpoint of epoch (\d+)", x))]  # fmt: skip
        assert saved and resumed, lines
        assert resumed[0] == saved[0] >= 2, (saved, resumed)
        epochs = [int(m.group(1)) for x in lines if (m := re.match(r"epoch (\d+)/", x))]
        assert epochs == list(range(1, 41)), epochs  # no epoch lost, none repeated
    for j in set(beta_jobs) - set(victims):
        assert not preempted(jobs[j]), history(jobs[j])  # inside beta's guarantee: untouched
    after = usage(admin)
    for team in ("alpha", "beta"):
        assert after[team]["usage"].get("used", {}).get("cpus", 0) == pytest.approx(0), after
    print("timings (s):", json.dumps(timings))
