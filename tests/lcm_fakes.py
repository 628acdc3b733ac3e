"""In-memory FAKES of the LCM's and the job monitor's ports, shared by every test that runs
the real LCM or the real JobMonitor without etcd, Docker, the scheduler service or the S3
IAM API.

Each subclasses the port it stands in for (dlaas/domain/ports.py, dlaas.domain.ports), so a port
that grows a method breaks them at construction, not in a test far away. They keep the
adapters' rules where the LCM relies on them: status changes follow dlaas.domain.status's table
and are mirrored into the job store like StatusKeeper's; `delete` forgets the placement
too; the engine creates a gang's containers once (running), refuses a gang with a missing
image whole, and its calls are idempotent. tests/integration/test_port_contracts.py is the
check: one behavioural contract per port, run against each fake here and its real adapter
(StatusKeeper on etcd, the Docker adapter, JobIdentities and boto3 on SeaweedFS); what a
fake does not promise (event timing, the scheduler's watch, the scheduler port) is named
there.

Importable as `lcm_fakes` from tests/unit and tests/integration: pytest puts tests/ on
sys.path for tests/conftest.py (no __init__.py files here).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from dlaas.adapters.job_identities import JobIdentities
from dlaas.adapters.nodes import NodeSpec
from dlaas.adapters.store.base import JobStore
from dlaas.config import PlatformSettings
from dlaas.domain import jobspec
from dlaas.domain.errors import ImageUnavailable, JobNotFound
from dlaas.domain.plan import DeploymentPlan
from dlaas.domain.ports import (
    Container,
    ContainerEngine,
    EngineUnreachable,
    EventStream,
    SchedulerPort,
    StatusRepo,
)
from dlaas.domain.status import JobState, advance, initial
from services.lcm.service import Lcm


class InMemoryStatusRepo(StatusRepo):
    """FAKE StatusRepo: a dict instead of etcd (no compare-and-swap needed: one process)."""

    def __init__(self, store: JobStore | None = None, clock: Callable[[], float] | None = None):
        import time

        self.store = store
        self.clock = clock or time.time
        self.states: dict[str, JobState] = {}
        self.placements: dict[str, list[dict]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        # The scheduler's running entries (written by the scheduler in production).
        self.held: dict[str, list[dict]] = {}
        self.watchers: list[Callable[[object], None]] = []

    def _mirror(self, job_id: str, state: JobState) -> None:
        if self.store is not None:
            self.store.record_transition(job_id, state.seq, state.transition())

    def get(self, job_id: str) -> JobState | None:
        return self.states.get(job_id)

    def create(self, job_id: str, reason: str = "submitted") -> JobState:
        if job_id in self.states:
            return self.states[job_id]
        state = self.states[job_id] = initial(self.clock(), reason)
        self._mirror(job_id, state)
        return state

    def transition(self, job_id, target, reason, *, error_code="", exit_code=None) -> JobState:
        current = self.states.get(job_id)
        if current is None:
            raise JobNotFound(job_id)
        new = advance(
            current, target, self.clock(), reason, error_code=error_code, exit_code=exit_code
        )
        self.states[job_id] = new
        self._mirror(job_id, new)
        return new

    def delete(self, job_id: str) -> None:
        self.states.pop(job_id, None)
        self.placements.pop(job_id, None)

    def active_jobs(self) -> dict[str, JobState]:
        return {j: s for j, s in self.states.items() if not s.final}

    def repair_mirrors(self, since: float | None = None) -> list[str]:
        return []  # the mirror is written in the same call: nothing is ever missed

    def placement(self, job_id: str) -> list[dict]:
        return list(self.placements.get(job_id, []))

    def set_placement(self, job_id: str, placement: list[dict]) -> None:
        self.placements[job_id] = list(placement)

    def set_node_health(self, name: str, health: dict[str, Any]) -> None:
        self.nodes[name] = dict(health)

    def unhealthy_nodes(self) -> set[str]:
        return {n for n, h in self.nodes.items() if not h.get("healthy", True)}

    def held_allocation(self, job_id: str) -> list[dict]:
        return list(self.held.get(job_id, []))

    def watch_scheduler(self, callback: Callable[[object], None]) -> object:
        self.watchers.append(callback)
        return callback

    def cancel_watch(self, handle: object) -> None:
        self.watchers.remove(handle)  # type: ignore[arg-type]


class FakeEvents(EventStream):
    """FAKE event stream: yields the job ids `FakeEngine.emit` queues; ends when closed."""

    def __init__(self) -> None:
        self.queue: queue.Queue[str | None] = queue.Queue()

    def __iter__(self) -> Iterator[str]:
        while (job_id := self.queue.get()) is not None:
            yield job_id

    def close(self) -> None:
        self.queue.put(None)


class FakeEngine(ContainerEngine):
    """FAKE container engine: records the plans it is given and never runs a container.

    For the LCM: `up` (whether it answers), `missing_images` (images it does not have),
    `containers_of` (job id -> container names "on" it; a test may seed leftovers).
    For the monitor (JobContainers): `boxes` (container id -> the Container as the engine
    reports it: `add` one, `set_state` to make it exit), `output` (container id -> what
    it printed: `print`), `emit` (an event for every open stream), `signals` and
    `stopped_containers` (what was sent), `layers` (container id -> its writable layer's
    bytes, for `layer_bytes`). While `up` is False every call of the port
    raises EngineUnreachable.
    """

    def __init__(self, missing_images: set[str] | None = None, node: str = "local"):
        self.up = True
        self.node = node
        self.missing_images = set(missing_images or ())
        self.plans: list[DeploymentPlan] = []
        self.containers_of: dict[str, list[str]] = {}
        self.removed: list[str] = []
        self.runs_removed: list[str] = []  # remove_run: a run of a job that goes on
        self.stopped: list[str] = []
        self.boxes: dict[str, Container] = {}
        self.output: dict[str, bytes] = {}
        self.stamped: dict[str, bytes] = {}  # the output, each line after its time
        self.signals: list[tuple[str, str | None]] = []  # (container name, signal)
        self.stopped_containers: list[str] = []
        self.streams: list[FakeEvents] = []
        self.layers: dict[str, int] = {}  # container id -> bytes in its writable layer

    # ---- seeding and inspecting (tests) --------------------------------------------

    def add(self, job_id: str, role: str, learner: int | None = None, state: str = "running"):
        """A container of the job, as the LCM's deploy would have made it."""
        name = (
            jobspec.helper_name(job_id)
            if role == jobspec.ROLE_HELPER
            else jobspec.learner_name(job_id, learner or 0)
        )
        c = Container(f"id-{name}", name, job_id, role, learner, state, self.node)
        self.boxes[c.id] = c
        self.containers_of.setdefault(job_id, []).append(name)
        return c

    def set_state(self, c: Container, state: str, exit_code: int | None = None, **kw) -> None:
        """The container moves to `state` (exited with `exit_code`, oom_killed=..., ...)."""
        self.boxes[c.id] = replace(self.boxes[c.id], state=state, exit_code=exit_code, **kw)

    def print(self, c: Container, text: str, at: float | None = None) -> None:
        """The container prints `text`, at `at` (default now) as `logs(timestamps=True)` says."""
        self.output[c.id] = self.output.get(c.id, b"") + text.encode()
        stamp = datetime.fromtimestamp(time.time() if at is None else at, UTC)
        prefix = stamp.strftime("%Y-%m-%dT%H:%M:%S.%f000Z ").encode()
        lines = text.encode().splitlines(keepends=True)
        self.stamped[c.id] = self.stamped.get(c.id, b"") + b"".join(prefix + x for x in lines)

    def emit(self, job_id: str) -> None:
        for stream in self.streams:
            stream.queue.put(job_id)

    def _answer(self) -> None:
        if not self.up:
            raise EngineUnreachable(self.node, "switched off by the test")

    # ---- the LCM's (ContainerEngine) -----------------------------------------------

    def ping(self) -> bool:
        return self.up

    def image_present(self, image: str) -> bool:
        return image not in self.missing_images

    def deploy(self, plan: DeploymentPlan) -> list[str]:
        self.plans.append(plan)
        missing = sorted({s.image for s in plan.containers} & self.missing_images)
        if missing:  # as the Docker adapter: nothing of the gang is created
            raise ImageUnavailable(f"image not found on the node: {missing[0]}")
        # Create what is missing, running; what is there already stays as it is.
        there = {c.name for c in self.boxes.values()}
        for spec in plan.containers:
            if spec.name not in there:
                c = Container(
                    f"id-{spec.name}", spec.name, plan.job_id, spec.role, spec.learner,
                    "running", self.node,
                )  # fmt: skip
                self.boxes[c.id] = c
        names = [spec.name for spec in plan.containers]
        self.containers_of[plan.job_id] = names
        return names

    def containers(self, job_id: str, role: str | None = None) -> list[str]:
        return list(self.containers_of.get(job_id, []))

    def stop_learners(self, job_id: str, timeout: int = 10) -> None:
        self.stopped.append(job_id)
        for c in list(self.boxes.values()):
            if c.job_id == job_id and c.role == jobspec.ROLE_LEARNER and c.running:
                self.set_state(c, "exited", 143)  # SIGTERM, as `docker stop` sends

    def signal_helper(self, job_id: str) -> None:
        pass

    def wait_helper(self, job_id: str, timeout_s: float) -> bool:
        return True

    def remove_run(self, job_id: str) -> None:
        self.runs_removed.append(job_id)
        self.remove_job(job_id)

    def remove_job(self, job_id: str) -> None:
        if self.containers_of.pop(job_id, None) is not None:
            self.removed.append(job_id)
        self._drop(job_id)

    # ---- JobContainers (dlaas.domain.ports) -----------------------------------------------

    def _drop(self, job_id: str) -> None:
        for cid in [cid for cid, c in self.boxes.items() if c.job_id == job_id]:
            del self.boxes[cid]
            self.output.pop(cid, None)
            self.stamped.pop(cid, None)

    def job_containers(self, job_id: str) -> list[Container]:
        self._answer()
        return [c for c in self.boxes.values() if c.job_id == job_id]

    def jobs_with_resources(self) -> set[str]:
        self._answer()
        return {j for j, names in self.containers_of.items() if names} | {
            c.job_id for c in self.boxes.values()
        }

    def events(self, since: float | None = None) -> EventStream:
        self._answer()
        stream = FakeEvents()
        self.streams.append(stream)
        return stream

    def logs(
        self, c: Container, *, tail: int | None = None, timestamps: bool = False
    ) -> bytes | None:
        self._answer()
        if c.id not in self.boxes:
            return None
        raw = (self.stamped if timestamps else self.output).get(c.id, b"")
        if tail is None:
            return raw
        return b"".join(raw.splitlines(keepends=True)[-tail:]) if tail else b""

    def follow_logs(self, c: Container) -> Iterator[bytes]:
        self._answer()
        # What it printed so far, then the end (as if it had exited): a fake has no time.
        raw = self.output.get(c.id) if c.id in self.boxes else None
        return iter([raw] if raw else [])

    def restart(self, c: Container) -> None:
        self._answer()
        if c.id in self.boxes:
            self.set_state(c, "running")

    def kill(self, c: Container, signal: str | None = None) -> None:
        self._answer()
        self.signals.append((c.name, signal))
        if signal is None and c.id in self.boxes:
            self.set_state(c, "exited", 137)

    def stop(self, c: Container, timeout: int) -> None:
        self._answer()
        self.stopped_containers.append(c.name)
        if c.id in self.boxes:
            self.set_state(c, "exited", 143)

    def layer_bytes(self, job_id: str) -> dict[str, int] | None:
        self._answer()
        mine = [c.id for c in self.boxes.values() if c.job_id == job_id and c.running]
        return {cid: self.layers.get(cid, 0) for cid in mine}

    def remove_resources(self, job_id: str) -> None:
        self._answer()
        if self.containers_of.pop(job_id, None) is not None:
            self.removed.append(job_id)
        self._drop(job_id)


