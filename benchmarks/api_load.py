"""REST API throughput and latency under load, against a platform brought up by `dlaas up`.

Three phases, each `--seconds` long (issue 24's Measure):
  (a) reads: `GET /v1/jobs` and `GET /v1/jobs/{id}` by one user, 8 connections each
      (16 in all), over `--jobs` queued jobs of that user in the store;
  (b) the same reads while another user holds `--follows` log-follow streams open
      (`GET /v1/jobs/{id}/logs?follow=true` over raw sockets; the ones past the follow
      limits get 429, counted);
  (c) `--submits` submits of a queued job from 8 clients (8 threads of this script, each
      with a connection of its own and its share, one after the other).
Every job asks for a whole node (the largest) and sleeps: the first placed holds it and
every other job stays QUEUED, so the load is the API's, not the engine's (it is halted
at the end). Reads come from Debian's `wrk` (C; `apt-get install
wrk`); its CPU time (and the submit threads') is printed beside each phase to show the
load generator is not the bottleneck. The API's own time per request (its
`dlaas_api_request_seconds` histogram, summed over the replicas) is printed beside the
client's latency: the difference is time spent waiting to be served (accept queue, event
loop, thread pool), not in the route. Each read phase also gives where the two cores went:
the API replicas' CPU per request (their /proc CPU time over the requests served), every
platform process's CPU share (and the Docker daemon's), how many requests each replica served (SO_REUSEPORT spreads
the connections, not the requests), and the load average at its end (other work on a
shared machine makes the p99 noisy: compare runs at a similar load).

Usage: python benchmarks/api_load.py [--seconds 30] [--follows 200] [--submits 200]
    [--jobs 60] [--home DIR] [--json]
It brings the platform up in DIR (a temporary one by default) and down again if it
started it. With --json the last line is {"reads": {...}, "reads_with_follows": {...},
"submits": {...}}: per path requests/s, p50/p99 ms, errors, and the server's mean ms.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from dlaas.local import components, platform
from dlaas.local.dockerd import DEFAULT_DOCKER_HOST

# Every job asks for a whole node and sleeps: the first one placed holds the node, every
# other one stays QUEUED behind it.
JOB = """
name: api-load
learners: 1
cpus: {cpus}
memory: 64MiB
framework:
  name: python
  version: "3"
  command: python3 -c "import time; time.sleep(3600)"
"""

# wrk's script: the Authorization header, and a JSON summary on stdout.
WRK_LUA = r"""
function init(args)
  wrk.headers["Authorization"] = "Bearer " .. os.getenv("WRK_TOKEN")
