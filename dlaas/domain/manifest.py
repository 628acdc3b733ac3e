"""Manifest v1: what a user asks the platform to run, as a pydantic model.

Pure logic, no I/O: `parse_manifest(text)` turns YAML into a validated `Manifest` or
raises `InvalidManifest` whose every problem names the field path and what is wrong.
FfDL's manifests parse unchanged: its S3-style store types map to our S3 store and its
connection keys (auth_url, user_name, password) map to ours.

Everything a manifest holds is bounded before it reaches a store, a proto or Docker:
numbers fit their proto types (and Docker's minimums), strings and lists have a length
limit and no NUL, the YAML has no aliases (no "billion laughs") and nests at most
`MAX_DEPTH` levels, so a refusal is always an `InvalidManifest` naming the field and
never an overflow or a RecursionError further on.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StrictBool,
    ValidationError,
    field_validator,
    model_validator,
)

from dlaas.domain.durations import Seconds
from dlaas.domain.errors import InvalidManifest
from dlaas.domain.frameworks import FRAMEWORK_ALIASES
from dlaas.domain.launch import (
    DEFAULT_COLLECTIVE_TIMEOUT_S,
    LAUNCHER_FRAMEWORKS,
    LAUNCHER_NONE,
    LAUNCHER_TORCHRUN,
    LAUNCHERS,
    MAX_COLLECTIVE_TIMEOUT_S,
    MIN_COLLECTIVE_TIMEOUT_S,
    RESERVED_ENV,
    launcher_problem,
)
from dlaas.domain.manifest_yaml import (
    capped_problems,
    check_shape,
    field_path,
    load_yaml,
)
from dlaas.domain.progress import ProgressSpec  # `progress:` totals (dlaas.domain.progress)
from dlaas.domain.sizes import MAX_SIZE_MB, DiskMb, parse_memory_mb
from dlaas.domain.triage import MAX_MANIFEST_ROWS, TriageRow

# Store types that are S3 (FfDL used several names for the same thing).
S3_STORE_TYPES = frozenset({"s3", "s3_datastore", "mount_cos", "cos", "s3_object_store"})

# Bounds. The numbers are those of the protos the manifest travels in (int32 learners,
# gpus and priority; int64 memory_mb) and of Docker (a container needs at least 6 MiB).
INT32_MAX = 2**31 - 1
MIN_MEMORY_MB = 6
MAX_MEMORY_MB = MAX_SIZE_MB
MIN_CPUS = 0.01  # Docker's smallest CPU quota
MAX_FREEFORM_BYTES = 64 * 2**10  # evaluation_metrics, as JSON
MAX_ENV = 256
MAX_DATA_STORES = 16
MAX_COMMAND = 32 * 2**10
MAX_ENV_VALUE = 32 * 2**10
MAX_TEXT = 4096  # description
MAX_SHORT = 256  # versions, ids, keys, bucket names, image names, ...
MAX_URL = 2048

# Priority classes a manifest may name instead of a number.
PRIORITY_CLASSES = {"low": -100, "normal": 0, "high": 100, "critical": 1000}

# Spaces are allowed: FfDL examples use names such as "pytorch ddl" (the name is only shown).
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.-]{0,62}$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_URL_RE = re.compile(r"^https?://[^\s/?#]+(?:[/?#]\S*)?$", re.IGNORECASE)
_BUCKET_RE = re.compile(r"^[A-Za-z0-9._-]+$")


# Bounds of the job monitor's limits (services/jobmonitor/limits.py).
MAX_STALL_AFTER_S = 7 * 86400
MAX_DURATION_S = 366 * 86400


Short = Annotated[str, Field(max_length=MAX_SHORT)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Connection(BaseModel):
    """Where a data store lives and how to sign in; FfDL's key names are accepted."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    endpoint: str | None = Field(default=None, validation_alias="auth_url", max_length=MAX_URL)
    access_key: str | None = Field(default=None, validation_alias="user_name", max_length=MAX_URL)
    secret_key: SecretStr | None = Field(
        default=None, validation_alias="password", max_length=MAX_URL
    )
    region: Short | None = None

    @field_validator("endpoint")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v and not _URL_RE.match(v):  # empty: the platform's own S3, as when absent
            raise ValueError("must be an http:// or https:// URL with a host")
        return v

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for ours, theirs in (
            ("auth_url", "endpoint"),
            ("user_name", "access_key"),
            ("password", "secret_key"),
        ):
            if theirs in data and ours not in data:
                data[ours] = data.pop(theirs)
            data.pop(theirs, None)
        return data


