"""`dlaas nodes`' table (dlaas.clients.cli_nodes): the measured use beside the allocation, with
unknown values said to be unknown (GPU utilization: n/a), never shown as 0."""

from __future__ import annotations

from rich.console import Console

from dlaas.clients.cli_nodes import _used, nodes_table


def node(utilization: dict | None, gpus: int = 0) -> dict:
    amount = {"cpus": 4, "memory_mb": 8192, "gpus": gpus, "learners": 0}
    return {
        "name": "n1",
        "state": "ready",
        "availability": "active",
        "capacity": amount,
        "allocated": {**amount, "cpus": 1},
        "labels": {},
        "jobs": [],
        "gpu_type": "",
        **({"utilization": utilization} if utilization is not None else {}),
    }


def test_measured_use_is_shown_and_unknown_is_said():
    measured = {"cpus": 1.5, "memory_mb": 300, "gpu_percent": None, "containers": 2}
    assert _used(node(measured)) == "1.5 CPUs, 300 MiB"
    assert _used(node(measured, gpus=2)) == "1.5 CPUs, 300 MiB, GPUs n/a"
    first_sample = {"cpus": None, "memory_mb": 300, "gpu_percent": None, "containers": 1}
    assert _used(node(first_sample)) == "? CPUs, 300 MiB"
    idle = {"cpus": 0.0, "memory_mb": 0, "gpu_percent": None, "containers": 0}
    assert _used(node(idle)) == "0 CPUs, 0 MiB"
    unknown = {"cpus": None, "memory_mb": None, "gpu_percent": None, "containers": 0}
    assert _used(node(unknown)) == "unknown"
    assert _used(node(None)) == "unknown"  # an older API without the field


def test_the_table_has_a_used_column():
    console = Console(width=200, record=True)
    console.print(nodes_table([node({"cpus": 0.75, "memory_mb": 64, "gpu_percent": None})]))
    text = console.export_text()
    assert "used" in text.splitlines()[1]
    assert "0.75 CPUs, 64 MiB" in text
