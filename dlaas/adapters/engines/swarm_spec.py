"""The swarm adapter's pure part: a DeploymentPlan's container as a Swarm service spec
(`service_spec`, with the helper's secrets apart: `secret_env`), and a service's latest task
as the port's plain Container (`container_of`, the task-state table). No Docker import: the
I/O is swarm_engine.py's, which the unit tests need not load to check these.
"""

from __future__ import annotations

import hashlib

from dlaas.adapters.engines.reports import SECRET_ENV_NAME, epoch
from dlaas.domain import jobspec
from dlaas.domain.plan import ContainerSpec, DeploymentPlan
from dlaas.domain.ports import Container

# A swarm node's platform name (a node label; else its hostname), and a service's node.
LABEL_NODE = "dlaas.node"
SECRET_FILE = "dlaas-env"
SECRET_PATH = f"/run/secrets/{SECRET_FILE}"
LEARNER_STOP_GRACE_S = 10
STOPPED_EXIT_CODE = 143  # 128 + SIGTERM: what a stopped learner reports
EXIT_ENGINE_LOST = 255  # as Docker reports a container that died with its engine
HELPER_STOP_GRACE_S = 30  # as long as the LCM waits for a helper to store
# A task's state (swarm) as a container state (Docker's words, dlaas.domain.ports).
_STATES = {
    **dict.fromkeys(
        ("new", "allocated", "pending", "assigned", "accepted", "preparing", "ready", "starting"),
        "created",
    ),
    "running": "running",
    "complete": "exited",
    "failed": "exited",
    "shutdown": "exited",
    "rejected": "dead",
    # The swarm lost track of the task's node (a manager restart, a node away): its container
    # may still run there. Nothing about it is known, and nothing may be judged.
    "orphaned": "unknown",
    "remove": "removing",
}


def _lost_exit_code(status: dict) -> int:
    """The exit code of a task that ended without one of its container's: 0 if it completed,
    125 if the engine refused what the job asked for (its image, its spec), else 255: the
    task went with its node's engine (a restart of it, the node lost), which the monitor
    reads as the node's failure, not the job's, as it does a Docker engine's 255."""
    if status.get("State") == "complete":
        return 0
    err = str(status.get("Err", "")).lower()
    if any(word in err for word in ("no such image", "invalid", "not found", "refused")):
        return 125
    return EXIT_ENGINE_LOST


# Docker's exit code for a container whose start failed with no code of the program's own
# (126 and 127 are a command its image cannot run: the job's).
EXIT_START_FAILED = 128


def _start_failed(status: dict, code: int | None) -> bool:
    """Whether the task's container never ran: the engine failed to start it (a network it
    could not join, the engine going away meanwhile), not the job's program exiting 128."""
    return code == EXIT_START_FAILED and "starting container failed" in str(status.get("Err", ""))


def container_of(service: dict, task: dict | None, node: str) -> Container:
    """A service's latest task as a container (no task yet: created)."""
    labels = (service.get("Spec") or {}).get("Labels") or {}
    learner = labels.get(jobspec.LABEL_LEARNER)
    status = (task or {}).get("Status") or {}
    state = _STATES.get(status.get("State", "new"), "created")
    replicas = ((service.get("Spec") or {}).get("Mode") or {}).get("Replicated") or {}
    if replicas.get("Replicas", 1) == 0 and state in ("created", "removing"):
        # Scaled to 0 (stopped by the platform) and its task shut down: swarm deletes the
        # task, and its exit code with it. A stopped container's code stands in.
        state = "exited"
        status = {"State": "shutdown", "ContainerStatus": {"ExitCode": STOPPED_EXIT_CODE},
                  "Timestamp": status.get("Timestamp") or service.get("UpdatedAt", "")}  # fmt: skip
    exited = state in ("exited", "dead")
    code = (status.get("ContainerStatus") or {}).get("ExitCode")
    if exited and (code is None or status.get("State") == "rejected"):
        code = _lost_exit_code(status)
    elif exited and _start_failed(status, code):
        # Its node's engine's failure (the manager's dockerd killed while it started the
        # task, in the chaos run): restarted, as a container that died with its engine.
        code = EXIT_ENGINE_LOST
    return Container(
        # No task yet: the service stands in (an id that is never a task's).
        id=(task or {}).get("ID") or f"service:{service.get('ID', '')}",
        name=(service.get("Spec") or {}).get("Name", ""),
        job_id=labels.get(jobspec.LABEL_JOB, ""),
        role=labels.get(jobspec.LABEL_ROLE, jobspec.ROLE_LEARNER),
        learner=int(learner) if learner not in (None, "") else None,
        state=state,
        node=node,
        exit_code=code if exited else None,
        # Docker reports 137 for a kill by the OOM killer as for any SIGKILL; a task says no more.
        oom_killed="OOM" in str(status.get("Err", "")).upper(),
        finished_at=epoch(status.get("Timestamp", "")) if exited else None,
    )


