"""Shared by the tests that pin "one home per contract": run a finder over product code.

A finder takes a module's source and returns the line numbers that break the contract;
`offenders` runs it over every module under `tops` (but `skip`) and names each hit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def offenders(
    finder: Callable[[str], list[int]], tops: Iterable[str], skip: Iterable[str] = ()
) -> list[str]:
    """`path:line` of every hit of `finder` in the .py files under `tops`, but `skip`."""
    skipped = set(skip)
    return [
        f"{path.relative_to(REPO)}:{line}"
        for top in tops
        for path in sorted((REPO / top).rglob("*.py"))
        if str(path.relative_to(REPO)) not in skipped and "_pb2" not in path.name
        for line in finder(path.read_text())
    ]
