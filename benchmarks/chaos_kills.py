"""The chaos suite's scenarios: one kill each, and how its recovery is timed.

Kills (`--kills`, in a seeded random order, SIGKILL always):
  lcm-leader   the LCM replica holding the leadership key   -> another replica holds it
  lcm-replica  an LCM replica that does not lead             -> it answers gRPC health again
  api          the REST API                                  -> GET /health answers
  jobmonitor   the job monitor (it serves nothing)           -> a new monitor process runs
  scheduler    the scheduler                                 -> it answers gRPC health again
  etcd         one etcd member (only with an etcd cluster)   -> the member answers /health
  learner      learner 0 of a running job (`docker kill`)    -> its job's new run prints
               its first "resuming from ..." / "epoch" line
  helper       the helper of a running job (`docker kill`)   -> a helper of the job runs
               again (started after the kill; measured to its start by its engine's
               clock, the poll's own sighting as seen_s) and the job is PROCESSING, or
               the job is COMPLETED (its learners finished meanwhile: only a new helper
               can have stored the results)
  engine       a swarm worker node dies (SwarmLab.kill_node(machine=True): its dockerd,
               containerd and containers; only with --nodes > 1); once its jobs
               progress elsewhere (or after the wait) the node is restarted
                                                             -> "engine_jobs": every job with
               a learner there prints an epoch from a new run (or ended), from the kill;
               "engine": the platform lists the node schedulable again, from the restart
  manager      the swarm manager's engine crashes (SwarmLab.kill_node("node-1"): dockerd
               only; every node's containers run on), restarted after MANAGER_DOWN_S
                                                             -> "manager": the platform lists
               every node schedulable again, from the restart; "manager_jobs": every job
               PROCESSING at the kill printed an epoch after the restart (or ended)
Recovery times are measured from the kill unless said otherwise; service restarts are the
supervisor's work, a node's restart the suite's own (it is the attacker). A node kill ends
only once its node is back: `up` (which the supervisor runs after a service kill) rebuilds
a swarm lab that has a node down. The learner and helper kills prefer a worker node's
containers on a swarm, and reach them through that node's own socket: the attacker, unlike
the platform, may use it.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import threading
import time
from collections.abc import Callable, Iterable

from benchmarks.chaos_checks import EPOCH_RE, RESUME_RE
from benchmarks.chaos_watch import Platform, Tracker, Watcher, _docker_ts, log
from dlaas.domain.status import FINAL
from dlaas.local.probes import grpc_answers, http_ok
from dlaas.local.state import record_alive

ALL_KILLS = (
    "lcm-leader",
    "lcm-replica",
    "api",
    "jobmonitor",
    "scheduler",
    "etcd",
    "learner",
    "helper",
    "engine",
    "manager",
)
# Kills that take a swarm node down: the suite restarts the node before the next kill.
NODE_KILLS = ("engine", "manager")
RECOVERY_WAIT_S = 90.0
# How long the manager's engine stays down (a crash its init system restarts).
MANAGER_DOWN_S = 10.0


def _sigkill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _wait(check: Callable[[], bool], timeout: float = RECOVERY_WAIT_S, every: float = 0.02):
    """Poll until `check` holds; the time that took, or None after `timeout`."""
    start = time.time()
    while time.time() - start < timeout:
        with contextlib.suppress(Exception):
            if check():
                return time.time() - start
        time.sleep(every)
    return None


def _new_pid_alive(p: Platform, name: str, old: int) -> bool:
    rec = p.record(name)
    return int(rec.get("pid") or 0) != old and record_alive(rec)


class Chaos:
    """Performs one kill and measures the recovery; results in `recovery` and `events`."""

    def __init__(
        self,
        p: Platform,
        watcher: Watcher,
        tracker: Tracker,
        rng: random.Random,
        wait_s: float = RECOVERY_WAIT_S,
    ):
        self.p, self.watcher, self.tracker, self.rng = p, watcher, tracker, rng
        self.wait_s = wait_s
        self._threads: list[threading.Thread] = []
        self.recovery: dict[str, float | None] = {}
        self.skipped: dict[str, str] = {}
        self.events: list[dict] = []
        # Jobs a container or node kill already hit: the next one picks another job, so
        # each recovery is measured on its own (a learner and a helper kill waiting for a
        # target at the same time once both took the same job, with the same restart).
        self._hit: set[str] = set()
        self._hit_lock = threading.Lock()

    def kill(self, what: str, pace_s: float | None = None) -> None:
        """Kill `what` and measure its recovery; return after it recovered or `pace_s`.

        A recovery slower than `pace_s` goes on being measured in the background (up to
        the wait) while the next kill happens: one slow recovery must not push the
        remaining kills past the end of the jobs.
        """
        fn = getattr(self, "_kill_" + what.replace("-", "_"), None)
        if fn is None:
            raise SystemExit(f"--kills: unknown component {what!r}; use {', '.join(ALL_KILLS)}")
        thread = threading.Thread(target=self._guarded, args=(what, fn), name=f"kill-{what}")
        thread.start()
        self._threads.append(thread)
        # A node kill returns with its node back (see the module docstring): no pace.
        thread.join(None if what in NODE_KILLS else pace_s)
        if thread.is_alive():
            log(f"  {what}: not recovered after {pace_s:.0f} s; measuring on, next kill")

    def _guarded(self, what: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - one failed kill must not end the suite
            self._skip(what, f"the kill failed: {exc!r}")

    def finish(self) -> None:
        """Wait for the recoveries still being measured (each is bounded by its wait)."""
        for thread in self._threads:
            thread.join()

    def _done(self, what: str, seconds: float | None, **detail) -> None:
        # A kind killed more than once (`--kills learner,learner`) counts its slowest recovery.
        prev = self.recovery.get(what, seconds)
        self.recovery[what] = None if seconds is None or prev is None else max(seconds, prev)
        shown = f"{seconds:.2f} s" if seconds is not None else f"NOT within {self.wait_s:.0f} s"
        extra = "".join(f", {k}={v}" for k, v in detail.items())
        log(f"  {what}: recovered in {shown}{extra}")
        self.events.append({"kill": what, "recovery_s": seconds, **detail})

    def _skip(self, what: str, reason: str) -> None:
        self.skipped[what] = reason
        log(f"  {what}: skipped: {reason}")

    # -- services
    def _service(self, what: str, name: str, answers: Callable[[dict], bool]) -> None:
        rec = self.p.record(name)
        old = int(rec.get("pid") or 0)
        if not old:
            return self._skip(what, f"no {name} pid record")
        log(f"kill -9 {name} (pid {old})")
        _sigkill(old)
        took = _wait(
            lambda: _new_pid_alive(self.p, name, old) and answers(self.p.record(name)), self.wait_s
        )
        self._done(what, took, pid=old)

    def _kill_api(self) -> None:
        # Two replicas share the port: the API answers again as soon as a live one takes
        # the next connection. The killed one must come back too (the supervisor).
        name = self.rng.choice(sorted(n for n in self.p.records() if n.startswith("api-")))
        rec = self.p.record(name)
        old, health = int(rec.get("pid") or 0), f"{rec.get('address')}/health"
        if not old:
            return self._skip("api", f"no {name} pid record")
        log(f"kill -9 {name} (pid {old}), one of the API replicas")
        _sigkill(old)
        took = _wait(lambda: http_ok(health), self.wait_s)
        back = _wait(lambda: _new_pid_alive(self.p, name, old) and http_ok(health), self.wait_s)
        replica_s = round(took + back, 2) if took is not None and back is not None else None
        self._done("api", took, pid=old, replica=name, replica_restarted_s=replica_s)

    def _kill_scheduler(self) -> None:
        self._service("scheduler", "scheduler", lambda rec: grpc_answers(rec["address"]))

    def _kill_jobmonitor(self) -> None:
        # The monitor serves nothing to ask: its replacement process running is the answer.
        self._service("jobmonitor", "jobmonitor", lambda rec: True)

    def _kill_lcm_replica(self) -> None:
        leader = self.p.leader()
        names = [n for n in self.p.records() if n.startswith("lcm-")]
        standby = [n for n in sorted(names) if f":{self.p.record(n).get('pid')}@" not in leader]
        if not standby:
            return self._skip("lcm-replica", "no LCM replica besides the leader")
        name = self.rng.choice(standby)
        self._service("lcm-replica", name, lambda rec: grpc_answers(rec["address"]))

    def _kill_lcm_leader(self) -> None:
        leader = self.p.leader()
        m = re.match(r"^.*:(\d+)@", leader)
        mine = {
            int(r.get("pid") or 0): n for n, r in self.p.records().items() if n.startswith("lcm-")
        }
        if not m or int(m.group(1)) not in mine:
            return self._skip("lcm-leader", f"leader key {leader!r} names none of our replicas")
        pid = int(m.group(1))
        log(f"kill -9 {mine[pid]} (pid {pid}), the LCM leader")
        _sigkill(pid)
        took = _wait(lambda: (now := self.p.leader()) != "" and now != leader, self.wait_s)
        self._done("lcm-leader", took, pid=pid, new_leader=self.p.leader())

    def _kill_etcd(self) -> None:
        members = self.p.etcd_members()
        if len(members) < 2:
            return self._skip("etcd", "the platform runs a single etcd member, not a cluster")
        name = self.rng.choice(members)
        self._service("etcd", name, lambda rec: http_ok(f"http://{rec['address']}/health"))

    # -- containers
    def _job_with_progress(self, role: str) -> tuple[str, str, dict] | None:
        """A PROCESSING job that has printed an epoch, with a running `role` container (on
        a swarm, one on a worker node: a node other than the one the manager runs on)."""
        from dlaas.domain import jobspec

        deadline = time.time() + 120
        while time.time() < deadline:
            self.tracker.poll()
            with self._hit_lock:
                ready = [j for j in self.tracker.processing()
                         if self.watcher.epochs_printed(j) >= 2 and j not in self._hit]  # fmt: skip
            self.rng.shuffle(ready)
            for job in ready:
                labels = {jobspec.LABEL_JOB: job}
                if role == jobspec.ROLE_LEARNER:
                    labels[jobspec.LABEL_LEARNER] = "0"
                found = self.p.running(role, **labels)
                if self.p.workers:
                    found = [(n, row) for n, row in found if n in self.p.workers]
                if found:
                    with self._hit_lock:
                        if job in self._hit:
                            continue
                        self._hit.add(job)
                    node, row = found[0]
                    return job, node, row
            time.sleep(0.5)
        return None

    def _kill_learner(self) -> None:
        from dlaas.domain import jobspec

        found = self._job_with_progress(jobspec.ROLE_LEARNER)
        if found is None:
            return self._skip("learner", "no running job with a learner to kill for 120 s")
        job, node, row = found
        log(f"docker kill learner 0 of {self.tracker.ids[job].name} ({job}) on {node}")
        t0 = time.time()
        self.p.clients[node].api.kill(row["Id"], signal="SIGKILL")
        progress = re.compile(f"{RESUME_RE.pattern}|{EPOCH_RE.pattern}")

        def resumed() -> bool:
            ts = self.watcher.first_line_after(job, 0, t0, progress)
            if ts is not None:
                resumed.at = ts
                return True
            return self.tracker.poll().get(job) in FINAL

        resumed.at = None
        took = _wait(resumed, self.wait_s, every=0.1)
        if took is not None and resumed.at is not None:
            took = resumed.at - t0
        self._done("learner", took, job=job, steps=self._steps_since(job, t0),
                   engine=self._engine_steps(job, t0))  # fmt: skip

    def _steps_since(self, job: str, t0: float) -> str:
        """The job's status changes after `t0`, as seconds after it (where recovery went)."""
        history = self.p.get(f"/v1/jobs/{job}").json().get("history", [])
        return " ".join(f"{h['status']}+{h['at'] - t0:.2f}" for h in history if h["at"] > t0)

    def _engine_steps(self, job: str, t0: float) -> str:
        """The job's new run as its engines saw it, as seconds after `t0`: each service's
        creation and its task's (the manager's clock), each container's creation and start
        and the helper's lines (its node's engine). Where a restart's time goes."""
        from dlaas.domain import jobspec

        out: list[tuple[float, str]] = []
        manager = self.p.clients.get(self.p.manager_node) if self.p.lab is not None else None
        label = {"label": [f"{jobspec.LABEL_JOB}={job}"]}
        with contextlib.suppress(Exception):
            for s in manager.api.services(filters=label) if manager else ():
                name = s["Spec"]["Name"].rsplit("-", 2)[-1]
                out.append((_docker_ts(s["CreatedAt"]), f"svc:{name}"))
                for t in manager.api.tasks(filters={"service": [s["ID"]]}):
                    out.append((_docker_ts(t["CreatedAt"]), f"task:{name}"))
        for node, client in list(self.p.clients.items()):
            try:
                rows = client.api.containers(all=True, filters=label)
            except Exception:  # noqa: BLE001, S112 - a dead engine lists nothing
                continue
            for row in rows:
                labels = row.get("Labels") or {}
                who = labels.get(jobspec.LABEL_ROLE, "?")
                if labels.get(jobspec.LABEL_LEARNER) not in (None, ""):
                    who += labels[jobspec.LABEL_LEARNER]
                with contextlib.suppress(Exception):
                    info = client.api.inspect_container(row["Id"])
                    created = _docker_ts(info["Created"])
                    if created < t0:
                        continue
                    out.append((created, f"created:{who}@{node}"))
                    out.append((_docker_ts(info["State"]["StartedAt"]), f"started:{who}"))
                    if who == jobspec.ROLE_HELPER:
                        raw = client.api.logs(row["Id"], timestamps=True, tail=30)
                        for line in raw.decode("utf-8", "replace").splitlines():
                            stamp, _, text = line.partition(" ")
                            # The helper's own account of its start in full, the rest cut.
                            keep = 200 if "data ready" in text else 48
                            out.append((_docker_ts(stamp), text[:keep]))
        return " | ".join(f"{text}+{ts - t0:.2f}" for ts, text in sorted(out) if ts > t0)

    def _kill_helper(self) -> None:
        from dlaas.domain import jobspec

        found = self._job_with_progress(jobspec.ROLE_HELPER)
        if found is None:
            return self._skip("helper", "no running job with a helper to kill for 120 s")
        job, node, row = found
        log(f"docker kill helper of {self.tracker.ids[job].name} ({job}) on {node}")
        t0 = time.time()
        self.p.clients[node].api.kill(row["Id"], signal="SIGKILL")

        def back() -> bool:
            for n, r in self.p.running(jobspec.ROLE_HELPER, **{jobspec.LABEL_JOB: job}):
                started = self.p.clients[n].api.inspect_container(r["Id"])["State"]["StartedAt"]
                if _docker_ts(started) > t0:
                    self.tracker.poll()
                    back.at = _docker_ts(started)
                    return self.tracker.status.get(job) == "PROCESSING"
            # A job that ended in the meantime counts once COMPLETED: only a helper started
            # after the kill can have stored its results (the killed one never came back).
            return self.tracker.poll().get(job) == "COMPLETED"

        back.at = None
        seen = _wait(back, self.wait_s, every=0.05)
        # Its start, by its engine's clock, as the learner's recovery is its first line's:
        # this poll's own round (every engine, the job list over REST) takes a while under load.
        took = back.at - t0 if seen is not None and back.at is not None else seen
        self._done("helper", took, job=job, seen_s=None if seen is None else round(seen, 2))

    # -- swarm nodes
    def _jobs_back(self, jobs: Iterable[str], since: float, new_run: bool) -> bool | None:
        """Every job in `jobs` ended COMPLETED or prints epochs again after `since` (from a
        run started after it, with `new_run`); None once one of them was lost."""
        status = self.tracker.poll()
        if any(status.get(j) in ("FAILED", "HALTED") for j in jobs):
            return None
        return all(
            status.get(j) == "COMPLETED"
            or (
                status.get(j) == "PROCESSING"
                and (
                    self.watcher.first_line_after(j, 0, since, EPOCH_RE) is not None
                    if new_run
                    else self.watcher.progressed_since(j, since)
                )
            )
            for j in jobs
        )

    def _wait_jobs_back(self, jobs: set[str], since: float, new_run: bool, t0: float):
        """Seconds from `t0` until `_jobs_back`; None if a job was lost or after the wait."""
        deadline = time.time() + 2 * self.wait_s
        while time.time() < deadline:
            back = self._jobs_back(jobs, since, new_run)
            if back is None:
                return None
            if back:
                return time.time() - t0
            time.sleep(0.2)
        return None

    def _restart_node(self, node: str) -> float | None:
        """Start `node`'s engine again; seconds until the platform schedules on it again."""
        t1 = time.time()
        self.p.lab.restart_node(node, wait_ready=False)
        self.p.renew_client(node)
        took = _wait(lambda: self.p.nodes_schedulable([node]), self.wait_s, every=0.2)
        return None if took is None else time.time() - t1

    def _busy_worker(self, timeout_s: float = 120.0) -> tuple[str, set[str]]:
        """The worker node running learners of the most jobs that have printed an epoch
        and no other kill hit (waiting up to `timeout_s` for one); else the busiest."""
        deadline = time.time() + timeout_s
        while True:
            with self.watcher._lock:
                on = {n: set(self.watcher.learners_on.get(n, ())) for n in self.p.workers}
            with self._hit_lock:
                fresh = {n: {j for j in jobs if j not in self._hit
                             and self.watcher.epochs_printed(j) >= 1} for n, jobs in on.items()}  # fmt: skip
            node = max(self.p.workers, key=lambda n: (len(fresh[n]), len(on[n]), self.rng.random()))
            if fresh[node] or time.time() > deadline:
                with self._hit_lock:
                    self._hit |= on[node]
                return node, on[node]
            time.sleep(0.5)

    def _kill_engine(self) -> None:
        if not self.p.workers:
            return self._skip("engine", "no swarm worker node (the platform runs --nodes 1)")
        node, jobs = self._busy_worker()
        log(f"kill node {node} (dockerd, containerd, containers), jobs there: {sorted(jobs)}")
        t0 = time.time()
        # The machine goes: an engine crash alone would leave its learners running on,
        # unseen, beside their replacements.
        self.p.lab.kill_node(node, machine=True)
        try:
            jobs_s = self._wait_jobs_back(jobs, t0, new_run=True, t0=t0)
            log(f"  engine_jobs: its {len(jobs)} job(s) progressing again after {jobs_s} s")
        finally:
            back_s = self._restart_node(node)
        self.recovery["engine_jobs"] = jobs_s
        self._done("engine", back_s, node=node, jobs=len(jobs))

    def _kill_manager(self) -> None:
        if self.p.lab is None:
            return self._skip("manager", "no swarm (the platform runs --nodes 1)")
        node = self.p.manager_node
        jobs = set(self.tracker.processing())
        log(f"kill -9 the swarm manager's dockerd ({node}) for {MANAGER_DOWN_S:.0f} s; "
            f"{len(jobs)} job(s) processing")  # fmt: skip
        t0 = time.time()
        self.p.lab.kill_node(node)
        try:
            time.sleep(MANAGER_DOWN_S)
        finally:
            t1 = time.time()
            back_s = self._restart_node(node)
        # Every node schedulable again is the platform's view of the manager being back.
        if back_s is not None:
            took = _wait(lambda: self.p.nodes_schedulable(self.p.engines), self.wait_s, every=0.2)
            back_s = None if took is None else time.time() - t1
        jobs_s = self._wait_jobs_back(jobs, t1, new_run=False, t0=t0)
        self.recovery["manager_jobs"] = jobs_s
        log(f"  manager_jobs: the {len(jobs)} job(s) progressing again {jobs_s} s after the kill")
        self._done("manager", back_s, node=node, down_s=MANAGER_DOWN_S)
