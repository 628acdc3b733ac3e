"""Node health as the LCM leader sees it: probe every engine, requeue a lost node's jobs,
clean a node that comes back.

A node whose engine fails NODE_LOST_AFTER probes in a row is lost: recorded in etcd (the
scheduler places nothing there), its running jobs requeued. When it answers again, the
containers of jobs that moved on meanwhile are removed before it is used again.
"""

from __future__ import annotations

import logging

from dlaas import errors
from dlaas.status import DEPLOYED, REQUEUEABLE
from services.lcm.ports import ContainerEngine

log = logging.getLogger(__name__)

# Node health: an engine is probed this often; this many failed probes in a row mark it lost.
NODE_PROBE_S = 0.5
NODE_LOST_AFTER = 2


class NodeHealth:
    """The node health of `Lcm` (leader only)."""

    def check_nodes(self) -> None:
        """Probe every engine; a lost one gets no new gangs and its jobs are requeued."""
        now = self.clock()
        if now - self._last_probe < NODE_PROBE_S:
            return
        self._last_probe = now
        for name, deployer in self.deployers.items():
            if deployer.ping():
                self._probe_failures[name] = 0
                if name in self._unhealthy:
                    self._node_back(name, deployer)
                continue
            self._probe_failures[name] = self._probe_failures.get(name, 0) + 1
            if self._probe_failures[name] >= NODE_LOST_AFTER and name not in self._unhealthy:
                self._node_lost(name)

    def _node_lost(self, name: str) -> None:
        log.warning("node %s lost: its engine is not answering", name)
        self._unhealthy.add(name)
        self.keeper.set_node_health(
            name, {"healthy": False, "since": self.clock(), "reason": "engine not answering"}
        )
        for job_id, state in self.keeper.active_jobs().items():
            if state.status in REQUEUEABLE and name in {p["node"] for p in self._placement(job_id)}:
                try:
                    self.requeue(job_id, f"node {name} lost: its engine is not answering", False)
                except errors.DlaasError as exc:
                    log.warning("requeue %s after losing %s: %s", job_id, name, exc.message)

    def _node_back(self, name: str, deployer: ContainerEngine) -> None:
        """A node rejoins: remove what is left of jobs that have moved on, then use it again."""
        log.info("node %s is answering again", name)
        for job_id in deployer.jobs_with_resources():
            state = self.keeper.get(job_id)
            placed_here = name in {p["node"] for p in self._placement(job_id)}
            if state is None or state.status not in DEPLOYED or not placed_here:
                deployer.remove_job(job_id)
        self._unhealthy.discard(name)
        self.keeper.set_node_health(name, {"healthy": True, "since": self.clock()})

    def _unhealthy_nodes(self) -> set[str]:
        """Nodes the leader marked lost, as recorded in etcd (any replica may ask)."""
        return self.keeper.unhealthy_nodes()
