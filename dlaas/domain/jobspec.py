"""The contract between the LCM, the job monitor and the containers of a job.

Names, labels, mount paths, env variables, helper events and helper exit codes: one
place, so the deployer, the monitor, the helper and the learner wrapper agree. Pure.
"""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum

# Labels on every container, network and volume the platform creates.
# Its value is the platform instance id, so platforms (and test runs) sharing one Docker
# engine never touch each other's containers.
LABEL_MANAGED = "dlaas.managed"
LABEL_JOB = "dlaas.job"
LABEL_ROLE = "dlaas.role"  # "helper" | "learner"
LABEL_LEARNER = "dlaas.learner"  # learner index, 0-based
LABEL_USER = "dlaas.user"
# A swarm node's platform name (a node label; else its hostname), and a service's node.
LABEL_NODE = "dlaas.node"

ROLE_HELPER = "helper"
ROLE_LEARNER = "learner"

# The shared job volume and what lives in it.
JOB_MOUNT = "/job"
DATA_DIR = f"{JOB_MOUNT}/data"
CODE_DIR = f"{JOB_MOUNT}/code"
RESULT_DIR = f"{JOB_MOUNT}/results"
CHECKPOINT_DIR = f"{JOB_MOUNT}/checkpoints"
LOG_DIR = f"{JOB_MOUNT}/logs"
DATA_READY_MARK = f"{JOB_MOUNT}/.data_ready"

MASTER_PORT = 29500

# The helper prints one line per event on stdout: "DLAAS-EVENT {json}".
EVENT_PREFIX = "DLAAS-EVENT "
EVENT_DATA_READY = "data_ready"  # data and code are in place; learners may start
EVENT_STORED = "stored"  # results and logs are in S3
EVENT_ERROR = "error"  # {"code": ..., "message": ...} before a non-zero exit
# {"bytes": n, "limit": n} once, when the node's job volume holds more than its learners'
# disk sizes (services/learner_helper/diskwatch.py); the monitor fails the job disk_full.
EVENT_DISK_FULL = "disk_full"
EVENT_CHECKPOINT_SYNCED = "checkpoint_synced"  # {"files": n, "at": unix time} after each sync
# {"learners": {"<id>": {"cpu_s": CPU-seconds, "memory_peak_mib": MiB}}}: what this node's
# learners' containers used (dlaas.learner.usage), before `stored`; for usage accounting.
EVENT_USAGE = "usage"

# Helper exit codes, so the monitor can say why a job failed.
HELPER_EXIT_OK = 0
HELPER_EXIT_DATA_NOT_FOUND = 10
HELPER_EXIT_STORE_REFUSED = 11
HELPER_EXIT_UPLOAD_FAILED = 12
HELPER_EXIT_BAD_ARCHIVE = 13
HELPER_EXIT_STORE_UNREACHABLE = 14
# The job's own data store (the manifest's connection.auth_url) did not answer at the
# helper's start: the job's fault (a wrong or private host), failed without restarts.
HELPER_EXIT_CONNECTION_UNREACHABLE = 15


class JobErrorCode(StrEnum):
    """Why a job failed or restarted: the `error_code` of its status and history entries.

    Stored in the job store, shown to users and counted by the operator metrics: a value
    here is a contract (tests/unit/test_error_codes.py pins them). Not to be confused with
    the `code` of dlaas.domain.errors' classes, which name an error on the wire. It lives here
    because the helper's image carries this module alone (images/Dockerfile.learner).
    """

    # The learners (services/jobmonitor/decide.py).
    EXIT_CODE = "exit_code"  # a learner exited non-zero
    OOM_KILLED = "oom_killed"
    KILLED = "killed"  # SIGKILL from outside (exit 137 without an OOM kill)
    TERMINATED = "terminated"  # SIGTERM from outside (exit 143, or a helper's unasked exit 0)
    ENGINE_LOST = "engine_lost"  # the engine restarted under the container (exit 255)
    CONTAINERS_MISSING = "containers_missing"
    # What a failed learner's last log lines say (the triage catalog: dlaas.domain.triage).
    GPU_OOM = "gpu_oom"  # CUDA out of memory: not restarted
    MISSING_MODULE = "missing_module"  # ModuleNotFoundError: the image lacks a module
    DISK_FULL = "disk_full"  # No space left on device
    COLLECTIVE_TIMEOUT = "collective_timeout"  # NCCL/gloo timeout: restarted (the platform's)
    PEER_RESET = "peer_reset"  # a peer's connection reset: restarted (the platform's)
    # The job monitor's limits (services/jobmonitor/limits.py).
    STALLED = "stalled"  # no learner logged for the job's stall_after (on_stall: fail)
    DEADLINE_EXCEEDED = "deadline_exceeded"  # ran for its max_duration
    # The helper (its exit codes: dlaas.domain.jobspec.HELPER_EXIT_REASONS).
    HELPER_FAILED = "helper_failed"  # a helper exit code the contract does not name
    STORE_TIMEOUT = "store_timeout"
    DATA_NOT_FOUND = "data_not_found"
    STORE_REFUSED = "store_refused"
    UPLOAD_FAILED = "upload_failed"
    BAD_ARCHIVE = "bad_archive"
    STORE_UNREACHABLE = "store_unreachable"
    # The LCM (services/lcm/).
    RESTARTS_EXHAUSTED = "restarts_exhausted"
    CAPACITY_EXCEEDED = "capacity_exceeded"
    IMAGE_MISSING = "image_missing"
    DEPLOY_REFUSED = "deploy_refused"
    DEPLOY_FAILED = "deploy_failed"


