"""The chaos suite's view of the platform under test: its records, REST, engines and jobs.

`Platform` reaches the state dir, the API and every node's engine (through its own socket,
the attacker's view); `Watcher` follows the learner containers' logs (for lost work and
duplicate learners); `Tracker` polls the jobs' statuses. benchmarks/chaos.py runs them.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.chaos_checks import EPOCH_RE, JobPlan, RunTimeline, duplicates
from dlaas.domain.status import FINAL
from dlaas.local.state import StateDir

POLL_DOCKER_S = 0.2
# Longest a watcher follows a container's engine that stopped answering (it may come back).
REFOLLOW_S = 120.0


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def _docker_ts(stamp: str) -> float:
    """'2026-11-22T03:04:41.123456789Z' -> seconds since the epoch (engine clock = host clock)."""
    head, _, frac = stamp.rstrip("Z").partition(".")
    base = dt.datetime.fromisoformat(head).replace(tzinfo=dt.UTC).timestamp()
    return base + float(f"0.{frac or 0}")


class Platform:
    """The platform under test: its state dir, REST client, nodes' engines and pid records.

    On a swarm (`home`/swarm holds the lab) the nodes are the lab's, each engine reached
    through its own socket (the attacker's view, never the platform's); else the one node
    "local" is the machine's engine.
    """

    def __init__(self, home: Path):
        import docker
        import httpx

        from dlaas.local.swarm import STATE_FILE, SwarmLab

        self.home = home
        cfg = json.loads((home / "client.json").read_text())
        self.token = cfg["token"]
        self.http = httpx.Client(
            base_url=cfg["url"], headers={"Authorization": f"Bearer {self.token}"}, timeout=30
        )
        conf = json.loads((home / "platform.json").read_text())
        self.platform_id = conf["platform_id"]
        self.engines: dict[str, str] = {}  # node -> its engine's docker host
        self.lab: SwarmLab | None = None
        self.manager_node = ""
        if (home / "swarm" / STATE_FILE).exists():
            info = SwarmLab(home / "swarm").info()
            self.lab = SwarmLab(home / "swarm", nodes=len(info.nodes))
            self.engines = dict(info.node_sockets)
            self.manager_node = info.nodes[0]  # the lab's only manager
        else:
            self.engines["local"] = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        self._docker = docker
        self.clients = {n: self.client(h) for n, h in self.engines.items()}

    @property
    def workers(self) -> list[str]:
        """The swarm's worker nodes (none on the machine's one engine)."""
        return [n for n in self.engines if self.lab is not None and n != self.manager_node]

    def renew_client(self, node: str) -> None:
        """A fresh client for a restarted engine: the old one's connections went with it."""
        self.clients[node] = self.client(self.engines[node])

    def nodes_schedulable(self, names: Iterable[str]) -> bool:
        """Whether the platform lists every node in `names` ready and schedulable."""
        rows = {n["name"]: n for n in self.get("/v1/nodes").json().get("nodes", [])}
        return all(
            rows.get(n, {}).get("healthy") and rows[n].get("state") == "ready" for n in names
        )

    def client(self, host: str):
        # A short timeout: a dead engine must not stall the watcher.
        return self._docker.DockerClient(base_url=host, version="1.41", timeout=5, max_pool_size=64)

    def record(self, name: str) -> dict:
        return StateDir(self.home).read_pid(name)

    def records(self) -> dict[str, dict]:
        out = {}
        for p in (self.home / "pids").glob("*.json"):
            with contextlib.suppress(OSError, ValueError):
                out[p.stem] = json.loads(p.read_text())
        return out

    def etcd_members(self) -> list[str]:
        return sorted(n for n in self.records() if n == "etcd" or n.startswith("etcd-"))

    def etcd_endpoints(self) -> list[str]:
        return [self.record(n).get("address", "") for n in self.etcd_members()]

    def api_url(self) -> str:
        return self.record("api-0").get("address") or str(self.http.base_url)

    def get(self, path: str, **params):
        """GET over REST, retried while the API is down (it is one of the things killed)."""
        import httpx

        deadline = time.monotonic() + 60
        while True:
            try:
                self.http.base_url = self.api_url()
                reply = self.http.get(path, params=params)
                if reply.status_code < 500:
                    return reply
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"GET {path}: the API did not answer for 60 s")
            time.sleep(0.2)

    def submit(self, plan: JobPlan) -> str:
        from dlaas.clients.client import pack_code

        data, name = pack_code(plan.code_dir)
        files = {
            "manifest": ("manifest.yaml", plan.manifest.encode(), "application/yaml"),
            "code": (name, data, "application/gzip"),
        }
        reply = self.http.post("/v1/jobs", files=files)
        if reply.status_code != 201:
            raise RuntimeError(f"submit {plan.name}: {reply.status_code} {reply.text}")
        return reply.json()["job_id"]

    def leader(self) -> str:
        """The LCM leadership key's value ("host:pid@addr"), read over etcd's HTTP gateway."""
        import httpx

        from dlaas.domain.keys import EtcdKeys

        key = base64.b64encode(EtcdKeys().lcm_leader.encode()).decode()
        for endpoint in self.etcd_endpoints():
            with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
                reply = httpx.post(f"http://{endpoint}/v3/kv/range", json={"key": key}, timeout=1)
                kvs = reply.json().get("kvs") or []
                return base64.b64decode(kvs[0]["value"]).decode() if kvs else ""
        return ""

    def running(self, role: str, **labels: str) -> list[tuple[str, dict]]:
        """(node, container summary) of this platform's running containers with `role`."""
        from dlaas.domain import jobspec

        want = [f"{jobspec.LABEL_MANAGED}={self.platform_id}", f"{jobspec.LABEL_ROLE}={role}"]
        want += [f"{k}={v}" for k, v in labels.items()]
        out = []
        for node, client in list(self.clients.items()):
            try:
                rows = client.api.containers(filters={"label": want, "status": "running"})
            except Exception:  # noqa: BLE001, S112 - a dead engine (killed on purpose) lists nothing
                continue
            out.extend((node, row) for row in rows)
        return out


