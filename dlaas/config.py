"""Typed configuration, built once in each service's main.py and passed down.

Every service reads the same platform settings (prefix `DLAAS_`); secrets have no
default. Nothing here is read at import time.

A secret setting (a SecretStr field) may also come from a file in /run/secrets named after
its variable in lower case: /run/secrets/dlaas_s3_secret_key is DLAAS_S3_SECRET_KEY. That is
where a swarm (or docker-compose) mounts the secrets docker-compose.yml attaches to a
service, so the values stay out of the service's spec. The variable wins where both are set
(`dlaas up` and the tests set variables); no other setting is read from a file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SecretsSettingsSource,
    SettingsConfigDict,
)

from dlaas.domain.egress import allowed_networks
from dlaas.domain.sizes import parse_memory_mb

SECRETS_DIR = "/run/secrets"


class _SecretFiles(SecretsSettingsSource):
    """pydantic-settings' secrets_dir source, for SecretStr fields only, and silent where
    the directory does not exist (everywhere but in a container given secrets)."""

    def __call__(self) -> dict[str, Any]:
        if self.secrets_dir is None or not Path(self.secrets_dir).is_dir():
            return {}
        return super().__call__()

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        if field.annotation is not SecretStr:
            return None, field_name, False
        return super().get_field_value(field, field_name)


class _Settings(BaseSettings):
    """Sources, first wins: arguments, environment, .env, then secret files."""

    model_config = SettingsConfigDict(secrets_dir=SECRETS_DIR)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # `_secrets_dir=` (the tests) reaches us through the default source's attribute.
        secrets_dir = getattr(file_secret_settings, "secrets_dir", None)
        files = _SecretFiles(settings_cls, secrets_dir=secrets_dir)
        return init_settings, env_settings, dotenv_settings, files


class PlatformSettings(_Settings):
    model_config = SettingsConfigDict(env_prefix="DLAAS_", extra="ignore")

    # etcd client endpoints, "host:port[,host:port...]".
    etcd_endpoints: str = "127.0.0.1:2379"
    etcd_prefix: str = "/dlaas"
    # Labels every container this platform creates (jobspec.LABEL_MANAGED): platforms that
    # share a Docker engine only ever see and touch their own.
    platform_id: str = "dlaas"
    # Job store: a path or sqlite:///path (embedded default) or mongodb://...
    store_url: str = "sqlite:///dlaas.db"
    # The platform's S3 (training data when a manifest names no endpoint, code archives).
    s3_endpoint: str = "http://127.0.0.1:8333"
    s3_access_key: str
    s3_secret_key: SecretStr
    s3_bucket: str = "dlaas"
    # Encrypts the passwords of users' own data stores in stored manifests (dlaas.domain.secretbox);
    # empty: such passwords are refused, never stored.
    secrets_key: SecretStr = SecretStr("")
    # The Docker engine that runs learners ("unix:///var/run/docker.sock").
    docker_host: str = "unix:///var/run/docker.sock"
    # The S3 endpoint as containers reach it (the host through the bridge gateway).
    s3_endpoint_for_containers: str = ""
    # Addresses of the gRPC services.
    lcm_addr: str = "127.0.0.1:50051"
    scheduler_addr: str = "127.0.0.1:50052"
    # Image for learners and helpers, built locally by `dlaas images build`.
    learner_image: str = "dlaas/learner:latest"
    # Declared capacity of the local node (0: read from the machine).
    node_name: str = "local"
    node_cpus: float = 0
    node_memory_mb: int = 0
    node_gpus: int = 0
    node_gpu_type: str = ""
    # The Docker Swarm manager's API (a Docker host URL, e.g. unix:///.../manager.sock):
    # set, the platform deploys on the swarm's nodes through that API alone
    # (dlaas/adapters/engines/swarm_engine.py) and gangs may span nodes; empty, on the one engine above.
    swarm_manager: str = ""
    # The broker of the asynchronous work (services/worker): result purges, retention.
    redis_url: str = "redis://127.0.0.1:6379/0"
    # Results of jobs that ended (COMPLETED/FAILED) more than this many days ago are
    # purged by the worker; 0 keeps them forever.
    results_retention_days: float = Field(0, ge=0)
    # How often the worker looks for results past their retention.
    retention_sweep_s: float = Field(3600, gt=0)
    # A task a worker took but never acknowledged (it died) is handed out again after
    # this long. Purges are idempotent, so a task redelivered while still running is safe.
    worker_visibility_timeout_s: float = Field(300, gt=0)
    # Endpoints users name (a manifest's data store, webhooks) may be public addresses
    # only; these networks ("127.0.0.0/8,10.0.0.0/8") are allowed too, for stores and
    # receivers the operator runs inside (dlaas.domain.egress). The old name still works.
    egress_allow_networks: str = Field(
        "",
        validation_alias=AliasChoices(
            "egress_allow_networks", "DLAAS_EGRESS_ALLOW_NETWORKS", "DLAAS_HOOKS_ALLOW_NETWORKS"
        ),
    )
    # The operator's failure-triage rows (a YAML list of {pattern, label, action[, explain]},
    # dlaas.domain.triage), read once when the job monitor starts; "" for the built-in only.
    triage_file: str = ""
    # Disk per learner (its writable layer and its share of the job volume): the size when
    # a manifest names no `disk`, and the most one may ask (refused at submit above it).
    # MiB, or a size such as 10GiB. Enforced as docs/operations.md's "Disk limits" says.
    learner_disk_mb: int = 10 * 1024
    max_learner_disk_mb: int = 100 * 1024

    @field_validator("learner_disk_mb", "max_learner_disk_mb", mode="before")
    @classmethod
    def _size(cls, v: object) -> int:
        return parse_memory_mb(v)

    @model_validator(mode="after")
    def _disk_within_max(self) -> PlatformSettings:
        if self.learner_disk_mb > self.max_learner_disk_mb:
            raise ValueError(
                f"learner_disk_mb ({self.learner_disk_mb} MiB) is above max_learner_disk_mb "
                f"({self.max_learner_disk_mb} MiB)"
            )
        return self

    def learner_disk_for(self, asked_mb: int) -> int:
        """A learner's disk size in MiB: the manifest's `disk`, else the platform's default."""
        return asked_mb or self.learner_disk_mb

    @field_validator("egress_allow_networks")
    @classmethod
    def _networks(cls, v: str) -> str:
        allowed_networks(v)  # ValueError names the entry
        return v

    def etcd_hostports(self) -> list[tuple[str, int]]:
        out = []
        for item in self.etcd_endpoints.split(","):
            host, _, port = item.strip().removeprefix("http://").rpartition(":")
            out.append((host or "127.0.0.1", int(port)))
        return out


class ApiSettings(_Settings):
    model_config = SettingsConfigDict(env_prefix="DLAAS_API_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8080
    # The bootstrap administrator's token; every other account is in the job store.
    admin_token: SecretStr
    max_code_archive_mb: int = 64
    # Failed token checks one client address may make within the window before its
    # requests are refused (429) until the window frees (services/api/auth.py).
    auth_max_failures: int = Field(20, ge=1)
    auth_failure_window_s: float = Field(60.0, gt=0)
    # One training-data object uploaded through the API (`dlaas data upload`).
    max_data_object_mb: int = 2048
    # This process's name among the API replicas that share the port ("api-1"), shown by
    # /health so that a starting replica can be told from its peers; "" when it runs alone.
    replica: str = ""