class Bucket(_Model):
    container: str = Field(min_length=1, max_length=MAX_SHORT)

    @field_validator("container")
    @classmethod
    def _bucket_name(cls, v: str) -> str:
        # FfDL's examples name buckets with '_' (its object store allowed them). In the
        # platform's S3 such a name maps to a valid one (dlaas.domain.namespace.s3_name); a
        # store of the user's own gets the name as written (DataStore refuses '_' there).
        if not _BUCKET_RE.match(v):
            raise ValueError("must be a bucket name: letters, digits, '.', '-' and '_'")
        return v


class DataStore(_Model):
    id: str = Field(min_length=1, max_length=MAX_SHORT)
    type: Short
    training_data: Bucket | None = None
    training_results: Bucket | None = None
    connection: Connection = Field(default_factory=Connection)

    @field_validator("type")
    @classmethod
    def _known_type(cls, v: str) -> str:
        if v.lower() not in S3_STORE_TYPES:
            raise ValueError(
                f"store type {v!r} is not supported; use one of: s3 "
                f"(also accepted: {', '.join(sorted(S3_STORE_TYPES - {'s3'}))})"
            )
        return "s3"

    @model_validator(mode="after")
    def _own_store_names(self) -> DataStore:
        # A store of the user's own takes the names as written, and S3 has no '_': said
        # here rather than by the client later, as a traceback.
        if not self.connection.endpoint:
            return self
        for field in ("training_data", "training_results"):
            bucket = getattr(self, field)
            if bucket is not None and "_" in bucket.container:
                v = bucket.container
                raise ValueError(
                    f"{field}.container: {v!r} is not an S3 bucket name: '_' is not allowed "
                    f"in a store of your own (connection.endpoint); rename the bucket, e.g. "
                    f"to {v.replace('_', '-').lower()!r}"
                )
        return self


