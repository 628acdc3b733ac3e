"""Node health and maintenance as the LCM leader sees it: probe every engine, requeue a lost
node's jobs, clean a node that comes back, and move jobs off a drained node.

A node whose engine fails NODE_LOST_AFTER probes in a row is lost: recorded in etcd (the
scheduler places nothing there), every job placed on it requeued (RESTARTABLE: a STORING job
too, from its last checkpoint, since the results its helper was uploading went with the
node). When it answers again, what jobs that moved on meanwhile left there is removed (only
that node's part: a requeued job may already run elsewhere) before it is used again. On a swarm
a probe is the swarm's own view of the node (SwarmNodeView.probe: the node object's state);
a swarm that cannot say (its manager is down) judges nothing: no node is lost for it.

Maintenance (a swarm only): a node's availability is the swarm's (`active`, `pause`,
`drain`). A node that is not active is not schedulable (recorded in etcd like a lost one,
with its availability); a drained one also has its jobs moved off, each as `drain_moves`
says: an elastic job keeping enough learners elsewhere (at least its min) shrinks, any
other job moves whole. Both go through the requeue (learners stopped with SIGTERM, the
helper stores their checkpoints, the gang queued again at its old position); an elastic
job then restarts with as many learners as fit (never fewer than its min) and grows back
into the node once it is active again. `set_node_availability` (use_cases.py) is the
administrator's way in; the leader's probe also notices an availability set on the swarm
directly (`docker node update`) and does the same.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from dlaas.adapters.nodes import NodeSpec
from dlaas.domain import errors
from dlaas.domain.ports import ContainerEngine, EngineUnreachable
from dlaas.domain.status import DEPLOYED, REQUEUEABLE, RESTARTABLE, Status
from dlaas.domain.stored import stored_manifest

log = logging.getLogger(__name__)

# Node health: an engine is probed this often; this many failed probes in a row mark it lost.
NODE_PROBE_S = 0.5
NODE_LOST_AFTER = 2
AVAILABILITIES = ("active", "pause", "drain")
# How long a drain waits for the moved jobs' gangs to be torn down (their helpers store
# checkpoints and logs first) before the swarm is told to drain the node (which stops
# whatever task is left on it).
DRAIN_WAIT_S = 90.0


@dataclass(frozen=True)
class PlacedGang:
    """A running job as a drain sees it: the node of each learner and the job's minimum."""

    job_id: str
    nodes: tuple[str, ...]  # one entry per learner
    min_learners: int


@dataclass(frozen=True)
class DrainMove:
    job_id: str
    action: str  # "shrink" (elastic, enough learners elsewhere) or "move" (whole gang)
    reason: str


def drain_moves(node: str, gangs: Iterable[PlacedGang]) -> list[DrainMove]:
    """What draining `node` does to each running gang (pure): none for a gang with no learner
    there; `shrink` for one that keeps at least max(1, min_learners) learners on other nodes;
    `move` for every other one (a fixed-size gang, or an elastic one that would fall below
    its min). Both are carried out from the job's checkpoint."""
    out = []
    for g in gangs:
        here = g.nodes.count(node)
        if not here:
            continue
        kept = len(g.nodes) - here
        if kept >= max(1, g.min_learners):
            out.append(DrainMove(g.job_id, "shrink", (
                f"node {node} drained: shrunk off it ({kept} of {len(g.nodes)} learner(s) "
                f"left elsewhere, min {g.min_learners}); restarts from its checkpoint"
            )))  # fmt: skip
        else:
            why = (
                f"{kept} learner(s) left elsewhere, below its min of {g.min_learners}"
                if kept and g.min_learners < len(g.nodes)
                else "a fixed-size gang"
                if g.min_learners >= len(g.nodes)
                else "no learner left"
            )
            out.append(DrainMove(g.job_id, "move", (
                f"node {node} drained: moved from its checkpoint ({why})"
            )))  # fmt: skip
    return out


@dataclass(frozen=True)
class NodeRow:
    """A node as `dlaas nodes` lists it."""

    spec: NodeSpec
    state: str  # ready, down (a swarm also says unknown or disconnected)
    availability: str  # active, pause, drain (unknown: the swarm cannot say now)
    healthy: bool  # schedulable: the scheduler places new gangs there


