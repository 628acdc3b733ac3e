"""Free-resource index and gang placement, used inside one scheduling round.

`FreeIndex` is a mutable scratch structure built from a Snapshot at the start of a round and
thrown away at its end (the Snapshot itself is never mutated). It keeps, per GPU type, the nodes
bucketed by how many GPUs they have free, so the common questions are cheap:
  - "could this gang possibly fit?" is O(max GPUs per node), not O(nodes);
  - a single-node gang is placed best-fit by walking buckets upward from its size.
Multi-node gangs look at candidate nodes only (those with enough free GPUs for one learner).

Every change (`take`, `give`) is reversible, which is how preemption tries victims and undoes the
attempt when it does not help.
"""

from __future__ import annotations

from collections.abc import Iterable

from .model import Allocation, Node

_EPS = 1e-9
_ENOUGH_CHOICE = 64  # candidate nodes looked at for a multi-node gang, once it would fit


class NodeFree:
    """What is still free on one node during a round."""

    __slots__ = ("cpus", "free", "mem", "node", "reserved_for")

    def __init__(self, node: Node) -> None:
        self.node = node
        self.free: set[int] = set(range(node.gpus))
        self.cpus = float(node.cpus)
        self.mem = int(node.memory_mb)
        self.reserved_for: str | None = None

    def fit(self, g: int, c: float, m: int, cap: int) -> int:
        """How many learners of shape (g GPUs, c CPUs, m MiB) fit here, at most `cap`."""
        n = cap
        if g > 0:
            n = min(n, len(self.free) // g)
        if c > _EPS:
            n = min(n, int((self.cpus + _EPS) // c))
        if m > 0:
            n = min(n, self.mem // m)
        return max(n, 0)


class FreeIndex:
    """Free GPUs/CPUs/memory per node, bucketed by free-GPU count per GPU type."""

    def __init__(self, nodes: Iterable[Node], allocations: Iterable[Allocation]) -> None:
        self.nodes: dict[str, NodeFree] = {}
        for n in nodes:
            if n.healthy and n.name not in self.nodes:
                self.nodes[n.name] = NodeFree(n)
        for a in allocations:
            nf = self.nodes.get(a.node)
            if nf is None:  # allocation on an unhealthy/removed node: nothing to subtract
                continue
            nf.free.difference_update(a.gpu_indices)
            nf.cpus -= a.cpus
            nf.mem -= a.memory_mb
        self.max_gpus = max((nf.node.gpus for nf in self.nodes.values()), default=0)
        # buckets[gpu_type][k] = ordered set (dict) of the nodes with exactly k free GPUs (their
        # NodeFree, hashed by identity: a walk gets the node without a lookup by name)
        self.buckets: dict[str, list[dict[NodeFree, None]]] = {}
        self.free_gpus: dict[str, int] = {}
        self.free_total = 0  # of every type (a round asks it of every job it looks at)
        # bumped on every change, so callers can memoize "did not fit" within one state
        self.version = 0
        self.reserved: dict[str, list[str]] = {}  # job_id -> node names held for it
        self._cap_cache: dict[tuple[int, str], tuple[int, int]] = {}
        self._all_types: tuple[str, ...] = ()
        self._holes: dict[str, list[int]] = {}  # per bucket, see _unlink
        for nf in self.nodes.values():
            self._bucket_add(nf)

    # -- bucket bookkeeping -------------------------------------------------------------
    def _bucket_add(self, nf: NodeFree) -> None:
        self.version += 1
        if nf.reserved_for is not None:
            return
        t = nf.node.gpu_type
        b = self.buckets.get(t)
        if b is None:
            b = self.buckets[t] = [{} for _ in range(self.max_gpus + 1)]
            self._holes[t] = [0] * (self.max_gpus + 1)
            self.free_gpus[t] = 0
            self._all_types = tuple(self.buckets)
        b[len(nf.free)][nf] = None
        self.free_gpus[t] += len(nf.free)
        self.free_total += len(nf.free)

    def _bucket_remove(self, nf: NodeFree) -> None:
        self.version += 1
        if nf.reserved_for is not None:
            return
        t = nf.node.gpu_type
        self._unlink(t, len(nf.free), nf)
        self.free_gpus[t] -= len(nf.free)
        self.free_total -= len(nf.free)

    def _unlink(self, t: str, k: int, nf: NodeFree) -> None:
        """Remove a node from bucket k of type t. A dict keeps a hole per deleted key until it
        grows, and iteration walks the holes: a bucket emptied from the front again and again
        (best fit takes its first node) would make "first node in the bucket" O(deletions).
        Copying the dict once its holes outnumber its keys keeps that O(1) amortized, and
        keeps the order."""
        bucket = self.buckets[t][k]
        del bucket[nf]
        holes = self._holes[t]
        holes[k] += 1
        if holes[k] > 32 and holes[k] > len(bucket):
            self.buckets[t][k] = dict(bucket)
            holes[k] = 0

    def _rebucket(self, nf: NodeFree, before: int) -> None:
        """A node's free GPU count went from `before` to what it is now."""
        self.version += 1
        if nf.reserved_for is not None:
            return
        after = len(nf.free)
        t = nf.node.gpu_type
        # _unlink inlined: every start, and every victim a preemption tries, comes here
        b = self.buckets[t]
        bucket = b[before]
        del bucket[nf]
        holes = self._holes[t]
        holes[before] += 1
        if holes[before] > 32 and holes[before] > len(bucket):
            b[before] = dict(bucket)
            holes[before] = 0
        # to the end of its bucket, even when the count stayed the same
        b[after][nf] = None
        self.free_gpus[t] += after - before
        self.free_total += after - before

    def _types(self, gpu_type: str) -> tuple[str, ...]:
        return (gpu_type,) if gpu_type else self._all_types

    # -- mutation ----------------------------------------------------------------------
    def take(self, allocs: Iterable[Allocation]) -> None:
        for a in allocs:
            nf = self.nodes.get(a.node)
            if nf is None:
                continue
            before = len(nf.free)
            nf.free.difference_update(a.gpu_indices)
            nf.cpus -= a.cpus
            nf.mem -= a.memory_mb
            self._rebucket(nf, before)

    def give(self, allocs: Iterable[Allocation]) -> None:
        for a in allocs:
            nf = self.nodes.get(a.node)
            if nf is None:
                continue
            before = len(nf.free)
            nf.free.update(a.gpu_indices)
            nf.cpus += a.cpus
            nf.mem += a.memory_mb
            self._rebucket(nf, before)

    def reserve(self, names: Iterable[str], job_id: str) -> None:
        """Hide nodes from everyone but `job_id` for the rest of the round (backfill guard)."""
        for name in names:
            nf = self.nodes[name]
            if nf.reserved_for is None:
                self._bucket_remove(nf)
                nf.reserved_for = job_id
                self.reserved.setdefault(job_id, []).append(name)

    def unreserve(self, job_id: str) -> list[str]:
        names = self.reserved.pop(job_id, [])
        for name in names:
            nf = self.nodes[name]
            nf.reserved_for = None
            self._bucket_add(nf)
        return names

    # -- queries -----------------------------------------------------------------------
    def total_free_gpus(self, gpu_type: str = "") -> int:
        if gpu_type:
            return self.free_gpus.get(gpu_type, 0)
        return self.free_total

    def upper_capacity(self, g: int, gpu_type: str) -> int:
        """Upper bound on learners of g GPUs placeable now (GPUs only; CPUs/memory not checked)."""
        if g <= 0:
            return 1 << 30
        if g == 1:  # one learner per free GPU: the free count, kept as the buckets change
            return self.free_gpus.get(gpu_type, 0) if gpu_type else self.free_total
        hit = self._cap_cache.get((g, gpu_type))
        if hit is not None and hit[0] == self.version:
            return hit[1]
        total = 0
        for t in self._types(gpu_type):
            b = self.buckets.get(t)
            if b is None:
                continue
            for k in range(g, len(b)):
                if b[k]:
                    total += len(b[k]) * (k // g)
        self._cap_cache[(g, gpu_type)] = (self.version, total)
        return total

    def largest_free_block(self, gpu_type: str = "") -> int:
        best = 0
        for t in self._types(gpu_type):
            b = self.buckets.get(t, [])
            for k in range(len(b) - 1, best, -1):
                if b[k]:
                    best = k
                    break
        return best

    def _candidates(self, g: int, c: float, m: int, gpu_type: str, job_id: str | None, cap: int):
        """(NodeFree, fit) for every node that can host at least one learner, most free first."""
        out: list[tuple[NodeFree, int]] = []
        have = 0
        if job_id is not None:  # nodes reserved for this very job are usable by it
            # (map, not a generator over self: that would make self a closure cell here)
            for nf in map(self.nodes.__getitem__, self.reserved.get(job_id, ())):
                if not gpu_type or nf.node.gpu_type == gpu_type:
                    k = nf.fit(g, c, m, cap)
                    if k > 0:
                        out.append((nf, k))
        if g > 0:
            for t in self._types(gpu_type):
                b = self.buckets.get(t)
                if b is None:
                    continue
                for k in range(len(b) - 1, g - 1, -1):
                    for nf in b[k]:
                        f = nf.fit(g, c, m, cap)
                        if f > 0:
                            out.append((nf, f))
                            have += f
                            # Enough to hold the gang, plus some choice for topology: looking
                            # at every node would make a round O(queue x nodes).
                            if have >= cap and len(out) >= _ENOUGH_CHOICE:
                                break
                    if have >= cap and len(out) >= _ENOUGH_CHOICE:
                        break
        else:
            for nf in self.nodes.values():
                if nf.reserved_for is not None:
                    continue
                if gpu_type and nf.node.gpu_type != gpu_type:
                    continue
                f = nf.fit(g, c, m, cap)
                if f > 0:
                    out.append((nf, f))
        if g > 0 and job_id is not None:
            out.sort(key=lambda x: -len(x[0].free))
        return out

    def place(
        self,
        job_id: str,
        learners: int,
        g: int,
        c: float,
        m: int,
        gpu_type: str = "",
        mode: str = "pack",
        first_learner: int = 0,
    ) -> list[Allocation] | None:
        """Place a whole gang or nothing. Does NOT take the resources; call `take` to commit."""
        if learners <= 0:
            return []
        if g > 0 and self.upper_capacity(g, gpu_type) < learners and job_id not in self.reserved:
            return None
        plan = self._plan(job_id, learners, g, c, m, gpu_type, mode)
        if plan is None:
            return None
        if len(plan) == 1 and learners == 1:  # the common case, kept cheap
            nf = plan[0][0]
            if g == 1:
                ix: tuple[int, ...] = (min(nf.free),)
            else:
                ix = tuple(sorted(nf.free)[:g]) if g else ()
            return [Allocation(first_learner, nf.node.name, ix, c, m)]
        allocs: list[Allocation] = []
        i = first_learner
        for nf, count in plan:
            free = sorted(nf.free)
            for j in range(count):
                allocs.append(Allocation(i, nf.node.name, tuple(free[j * g : (j + 1) * g]), c, m))
                i += 1
        return allocs

    def place_on(
        self, node: str, job_id: str, learners: int, g: int, c: float, m: int, first_learner: int
    ) -> list[Allocation] | None:
        """`learners` more learners on `node` alone (a gang kept on one node grows there)."""
        nf = self.nodes.get(node)
        if (
            nf is None
            or nf.reserved_for not in (None, job_id)
            or nf.fit(g, c, m, learners) < learners
        ):
            return None
        free = sorted(nf.free)
        return [
            Allocation(first_learner + k, node, tuple(free[k * g : (k + 1) * g]), c, m)
            for k in range(learners)
        ]

    @staticmethod
    def _best_fit(buckets, lo: int, hi: int, g: int, c: float, m: int, learners: int):
        """The first node in buckets lo..hi-1 (fewest free GPUs first) that holds the gang.
        (Every node in bucket k >= lo has the GPUs: only its CPUs and memory are checked,
        as NodeFree.fit does, inlined: a round asks this for every job it starts.)"""
        need_m = learners * m
        for k in range(lo, hi):
            for nf in buckets[k]:
                if (c <= _EPS or (nf.cpus + _EPS) // c >= learners) and (
                    m <= 0 or nf.mem >= need_m
                ):
                    return nf
        return None

    def _plan(self, job_id, learners, g, c, m, gpu_type, mode):
        # (no comprehension or lambda in here: one would make its arguments closure cells,
        # paid on every call, and a round places every job it starts through here)
        # Fast path: one node takes the whole gang (PACK/topology), best fit = fewest spare GPUs.
        if mode != "spread" or learners == 1:
            if g > 0:
                held = self.reserved.get(job_id)
                if held:
                    own = self._own_node(held, g, c, m, learners)
                    if own is not None:
                        return [(own, learners)]
                best = None
                for t in (gpu_type,) if gpu_type else self._all_types:
                    b = self.buckets.get(t)
                    if b is not None:
                        top = len(b) if best is None else min(len(b), len(best.free))
                        best = self._best_fit(b, learners * g, top, g, c, m, learners) or best
                if best is not None:
                    return [(best, learners)]
            else:
                nf = self._cpu_only_node(job_id, learners, g, c, m, gpu_type)
                if nf is not None:
                    return [(nf, learners)]
            if learners == 1 or mode == "node":
                return None
        return self._multi_node_plan(job_id, learners, g, c, m, gpu_type, mode)

    def _own_node(self, held, g, c, m, learners):
        """Of the nodes reserved for the job, the one with the fewest free GPUs that holds the
        whole gang; None if none does."""
        own = [
            nf for nf in map(self.nodes.__getitem__, held) if nf.fit(g, c, m, learners) >= learners
        ]
        return min(own, key=lambda nf: len(nf.free)) if own else None

    def _cpu_only_node(self, job_id, learners, g, c, m, gpu_type):
        """The node that holds a whole GPU-less gang with the fewest CPUs left over."""
        cands = [
            (nf, f)
            for nf, f in self._candidates(g, c, m, gpu_type, job_id, learners)
            if f >= learners
        ]
        if not cands:
            return None
        return min(cands, key=lambda x: (x[0].cpus - learners * c, x[0].node.name))[0]

    def _multi_node_plan(self, job_id, learners, g, c, m, gpu_type, mode):
        """The gang over several nodes: spread as wide as it can, or packed into the smallest
        topology domain (rack, then area) that holds it, fewest nodes first."""
        cands = self._candidates(g, c, m, gpu_type, job_id, learners)
        if sum(f for _, f in cands) < learners:
            return None
        if mode == "spread":
            cands.sort(key=lambda x: (-x[1], x[0].node.name))
            counts = [0] * len(cands)
            left = learners
            while left:
                for i, (_, f) in enumerate(cands):
                    if counts[i] < f and left:
                        counts[i] += 1
                        left -= 1
            return [(cands[i][0], k) for i, k in enumerate(counts) if k]
        # PACK / topology: the smallest topology domain (rack, then area) that holds the gang,
        # then the fewest nodes inside it.
        for level in ("rack", "area"):
            groups: dict[str, list[tuple[NodeFree, int]]] = {}
            for nf, f in cands:
                key = nf.node.labels.get(level, "") if nf.node.labels else ""
                if key:
                    groups.setdefault(key, []).append((nf, f))
            fitting = [(sum(f for _, f in v), k, v) for k, v in groups.items()]
            fitting = [x for x in fitting if x[0] >= learners]
            if fitting:
                cands = min(fitting, key=lambda x: (x[0], x[1]))[2]
                break
        cands = sorted(cands, key=lambda x: (-x[1], x[0].node.name))
        plan = []
        left = learners
        for nf, f in cands:
            k = min(f, left)
            plan.append((nf, k))
            left -= k
            if not left:
                return plan
        return None