HELPER_EXIT_REASONS = {
    HELPER_EXIT_DATA_NOT_FOUND: (JobErrorCode.DATA_NOT_FOUND, "training data not found"),
    HELPER_EXIT_STORE_REFUSED: (
        JobErrorCode.STORE_REFUSED,
        "the data store refused the credentials",
    ),
    HELPER_EXIT_UPLOAD_FAILED: (JobErrorCode.UPLOAD_FAILED, "results or logs could not be stored"),
    HELPER_EXIT_BAD_ARCHIVE: (JobErrorCode.BAD_ARCHIVE, "the code archive could not be unpacked"),
    HELPER_EXIT_STORE_UNREACHABLE: (
        JobErrorCode.STORE_UNREACHABLE,
        "the data store could not be reached",
    ),
    HELPER_EXIT_CONNECTION_UNREACHABLE: (
        JobErrorCode.STORE_UNREACHABLE,
        "the job's data store could not be reached",
    ),
}

# Helper env: set when DLAAS_S3_ENDPOINT is the job's own data store, to the manifest
# field that named it (STORE_ENDPOINT_FIELD); empty or absent: the platform's store. The
# helper then checks the endpoint answers before anything else, and names the field.
ENV_STORE_FIELD = "DLAAS_S3_ENDPOINT_FIELD"
STORE_ENDPOINT_FIELD = "data_stores[0].connection.auth_url"

# The helper finishes (stores results and logs, exits) on this signal.
HELPER_FINISH_SIGNAL = "SIGUSR1"
# CPU weight of a learner container (Docker's default, which the helper keeps, is 1024).
# On a node whose CPUs the learners saturate, a helper (data staging, checkpoint upload,
# log shipping: small, and on every job's critical path) still runs promptly: a restarted
# gang's helper took 2.6 s to stage its data beside 20 busy jobs at equal weight, ~1 s
# with this one (0.3 s on an idle node).
LEARNER_CPU_SHARES = 256


def network_name(job_id: str) -> str:
    return f"dlaas-{job_id}"


# The host interface of a job's bridge network: "dl" + 5 hex digits of the platform id +
# 8 of the job id, 15 characters (Linux's limit for an interface name). Every job bridge of
# one platform shares the prefix, so the host firewall (dlaas.local.firewall) fences them all
# in with one interface match ("-i dl1a2b3+"). The prefix never matches the extra
# engines' own bridges ("dlaas-br201": "s" is no hex digit).
BRIDGE_PREFIX_HEX = 5
BRIDGE_JOB_HEX = 8


def _hex(text: str, digits: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:digits]


def bridge_prefix(platform_id: str) -> str:
    return "dl" + _hex(platform_id, BRIDGE_PREFIX_HEX)


def bridge_name(platform_id: str, job_id: str) -> str:
    return bridge_prefix(platform_id) + _hex(job_id, BRIDGE_JOB_HEX)


def volume_name(job_id: str) -> str:
    return f"dlaas-{job_id}"


def helper_name(job_id: str) -> str:
    return f"dlaas-{job_id}-helper"


def learner_name(job_id: str, index: int) -> str:
    return f"dlaas-{job_id}-learner-{index}"