class NodeHealth:
    """The node health of `Lcm` (probes: leader only; the listing and moves: any replica)."""

    def check_nodes(self) -> None:
        """Probe every engine; a lost one gets no new gangs and its jobs are requeued."""
        now = self.clock()
        if now - self._last_probe < NODE_PROBE_S:
            return
        self._last_probe = now
        for name, deployer in self.deployers.items():
            seen = deployer.probe()
            if seen == "unknown":
                # Nobody can tell (on a swarm: its manager is away, or has not heard from
                # the node since it restarted). Its containers may run on, as a swarm's
                # tasks do on the workers while the manager is down: nothing is judged, no
                # failed probe counted, and the node keeps its record until someone can say.
                continue
            if seen == "up":
                self._probe_failures[name] = 0
                if name in self._unhealthy:
                    self._node_back(name, deployer)
                self._check_availability(name, deployer)
                continue
            self._probe_failures[name] = self._probe_failures.get(name, 0) + 1
            if self._probe_failures[name] >= NODE_LOST_AFTER and name not in self._unhealthy:
                self._node_lost(name, deployer)

    def _publish_health(self, name: str, reason: str) -> None:
        """Record in etcd whether the scheduler may place on the node: answering and active."""
        availability = self._availability.get(name, "active")
        healthy = name not in self._unhealthy and availability == "active"
        health = {"healthy": healthy, "since": self.clock(), "availability": availability}
        if not healthy:
            health["reason"] = reason
        self.keeper.set_node_health(name, health)

    def _node_lost(self, name: str, deployer: ContainerEngine) -> None:
        log.warning("node %s lost: its engine is not answering", name)
        self._unhealthy.add(name)
        self._publish_health(name, "engine not answering")
        for job_id, state in self.keeper.active_jobs().items():
            if state.status in RESTARTABLE and name in {p["node"] for p in self._placement(job_id)}:
                reason = f"node {name} lost: its engine is not answering"
                if state.status == Status.STORING:
                    # Its helper was uploading the results from the node's volume: they are
                    # gone with it, the checkpoints are in S3. Redo the tail, lose no job.
                    reason = (
                        f"node {name} lost while storing the results (only that node had "
                        f"them): restarts from its last checkpoint"
                    )
                try:
                    self.requeue(job_id, reason, False, node_lost=True)
                except errors.DlaasError as exc:
                    log.warning("requeue %s after losing %s: %s", job_id, name, exc.message)
                    continue
                if deployer.answers_for_down_node:
                    # A swarm's manager still answers: the gang's services go now (their
                    # names are free for the restart; the lost node's containers stop when
                    # it rejoins). An engine of its own is left alone: it cannot answer.
                    try:
                        deployer.remove_job(job_id)
                    except Exception:  # broad on purpose: logged; its return clears the rest
                        log.exception("removing %s's services after losing %s", job_id, name)

    def _node_back(self, name: str, deployer: ContainerEngine) -> None:
        """A node rejoins: remove what is left of jobs that have moved on, then use it again."""
        log.info("node %s is answering again", name)
        for job_id in deployer.jobs_with_resources():
            state = self.keeper.get(job_id)
            placed_here = name in {p["node"] for p in self._placement(job_id)}
            if state is None or state.status not in DEPLOYED or not placed_here:
                if state is None or state.final:
                    deployer.remove_job(job_id)
                else:
                    # Moved on (requeued while the node was away): its new run may already
                    # be deployed elsewhere; on a swarm removing the whole job would stop it.
                    deployer.remove_job_here(job_id)
        self._unhealthy.discard(name)
        self._publish_health(name, f"availability {self._availability.get(name, 'active')}")

    def _check_availability(self, name: str, deployer: ContainerEngine) -> None:
        """Follow the node's availability: not active, no new gangs; drained, its jobs move."""
        try:
            availability = deployer.availability()
        except EngineUnreachable:
            return  # the next probe asks again
        before = self._availability.get(name)
        if availability == before:
            return
        self._availability[name] = availability
        log.info("node %s is %s (was %s)", name, availability, before or "not seen yet")
        self._publish_health(name, f"availability {availability}")
        if availability == "drain":
            self.move_off(name, "drained")

    def _unhealthy_nodes(self) -> set[str]:
        """Nodes the leader marked lost or not active, as recorded in etcd (any replica)."""
        return self.keeper.unhealthy_nodes()

    # ---- maintenance ----------------------------------------------------------------

    def move_off(self, name: str, why: str) -> list[DrainMove]:
        """Move the running jobs off a drained node (drain_moves); the moves made."""
        gangs = []
        for job_id, state in self.keeper.active_jobs().items():
            nodes = tuple(p["node"] for p in self._placement(job_id))
            if state.status not in REQUEUEABLE or name not in nodes:
                continue
            try:
                manifest = stored_manifest(self.store.get(job_id))
            except errors.DlaasError as exc:  # unreadable now: moved whole, never lost
                log.warning("drain %s: job %s's manifest: %s", name, job_id, exc.message)
                gangs.append(PlacedGang(job_id, nodes, len(nodes)))
                continue
            gangs.append(PlacedGang(job_id, nodes, manifest.min_learners or len(nodes)))
        moves = drain_moves(name, gangs)
        for move in moves:
            log.info("%s %s: %s", move.action, move.job_id, move.reason)
            try:
                self.requeue(move.job_id, move.reason.replace("drained", why, 1), False)
            except errors.DlaasError as exc:  # it ended or moved meanwhile
                log.warning("drain %s: job %s: %s", name, move.job_id, exc.message)
        return moves

    def set_node_availability(self, name: str, availability: str, user: str) -> NodeRow:
        """An administrator sets a node's availability (use case of SetNodeAvailability).

        drain: the swarm is first told `pause` (no new tasks; also where an engine that has
        no availability refuses, before anything moved), the node recorded not schedulable,
        its jobs moved (queued at once, their gangs torn down by the requeue); the swarm is
        told `drain` once those gangs are gone, so no task of ours is stopped by the swarm
        before its helper stored its checkpoints. active: the swarm's availability, then the
        node schedulable again at once if the swarm sees it ready (else the probe does it).
        """
        if availability not in AVAILABILITIES:
            raise errors.InvalidRequest(
                f"availability: must be one of {', '.join(AVAILABILITIES)}, got {availability!r}"
            )
        deployer = self.deployers.get(name)
        if deployer is None:
            known = ", ".join(sorted(self.deployers))
            raise errors.InvalidRequest(f"node: no node {name!r} (nodes: {known})")
        by = f"by {user}" if user else "by an administrator"
        if availability == "active":
            deployer.set_availability("active")
            if deployer.node_state() in ("ready", None) and name not in self._unhealthy:
                self._availability[name] = "active"
                self._publish_health(name, "")
            return self._row(name)
        deployer.set_availability("pause")
        # Not schedulable at once (the leader's probe records the same when it sees it).
        self.keeper.set_node_health(name, {
            "healthy": False, "since": self.clock(), "availability": availability,
            "reason": f"availability {availability} set {by}",
        })  # fmt: skip
        if availability == "drain":
            moved = [m.job_id for m in self.move_off(name, f"drained {by}")]
            threading.Thread(
                target=self._finish_drain, args=(name, deployer, moved), daemon=True
            ).start()
        return self._row(name)

    def _finish_drain(self, name: str, deployer: ContainerEngine, moved: list[str]) -> None:
        """Wait until the moved jobs' gangs are gone, then drain the node on the swarm."""
        deadline = time.monotonic() + DRAIN_WAIT_S
        try:
            while moved and time.monotonic() < deadline and not self._stop.is_set():
                moved = [j for j in moved if j in deployer.jobs_with_resources()]
                self._stop.wait(0.5)
            if moved:
                log.warning("drain %s: gangs of %s still there; the swarm stops them", name, moved)
            if deployer.availability() == "pause":  # not activated again meanwhile
                deployer.set_availability("drain")
        except Exception:  # broad on purpose: logged; the node stays paused (no new gangs)
            log.exception("drain %s: telling the swarm to drain", name)

    def node_rows(self) -> list[NodeRow]:
        """Every node with its state, availability and whether it is schedulable."""
        not_schedulable = self.keeper.unhealthy_nodes()  # etcd: any replica may list
        return [self._row(n.name, n, not_schedulable) for n in self.nodes]

    def _row(
        self, name: str, spec: NodeSpec | None = None, not_schedulable: set[str] | None = None
    ) -> NodeRow:
        spec = spec or next(n for n in self.nodes if n.name == name)
        if not_schedulable is None:
            not_schedulable = self.keeper.unhealthy_nodes()
        deployer = self.deployers.get(name)
        state = deployer.node_state() if deployer is not None else "unknown"
        if state is None:  # an engine of its own: the probes say
            state = "down" if name in not_schedulable or name in self._unhealthy else "ready"
        try:
            availability = deployer.availability() if deployer is not None else "unknown"
        except EngineUnreachable:
            availability = "unknown"
        return NodeRow(spec, state, availability, name not in not_schedulable)