def secret_env(spec: ContainerSpec) -> tuple[dict[str, str], dict[str, str]]:
    """(plain env, secret env) of a helper: what holds keys or secrets goes to a file."""
    if spec.role != jobspec.ROLE_HELPER:
        return dict(spec.env), {}
    secret = {k: v for k, v in spec.env.items() if v and SECRET_ENV_NAME.search(k)}
    plain = {k: v for k, v in spec.env.items() if k not in secret}
    if secret:
        plain[jobspec.ENV_SECRET_FILE] = SECRET_PATH
    # A service's container cannot be signalled: the helper finishes once its learners
    # (stopped by scaling their services to 0) have exited.
    plain[jobspec.ENV_HELPER_FINISH_ON_EXIT] = "1"
    return plain, secret


def file_secret_name(plan: DeploymentPlan, content: bytes) -> str:
    """The Swarm secret of one secret file (ContainerSpec.files), named by its content."""
    return f"{plan.network}-file-{hashlib.sha256(content).hexdigest()[:12]}"


def service_spec(
    spec: ContainerSpec,
    plan: DeploymentPlan,
    node_id: str,
    secret: dict | None,
    file_secrets: dict[str, dict] | None = None,
) -> dict:
    """The Swarm service of one container (the API's ServiceSpec as a dict). Pure.

    `file_secrets` are the Swarm secrets of the spec's secret files, by secret name
    (file_secret_name); a file is mounted at its path, which lies under /run/secrets."""
    env, _ = secret_env(spec)
    helper = spec.role == jobspec.ROLE_HELPER
    container = {
        "Image": spec.image,
        "Args": list(spec.command),
        "Env": [f"{k}={v}" for k, v in env.items()],
        "Labels": dict(spec.labels),
        "Hostname": spec.aliases[0] if spec.aliases else "",
        "Init": True,
        "CapabilityDrop": ["ALL"],
        "CapabilityAdd": list(spec.cap_add) or None,
        "Mounts": [
            {
                "Type": "volume",
                "Source": plan.volume,
                "Target": jobspec.JOB_MOUNT,
                "VolumeOptions": {"Labels": dict(plan.labels)},
            },
            {
                "Type": "tmpfs",
                "Target": "/tmp",
                "TmpfsOptions": {"SizeBytes": spec.tmp_mb * 2**20, "Mode": 0o1777},
            },
        ],
        "StopSignal": jobspec.HELPER_FINISH_SIGNAL if helper else "SIGTERM",
        "StopGracePeriod": int((HELPER_STOP_GRACE_S if helper else LEARNER_STOP_GRACE_S) * 1e9),
    }
    if secret is not None and helper:
        container["Secrets"] = [
            {
                "SecretID": secret["ID"],
                "SecretName": secret["Spec"]["Name"],
                "File": {"Name": SECRET_FILE, "UID": "0", "GID": "0", "Mode": 0o400},
            }
        ]
    for path, content in spec.files:
        made = (file_secrets or {})[file_secret_name(plan, content)]
        container.setdefault("Secrets", []).append(
            {
                "SecretID": made["ID"],
                "SecretName": made["Spec"]["Name"],
                "File": {
                    "Name": path.removeprefix("/run/secrets/"),
                    "UID": "0",
                    "GID": "0",
                    "Mode": 0o400,
                },
            }
        )
    limits: dict = {"Pids": spec.pids_limit}
    if spec.nano_cpus:
        limits["NanoCPUs"] = spec.nano_cpus
    if spec.mem_limit_mb:
        limits["MemoryBytes"] = spec.mem_limit_mb * 2**20
    resources: dict = {"Limits": limits}
    if spec.gpus:
        # Nodes advertise their GPUs as generic resources (dockerd --node-generic-resource).
        resources["Reservations"] = {
            "GenericResources": [{"DiscreteResourceSpec": {"Kind": "gpu", "Value": spec.gpus}}]
        }
    labels = {**spec.labels, LABEL_NODE: spec.node}
    return {
        "Name": spec.name,
        "Labels": labels,
        "TaskTemplate": {
            "ContainerSpec": container,
            "Resources": resources,
            "RestartPolicy": {"Condition": "none", "MaxAttempts": 0},
            "Placement": {"Constraints": [f"node.id=={node_id}"]},
            "Networks": [{"Target": plan.network, "Aliases": list(spec.aliases)}],
        },
        "Mode": {"Replicated": {"Replicas": 1}},
        "EndpointSpec": {"Mode": "dnsrr"},
    }