def learner_alias(index: int) -> str:
    """The learner's host name on the job network (MASTER_ADDR is learner 0's)."""
    return f"learner-{index}"


def log_object_key(job_id: str, index: int) -> str:
    return f"{job_id}/logs/learner-{index}.log"


def results_prefix(job_id: str) -> str:
    return f"{job_id}/"


def checkpoint_prefix(job_id: str) -> str:
    """Where the helper keeps CHECKPOINT_DIR in the job's results bucket, across restarts."""
    return f"{job_id}/checkpoints/"


def metrics_prefix(job_id: str) -> str:
    """Where the helper keeps the metric files the learners write under LOG_DIR (their
    paths below LOG_DIR kept), in the job's results bucket; the API reads them there."""
    return f"{job_id}/metrics/"


METRIC_FILE_TENSORBOARD = "tensorboard"
METRIC_FILE_JSONL = "jsonl"
# FfDL's emetrics file ($JOB_STATE_DIR/logs/evaluation-metrics.txt): JSON lines too.
_EMETRICS_NAMES = ("evaluation-metrics.txt", "evaluation_metrics.txt")


def metric_file_kind(rel: str) -> str | None:
    """What a file below LOG_DIR holds, by its name: TensorBoard events, JSON lines of
    metrics (`*.jsonl`, FfDL's emetrics file), or None for anything else (the learner
    logs among them). A file below `learner-<i>/` is learner i's, any other learner 0's."""
    name = rel.rsplit("/", 1)[-1]
    if name.startswith("."):
        return None  # half-written, as everywhere in the helper
    if name.startswith("events.out.tfevents."):
        return METRIC_FILE_TENSORBOARD
    if name.endswith(".jsonl") or name in _EMETRICS_NAMES:
        return METRIC_FILE_JSONL
    return None


def metric_file_learner(rel: str) -> int:
    """The learner a metric file belongs to: i below `learner-<i>/`, else 0 (the chief,
    which writes the summaries in TensorFlow's and Horovod's conventions)."""
    first = rel.split("/", 1)[0] if "/" in rel else ""
    index = first.removeprefix("learner-")
    return int(index) if first.startswith("learner-") and index.isdigit() else 0


# Helper env for checkpoints: the helper restores CHECKPOINT_DIR from
# checkpoint_prefix(JOB_ID) before data_ready, syncs it there every
# DLAAS_CHECKPOINT_INTERVAL_S seconds (0: only at the end) and once more on the finish signal.
ENV_CHECKPOINT_INTERVAL = "DLAAS_CHECKPOINT_INTERVAL_S"
ENV_CHECKPOINT_PREFIX = "DLAAS_CHECKPOINT_PREFIX"
# A gang on several nodes has a helper per node (dlaas/domain/plan.py): which learners are
# on its node (comma-separated indices), and whether it is the job's helper ("1": it
# mirrors the checkpoints and prints the events; "0": it only restores them).
ENV_HELPER_LEARNERS = "DLAAS_HELPER_LEARNERS"
ENV_HELPER_PRIMARY = "DLAAS_HELPER_PRIMARY"
# "1": the helper finishes by itself once every learner of its node has exited (their exit
# codes in LOG_DIR), for engines that cannot signal a running container (Swarm).
ENV_HELPER_FINISH_ON_EXIT = "DLAAS_HELPER_FINISH_ON_EXIT"
# The most the node's job volume may hold, MiB: its learners' disk sizes added up. Its
# helper measures the volume and prints EVENT_DISK_FULL past it; "" or 0: not watched.
ENV_VOLUME_LIMIT_MB = "DLAAS_VOLUME_LIMIT_MB"
# Where the helper finds its secret env entries as a file of NAME=value lines, when the
# engine hands secrets over as files (Swarm secrets) instead of env values.
ENV_SECRET_FILE = "DLAAS_SECRET_ENV_FILE"  # noqa: S105 - a variable's name, not a secret


def format_event(event: str, **fields: object) -> str:
    return EVENT_PREFIX + json.dumps({"event": event, **fields}, sort_keys=True)


def parse_event(line: str) -> dict | None:
    if not line.startswith(EVENT_PREFIX):
        return None
    try:
        data = json.loads(line[len(EVENT_PREFIX) :])
    except ValueError:
        return None
    return data if isinstance(data, dict) and "event" in data else None
