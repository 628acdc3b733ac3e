"""Helpers for the isolation tests: the scripts job containers run instead of a learner or
the helper, and reading what they found (the fixtures are in conftest.py)."""

from __future__ import annotations

import json
import time

MANIFEST = """
name: probe
learners: {learners}
cpus: 0.5
memory: 256MiB
framework:
  name: python
  command: sleep 120
"""
SLEEP = ["sleep", "120"]
RESULT_PREFIX = "RESULT "

# Prints RESULT {"name": "open" | "blocked: why"} for each target in $PROBES, a JSON list
# of [name, host, port, retry_s]: connects at once, each within 2 s; a target with
# retry_s > 0 is tried again while refused (a listener still starting). Host "gateway"
# is the container's default gateway: the host's address on the job's own bridge.
PROBE = """
import json, os, socket, struct, threading, time
results = {}
def gateway():
    for line in open("/proc/net/route").read().splitlines()[1:]:
        f = line.split()
        if f[1] == "00000000":
            return socket.inet_ntoa(struct.pack("<L", int(f[2], 16)))
def probe(name, host, port, retry_s):
    host = gateway() if host == "gateway" else host
    deadline = time.monotonic() + retry_s
    while True:
        try:
            socket.create_connection((host, port), timeout=2).close()
            results[name] = "open"
            return
        except OSError as e:
            if time.monotonic() >= deadline:
                results[name] = f"blocked: {type(e).__name__}"
                return
            time.sleep(0.3)
threads = [threading.Thread(target=probe, args=t) for t in json.loads(os.environ["PROBES"])]
[t.start() for t in threads]
[t.join() for t in threads]
print("RESULT " + json.dumps(results), flush=True)
"""

# Listens on MASTER_PORT (as learner 0 of a distributed job does) and hands every
# connection a line, standing in for the gradients another job must never read.
LISTENER = """
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 29500))
s.listen()
while True:
    c, _ = s.accept()
    c.sendall(b"job A's gradients\\n")
    c.close()
"""


def python(script: str) -> list[str]:
    return ["python3", "-c", script]


def result_of(docker_client, name: str, timeout: float = 60.0) -> dict:
    """The RESULT line a probe container printed before it exited."""
    container = docker_client.containers.get(name)
    container.wait(timeout=timeout)
    logs = container.logs().decode(errors="replace")
    for line in logs.splitlines():
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    raise AssertionError(f"{name} printed no result:\n{logs[-2000:]}")


def container_ip(docker_client, name: str, network: str, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        c = docker_client.containers.get(name)
        ip = c.attrs["NetworkSettings"]["Networks"].get(network, {}).get("IPAddress")
        if ip or time.monotonic() > deadline:
            assert ip, f"{name} has no address on {network}"
            return ip
        time.sleep(0.2)