class Watcher:
    """Background: duplicate learners (all engines every 0.2 s) and learner log timelines."""

    def __init__(self, platform: Platform):
        self.p = platform
        self.dups: set[tuple[str, int]] = set()
        self.timelines: dict[tuple[str, int], list[RunTimeline]] = {}
        self.learners_on: dict[str, set[str]] = {}  # node -> jobs with a learner there now
        self._followed: set[str] = set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        from dlaas.domain import jobspec

        while not self._stop.is_set():
            rows = self.p.running(jobspec.ROLE_LEARNER)
            keys, on = [], {}
            for node, row in rows:
                labels = row.get("Labels") or {}
                job = labels.get(jobspec.LABEL_JOB, "")
                index = int(labels.get(jobspec.LABEL_LEARNER, "0"))
                keys.append((job, index))
                on.setdefault(node, set()).add(job)
                with self._lock:
                    new = row["Id"] not in self._followed
                    self._followed.add(row["Id"])
                if new:
                    threading.Thread(
                        target=self._follow, args=(node, row["Id"], job, index), daemon=True
                    ).start()
            found = duplicates(keys)
            with self._lock:
                for key in found - self.dups:
                    log(f"DUPLICATE learner: job {key[0]} learner {key[1]}")
                self.dups |= found
                self.learners_on = on
            self._stop.wait(POLL_DOCKER_S)

    def _follow(self, node: str, container_id: str, job: str, index: int) -> None:
        """Collect one learner container's timestamped lines until it stops running.

        A stream that breaks because the node's engine went away (the manager's engine
        crash leaves its containers running) is picked up again once the engine answers,
        from the last line's time; the run ends when the container is found stopped, or
        started again (restarted in place: the next poll follows its new run, from its
        start).
        """
        run = RunTimeline(container_id, time.time())
        with self._lock:
            runs = self.timelines.setdefault((job, index), [])
        broke_at, since, registered = None, 0.0, False
        give_up = time.time() + REFOLLOW_S
        while not self._stop.is_set() and time.time() < give_up:
            client = self.p.clients.get(node)
            try:
                state = client.api.inspect_container(container_id)["State"]
            except self.p._docker.errors.NotFound:
                break  # removed: its stream ended for good
            except Exception:  # noqa: BLE001 - the engine is down (killed on purpose): retry
                broke_at = broke_at or time.time()
                self._stop.wait(1.0)
                continue
            started = _docker_ts(state["StartedAt"])
            if not registered:  # the first look
                if not state.get("Running"):
                    break  # listed just before it ended: that run was followed already
                run.start = since = started
                registered = True
                with self._lock:
                    runs.append(run)
                    runs.sort(key=lambda r: r.start)
            elif not state.get("Running") or started != run.start:
                # It died with its engine (or after), or was restarted in place since (the
                # same container, a new run: followed anew): its stream ended at the break.
                break
            else:
                self._stop.wait(0.5)  # its engine is back and it runs on: read on
            broke_at = None
            # Broad: the engine died, or the container went; the stream ends either way.
            with contextlib.suppress(Exception):
                self._read_logs(client, container_id, run, since)
            broke_at = time.time()
            since = run.lines[-1][0] if run.lines else run.start
            give_up = time.time() + REFOLLOW_S
        run.end = broke_at or time.time()
        with self._lock:  # a restart in place runs it again: the next poll follows that run
            self._followed.discard(container_id)

    @staticmethod
    def _read_logs(client, container_id: str, run: RunTimeline, since: float) -> None:
        """Append the container's lines (after `since`) to `run` until its stream ends."""
        buf = b""
        stream = client.api.logs(
            container_id, stream=True, follow=True, timestamps=True, since=since or None
        )
        for chunk in stream:
            buf += chunk
            *whole, buf = buf.split(b"\n")
            for raw in whole:
                stamp, _, text = raw.decode("utf-8", "replace").partition(" ")
                with contextlib.suppress(ValueError):
                    ts = _docker_ts(stamp)
                    if ts > since:  # `since` has whole-second precision on some engines
                        run.lines.append((ts, text))

    def first_line_after(self, job: str, index: int, after: float, pattern) -> float | None:
        with self._lock:
            runs = list(self.timelines.get((job, index), []))
        for run in runs:
            if run.start <= after:
                continue
            for ts, text in run.lines:
                if pattern.search(text):
                    return ts
        return None

    def progressed_since(self, job: str, after: float) -> bool:
        """Whether learner 0 of `job` printed an epoch line after `after`, in any run."""
        with self._lock:
            runs = list(self.timelines.get((job, 0), []))
        return any(ts > after and EPOCH_RE.match(t) for r in runs for ts, t in r.lines)

    def epochs_printed(self, job: str) -> int:
        with self._lock:
            runs = list(self.timelines.get((job, 0), []))
        return sum(1 for r in runs for _, t in r.lines if EPOCH_RE.match(t))


@dataclass
class Tracker:
    """Job statuses, polled over REST every 0.5 s."""

    platform: Platform
    ids: dict[str, JobPlan]
    status: dict[str, str] = field(default_factory=dict)

    def poll(self) -> dict[str, str]:
        try:
            reply = self.platform.get("/v1/jobs", limit=500)
            for job in reply.json().get("jobs", []):
                if job["job_id"] in self.ids:
                    self.status[job["job_id"]] = job["status"]
        except (RuntimeError, ValueError):
            pass
        return self.status

    def active(self) -> list[str]:
        return [j for j in self.ids if self.status.get(j) not in FINAL]

    def processing(self) -> list[str]:
        return [j for j in self.ids if self.status.get(j) == "PROCESSING"]
