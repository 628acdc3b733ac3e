"""One node of a Docker Swarm as the LCM and the monitor hold a node's engine: a view of
the swarm through its manager (`SwarmEngine.node(name)`), which deploys a whole gang (its
plan names every container's node), reports its own node's containers, or EngineUnreachable
while the swarm sees that node down; and the monitor's event stream, which polls the
manager's tasks (the swarm reports no task changes as events).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import docker.errors
import requests.exceptions

from dlaas.adapters.engines.docker_engine import engine_outage
from dlaas.adapters.nodes import SwarmNode
from dlaas.domain import jobspec
from dlaas.domain.errors import TemporaryError
from dlaas.domain.plan import DeploymentPlan
from dlaas.domain.ports import Container, ContainerEngine, EngineUnreachable, EventStream

if TYPE_CHECKING:
    from dlaas.adapters.engines.swarm_engine import SwarmEngine

log = logging.getLogger(__name__)

# What a call to the manager raises when it does not answer.
MANAGER_UNREACHABLE = (
    requests.exceptions.ConnectionError,
    requests.exceptions.Timeout,
    ConnectionError,
)
# How long a teardown lets the learners of a broken gang end by themselves before it stops
# them (see SwarmNodeView.stop_learners).
LEARNERS_SELF_END_S = 1.0
# How long a teardown lets the helpers finish by themselves before it signals them (see
# SwarmNodeView.signal_helper): a helper notices its learners' end within 0.5 s and stores
# in a second or two; a signal costs the engine's 2 s delay on top.
HELPER_SELF_FINISH_S = 5.0


class _PollStream(EventStream):
    """Swarm reports no task changes as events: the manager's tasks are polled instead,
    every POLL_S (how late the monitor learns of a container's end, on average half of it)."""

    def __init__(self, engine: SwarmEngine, node: str):
        self.engine = engine
        self.node = node
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[str]:
        before: dict[str, tuple] = {}
        first = True
        while not self._closed.is_set():
            try:
                now = self.engine.shared_fingerprint()
                node = self.engine.nodes().get(self.node)
            except MANAGER_UNREACHABLE as exc:
                raise EngineUnreachable(self.node, str(exc)) from None
            if node is None or not node.ready:
                raise EngineUnreachable(self.node, "the swarm sees the node down")
            if not first:
                for job in sorted(set(now) | set(before)):
                    if now.get(job) != before.get(job):
                        yield job
            before, first = now, False
            self._closed.wait(self.engine.poll_s)

    def close(self) -> None:
        self._closed.set()


class SwarmNodeView(ContainerEngine):
    """One node of the swarm, as the LCM and the monitor hold a node's engine."""

    answers_for_down_node = True  # everything goes through the manager

    def __init__(self, engine: SwarmEngine, name: str):
        self.engine = engine
        self.name = name

    def _check(self) -> None:
        try:
            node = self.engine.nodes().get(self.name)
        # A manager that answers with an error (no leader yet after its restart) cannot say
        # what runs on the node either.
        except (*MANAGER_UNREACHABLE, docker.errors.APIError) as exc:
            raise EngineUnreachable(self.name, str(exc)) from None
        if node is None or not node.ready:
            raise EngineUnreachable(self.name, "the swarm sees the node down")

    # ---- ContainerEngine (the LCM) --------------------------------------------------

    def ping(self) -> bool:
        return self.probe() == "up"

    def probe(self) -> str:
        """The swarm's view of the node: up (ready), down (down, disconnected, gone from the
        swarm), or unknown when the swarm cannot say: its manager does not answer (or answers
        with an error of its own: no leader yet after a restart), or it lists the node
        "unknown" (a restarted manager has not heard from it yet; swarmkit marks it down if
        no heartbeat comes within its grace period). The platform sees the cluster only
        through the manager: a manager away is not every node lost, and the tasks on the
        workers run on meanwhile."""
        try:
            node = self.engine.nodes().get(self.name)
        except (*MANAGER_UNREACHABLE, docker.errors.APIError) as exc:
            log.debug("node %s: the swarm manager cannot say: %s", self.name, exc)
            return "unknown"
        if node is None:
            return "down"
        if node.state == "unknown":
            return "unknown"
        return "up" if node.ready else "down"

    def _node(self) -> SwarmNode:
        try:
            node = self.engine.nodes().get(self.name)
        except MANAGER_UNREACHABLE as exc:
            raise EngineUnreachable(self.name, str(exc)) from None
        if node is None:
            raise EngineUnreachable(self.name, "the node is not in the swarm")
        return node

    def node_state(self) -> str | None:
        """The swarm's word for the node (ready, down, unknown, disconnected)."""
        try:
            return self._node().state
        except EngineUnreachable:
            return "unknown"  # the manager cannot be asked, or the node left the swarm

    def availability(self) -> str:
        return self._node().availability

    def set_availability(self, availability: str) -> None:
        try:
            self.engine.set_availability(self.name, availability)
        except MANAGER_UNREACHABLE as exc:
            raise TemporaryError(f"the swarm manager is not answering: {exc}") from None

    @engine_outage
    def image_present(self, image: str) -> bool:
        # Only the manager's own images are visible here; a node without the image rejects
        # its task, which the monitor reports.
        try:
            self.engine.client.images.get(image)
            return True
        except docker.errors.ImageNotFound:
            return False

    @engine_outage
    def deploy(self, plan: DeploymentPlan) -> list[str]:
        return self.engine.deploy(plan)

    @engine_outage
    def containers(self, job_id: str, role: str | None = None) -> list[Container]:
        found = self.engine.job_containers(job_id)
        return [c for c in found if role is None or c.role == role]

    @engine_outage
    def stop_learners(self, job_id: str, timeout: int = 10) -> None:
        """Scale the learners' services to 0 (SIGTERM, after the engine's 2 s delay for a
        task on an overlay network) and wait until they have stopped.

        A gang one of whose learners failed is broken: its other learners lose their peer
        and end by themselves within moments (the ddp example's PeerLost). They are given
        LEARNERS_SELF_END_S first: a task told to stop while it was ending anyway reports its
        end only after that 2 s delay."""
        t0 = time.monotonic()
        learners = self.containers(job_id, jobspec.ROLE_LEARNER)
        if any(c.exited and c.exit_code for c in learners) and not all(c.exited for c in learners):
            self.engine.wait_stopped(job_id, jobspec.ROLE_LEARNER, LEARNERS_SELF_END_S)
            learners = self.containers(job_id, jobspec.ROLE_LEARNER)
        running = [c.learner for c in learners if not c.exited]
        for c in learners:
            self.engine.scale(c.name, 0)
        stopped = self.engine.wait_stopped(job_id, jobspec.ROLE_LEARNER, timeout + 5)
        # Where a restart's time goes (a teardown is stop, signal, wait for the helper).
        log.info("%s: learners %s after %.2f s (still running when stopped: %s)", job_id,
                 "stopped" if stopped else "NOT stopped", time.monotonic() - t0,
                 running or "none")  # fmt: skip

    @engine_outage
    def signal_helper(self, job_id: str) -> None:
        """Let the helpers store and finish (called once the learners are stopped).

        A helper on a swarm finishes by itself once every learner of its node has ended:
        its exit code written, or (killed, SIGKILL included) the lock its wrapper held for
        its life dropped (services.learner_helper.presence). That is waited for
        first, up to HELPER_SELF_FINISH_S: the finish signal (the service scaled to 0: the
        swarm sends its StopSignal) reaches a task on an overlay network only after the
        engine's fixed 2 s delay, and its end is reported only after that delay, even when
        the helper was done before. A helper still running then (one still downloading, an
        image from before the alive lock) is scaled to 0; a teardown needs no exit code,
        which the swarm drops with the task."""
        if self.engine.wait_stopped(job_id, jobspec.ROLE_HELPER, HELPER_SELF_FINISH_S):
            return
        for c in self.containers(job_id, jobspec.ROLE_HELPER):
            if not c.exited:
                self.engine.scale(c.name, 0)

    @engine_outage
    def wait_helper(self, job_id: str, timeout_s: float) -> bool:
        t0 = time.monotonic()
        done = self.engine.wait_stopped(job_id, jobspec.ROLE_HELPER, timeout_s)
        log.info("%s: helper %s after %.2f s", job_id, "finished" if done else "NOT finished",
                 time.monotonic() - t0)  # fmt: skip
        return done

    @engine_outage
    def remove_job(self, job_id: str) -> None:
        self.engine.remove_job(job_id)

    @engine_outage
    def remove_run(self, job_id: str) -> None:
        # The job's overlay network stays for its next run: the swarm allocates a new one
        # before it creates the first container (0.5-0.6 s on an idle 2-node lab, measured),
        # on the path of every restart. `remove_job` takes it when the job ends.
        self.engine.remove_job(job_id, keep_network=True)

    @engine_outage
    def remove_job_here(self, job_id: str) -> None:
        # The manager removes swarm-wide: only this node's services, or a requeued job's
        # new run on other nodes would go with its leftovers here.
        self.engine.remove_job_on(job_id, self.name)

    # ---- JobContainers (the monitor, the log reader) ---------------------------------

    def job_containers(self, job_id: str) -> list[Container]:
        self._check()
        try:
            found = self.engine.job_containers(job_id, self.name)
        except MANAGER_UNREACHABLE as exc:
            raise EngineUnreachable(self.name, str(exc)) from None
        if any(c.state == "unknown" for c in found):
            # As good as the node not answering: a job must not be judged on these.
            raise EngineUnreachable(self.name, f"the swarm lost track of {job_id}'s tasks here")
        return found

    def jobs_with_resources(self) -> set[str]:
        return self.engine.jobs(self.name)

    def events(self, since: float | None = None) -> EventStream:
        self._check()
        return _PollStream(self.engine, self.name)

    def logs(
        self, c: Container, *, tail: int | None = None, timestamps: bool = False
    ) -> bytes | None:
        if c.id.startswith("service:"):
            return b""  # no task has run yet
        try:
            return self.engine.task_logs(c.id, tail=tail, timestamps=timestamps)
        except docker.errors.APIError:
            # Gone (404), or the manager cannot give it now (a 5xx, e.g. while its service
            # is removed): cannot be read, and a log reader takes the stored object instead.
            return None

    def follow_logs(self, c: Container) -> Iterator[bytes]:
        if c.id.startswith("service:"):
            return iter(())
        try:
            return self.engine.task_logs(c.id, follow=True)
        except docker.errors.APIError:
            return iter(())

    def restart(self, c: Container) -> None:
        self.engine.restart(c.name)

    def kill(self, c: Container, signal: str | None = None) -> None:
        if signal == jobspec.HELPER_FINISH_SIGNAL and c.role == jobspec.ROLE_HELPER:
            return  # it finishes by itself once its learners have exited (signal_helper)
        self.engine.remove_service(c.name)

    def stop(self, c: Container, timeout: int) -> None:
        self.engine.scale(c.name, 0)

    def remove_resources(self, job_id: str) -> None:
        self.engine.remove_job(job_id)
