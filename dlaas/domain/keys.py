"""The etcd key layout: the one module that spells a key.

Pure (no etcd client). Every service that reads or writes etcd — the status keeper
(dlaas/adapters/etcd_status.py), the scheduler's state, the LCM's leader election, the job
monitor's watch, the chaos benchmark — asks an `EtcdKeys` for the key, so the layout can
change here only. tests/unit/test_etcd_keys.py fails when a module outside this one
formats a `/jobs/`, `/nodes/`, `/sched/` or `/lcm/` key by hand.

    <prefix>/jobs/<job id>/status      the job's live status (JobState as JSON)
    <prefix>/jobs/<job id>/placement   the learners' nodes and GPUs, written by the LCM
    <prefix>/nodes/<name>              a node's health, written by the LCM leader
    <prefix>/sched/queue/<job id>      a queued gang request (scheduler)
    <prefix>/sched/running/<job id>    a placed gang: its allocation and original request
    <prefix>/sched/quota/<team>        a team's quota (scheduler)
    <prefix>/lcm/leader                the LCM leadership lease's holder
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PREFIX = "/dlaas"

_STATUS = "status"
_PLACEMENT = "placement"


@dataclass(frozen=True)
class EtcdKeys:
    """The keys under one platform's prefix (`/dlaas` unless configured otherwise)."""

    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        # "/dlaas" and "/dlaas/" name the same tree.
        object.__setattr__(self, "prefix", self.prefix.rstrip("/"))

    # ---- jobs ------------------------------------------------------------------------

    @property
    def jobs(self) -> str:
        """The prefix of every job's keys."""
        return f"{self.prefix}/jobs/"

    def job(self, job_id: str) -> str:
        """The prefix of one job's keys (deleting it deletes all the job's facts)."""
        return f"{self.jobs}{job_id}/"

    def status(self, job_id: str) -> str:
        return self.job(job_id) + _STATUS

    def placement(self, job_id: str) -> str:
        return self.job(job_id) + _PLACEMENT

    def job_of(self, key: str) -> str:
        """The job id a key under `jobs` belongs to ("" for the bare prefix or another key)."""
        if not key.startswith(self.jobs):
            return ""
        return key[len(self.jobs) :].split("/", 1)[0]

    def is_status(self, key: str) -> bool:
        """Whether `key` is some job's status key."""
        job_id = self.job_of(key)
        return bool(job_id) and key == self.status(job_id)

    # ---- nodes -----------------------------------------------------------------------

    @property
    def nodes(self) -> str:
        return f"{self.prefix}/nodes/"

    def node(self, name: str) -> str:
        return self.nodes + name

    # ---- the scheduler's state ---------------------------------------------------------

    @property
    def sched(self) -> str:
        """The prefix of all the scheduler writes (the LCM watches it for decisions)."""
        return f"{self.prefix}/sched/"

    @property
    def sched_queue(self) -> str:
        return self.sched + "queue/"

    @property
    def sched_running(self) -> str:
        return self.sched + "running/"

    @property
    def sched_quota(self) -> str:
        return self.sched + "quota/"

    def queued(self, job_id: str) -> str:
        return self.sched_queue + job_id

    def running(self, job_id: str) -> str:
        return self.sched_running + job_id

    def quota(self, team: str) -> str:
        return self.sched_quota + team

    # ---- the LCM -----------------------------------------------------------------------

    @property
    def lcm_leader(self) -> str:
        return f"{self.prefix}/lcm/leader"