class FakeScheduler(SchedulerPort):
    """FAKE scheduler port: a cluster of `cpus` CPUs; refuses a gang that can never fit
    (like the real scheduler's check), records every gang and release. `decisions` is
    what the next schedule() returns; `raises`, when set, is raised by every call."""

    def __init__(self, cpus: float = 8.0):
        self.cpus = cpus
        self.gangs: list[Any] = []  # every GangRequest enqueued, in order
        self.released: list[str] = []
        self.decisions: list[Any] = []
        self.raises: BaseException | None = None

    def _check(self) -> None:
        if self.raises is not None:
            raise self.raises

    def enqueue(self, gang) -> tuple[bool, str]:
        self._check()
        if gang.learners * gang.cpus > self.cpus:
            return False, (
                f"learners: {gang.learners} learners x {gang.cpus:g} cpus can never fit; "
                f"the cluster has {self.cpus:g} cpus"
            )
        self.gangs.append(gang)
        return True, ""

    def schedule(self) -> list[Any]:
        self._check()
        out, self.decisions = self.decisions, []
        return out

    def release(self, job_id: str, ended: bool = False) -> None:
        self._check()
        self.released.append(job_id)


class FakeIdentities(JobIdentities):
    """FAKE S3 identities: issued and revoked in a dict (no IAM API)."""

    def __init__(self) -> None:  # no boto3 client: nothing here reaches S3
        self.issued: dict[str, dict] = {}
        self.revoked: list[str] = []

    def issue(self, job_id: str, policy: dict[str, Any]) -> tuple[str, str]:
        self.issued[job_id] = policy
        return f"AK{job_id}", f"SK{job_id}"

    def revoke(self, job_id: str) -> bool:
        self.revoked.append(job_id)
        return self.issued.pop(job_id, None) is not None

    def job_users(self) -> set[str]:
        return set(self.issued)


