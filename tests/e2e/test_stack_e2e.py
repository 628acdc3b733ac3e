"""End to end: the platform itself as a Docker stack on a 2-node swarm, deployed with
`docker stack deploy -c docker-compose.yml` from images built here (no registry).

The images come from dlaas.local.stack (the learners' base + Debian packages + the venv's
packages), copied to both nodes of a SwarmLab (dlaas.local.swarm); deploy/stack-lab.yml adds
what the lab cannot run of the compose file (SQLite instead of MongoDB, host-mode ports: no
routing mesh without iptables). The S3 secret key and the admin token are swarm secrets,
created through the manager's API before the deploy, as an operator would. The test checks
that every service runs the replicas the files ask for (two APIs, one on each node), that
no service's spec holds a secret's value (the deploying shell even still exports the old
variables) and each names only the secrets it needs, then, through the API published on
node-1, makes a user, uploads the digits data and runs the digits example to COMPLETED:
the scheduler, the LCM and the job monitor in the stack place and watch the job's
containers through the manager's socket. The stack is removed and the lab torn down
afterwards, also when the test fails.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import yaml

from dlaas.domain.secretbox import new_key
from dlaas.local.stack import (
    ADMIN_TOKEN_SECRET,
    COMPOSE_FILE,
    LAB_OVERRIDE,
    LOCAL_IMAGES,
    S3_SECRET_KEY_SECRET,
    SECRETS_KEY_SECRET,
    create_secrets,
    ensure_stack_images,
    expected_replicas,
    running_replicas,
    stack_env,
    stack_secrets,
)
from dlaas.local.swarm import SwarmLab, SwarmLabError, check_requirements

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

REPO = Path(__file__).resolve().parents[2]
STACK = "dlaas"
DOCKER = shutil.which("docker")


def _docker(env: dict[str, str], *args: str, timeout: float = 180) -> str:
    done = subprocess.run(
        [DOCKER, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"docker {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _until(check, what: str, timeout: float, interval: float = 1.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(interval)


@pytest.fixture(scope="module")
def lab(ram_path, docker_client, learner_image):
    try:
        check_requirements()
    except SwarmLabError as e:
        pytest.skip(str(e))
    if DOCKER is None:
        pytest.skip("the docker CLI is not installed (`docker stack deploy` is the subject)")
    images = ensure_stack_images(docker_client, progress=print)
    root = ram_path  # in memory: each node loads the images (conftest's RAM_ROOT says why)
    tags = [learner_image, *images.tags()]
    swarm = SwarmLab(root / "swarm", nodes=2, images=tags, progress=print)
    started = time.monotonic()
    try:
        info = swarm.up()
        print(f"lab up with the images on both nodes in {time.monotonic() - started:.0f} s")
        yield swarm, info, root
    finally:
        swarm.down()


@pytest.fixture(scope="module")
def stack(lab):
    _swarm, info, root = lab
    store = root / "store"
    store.mkdir()
    values = stack_secrets(
        s3_secret_key=secrets.token_urlsafe(24),
        admin_token=secrets.token_urlsafe(24),
        secrets_key=new_key(),
    )
    with _manager(info.manager_socket) as client:
        create_secrets(client, values)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(root),  # no user configuration of the docker CLI
        "DOCKER_HOST": info.manager_socket,
        # An operator's shell that still exports the variables the stack once read: their
        # values must reach no service.
        "DLAAS_S3_SECRET_KEY": values[S3_SECRET_KEY_SECRET],
        "DLAAS_API_ADMIN_TOKEN": values[ADMIN_TOKEN_SECRET],
        **stack_env(
            LOCAL_IMAGES,
            docker_socket=info.manager_socket.removeprefix("unix://"),
            # SeaweedFS runs on the manager (node-1) and publishes 8333 there.
            s3_for_containers=f"http://{info.node_addresses['node-1']}:8333",
            s3_access_key="stack-" + secrets.token_hex(4),
            extra={"DLAAS_LAB_STORE_DIR": str(store)},
        ),
    }
    files = ["-c", str(COMPOSE_FILE), "-c", str(LAB_OVERRIDE)]
    started = time.monotonic()
    try:
        _docker(env, "stack", "deploy", *files, "--resolve-image", "never", STACK)
        yield env, files, info, values
    finally:
        # Best effort: the lab goes down next whatever this says.
        subprocess.run([DOCKER, "stack", "rm", STACK], env=env, capture_output=True, timeout=60,
                       check=False)  # fmt: skip
        print(f"stack up for {time.monotonic() - started:.0f} s")


@contextmanager
def _manager(url: str):
    import docker

    client = docker.DockerClient(base_url=url, timeout=30)
    try:
        yield client
    finally:
        client.close()


LABEL = {"label": f"com.docker.stack.namespace={STACK}"}


def _running(env) -> dict[str, int]:
    with _manager(env["DOCKER_HOST"]) as client:
        services = client.api.services(filters=LABEL)
        tasks = client.api.tasks(filters=LABEL)
        return running_replicas(STACK, services, tasks)


def _check_service_specs(env, values: dict[str, str]) -> None:
    """What `docker service inspect` shows of every service: no secret's value anywhere,
    and each service names only the secrets it reads."""
    with _manager(env["DOCKER_HOST"]) as client:
        services = client.api.services(filters=LABEL)
    assert services
    attached = {}
    for svc in services:
        name = svc["Spec"]["Name"].removeprefix(f"{STACK}_")
        text = json.dumps(svc)
        leaked = [secret for secret, value in values.items() if value in text]
        assert not leaked, f"the spec of {name} holds the value of {leaked}"
        refs = svc["Spec"]["TaskTemplate"]["ContainerSpec"].get("Secrets") or []
        attached[name] = {ref["SecretName"] for ref in refs}
    s3, admin, box = S3_SECRET_KEY_SECRET, ADMIN_TOKEN_SECRET, SECRETS_KEY_SECRET
    assert attached == {
        "etcd": set(), "mongo": set(), "redis": set(), "seaweedfs": {s3}, "scheduler": {s3},
        "lcm": {s3, box}, "jobmonitor": {s3}, "worker": {s3, box}, "api": {s3, admin, box},
    }  # fmt: skip


def _check_s3_admin_identity(env, info, secret_key: str) -> None:
    """SeaweedFS took its admin identity's secret key from the secret's file: requests
    signed with it pass, requests signed with another are refused (an S3 with no identity
    would let both through)."""
    from botocore.exceptions import ClientError

    from dlaas.adapters.s3 import client

    endpoint = f"http://{info.node_addresses['node-1']}:8333"
    access_key = env["DLAAS_S3_ACCESS_KEY"]
    client(endpoint, access_key, secret_key, attempts=1).list_buckets()
    with pytest.raises(ClientError):
        client(endpoint, access_key, secret_key + "x", attempts=1).list_buckets()


def _print_diagnostics(env) -> None:
    """What a failed run needs to be understood: the platform's logs."""
    for service in ("api", "scheduler", "lcm", "jobmonitor"):
        done = subprocess.run(
            [DOCKER, "service", "logs", "--raw", "--tail", "80", f"{STACK}_{service}"],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        print(f"--- {service} ---\n{done.stdout[-8000:]}{done.stderr[-8000:]}")


def test_the_stack_runs_its_replicas_and_a_job_completes_through_it(stack):
    env, files, info, values = stack
    wanted = expected_replicas(yaml.safe_load(_docker(env, "stack", "config", *files)))
    # What docker-compose.yml asks for; the lab's file only scales MongoDB away.
    assert wanted == {
        "etcd": 1, "mongo": 0, "seaweedfs": 1, "redis": 1, "scheduler": 1, "lcm": 2,
        "jobmonitor": 1, "api": 2, "worker": 1,
    }  # fmt: skip
    started = time.monotonic()
    try:
        _until(lambda: _running(env) == wanted, "every service at its replicas", 150)
    except AssertionError:
        print(_docker(env, "stack", "ps", "--no-trunc", STACK))
        running = _running(env)
        for name in sorted(n for n in wanted if running.get(n, 0) < wanted[n]):
            print(f"--- {name}:\n" + _docker(env, "service", "logs", "--raw", "--tail", "30",
                                             f"{STACK}_{name}"))  # fmt: skip
        raise
    print(f"all replicas running {time.monotonic() - started:.0f} s after the deploy")
    _check_service_specs(env, values)
    try:
        _a_job_through_the_stack(env, info, values)
    except BaseException:
        _print_diagnostics(env)
        raise
    print(json.dumps(_running(env)))


def _a_job_through_the_stack(env, info, values) -> None:

    api = f"http://{info.node_addresses['node-1']}:8080"
    # The API authenticates this token only if it read it from its secret's file.
    admin_token = values[ADMIN_TOKEN_SECRET]

    def healthy():
        try:
            return httpx.get(f"{api}/health", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    _until(healthy, f"the API at {api}", 90)
    _check_s3_admin_identity(env, info, values[S3_SECRET_KEY_SECRET])
    with httpx.Client(base_url=api, headers={"Authorization": f"Bearer {admin_token}"},
                      timeout=60) as admin:  # fmt: skip
        made = admin.post("/v1/users", json={"name": "alice", "team": "research"})
        assert made.status_code == 201, made.text
        user_token = made.json()["token"]
        # The API replica on node-2 answers too, from the same store.
        other = f"http://{info.node_addresses['node-2']}:8080"
        me = httpx.get(f"{other}/v1/me", headers={"Authorization": f"Bearer {user_token}"})
        assert me.status_code == 200 and me.json()["user"] == "alice", me.text

    from test_platform_e2e import _upload_digits, logs, submit, wait_final

    with httpx.Client(base_url=api, headers={"Authorization": f"Bearer {user_token}"},
                      timeout=60) as http:  # fmt: skip
        _upload_digits(http)
        started = time.monotonic()
        manifest = (REPO / "examples/digits/manifest.yaml").read_text()
        # The stack's LCMs may not reach etcd yet right after the deploy (the swarm lists a
        # task in DNS only once it runs): such a submit is refused as unavailable (503),
        # nothing kept, and a client asks again, as this test does for a minute. Any other
        # refusal (a 500 above all) fails the test.
        for attempt in range(12):
            try:
                job_id = submit(http, manifest, REPO / "examples/digits")
                break
            except AssertionError as refused:
                if attempt == 11 or '"unavailable"' not in str(refused):
                    raise
                print(f"submit refused, asked again: {str(refused)[:200]}")
                time.sleep(5)
        try:
            job = wait_final(http, job_id, timeout=180)
        except AssertionError:
            print("job:", http.get(f"/v1/jobs/{job_id}").text[:3000])
            print("queue:", http.get("/v1/queue").text[:3000])
            raise
        history = [(h["status"], h["reason"]) for h in job["history"]]
        assert job["status"] == "COMPLETED", history
        print(f"digits through the stack: COMPLETED in {time.monotonic() - started:.0f} s")
        assert {e["node"] for e in job["learners"]} <= {"node-1", "node-2"}, job["learners"]
        lines = logs(http, job_id)
        assert any(re.match(r"epoch 20/20 loss=", line) for line in lines), lines[-20:]
        metrics = http.get(f"/v1/jobs/{job_id}/results")
        assert metrics.status_code == 200, metrics.text
