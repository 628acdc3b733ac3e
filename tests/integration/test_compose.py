"""docker-compose.yml is valid for docker-compose and for `docker stack deploy`, and
describes the whole platform, its secrets as swarm secrets (never variables).

Runs the real `docker-compose config` (Debian's 1.29) with the required variables set
and an empty env file (a developer's .env must not change the outcome), and the Docker
CLI's own `docker stack config` (the loader and compose v3 schema `docker stack deploy`
uses); no image is pulled or built, no engine is asked. Each part is skipped where its
binary is absent.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
BINARY = shutil.which("docker-compose")
DOCKER = shutil.which("docker")
needs_compose = pytest.mark.skipif(BINARY is None, reason="docker-compose binary not installed")

REQUIRED = {"DLAAS_S3_ACCESS_KEY": "test-access"}
# Variables the stack once read its secrets from: set in the deploying shell, their values
# must reach no service (they are swarm secrets now).
CANARIES = {
    "DLAAS_S3_SECRET_KEY": "canary-s3-secret",
    "DLAAS_API_ADMIN_TOKEN": "canary-admin",
    "DLAAS_SECRETS_KEY": "canary-box-key",
}
S3_SECRET, ADMIN_SECRET = "dlaas_s3_secret_key", "dlaas_api_admin_token"
BOX_SECRET = "dlaas_secrets_key"
SECRET_FILES = REPO / "deploy" / "compose-secret-files.yml"
INFRA = {"etcd", "mongo", "seaweedfs", "redis"}
PLATFORM = {"api", "lcm", "jobmonitor", "scheduler", "worker"}
# They read or drive the swarm (or the one engine) through the engine's socket.
ENGINE_USERS = {"scheduler", "lcm", "jobmonitor"}


def compose(
    tmp_path: Path, *args: str, env: dict[str, str], files: tuple[Path, ...] = (COMPOSE,)
) -> subprocess.CompletedProcess:
    empty_env_file = tmp_path / "empty.env"
    empty_env_file.write_text("")
    base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    assert BINARY is not None
    file_args = [arg for f in files for arg in ("-f", str(f))]
    cmd = [BINARY, "--env-file", str(empty_env_file), *file_args, *args]
    return subprocess.run(
        cmd, env={**base_env, **env}, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> dict:
    """The resolved configuration, as docker-compose itself prints it."""
    if BINARY is None:
        pytest.skip("docker-compose binary not installed")
    tmp = tmp_path_factory.mktemp("compose")
    done = compose(tmp, "config", env={**REQUIRED, **CANARIES})
    assert done.returncode == 0, done.stderr
    assert not any(v in done.stdout for v in CANARIES.values())
    return yaml.safe_load(done.stdout)


@needs_compose
def test_config_is_valid(tmp_path):
    done = compose(tmp_path, "config", "-q", env=REQUIRED)
    assert done.returncode == 0, done.stderr


@needs_compose
def test_the_access_key_is_required(tmp_path):
    done = compose(tmp_path, "config", "-q", env={})
    assert done.returncode != 0
    assert "DLAAS_S3_ACCESS_KEY" in done.stderr


def _secrets_of(svc: dict) -> set[str]:
    # Short syntax, as written, or {source: ...} as the loaders print it.
    return {s if isinstance(s, str) else s["source"] for s in svc.get("secrets", [])}


def _check_secrets(services: dict, declared: dict) -> None:
    """Each secret is external and attached to the services that read it, and only those;
    no environment holds a secret (or a variable that once carried one)."""
    assert set(declared) == {S3_SECRET, ADMIN_SECRET, BOX_SECRET}
    assert all(d.get("external") for d in declared.values()), declared
    wanted = {name: {S3_SECRET} for name in PLATFORM | {"seaweedfs"}}
    wanted["api"] = {S3_SECRET, ADMIN_SECRET, BOX_SECRET}
    wanted["lcm"] = wanted["worker"] = {S3_SECRET, BOX_SECRET}
    assert {n: _secrets_of(svc) for n, svc in services.items() if _secrets_of(svc)} == wanted
    for name, svc in services.items():
        env = svc.get("environment") or {}
        assert not {"DLAAS_S3_SECRET_KEY", "DLAAS_API_ADMIN_TOKEN", "DLAAS_API_TOKENS",
                    "DLAAS_SECRETS_KEY", "AWS_SECRET_ACCESS_KEY"} & set(env), name  # fmt: skip
    # SeaweedFS reads its admin secret key from the file its entrypoint is given.
    entrypoint = " ".join(services["seaweedfs"]["entrypoint"])
    assert f"/run/secrets/{S3_SECRET}" in entrypoint


def test_secrets_are_swarm_secrets_where_needed(config):
    _check_secrets(config["services"], config["secrets"])


@needs_compose
def test_one_host_reads_the_secrets_from_a_directory_of_files(tmp_path):
    files = (COMPOSE, SECRET_FILES)
    done = compose(tmp_path, "config", env={**REQUIRED, "DLAAS_SECRETS_DIR": "/etc/dlaas/s"},
                   files=files)  # fmt: skip
    assert done.returncode == 0, done.stderr
    secrets = yaml.safe_load(done.stdout)["secrets"]
    names = (S3_SECRET, ADMIN_SECRET, BOX_SECRET)
    assert secrets == {name: {"file": f"/etc/dlaas/s/{name}"} for name in names}
    done = compose(tmp_path, "config", "-q", env=REQUIRED, files=files)
    assert done.returncode != 0 and "DLAAS_SECRETS_DIR" in done.stderr


def test_expected_services(config):
    assert set(config["services"]) == INFRA | PLATFORM


def test_infrastructure_images(config):
    images = {name: config["services"][name]["image"] for name in INFRA}
    assert images["etcd"].startswith("quay.io/coreos/etcd:")
    assert images["mongo"] == "mongo:7"
    assert images["seaweedfs"].startswith("chrislusf/seaweedfs")
    assert images["redis"].startswith("redis:")
    assert "-s3" in config["services"]["seaweedfs"]["command"]


@pytest.mark.parametrize("name", sorted(PLATFORM))
def test_platform_service(config, name):
    svc = config["services"][name]
    assert svc["build"]["dockerfile"] == "images/Dockerfile.platform"
    assert Path(svc["build"]["context"]) == REPO
    assert svc["command"] == ["python", "-m", f"services.{name}.main"]
    env = svc["environment"]
    assert env["DLAAS_STORE_URL"] == "mongodb://mongo:27017/dlaas"
    assert env["DLAAS_ETCD_ENDPOINTS"] == "etcd:2379"
    assert env["DLAAS_S3_ENDPOINT"] == "http://seaweedfs:8333"
    assert env["DLAAS_S3_ACCESS_KEY"] == "test-access"
    assert (env["DLAAS_LCM_ADDR"], env["DLAAS_SCHEDULER_ADDR"]) == (
        "lcm:50051",
        "scheduler:50052",
    )
    deps = svc["depends_on"]
    assert "etcd" in deps
    for dep in deps:
        # What a service needs says whether it is up: docker-compose starts it first, a
        # swarm marks its tasks healthy (the stack format has no "wait until healthy").
        assert "healthcheck" in config["services"][dep], f"{name} needs {dep}"


@pytest.mark.parametrize("name", sorted(ENGINE_USERS))
def test_docker_socket_is_mounted_where_containers_are_managed(config, name):
    svc = config["services"][name]
    assert svc["environment"]["DLAAS_DOCKER_HOST"] == "unix:///var/run/docker.sock"
    assert any(v.startswith("/var/run/docker.sock:/var/run/docker.sock") for v in svc["volumes"])


def test_socket_is_not_mounted_elsewhere(config):
    for name, svc in config["services"].items():
        if name not in ENGINE_USERS:
            assert not any("docker.sock" in v for v in svc.get("volumes", [])), name


def test_api_settings(config):
    api = config["services"]["api"]
    env = api["environment"]
    assert env["DLAAS_API_HOST"] == "0.0.0.0"  # reachable from outside its container
    assert "8080:8080" in {f"{p['published']}:{p['target']}" for p in _ports(api)}
    assert {"lcm", "scheduler", "mongo", "seaweedfs"} <= set(api["depends_on"])
    # The service that faces users never reads an engine (nor has its socket).
    assert env["DLAAS_SWARM_MANAGER"] == ""


def test_redis_is_the_broker_of_every_platform_service(config):
    for name in PLATFORM:
        assert config["services"][name]["environment"]["DLAAS_REDIS_URL"] == "redis://redis:6379/0"
    assert "--protected-mode" in config["services"]["redis"]["command"]


def test_images_socket_and_swarm_manager_come_from_variables(tmp_path):
    images = {
        "DLAAS_PLATFORM_IMAGE": "reg.example/dlaas/platform:7",
        "DLAAS_ETCD_IMAGE": "reg.example/etcd:1",
        "DLAAS_MONGO_IMAGE": "reg.example/mongo:1",
        "DLAAS_SEAWEEDFS_IMAGE": "reg.example/weed:1",
        "DLAAS_REDIS_IMAGE": "reg.example/redis:1",
    }
    extra = {"DLAAS_DOCKER_SOCKET": "/lab/manager.sock",
             "DLAAS_SWARM_MANAGER": "unix:///var/run/docker.sock"}  # fmt: skip
    if BINARY is None:
        pytest.skip("docker-compose binary not installed")
    done = compose(tmp_path, "config", env={**REQUIRED, **images, **extra})
    assert done.returncode == 0, done.stderr
    services = yaml.safe_load(done.stdout)["services"]
    for name in PLATFORM:
        assert services[name]["image"] == "reg.example/dlaas/platform:7", name
    for name in INFRA:
        assert services[name]["image"] == images[f"DLAAS_{name.upper()}_IMAGE"], name
    for name in ENGINE_USERS:
        svc = services[name]
        assert any(v.startswith("/lab/manager.sock:/var/run/docker.sock") for v in svc["volumes"])
        assert svc["environment"]["DLAAS_SWARM_MANAGER"] == "unix:///var/run/docker.sock"
    assert services["api"]["environment"]["DLAAS_SWARM_MANAGER"] == ""


def test_healthcheck_python_snippets_compile(config):
    snippets = [
        svc["healthcheck"]["test"][3]
        for svc in config["services"].values()
        if svc.get("healthcheck", {}).get("test", [None, None])[1:3] == ["python", "-c"]
    ]
    assert len(snippets) == 3  # api, lcm, scheduler
    for code in snippets:
        compile(code, "<healthcheck>", "exec")


def test_service_entrypoints_exist():
    missing = [n for n in sorted(PLATFORM) if not (REPO / "services" / n / "main.py").is_file()]
    assert not missing, f"docker-compose.yml starts services.<name>.main for: {missing}"


def _ports(svc: dict) -> list[dict]:
    # docker-compose 1.29 prints ports either as "a:b" strings or as mappings.
    out = []
    for p in svc.get("ports", []):
        if isinstance(p, str):
            published, _, target = p.rpartition(":")
            out.append({"published": published, "target": target})
        else:
            out.append({"published": str(p.get("published")), "target": str(p["target"])})
    return out


# --------------------------------------------------------------------------- docker stack


def _has_stack_config() -> bool:
    if DOCKER is None:
        return False
    done = subprocess.run(
        [DOCKER, "stack", "--help"], capture_output=True, text=True, timeout=30, check=False
    )
    return any(line.split()[:1] == ["config"] for line in done.stdout.splitlines())


needs_stack = pytest.mark.skipif(
    not _has_stack_config(), reason="no docker CLI with `docker stack config` (20.10+ CLI)"
)


def stack_config(
    tmp_path: Path, env: dict[str, str], *overrides: Path
) -> subprocess.CompletedProcess:
    """`docker stack config -c docker-compose.yml`: the stack loader, with no engine asked
    (DOCKER_HOST points nowhere) and no user config (HOME is empty)."""
    assert DOCKER is not None
    base_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock",
    }
    return subprocess.run(
        [DOCKER, "stack", "config", "-c", str(COMPOSE), *(f"-c={o}" for o in overrides)],
        env={**base_env, **env}, capture_output=True, text=True, timeout=60, check=False,
        cwd=tmp_path,
    )  # fmt: skip


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> dict:
    """The configuration `docker stack deploy` would deploy, as the Docker CLI prints it."""
    if not _has_stack_config():
        pytest.skip("no docker CLI with `docker stack config` (20.10+ CLI)")
    done = stack_config(tmp_path_factory.mktemp("stack"), {**REQUIRED, **CANARIES})
    assert done.returncode == 0, done.stderr
    assert not any(v in done.stdout for v in CANARIES.values())
    return yaml.safe_load(done.stdout)


@needs_stack
def test_stack_format_is_accepted(tmp_path):
    done = stack_config(tmp_path, REQUIRED)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr  # no warning either


@needs_stack
def test_stack_requires_the_access_key(tmp_path):
    done = stack_config(tmp_path, {})
    assert done.returncode != 0
    assert "DLAAS_S3_ACCESS_KEY" in done.stderr


def test_stack_secrets_are_swarm_secrets_where_needed(stack):
    _check_secrets(stack["services"], stack["secrets"])


def test_lab_override_swaps_mongo_for_a_shared_sqlite_and_binds_ports_on_nodes(tmp_path):
    if not _has_stack_config():
        pytest.skip("no docker CLI with `docker stack config` (20.10+ CLI)")
    env = {**REQUIRED, "DLAAS_LAB_STORE_DIR": "/lab/store"}
    done = stack_config(tmp_path, env, REPO / "deploy" / "stack-lab.yml")
    assert done.returncode == 0, done.stderr
    services = yaml.safe_load(done.stdout)["services"]
    assert services["mongo"]["deploy"]["replicas"] == 0
    assert services["api"]["deploy"]["replicas"] == 2
    for name in PLATFORM:
        svc = services[name]
        assert svc["environment"]["DLAAS_STORE_URL"] == "sqlite:////var/lib/dlaas-store/jobs.db"
        assert {"type": "bind", "source": "/lab/store", "target": "/var/lib/dlaas-store"} in svc[
            "volumes"
        ], name
    for name, port in (("api", 8080), ("seaweedfs", 8333)):
        assert services[name]["ports"] == [{"mode": "host", "target": port, "published": port}]
    # No virtual IP anywhere: the lab's engines run without iptables.
    assert all(s["deploy"].get("endpoint_mode") == "dnsrr" for s in services.values())
    # The store directory is required, named in the message.
    done = stack_config(tmp_path, REQUIRED, REPO / "deploy" / "stack-lab.yml")
    assert done.returncode != 0 and "DLAAS_LAB_STORE_DIR" in done.stderr


def test_stack_has_the_same_services(stack):
    assert set(stack["services"]) == INFRA | PLATFORM
    for name in PLATFORM:
        assert stack["services"][name]["image"] == "dlaas/platform:latest", name


def test_stack_replicas(stack):
    replicas = {name: svc["deploy"]["replicas"] for name, svc in stack["services"].items()}
    assert replicas == {name: 1 for name in INFRA | PLATFORM} | {"api": 2, "lcm": 2}
    api = stack["services"]["api"]["deploy"]
    # docker-compose honours deploy.replicas too: one API per host keeps its port free.
    assert api["placement"]["max_replicas_per_node"] == 1
    for name, svc in stack["services"].items():
        assert svc["deploy"]["restart_policy"]["condition"] == "any", name


@pytest.mark.parametrize("name", sorted(ENGINE_USERS | {"etcd", "mongo", "seaweedfs"}))
def test_engine_users_and_stateful_services_run_on_a_manager(stack, name):
    # They mount the engine's socket: on a swarm only a manager's reaches the cluster.
    assert "node.role == manager" in stack["services"][name]["deploy"]["placement"]["constraints"]


@pytest.mark.parametrize("name", ["scheduler", "lcm"])
def test_grpc_services_bind_their_own_host_name(stack, name):
    # The name they bind (DLAAS_*_ADDR's host) resolves in their own container, to their
    # own address, even before the swarm's DNS lists the task (or lists other replicas).
    svc = stack["services"][name]
    assert svc["hostname"] == name
    assert svc["environment"][f"DLAAS_{name.upper()}_ADDR"].startswith(f"{name}:")


def test_endpoint_modes(stack):
    for name, svc in stack["services"].items():
        mode = svc["deploy"].get("endpoint_mode", "vip")
        if svc.get("ports"):
            # A swarm refuses dnsrr for a service that publishes a port through its ingress.
            assert mode == "vip", name
        else:
            # The scheduler and the LCM bind the address their name resolves to, which must
            # be the task's own: a virtual IP cannot be bound.
            assert mode == "dnsrr", name
