"""The LCM's ports: everything it needs from the outside world, as abstract classes.

The use cases, the reconciler, node health and deployment (service.py composes them)
talk only to these. Production adapters: `StatusKeeper` (etcd, dlaas.adapters.etcd_status),
`SchedulerClient` (gRPC, dlaas.clients.sdk), `Deployer` (Docker, deployer.py), `JobIdentities`
(S3 IAM, dlaas.adapters.job_identities). The fast tests' in-memory fakes (tests/lcm_fakes.py)
subclass the same ports.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

from dlaas.domain.errors import InvalidRequest
from dlaas.domain.ports import JobContainers, SchedulerPort, StatusRepo
from services.lcm.plan import DeploymentPlan

__all__ = ["ContainerEngine", "JobContainers", "SchedulerPort", "StatusRepo"]


class ContainerEngine(JobContainers):
    """One node's container engine, as the LCM drives it: every call idempotent.

    Also the node's JobContainers (dlaas.domain.ports), which the job monitor and the API's log
    reader use; the LCM itself uses `jobs_with_resources` from there (a node that comes
    back is cleared of what is left of jobs that moved on).
    """

    @abstractmethod
    def ping(self) -> bool:
        """Whether the engine answers now (never raises)."""

    def probe(self) -> str:
        """The node's health for the LCM's probes: "up", "down", or "unknown" when nobody can
        tell now (a cluster manager that does not answer, or has not heard from the node
        since it restarted), and then nothing may be judged on it. Never raises. An engine of
        its own is the node: it answers or the node is down."""
        return "up" if self.ping() else "down"

    @abstractmethod
    def image_present(self, image: str) -> bool: ...

    # Whether this node's containers are reached through a cluster manager that still
    # answers while the node is down (a swarm node): its jobs' containers can be removed.
    answers_for_down_node: bool = False

    # A node's state and availability are the cluster engine's (a swarm node object's). An
    # engine of its own has neither: its state is what the LCM's probes say (None here) and
    # it is always active.
    def node_state(self) -> str | None:
        """ready, down, unknown or disconnected as the cluster sees the node; None: ask ping."""
        return None

    def availability(self) -> str:
        """active, pause or drain (raise EngineUnreachable if the cluster cannot say)."""
        return "active"

    def set_availability(self, availability: str) -> None:
        raise InvalidRequest(
            "availability: a node can be drained only on a swarm (DLAAS_SWARM_MANAGER); "
            "this platform runs on an engine of its own"
        )

    @abstractmethod
    def deploy(self, plan: DeploymentPlan) -> list[str]:
        """Make the job's containers match `plan` and start them; the container names
        (the helper's first). Raise DeployRefused, ImageUnavailable or TemporaryError."""

    @abstractmethod
    def containers(self, job_id: str, role: str | None = None) -> Sequence[object]:
        """The job's containers on this engine (empty: it has none here)."""

    @abstractmethod
    def stop_learners(self, job_id: str, timeout: int = 10) -> None: ...

    @abstractmethod
    def signal_helper(self, job_id: str) -> None:
        """Tell the job's helper to store checkpoints and logs and exit."""

    @abstractmethod
    def wait_helper(self, job_id: str, timeout_s: float) -> bool:
        """Wait until the job's helper has exited; False on timeout."""

    @abstractmethod
    def remove_job(self, job_id: str) -> None:
        """Remove every container, the network and the volume of a job (missing is fine)."""

    def remove_job_here(self, job_id: str) -> None:
        """Remove only what the job has on this node (missing is fine): a node that comes
        back is cleared of a job that moved on, whose new run may already be elsewhere. An
        engine of its own holds only this node's part: that is the whole job here."""
        self.remove_job(job_id)
