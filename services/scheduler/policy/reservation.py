"""Reservations and head-of-line blocking: how a blocked gang is kept from starving.

Part of the round (`round.Round` mixes `Reservation` in). The first blocked gang (under the
policies in `PolicyConfig.reserve_policies`) gets a RESERVATION: the nodes it will drain are
hidden from later (smaller) jobs for the rest of the round, so a stream of small jobs can
backfill the rest of the cluster but never starve the big gang. Under fifo, a head that does
not fit may instead hold back every later job (`PolicyConfig.fifo_blocking`).
"""

from __future__ import annotations

from .model import QueuedJob
from .policies import wait_since
from .state import RoundState


class Reservation(RoundState):
    """The round's reservation and fifo-blocking steps (a mixin of `round.Round`)."""

    def try_reserve(self, j: QueuedJob) -> None:
        if (
            self.reserved_for is not None
            or j.gpus_per_learner * j.learners < self.cfg.reserve_min_gpus
        ):
            return
        if not self.policy.reserves(self.cfg):
            return
        if self.now - wait_since(j) < self.cfg.reserve_after_s:
            return
        g, c, m = j.gpus_per_learner, j.cpus_per_learner, j.memory_mb_per_learner
        nodes = [
            nf
            for nf in self.idx.nodes.values()
            if nf.reserved_for is None and (not j.gpu_type or nf.node.gpu_type == j.gpu_type)
        ]
        # Most free first: those drain soonest without knowing any job's duration.
        nodes.sort(key=lambda nf: (-len(nf.free), -nf.cpus, nf.node.name))
        chosen, have = [], 0
        for nf in nodes:
            n = nf.node
            cap = j.learners
            if g:
                cap = min(cap, n.gpus // g)
            if c > 0:
                cap = min(cap, int(n.cpus // c))
            if m:
                cap = min(cap, n.memory_mb // m)
            if cap <= 0:
                continue
            chosen.append(nf.node.name)
            have += cap
            if have >= j.min_gang:
                self.idx.reserve(chosen, j.job_id)
                self.reserved_for = j.job_id
                return

    def _fifo_blocks(self, j: QueuedJob) -> bool:
        """Whether a fifo head that did not fit holds back every later job (fifo_blocking)."""
        mode = self.cfg.fifo_blocking
        if self.reserved_for == j.job_id:
            return False  # nodes are held for it: the rest of the cluster may be backfilled
        if mode == "gang":
            return True
        if mode == "count":
            need = j.min_gang * j.gpus_per_learner
            return need == 0 or self.idx.total_free_gpus(j.gpu_type) < need
        return False
