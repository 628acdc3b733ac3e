"""The lifecycle manager: accepts jobs, asks the scheduler to place them, deploys them.

`Lcm` composes the LCM's concerns, each in a module of its own:
- use_cases.py: submit, halt, resume, requeue, scale, delete (what the gRPC API calls);
- reconciler.py: the leader's placement loop and the repair of what a crash left;
- node_health.py: probing the engines, requeueing a lost node's jobs, draining a node;
- deployment.py: deploy and teardown of a gang, the jobs' S3 identities;
- restart_policy.py: the restart backoff (pure); grpc_api.py: the gRPC servicer.

Replicas: every replica serves the gRPC use cases (they are single CAS writes plus
idempotent container calls); only the leader (dlaas.adapters.leader, an etcd lease) runs the
placement loop and the reconcile, so there is one writer of deployments at a time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from dlaas.adapters.job_identities import JobIdentities
from dlaas.adapters.nodes import NodeSpec
from dlaas.adapters.store.base import JobStore
from dlaas.config import PlatformSettings
from dlaas.domain.ports import ContainerEngine, SchedulerPort, StatusRepo
from dlaas.domain.secretbox import SecretBox
from services.lcm.deployment import Deployment
from services.lcm.node_health import NodeHealth
from services.lcm.reconciler import Reconciler
from services.lcm.use_cases import JobUseCases


class Lcm(JobUseCases, Reconciler, NodeHealth, Deployment):
    def __init__(
        self,
        settings: PlatformSettings,
        keeper: StatusRepo,
        store: JobStore,
        deployers: dict[str, ContainerEngine] | ContainerEngine,
        scheduler: SchedulerPort,
        nodes: list[NodeSpec],
        clock: Callable[[], float] = time.time,
        identities: JobIdentities | None = None,
        s3: object = None,
    ):
        self.settings = settings
        # Per-job S3 identities and the platform's own S3 client (results buckets are made
        # by the platform: a job's identity may not create buckets).
        self.identities = identities or JobIdentities(
            settings.s3_endpoint, settings.s3_access_key, settings.s3_secret_key.get_secret_value()
        )
        self._s3 = s3
        self._last_sweep = 0.0
        self.box = SecretBox(settings.secrets_key.get_secret_value())
        self.keeper = keeper
        self.store = store
        if isinstance(deployers, ContainerEngine):
            deployers = {n.name: deployers for n in nodes}
        self.deployers = deployers
        self.scheduler = scheduler
        self.nodes = nodes
        self.clock = clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._leading = threading.Event()
        self._thread: threading.Thread | None = None
        # Requeued jobs waiting out their restart backoff: job_id -> not_before.
        self._due: dict[str, float] = {}
        # Node health as the leader sees it: name -> consecutive failed probes.
        self._probe_failures: dict[str, int] = {}
        self._unhealthy: set[str] = set()
        # Each node's availability as the leader last saw it (a swarm's: active/pause/drain).
        self._availability: dict[str, str] = {}
        self._last_probe = 0.0
        self._last_pending_check = 0.0
        self._last_mirror_check = 0.0
        self._lock = threading.Lock()
        # Teardowns under way (job_id -> how many), and the jobs whose deploy waits for
        # them (deployment.py: a new run is deployed only once the old one is gone).
        self._teardowns_lock = threading.Lock()
        self._teardowns: dict[str, int] = {}
        self._deploy_after: set[str] = set()
        # Images a submit found on the node, and when (use_cases.py: asked once a while).
        self._images_lock = threading.Lock()
        self._images_seen: dict[str, float] = {}