end
function done(summary, latency, requests)
  local s = summary.duration / 1e6
  io.write(string.format(
    '{"requests": %d, "seconds": %.3f, "rps": %.1f, "p50_ms": %.2f, "p99_ms": %.2f, ' ..
    '"max_ms": %.2f, "non_2xx": %d, "socket_errors": %d}\n',
    summary.requests, s, summary.requests / s, latency:percentile(50) / 1000,
    latency:percentile(99) / 1000, latency.max / 1000, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
"""

SERVER_SECONDS = re.compile(
    r'dlaas_api_request_seconds_(sum|count)\{[^}]*method="(\w+)",[^}]*route="([^"]+)"[^}]*\}'
    r" ([0-9.e+-]+)"
)
REPLICA = re.compile(r'replica="([^"]+)"')


def process_cpu(home: Path) -> dict[str, float]:
    """CPU seconds so far of each platform process `up` started (its pid records; a
    restarted replica's count starts again, so compare only within a phase), and of the
    Docker engine's daemon where `up` did not start it (the services' engine calls)."""
    pids = {c.name: c.pid for c in components.status(home) if c.pid}
    if "dockerd" not in pids:  # the daemon on the default socket (others may run labs)
        pidof = subprocess.run(["pidof", "dockerd"], check=False, capture_output=True, text=True)
        socket_path = DEFAULT_DOCKER_HOST.removeprefix("unix://")
        for pid in pidof.stdout.split():
            try:
                if socket_path in Path(f"/proc/{pid}/cmdline").read_text():
                    pids["dockerd"] = int(pid)
            except OSError:
                continue
    out = {}
    for name, pid in pids.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[name] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def cpu_shares(before: dict[str, float], after: dict[str, float], wall: float) -> dict:
    """Each process's CPU over the phase, as a share of one core; the API replicas summed."""
    used = {k: after[k] - before[k] for k in after if k in before}
    out = {"api": round(sum(v for k, v in used.items() if k.startswith("api-")) / wall, 3)}
    for name, v in sorted(used.items(), key=lambda kv: -kv[1]):
        if not name.startswith("api-") and v / wall >= 0.01:
            out[name] = round(v / wall, 3)
    return out


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def server_times(url: str) -> dict[str, dict[tuple[str, str], float]]:
    """replica -> {(method, route, sum|count): value} of the API's request histogram; each
    scrape reaches one replica (the kernel spreads connections), so scrape a few times."""
    seen: dict[str, dict] = {}
    for _ in range(12):
        try:
            text = httpx.get(f"{url}/metrics", timeout=10).text
        except httpx.HTTPError:
            continue
        values: dict = {}
        replica = None
        for line in text.splitlines():
            m = SERVER_SECONDS.match(line)
            if m:
                replica = replica or (REPLICA.search(line) or [None, "?"])[1]
                values[(m.group(2), m.group(3), m.group(1))] = float(m.group(4))
        if replica:
            seen[replica] = values
    return seen


def server_mean_ms(before: dict, after: dict, method: str, route: str) -> float | None:
    total, count = 0.0, 0.0
    for replica, values in after.items():
        old = before.get(replica, {})
        total += values.get((method, route, "sum"), 0) - old.get((method, route, "sum"), 0)
        count += values.get((method, route, "count"), 0) - old.get((method, route, "count"), 0)
    return round(1000 * total / count, 2) if count else None


def wrk(
    url: str, path: str, token: str, connections: int, seconds: float, **env: str
) -> subprocess.Popen:
    script = Path(tempfile.gettempdir()) / "dlaas-api-load.lua"
    script.write_text(WRK_LUA)
    cmd = ["wrk", "-t", "2", "-c", str(connections)]
    cmd += ["-d", f"{seconds:.0f}s", "--timeout", "10s", "-s", str(script), url + path]
    environ = {"WRK_TOKEN": token, "PATH": "/usr/bin:/bin", **env}
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environ, text=True
    )


def result_of(proc: subprocess.Popen) -> dict:
    out, _ = proc.communicate()
    line = next((ln for ln in out.splitlines() if ln.startswith('{"requests"')), None)
    if line is None:
        raise RuntimeError(f"wrk printed no summary:\n{out}")
    return json.loads(line)


def reads(url: str, token: str, job_id: str, seconds: float, home: Path) -> dict:
    """Phase (a)'s load: two wrk runs at once, 8 connections each."""
    before, cpu = server_times(url), children_cpu()
    procs_cpu = process_cpu(home)
    started = time.monotonic()
    procs = {
        "GET /v1/jobs": wrk(url, "/v1/jobs", token, 8, seconds),
        "GET /v1/jobs/{id}": wrk(url, f"/v1/jobs/{job_id}", token, 8, seconds),
    }
    out = {name: result_of(p) for name, p in procs.items()}
    wall = time.monotonic() - started
    cpu_used = cpu_shares(procs_cpu, process_cpu(home), wall)
    after = server_times(url)
    out["GET /v1/jobs"]["server_mean_ms"] = server_mean_ms(before, after, "GET", "/v1/jobs")
    out["GET /v1/jobs/{id}"]["server_mean_ms"] = server_mean_ms(
        before, after, "GET", "/v1/jobs/{job_id}"
    )
    requests = sum(r["requests"] for r in out.values()) or 1
    out["total_rps"] = round(sum(r["rps"] for r in out.values() if isinstance(r, dict)), 1)
    out["wrk_cpu_share"] = round((children_cpu() - cpu) / wall, 3)  # of one core
    # Where the two cores went: the API replicas' CPU per request, and every process's share.
    out["api_cpu_ms_per_request"] = round(1000 * cpu_used["api"] * wall / requests, 3)
    out["cpu_shares"] = cpu_used
    # How the kernel spread the 16 connections over the replicas (SO_REUSEPORT).
    out["replica_requests"] = replica_counts(before, after)
    out["load_avg"] = round(os.getloadavg()[0], 2)
    return out


def replica_counts(before: dict, after: dict) -> dict[str, int]:
    out = {}
    for replica, values in after.items():
        old = before.get(replica, {})
        out[replica] = int(
            sum(v - old.get(k, 0) for k, v in values.items() if k[0] == "GET" and k[2] == "count")
        )
    return out


def open_follow(url: str, path: str, token: str) -> tuple[socket.socket, int]:
    parts = urlsplit(url)
    s = socket.create_connection((parts.hostname, parts.port), timeout=30)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        if not chunk:
            break
        head += chunk
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0
    return s, status


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def submits(url: str, token: str, count: int, clients: int, manifest: str, home: Path) -> dict:
    """Phase (c): `count` submits from `clients` threads, each with its own connection and
    its share, one after the other (wrk cannot stop at a count and time it). The threads'
    CPU time is printed: about a millisecond a request, so they are not the bottleneck."""
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    lock = threading.Lock()

    def client(share: int) -> None:
        files = {"manifest": ("manifest.yml", manifest, "application/yaml")}
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
            for _ in range(share):
                started = time.perf_counter()
                status = http.post("/v1/jobs", files=files).status_code
                took = time.perf_counter() - started
                with lock:
                    latencies.append(took)
                    statuses[status] = statuses.get(status, 0) + 1

    before = server_times(url)
    procs_cpu = process_cpu(home)
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(count // clients,)) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - started
    used = resource.getrusage(resource.RUSAGE_SELF)
    load_cpu = used.ru_utime + used.ru_stime - cpu.ru_utime - cpu.ru_stime
    # Before the scrapes below: each /metrics costs the API CPU the submits did not.
    shares = cpu_shares(procs_cpu, process_cpu(home), wall)
    ok = sum(v for k, v in statuses.items() if 200 <= k < 300)
    return {
        "POST /v1/jobs": {
            "requests": len(latencies),
            "seconds": round(wall, 3),
            "rps": round(len(latencies) / wall, 1),
            "p50_ms": round(1000 * percentile(latencies, 0.5), 2),
            "p99_ms": round(1000 * percentile(latencies, 0.99), 2),
            "max_ms": round(1000 * max(latencies), 2),
            "non_2xx": len(latencies) - ok,
            "socket_errors": 0,
            "server_mean_ms": server_mean_ms(before, server_times(url), "POST", "/v1/jobs"),
        },
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "load_cpu_share": round(load_cpu / wall, 3),  # of one core
        "cpu_shares": shares,
        "load_avg": round(os.getloadavg()[0], 2),
    }


def halt_placed(url: str, tokens, timeout_s: float = 120) -> None:
    """Halt every job of these users, the queued ones first (newest first: else each halted
    holder lets the next one be placed), and wait until each is final: `down` then leaves
    no container behind."""
    final = ("COMPLETED", "FAILED", "HALTED")
    deadline = time.monotonic() + timeout_s
    for token in tokens:
        headers = {"Authorization": f"Bearer {token}"}
        while time.monotonic() < deadline:
            listing = httpx.get(f"{url}/v1/jobs", params={"limit": 500}, headers=headers).json()
            active = [j for j in listing.get("jobs", []) if j.get("status") not in final]
            if not active:
                break
            for job in active:
                httpx.post(f"{url}/v1/jobs/{job['job_id']}/halt", headers=headers, timeout=60)
            time.sleep(2)


def run(url: str, admin: str, args: argparse.Namespace, home: Path) -> dict:
    http = httpx.Client(base_url=url, timeout=60, headers={"Authorization": f"Bearer {admin}"})
    nodes = http.get("/v1/nodes").json().get("nodes", [])
    cpus = max(n["capacity"]["cpus"] for n in nodes)
    manifest = JOB.format(cpus=cpus)
    stamp = time.strftime("%H%M%S")
    tokens = {}
    for who in ("reader", "follower"):
        r = http.post("/v1/users", json={"name": f"load-{who}-{stamp}", "team": "load"})
        r.raise_for_status()
        tokens[who] = r.json()["token"]

    def submit(token: str) -> str:
        files = {"manifest": ("manifest.yml", manifest, "application/yaml")}
        r = httpx.post(
            f"{url}/v1/jobs", files=files, headers={"Authorization": f"Bearer {token}"}, timeout=60
        )
        if r.status_code >= 300:
            raise RuntimeError(f"submit: {r.status_code} {r.text}")
        return r.json()["job_id"]

    print(f"seeding {args.jobs} queued jobs ...", flush=True)
    jobs = [submit(tokens["reader"]) for _ in range(args.jobs)]
    followed = [submit(tokens["follower"]) for _ in range(4)]

    viewed = http.get(
        f"/v1/jobs/{jobs[0]}", headers={"Authorization": f"Bearer {tokens['reader']}"}
    )
    print(f"(a) reads, {args.seconds:.0f} s ...", flush=True)
    a = reads(url, tokens["reader"], jobs[0], args.seconds, home)

    print(f"(b) reads with {args.follows} follows open ...", flush=True)
    held: list[socket.socket] = []
    statuses: dict[int, int] = {}
    lock = threading.Lock()

    def follow(i: int) -> None:
        path = f"/v1/jobs/{followed[i % len(followed)]}/logs?follow=true"
        try:
            s, status = open_follow(url, path, tokens["follower"])
        except OSError:
            s, status = None, 0
        with lock:
            statuses[status] = statuses.get(status, 0) + 1
            if s is not None:
                held.append(s)

    opening = [threading.Thread(target=follow, args=(i,)) for i in range(args.follows)]
    for t in opening:
        t.start()
    for t in opening:
        t.join()
    b = reads(url, tokens["reader"], jobs[0], args.seconds, home)
    b["follows"] = {str(k): v for k, v in sorted(statuses.items())}
    for s in held:
        s.close()

    print(f"(c) {args.submits} submits from 8 clients ...", flush=True)
    c = submits(url, tokens["reader"], args.submits, 8, manifest, home)
    halt_placed(url, tokens.values())
    a["viewed_status"] = viewed.json().get("status")  # the job GET /v1/jobs/{id} reads
    return {"reads": a, "reads_with_follows": b, "submits": c}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--follows", type=int, default=200)
    ap.add_argument("--submits", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=60)
    ap.add_argument("--home", type=Path, default=None, help="platform state dir")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if shutil.which("wrk") is None:
        print("wrk is not installed: apt-get install wrk")
        return 2
    home = args.home or Path(tempfile.mkdtemp(prefix="dlaas-bench-"))
    was_up = (home / "client.json").exists() and all(c.running for c in components.status(home))
    print(f"platform in {home}", flush=True)
    platform.up(home, progress=lambda line: print("  " + line, flush=True))
    try:
        cfg = json.loads((home / "admin.json").read_text())  # users and nodes need it
        result = run(cfg["url"], cfg["admin_token"], args, home)
    finally:
        if not was_up:
            platform.down(home)
    for phase, r in result.items():
        for name, v in r.items():
            if isinstance(v, dict) and "rps" in v:
                print(
                    f"{phase:18} {name:18} {v['rps']:8.1f}/s  p50 {v['p50_ms']:7.1f} ms  "
                    f"p99 {v['p99_ms']:7.1f} ms  server mean {v['server_mean_ms']} ms  "
                    f"non-2xx {v['non_2xx']}  socket errors {v['socket_errors']}"
                )
        extra = {k: v for k, v in r.items() if not (isinstance(v, dict) and "rps" in v)}
        print(f"{phase:18} {extra}")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