class FakeBuckets:
    """FAKE platform S3 client for the LCM's results buckets (head_bucket/create_bucket)."""

    def __init__(self) -> None:
        self.buckets: set[str] = set()

    def head_bucket(self, Bucket: str) -> None:
        import botocore.exceptions

        if Bucket not in self.buckets:
            raise botocore.exceptions.ClientError({"Error": {"Code": "404"}}, "HeadBucket")

    def create_bucket(self, Bucket: str) -> None:
        self.buckets.add(Bucket)


def fake_lcm(
    store: JobStore,
    settings: PlatformSettings | None = None,
    nodes: list[NodeSpec] | None = None,
    cpus: float = 8.0,
    clock: Callable[[], float] | None = None,
) -> Lcm:
    """The REAL Lcm over the fakes: `lcm.keeper`, `lcm.scheduler`, `lcm.deployers[name]`,
    `lcm.identities` are the fakes above, for a test to seed and inspect."""
    import time

    settings = settings or PlatformSettings(s3_access_key="k", s3_secret_key="s")
    nodes = nodes or [NodeSpec(name="local", cpus=int(cpus), memory_mb=16384)]
    clock = clock or time.time
    return Lcm(
        settings,
        InMemoryStatusRepo(store, clock),
        store,
        {n.name: FakeEngine() for n in nodes},
        FakeScheduler(cpus),
        nodes,
        clock=clock,
        identities=FakeIdentities(),
        s3=FakeBuckets(),
    )
