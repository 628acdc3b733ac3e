"""Shared by the tests that read the product code instead of running it: one parse per file.

The "one home per contract" scans (etcd keys, error codes, stored manifests), the import
boundaries and the declared dependencies all read the same ~130 modules with `ast`.
Parsing them is most of what those tests cost, so a file is parsed once per test session
(`tree`, keyed on its path and modification time: a file a test writes and then changes
is read again) and its nodes walked once (`nodes`).

A finder takes a module's nodes (`nodes(path)`, or `walk(ast.parse(text))` for a line in
a finder's own tests) and returns the line numbers that break the contract; `offenders`
runs it over every module under `tops` (but `skip`) and names each hit.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

Finder = Callable[[Sequence[ast.AST]], list[int]]


@functools.cache
def _parsed(path: Path, mtime_ns: int, size: int) -> tuple[ast.Module, tuple[ast.AST, ...]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return tree, tuple(ast.walk(tree))


def _key(path: Path) -> tuple[Path, int, int]:
    st = path.stat()
    return path.resolve(), st.st_mtime_ns, st.st_size


def tree(path: Path) -> ast.Module:
    """The parsed module at `path`; parsed once per session (and again once it changed).
    The tree is shared: a caller must not change it."""
    return _parsed(*_key(path))[0]


def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of the module at `path` in `ast.walk` order, walked once per session."""
    return _parsed(*_key(path))[1]


def walk(module: ast.AST) -> tuple[ast.AST, ...]:
    """Every node of a tree of the caller's own (a finder's test lines), as `nodes` gives."""
    return tuple(ast.walk(module))


@functools.cache
def _files(top: str) -> tuple[Path, ...]:
    return tuple(
        p for p in sorted((REPO / top).rglob("*.py")) if "_pb2" not in p.name
    )  # generated stubs are not code anyone writes


def product_files(tops: Iterable[str], skip: Iterable[str] = ()) -> list[Path]:
    """The .py files under each of `tops` (repo-relative), but `skip` and generated stubs."""
    skipped = set(skip)
    return [p for top in tops for p in _files(top) if str(p.relative_to(REPO)) not in skipped]


def offenders(finder: Finder, tops: Iterable[str], skip: Iterable[str] = ()) -> list[str]:
    """`path:line` of every hit of `finder` in the .py files under `tops`, but `skip`."""
    return [
        f"{path.relative_to(REPO)}:{line}"
        for path in product_files(tops, skip)
        for line in finder(nodes(path))
    ]
