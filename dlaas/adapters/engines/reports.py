"""What a container engine reports, read purely: Docker's timestamps as seconds, and an
engine's message made fit for a job's status (env values hidden, length bounded), and a
Docker container's list entry and inspected state as the port's Container. Shared by
the Docker and the Swarm adapters; no Docker import, so the swarm's pure service-spec code
(swarm_spec.py) can use it.
"""

from __future__ import annotations

import re
from datetime import datetime

from dlaas.domain import jobspec
from dlaas.domain.plan import DeploymentPlan
from dlaas.domain.ports import EXITED_STATES, Container

# runc quotes a bad env entry whole ("NAME=value"); values may hold secrets.
_QUOTED_ENV = re.compile(r'"([A-Za-z_][A-Za-z0-9_]*)=(?:[^"\\]|\\.)*"')
SECRET_ENV_NAME = re.compile(r"KEY|SECRET|TOKEN|PASSWORD|CREDENTIAL", re.IGNORECASE)
MAX_REASON_CHARS = 500


def redact(text: str, plan: DeploymentPlan) -> str:
    """The engine's message fit for the job's status: env values out, bounded length."""
    text = _QUOTED_ENV.sub(r'"\1=<hidden>"', text)
    for spec in plan.containers:
        for name, value in spec.env.items():
            if value and len(value) >= 4 and SECRET_ENV_NAME.search(name):
                text = text.replace(value, "<hidden>")
    return text[:MAX_REASON_CHARS]


def epoch(stamp: str) -> float | None:
    """Docker's RFC 3339 time with nanoseconds as seconds; None for its zero time."""
    if not stamp or stamp.startswith("0001-"):
        return None
    head, _, frac = stamp.rstrip("Z").partition(".")
    try:
        t = datetime.fromisoformat(head + "+00:00").timestamp()
    except ValueError:
        return None
    return t + (float("0." + frac) if frac.isdigit() else 0.0)


def docker_container(listed: dict, state: dict | None = None, node: str = "") -> Container:
    """A Docker container as the port's plain Container: `listed` is its entry in the
    engine's container list (id, names, labels, state), `state` the State of its inspect,
    which only an exited container needs (its exit code, OOM kill and finish time)."""
    labels = listed.get("Labels") or {}
    status = (state or {}).get("Status") or listed.get("State") or "unknown"
    names = listed.get("Names") or [""]
    learner = labels.get(jobspec.LABEL_LEARNER)
    exited = status in EXITED_STATES and state is not None
    return Container(
        id=listed.get("Id", ""),
        name=names[0].lstrip("/"),
        job_id=labels.get(jobspec.LABEL_JOB, ""),
        role=labels.get(jobspec.LABEL_ROLE, jobspec.ROLE_LEARNER),
        learner=int(learner) if learner not in (None, "") else None,
        state=status,
        node=node,
        exit_code=state.get("ExitCode") if exited else None,
        oom_killed=bool(state.get("OOMKilled")) if exited else False,
        finished_at=epoch(state.get("FinishedAt", "")) if exited else None,
    )
