"""One module spells the etcd keys (dlaas/domain/keys.py); nothing else formats them by hand.

The layout is pinned here; the scan reads every product module with `ast` and fails naming
the file and line of a string that builds a `/jobs/`, `/nodes/`, `/sched/` or `/lcm/` key
under a prefix (`f"{prefix}/jobs/..."`, `prefix + "/nodes/"`, `"/dlaas/lcm/leader"`).
HTTP paths ("/v1/jobs/...", a route's "/jobs/{job_id}") are not etcd keys and pass.
"""

from __future__ import annotations

import ast
import itertools
import re

import pytest
from source_scan import offenders, walk

from dlaas.domain.keys import EtcdKeys

_KEY_PART = re.compile(r"^/(jobs|nodes|sched|lcm)/")
_LITERAL_KEY = re.compile(r"/dlaas/(jobs|nodes|sched|lcm)\b")


def test_the_layout():
    k = EtcdKeys("/dlaas/")
    assert k.status("j1") == "/dlaas/jobs/j1/status"
    assert k.placement("j1") == "/dlaas/jobs/j1/placement"
    assert k.job("j1") == "/dlaas/jobs/j1/"
    assert k.node("n1") == "/dlaas/nodes/n1"
    assert k.queued("j1") == "/dlaas/sched/queue/j1"
    assert k.running("j1") == "/dlaas/sched/running/j1"
    assert k.quota("t") == "/dlaas/sched/quota/t"
    assert k.lcm_leader == "/dlaas/lcm/leader"
    assert EtcdKeys("/other").status("j") == "/other/jobs/j/status"


def test_a_key_names_its_job():
    k = EtcdKeys()
    assert k.job_of(k.status("j-1")) == "j-1" and k.is_status(k.status("j-1"))
    assert k.job_of(k.placement("j-1")) == "j-1" and not k.is_status(k.placement("j-1"))
    assert k.job_of(k.jobs) == "" and not k.is_status(k.jobs)
    assert k.job_of(k.node("n")) == "" and not k.is_status(k.node("n"))
    # A job whose id ends in "status" is not confused with a status key.
    assert not k.is_status(k.jobs + "status")


def hand_made_keys(nodes) -> list[int]:
    """Line numbers where a module (its `nodes`, source_scan) builds an etcd key by hand."""
    found = []
    for node in nodes:
        if isinstance(node, ast.JoinedStr):
            parts = node.values
            for before, part in itertools.pairwise(parts):
                if (
                    isinstance(before, ast.FormattedValue)
                    and isinstance(part, ast.Constant)
                    and _KEY_PART.match(str(part.value))
                ):
                    found.append(node.lineno)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            right = node.right
            if isinstance(right, ast.Constant) and _KEY_PART.match(str(right.value)):
                found.append(node.lineno)
        if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
            text = node.value if isinstance(node.value, str) else node.value.decode("latin-1")
            if _LITERAL_KEY.search(text):
                found.append(node.lineno)
    return sorted(set(found))


@pytest.mark.parametrize(
    "line",
    [
        'k = f"{self.prefix}/jobs/{job_id}/status"',
        "k = prefix.rstrip('/') + '/nodes/'",
        'k = f"{prefix}/sched/running/{job_id}"',
        'k = b"/dlaas/lcm/leader"',
        'k = f"{settings.etcd_prefix}/lcm/leader"',
    ],
)
def test_the_scan_catches_a_hand_made_key(line):
    assert hand_made_keys(walk(ast.parse(line))) == [1]


@pytest.mark.parametrize(
    "line",
    [
        'r = f"/v1/jobs/{job_id}/logs"',
        'r = "/jobs/{job_id}/halt"',
        'r = f"{base}/v1/jobs/{job_id}"',
        'r = f"s3://{bucket}/{prefix}"',
    ],
)
def test_the_scan_lets_http_paths_pass(line):
    assert hand_made_keys(walk(ast.parse(line))) == []


def test_no_module_but_keys_py_formats_an_etcd_key():
    found = offenders(hand_made_keys, ("dlaas", "services", "benchmarks"), {"dlaas/domain/keys.py"})
    assert found == [], "etcd keys formatted outside dlaas/domain/keys.py: " + ", ".join(found)
