"""Dependencies point inward: the pure modules never reach an I/O library.

Reads the source with `ast` instead of importing it, follows every import that lands
inside the repository (including the packages' `__init__.py`, which Python runs on the
way), and fails naming the import chain that reaches a forbidden library. Imports under
`if TYPE_CHECKING:` are skipped: they never run. Imports inside functions count: they
run when the function does.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

import pytest
from source_scan import tree

REPO = Path(__file__).resolve().parents[2]

FORBIDDEN = frozenset(
    {"docker", "pymongo", "grpc", "fastapi", "pyetcd", "boto3", "httpx", "sqlite3"}
)

PURE_FILES = [
    "dlaas/domain/manifest.py",
    "dlaas/domain/manifest_yaml.py",
    "dlaas/domain/frameworks.py",
    "dlaas/domain/queue.py",
    "dlaas/domain/status.py",
    "dlaas/domain/jobspec.py",
    "dlaas/domain/errors.py",
    "dlaas/domain/plan.py",
    "dlaas/domain/launch.py",
    "dlaas/domain/job_keys.py",
    "services/jobmonitor/decide.py",
    "services/jobmonitor/workqueue.py",
    "dlaas/domain/ports.py",
    "services/api/rules.py",
    "dlaas/domain/purge.py",
    "dlaas/domain/keys.py",
    "dlaas/domain/metrics.py",
    "dlaas/domain/metric_query.py",
    "services/lcm/utilization.py",
    "dlaas/domain/hooks.py",
    "dlaas/domain/authz.py",
    "dlaas/adapters/engines/swarm_spec.py",
    "dlaas/adapters/engines/reports.py",
]
PURE_GLOBS = ["services/scheduler/policy/**/*.py"]


@dataclass(frozen=True)
class Violation:
    chain: tuple[str, ...]  # repo modules from the pure one to the importer
    target: str  # the forbidden module imported
    where: str  # file:line of that import

    def __str__(self) -> str:
        return f"{' -> '.join(self.chain)} imports {self.target} ({self.where})"


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_file(root: Path, name: str) -> Path | None:
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.AST):
    """Every node except the bodies of `if TYPE_CHECKING:` blocks."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))


def imports_of(root: Path, path: Path) -> tuple[tuple[str, int, bool], ...]:
    """(absolute module name, line, maybe_submodule) for every runtime import in `path`.

    `from pkg import name` yields `pkg`, and `pkg.name` marked maybe_submodule: `name`
    may be a submodule (followed if it is a file) or just an attribute. Read once per
    session per version of the file: every pure module's walk passes the same ones.
    """
    return _imports_of(root, path, path.stat().st_mtime_ns)


@functools.cache
def _imports_of(root: Path, path: Path, _mtime_ns: int) -> tuple[tuple[str, int, bool], ...]:
    me = module_name(root, path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: list[tuple[str, int, bool]] = []
    for node in _runtime_nodes(tree(path)):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno, False) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base:
                out.append((base, node.lineno, False))
            out += [(f"{base}.{a.name}".lstrip("."), node.lineno, True) for a in node.names]
    return tuple(out)


def with_parents(name: str) -> list[str]:
    """`a.b.c` -> [`a`, `a.b`, `a.b.c`]: importing a module runs its packages first."""
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def forbidden_imports(root: Path, start: Path, forbidden=FORBIDDEN) -> list[Violation]:
    """Follow the imports of `start` through the repository; report forbidden ones."""
    first = module_name(root, start)
    chains: dict[str, tuple[str, ...]] = {}
    todo: list[str] = []
    for name in with_parents(first):
        if module_file(root, name) and name not in chains:
            chains[name] = (first,) if name == first else (first, f"(package {name})")
            todo.append(name)
    found: list[Violation] = []
    while todo:
        current = todo.pop()
        path = module_file(root, current)
        assert path is not None
        for target, line, maybe_submodule in imports_of(root, path):
            if target.split(".")[0] in forbidden and not maybe_submodule:
                where = f"{path.relative_to(root)}:{line}"
                found.append(Violation(chains[current], target, where))
                continue
            for name in with_parents(target):
                if name not in chains and module_file(root, name):
                    chains[name] = (*chains[current], name)
                    todo.append(name)
    return sorted(set(found), key=str)


def pure_modules() -> list[Path]:
    files = [REPO / f for f in PURE_FILES]
    for pattern in PURE_GLOBS:
        files += sorted(REPO.glob(pattern))
    return files


@pytest.mark.parametrize("path", pure_modules(), ids=lambda p: str(p.relative_to(REPO)))
def test_pure_module_reaches_no_io_library(path):
    assert path.is_file(), f"{path.relative_to(REPO)} is listed as pure but does not exist"
    violations = forbidden_imports(REPO, path)
    assert not violations, "pure module reaches an I/O library:\n" + "\n".join(map(str, violations))


# -- the checker itself must be able to fail -------------------------------------------


def write(root: Path, rel: str, text: str) -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def test_checker_follows_relative_imports_and_package_inits(tmp_path):
    write(tmp_path, "pkg/__init__.py", "")
    write(tmp_path, "pkg/sub/__init__.py", "import httpx\n")
    start = write(
        tmp_path,
        "pkg/pure.py",
        "from typing import TYPE_CHECKING\n"
        "from . import helper\n"
        "from .sub import thing\n"
        "if TYPE_CHECKING:\n"
        "    import grpc\n",
    )
    write(tmp_path, "pkg/helper.py", "def f():\n    from docker.types import Mount\n")
    write(tmp_path, "pkg/sub/thing.py", "import os\n")
    got = {(v.target, v.where, v.chain) for v in forbidden_imports(tmp_path, start)}
    assert got == {
        ("docker.types", "pkg/helper.py:2", ("pkg.pure", "pkg.helper")),
        ("httpx", "pkg/sub/__init__.py:1", ("pkg.pure", "pkg.sub")),
    }


def test_checker_sees_parent_package_init_of_the_start_module(tmp_path):
    write(tmp_path, "svc/__init__.py", "import sqlite3\n")
    start = write(tmp_path, "svc/policy.py", "import math\n")
    (v,) = forbidden_imports(tmp_path, start)
    assert (v.target, v.where) == ("sqlite3", "svc/__init__.py:1")
    assert str(v) == "svc.policy -> (package svc) imports sqlite3 (svc/__init__.py:1)"


def test_checker_passes_a_clean_module(tmp_path):
    write(tmp_path, "clean/__init__.py", "from .a import x\n")
    write(tmp_path, "clean/a.py", "import json\nx = 1\n")
    start = write(tmp_path, "clean/b.py", "from clean.a import x\nimport dataclasses\n")
    assert forbidden_imports(tmp_path, start) == []