class Framework(_Model):
    name: str = Field(min_length=1, max_length=MAX_SHORT)
    version: Short = "latest"
    image: str | None = Field(default=None, min_length=1, max_length=MAX_SHORT)
    command: str = Field(min_length=1, max_length=MAX_COMMAND)
    # How the command is started (dlaas.domain.launch): as written, under torchrun, or by
    # mpirun on learner 0 over the gang.
    launcher: str = LAUNCHER_NONE
    # torchrun's --nproc_per_node, MPI's slots per learner; default: the learner's GPUs, or 1.
    processes_per_learner: int | None = Field(default=None, ge=1, le=256)
    # The longest a collective may wait for a peer: torch's default timeout (launch.py).
    collective_timeout: Seconds = Field(
        default=DEFAULT_COLLECTIVE_TIMEOUT_S,
        ge=MIN_COLLECTIVE_TIMEOUT_S,
        le=MAX_COLLECTIVE_TIMEOUT_S,
    )

    @field_validator("launcher")
    @classmethod
    def _launcher(cls, v: str) -> str:
        if v.lower() not in LAUNCHERS:
            raise ValueError(f"unknown launcher {v!r}; use one of: {', '.join(LAUNCHERS)}")
        return v.lower()

    @model_validator(mode="after")
    def _launchable(self) -> Framework:
        if self.processes_per_learner is not None and self.launcher == LAUNCHER_NONE:
            raise ValueError(
                "processes_per_learner: needs a launcher (torchrun or mpi) to start the "
                "processes; without one a learner runs the command once"
            )
        frameworks = LAUNCHER_FRAMEWORKS.get(self.launcher)
        name = FRAMEWORK_ALIASES.get(self.name.lower(), self.name.lower())
        if frameworks and not self.image and name not in frameworks:
            raise ValueError(
                f"launcher: {self.launcher} cannot run framework {self.name!r}: its image has "
                f"no {self.launcher}; use framework {' or '.join(frameworks)}, or set "
                f"framework.image to an image that has it"
            )
        if problem := launcher_problem(self.launcher, self.command):
            raise ValueError(f"command: {problem}")
        return self

    @field_validator("version", mode="before")
    @classmethod
    def _version_str(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v


class Checkpoint(_Model):
    interval_s: int = Field(
        default=300, ge=0, le=INT32_MAX, description="0 turns periodic checkpoints off"
    )


class Elastic(_Model):
    """How an elastic job (min_learners < max_learners) may be resized by the platform.

    The job's target is `learners` (or the user's last `dlaas scale N`): the scheduler shrinks
    it below that only for a job of a higher class, and grows it back to it. With `auto_grow`
    it may also grow past the target, toward max_learners, into idle resources; those learners
    are lent and given back (a checkpoint, then a restart at the target) when a queued job
    needs them. Off by default: a job runs at the size its user asked for.
    """

    auto_grow: StrictBool = False


class Manifest(_Model):
    name: str
    description: str = Field(default="", max_length=MAX_TEXT)
    version: Short = "1.0"
    learners: int = Field(default=1, ge=1, le=1024)
    cpus: float = Field(default=1.0, ge=MIN_CPUS, le=1024, allow_inf_nan=False)
    gpus: int = Field(default=0, ge=0, le=64)
    gpu_type: Short | None = None
    memory_mb: int = Field(default=1024, validation_alias="memory")
    # Per learner: its writable layer and its share of the job volume (sizes.py); 0: the
    # platform's default. The platform's maximum is checked at submit, enforced by the monitor.
    disk_mb: DiskMb = Field(default=0, validation_alias="disk")
    data_stores: list[DataStore] = Field(default_factory=list, max_length=MAX_DATA_STORES)
    framework: Framework
    evaluation_metrics: dict[str, Any] | None = None
    min_learners: int | None = Field(default=None, ge=1, le=1024)
    max_learners: int | None = Field(default=None, ge=1, le=1024)
    elastic: Elastic = Field(default_factory=Elastic)
    priority: int = Field(default=0, ge=-INT32_MAX - 1, le=INT32_MAX)
    checkpoint: Checkpoint = Field(default_factory=Checkpoint)
    max_restarts: int = Field(default=0, ge=0, le=100)
    env: dict[str, str] = Field(default_factory=dict, max_length=MAX_ENV)
    # The job's own failure-triage rows, read before the operator's and the built-in ones
    # (dlaas.domain.triage); bounded, for they run inside the job monitor.
    triage: list[TriageRow] = Field(default_factory=list, max_length=MAX_MANIFEST_ROWS)
    # Seconds with no new log line from any learner after which the job counts as stalled
    # (services/jobmonitor/limits.py); 0: the platform's default. on_stall: what then.
    stall_after: int = Field(default=0, ge=0, le=MAX_STALL_AFTER_S)
    on_stall: Literal["notify", "restart", "fail"] = "notify"
    # Running time (queued, pending and halted time not counted) after which the job is
    # stopped like a halt and fails `deadline_exceeded`: seconds or "2h", "30m", "1h30m";
    # 0: none (the platform's maximum still applies).
    max_duration: Seconds = Field(default=0, ge=0, le=MAX_DURATION_S)
    progress: ProgressSpec = Field(default_factory=ProgressSpec)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(
                "must be 1-63 letters, digits, spaces, '.', '_' or '-', starting with a letter or digit"
            )
        return v

    @field_validator("version", mode="before")
    @classmethod
    def _version_str(cls, v: Any) -> Any:
        return str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v

    @field_validator("memory_mb", mode="before")
    @classmethod
    def _memory(cls, v: Any) -> int:
        mib = parse_memory_mb(v)
        if mib < MIN_MEMORY_MB:
            raise ValueError(f"must be at least {MIN_MEMORY_MB} MiB (Docker's minimum)")
        return mib

    @field_validator("evaluation_metrics")
    @classmethod
    def _metrics_size(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        # Free-form, shown back by `show`: bounded so one job cannot bloat every listing.
        if v is not None and len(json.dumps(v, default=str)) > MAX_FREEFORM_BYTES:
            raise ValueError(f"must be at most {MAX_FREEFORM_BYTES // 1024} KiB (as JSON)")
        return v

    @field_validator("priority", mode="before")
    @classmethod
    def _priority(cls, v: Any) -> Any:
        if isinstance(v, str) and not v.lstrip("-").isdigit():
            if v.lower() not in PRIORITY_CLASSES:
                raise ValueError(
                    f"unknown priority class {v!r}; use a number or one of {', '.join(PRIORITY_CLASSES)}"
                )
            return PRIORITY_CLASSES[v.lower()]
        return v

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        out = {}
        for key, value in v.items():
            if not isinstance(key, str) or not _ENV_RE.match(key):
                raise ValueError(f"{key!r} is not a valid environment variable name")
            if len(key) > MAX_SHORT:
                raise ValueError(f"variable names are at most {MAX_SHORT} characters")
            if key in RESERVED_ENV:
                raise ValueError(f"{key} is set by the platform and cannot be overridden")
            value = value if isinstance(value, str) else str(value)
            if len(value) > MAX_ENV_VALUE:
                raise ValueError(f"{key}: values are at most {MAX_ENV_VALUE // 1024} KiB")
            out[key] = value
        return out

    @model_validator(mode="after")
    def _elastic_range(self) -> Manifest:
        lo, hi = self.elastic_range
        if self.min_learners is not None and self.max_learners is not None and lo > hi:
            raise ValueError(f"min_learners ({lo}) is above max_learners ({hi})")
        problem = elastic_range_problem(self.learners, lo, hi)
        if problem:
            raise ValueError(problem)
        self.min_learners, self.max_learners = lo, hi
        if self.elastic.auto_grow and hi == self.learners:
            raise ValueError(
                f"elastic.auto_grow: needs max_learners above learners ({self.learners}) to grow into"
            )
        fw = self.framework
        if (
            fw.launcher == LAUNCHER_TORCHRUN
            and self.gpus
            and fw.processes_per_learner is not None
            and fw.processes_per_learner > self.gpus
        ):
            raise ValueError(
                f"framework.processes_per_learner: {fw.processes_per_learner} torchrun "
                f"processes per learner need as many GPUs, and each learner has {self.gpus} "
                f"(gpus); ask for {fw.processes_per_learner} gpus or fewer processes"
            )
        ids = [s.id for s in self.data_stores]
        if len(ids) != len(set(ids)):
            raise ValueError("data_stores: ids must be unique")
        return self

    @property
    def is_elastic(self) -> bool:
        return self.min_learners != self.max_learners

    @property
    def elastic_range(self) -> tuple[int, int]:
        """(min_learners, max_learners); both are `learners` unless the manifest widens them."""
        lo = self.min_learners if self.min_learners is not None else self.learners
        hi = self.max_learners if self.max_learners is not None else self.learners
        return lo, hi

    def data_store(self) -> DataStore | None:
        """The store that holds training data and receives results (the first one)."""
        return self.data_stores[0] if self.data_stores else None

    def normalized(self) -> dict[str, Any]:
        """The manifest as the platform understood it, with credentials masked.

        The access key is masked too: with the password it is the credential of the user's
        store, and a job's page is no place for either.
        """
        data = self.model_dump(mode="json", exclude_none=True)
        for store in data.get("data_stores") or []:
            conn = store.get("connection") or {}
            if conn.get("access_key"):
                conn["access_key"] = "**********"
        return data


def errors_from_validation(exc: ValidationError) -> list[str]:
    """Turn pydantic's errors into `path: what is wrong` lines, with no input values echoed."""
    out = []
    for err in exc.errors(include_url=False, include_input=False):
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        out.append(f"{field_path(tuple(err['loc']))}: {msg}")
    return capped_problems(out)


def elastic_range_problem(learners: int, lo: int, hi: int) -> str:
    """The one elastic-range rule, min_learners <= learners <= max_learners: "" when it
    holds, else the problem naming the fields.

    Asked by the manifest's validator (the target it asks for), the scale use case (the
    LCM's and the API's, through `scale_problem`) and the scheduler's Enqueue (a gang).
    """
    if lo <= learners <= hi:
        return ""
    return (
        f"learners: {learners} is outside the job's elastic range; allowed {lo} to {hi} "
        "(min_learners to max_learners)"
    )


def scale_problem(manifest: Manifest, learners: int, job_id: str) -> str:
    """ "" when the job may be scaled to `learners`, else the problem naming the field."""
    if not manifest.is_elastic:
        return (
            f"learners: job {job_id} is not elastic (it runs exactly {manifest.learners} "
            "learner(s)); set min_learners < max_learners in its manifest to allow scaling"
        )
    lo, hi = manifest.elastic_range
    return elastic_range_problem(learners, lo, hi)


def parse_manifest(text: str | bytes) -> Manifest:
    """Parse and validate a YAML manifest; raise InvalidManifest listing every problem."""
    return manifest_from_dict(load_yaml(text))


def manifest_from_dict(data: dict[str, Any]) -> Manifest:
    """Validate an already-parsed manifest (see `check_shape` for what is refused first)."""
    check_shape(data)
    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:
        raise InvalidManifest(errors_from_validation(exc)) from None
