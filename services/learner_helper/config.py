"""The helper's configuration from its env (and the secret file an engine hands over).

Standard library only, like resume.py: the helper's fast start reads it before boto3 is
imported (services.learner_helper.__main__).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dlaas.domain.jobspec import (
    ENV_CHECKPOINT_INTERVAL,
    ENV_CHECKPOINT_PREFIX,
    ENV_HELPER_FINISH_ON_EXIT,
    ENV_HELPER_LEARNERS,
    ENV_HELPER_PRIMARY,
    ENV_SECRET_FILE,
    ENV_STORE_FIELD,
    checkpoint_prefix,
)


def folder_prefix(prefix: str) -> str:
    """A data prefix names a folder: 'train' and 'train/' both mean 'train/'."""
    prefix = prefix.strip().lstrip("/")
    return prefix if not prefix or prefix.endswith("/") else prefix + "/"


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class HelperConfig:
    job_id: str
    num_learners: int
    endpoint: str
    access_key: str
    secret_key: str
    region: str
    data_bucket: str
    data_prefix: str
    results_bucket: str
    code_bucket: str
    code_key: str
    code_endpoint: str = ""
    code_access_key: str = ""
    code_secret_key: str = ""
    checkpoint_prefix: str = ""
    checkpoint_interval_s: float = 0.0
    # The learners on this helper's node (a gang spanning nodes has a helper per node), and
    # whether it is the job's helper, which alone mirrors the checkpoints to S3.
    learners: tuple[int, ...] = ()
    primary: bool = True
    # Finish by itself once its learners have exited (an engine that cannot signal a
    # running container, Swarm, stops the learners instead).
    finish_on_exit: bool = False
    # The manifest field that named DLAAS_S3_ENDPOINT when it is the job's own data store
    # ("": the platform's store).
    store_field: str = ""

    def __repr__(self) -> str:  # never show the secret, even in a traceback
        return f"HelperConfig(job_id={self.job_id!r}, endpoint={self.endpoint!r}, ...)"

    @classmethod
    def from_env(cls, env: dict[str, str]) -> HelperConfig:
        def get(name: str) -> str:
            return (env.get(name) or "").strip()

        missing = [
            n
            for n in (
                "JOB_ID",
                "DLAAS_S3_ENDPOINT",
                "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY",
                "DLAAS_RESULTS_BUCKET",
            )
            if not get(n)
        ]
        if missing:
            raise ConfigError(f"missing env: {', '.join(missing)}")
        try:
            num_learners = int(get("NUM_LEARNERS") or "1")
            if num_learners < 1:
                raise ValueError
        except ValueError:
            raise ConfigError("NUM_LEARNERS must be a positive integer") from None
        if bool(get("DLAAS_CODE_BUCKET")) != bool(get("DLAAS_CODE_KEY")):
            raise ConfigError("DLAAS_CODE_BUCKET and DLAAS_CODE_KEY must be set together")
        code_store = ("DLAAS_CODE_ENDPOINT", "DLAAS_CODE_ACCESS_KEY", "DLAAS_CODE_SECRET_KEY")
        if any(get(n) for n in code_store) and not all(get(n) for n in code_store):
            raise ConfigError(f"{', '.join(code_store)} must be set together")
        try:
            interval = float(get(ENV_CHECKPOINT_INTERVAL) or "0")
            if not interval >= 0:  # also refuses nan
                raise ValueError
        except ValueError:
            raise ConfigError(
                f"{ENV_CHECKPOINT_INTERVAL} must be a number of seconds >= 0"
            ) from None
        try:
            learners = tuple(
                int(x) for x in get(ENV_HELPER_LEARNERS).split(",") if x.strip()
            ) or tuple(range(num_learners))
            if any(not 0 <= i < num_learners for i in learners):
                raise ValueError
        except ValueError:
            raise ConfigError(
                f"{ENV_HELPER_LEARNERS} must list learner indices below NUM_LEARNERS"
            ) from None
        prefix = folder_prefix(get(ENV_CHECKPOINT_PREFIX) or checkpoint_prefix(get("JOB_ID")))
        # The sync deletes below this prefix: it must never be the whole bucket.
        if not prefix or ".." in prefix.split("/"):
            raise ConfigError(f"{ENV_CHECKPOINT_PREFIX} must name a folder, without '..'")
        return cls(
            job_id=get("JOB_ID"),
            num_learners=num_learners,
            endpoint=get("DLAAS_S3_ENDPOINT"),
            access_key=get("AWS_ACCESS_KEY_ID"),
            secret_key=get("AWS_SECRET_ACCESS_KEY"),
            region=get("AWS_DEFAULT_REGION") or "us-east-1",
            data_bucket=get("DLAAS_DATA_BUCKET"),
            data_prefix=get("DLAAS_DATA_PREFIX"),
            results_bucket=get("DLAAS_RESULTS_BUCKET"),
            code_bucket=get("DLAAS_CODE_BUCKET"),
            code_key=get("DLAAS_CODE_KEY"),
            code_endpoint=get("DLAAS_CODE_ENDPOINT"),
            code_access_key=get("DLAAS_CODE_ACCESS_KEY"),
            code_secret_key=get("DLAAS_CODE_SECRET_KEY"),
            checkpoint_prefix=prefix,
            checkpoint_interval_s=interval,
            learners=learners,
            primary=get(ENV_HELPER_PRIMARY) != "0",
            finish_on_exit=get(ENV_HELPER_FINISH_ON_EXIT) == "1",
            store_field=get(ENV_STORE_FIELD),
        )


def with_secret_file(env: dict[str, str]) -> dict[str, str]:
    """`env` plus the NAME=value lines of the file ENV_SECRET_FILE names (an engine that
    hands secrets over as files, e.g. a Swarm secret). Raise ConfigError if unreadable."""
    path = (env.get(ENV_SECRET_FILE) or "").strip()
    if not path:
        return env
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{ENV_SECRET_FILE}: cannot read {path}: {exc.strerror}") from None
    merged = dict(env)
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip():
            merged[name.strip()] = value
    return merged
