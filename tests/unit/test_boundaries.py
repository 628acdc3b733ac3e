"""Dependencies point inward, checked by import-linter (`[tool.importlinter]` in pyproject.toml).

The contracts: layers (services over clients over the local platform over adapters over the
core), services independent of each other, clients and adapters importing no service, the
pure logic (the domain, the scheduling policies, the pure deciders) reaching no adapter,
configuration or I/O library, and no import cycle between the modules of a package.
scripts/test.sh runs `lint-imports` before pytest; here the same contracts run on the tree,
and on copies of it with one forbidden import planted, which must break the contract that
forbids it: a contract that cannot fail checks nothing. Imports inside functions count
(they run when the function does); imports under `if TYPE_CHECKING:` do not (they never run).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from importlinter import configuration
from importlinter.application import use_cases

REPO = Path(__file__).resolve().parents[2]


def lint(
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    cache_dir: Path | None = None,
) -> str:
    """Check `root`'s contracts (its pyproject.toml) over `root`'s packages; the report.
    `cache_dir`: import-linter's cache of each module's imports, by its modification time."""
    # import-linter finds a root package with importlib, which answers with the module
    # already imported (this test session's): make it look on the path, `root` first.
    monkeypatch.syspath_prepend(str(root))
    for package in ("dlaas", "services"):
        monkeypatch.delitem(sys.modules, package, raising=False)
    configuration.configure()  # what the `lint-imports` command does first
    capsys.readouterr()
    passed = use_cases.lint_imports(
        config_filename=str(root / "pyproject.toml"),
        cache_dir=str(cache_dir) if cache_dir else None,
        no_logo=True,
    )
    # The report wraps long contract names: compare with the white space folded.
    report = " ".join(capsys.readouterr().out.split())
    return ("PASSED " if passed else "FAILED ") + report


def test_the_tree_keeps_every_contract(monkeypatch, capsys):
    report = lint(REPO, monkeypatch, capsys)
    assert report.startswith("PASSED"), report
    assert "0 broken" in report


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory) -> Path:
    """One copy of the packages and pyproject.toml for the module's plants. They share
    import-linter's cache (`CACHE` in it), so a lint re-reads only the file a plant changed:
    a stale entry could only hide a plant, which fails the test, never passes it."""
    root = tmp_path_factory.mktemp("tree")
    for package in ("dlaas", "services"):
        shutil.copytree(
            REPO / package, root / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    return root


CACHE = ".import_linter_cache"
_writes = itertools.count(1)


def _write(path: Path, text: str) -> None:
    path.write_text(text)
    # A modification time of its own for every write, even within the clock's tick: the
    # cache tells a changed file by it.
    stamp = time.time_ns() + next(_writes) * 1_000_000
    os.utime(path, ns=(stamp, stamp))


@contextlib.contextmanager
def planted_in(root: Path, rel: str, planted: str) -> Iterator[Path]:
    """`root` with `planted` appended to `rel` while the block runs."""
    target = root / rel
    original = target.read_text()
    _write(target, original + "\n" + planted + "\n")
    try:
        yield root
    finally:
        _write(target, original)


PLANTED = [
    # (file, planted code, the contract it breaks, the import the report names)
    pytest.param(
        "dlaas/domain/status.py",
        "def f():\n    import docker",  # inside a function: it runs when the function does
        "Pure logic reaches no adapter, configuration or I/O library BROKEN",
        "dlaas.domain.status -> docker",
        id="domain-imports-io-library",
    ),
    pytest.param(
        "services/scheduler/policy/model.py",
        "from dlaas.config import PlatformSettings",
        "Pure logic reaches no adapter, configuration or I/O library BROKEN",
        "services.scheduler.policy.model -> dlaas.config",
        id="policy-reads-configuration",
    ),
    pytest.param(
        "dlaas/domain/plan.py",
        "from dlaas.adapters import s3",
        "Layers: services over clients over the local platform over adapters over the core BROKEN",
        "dlaas.domain.plan -> dlaas.adapters.s3",
        id="domain-imports-adapter",
    ),
    pytest.param(
        "services/api/errors.py",
        "from services.lcm import use_cases",
        "Services import each other only through the protos BROKEN",
        "services.api.errors -> services.lcm.use_cases",
        id="service-imports-service",
    ),
    pytest.param(
        "dlaas/adapters/s3.py",
        "import services.api.rules",
        "Clients and adapters import no service BROKEN",
        "dlaas.adapters.s3 -> services.api.rules",
        id="adapter-imports-service",
    ),
    pytest.param(
        "services/lcm/deployment.py",
        "import pymongo.errors",  # to classify the job store's errors: the adapter's job
        "Services reach the engines and the stores only through their adapters BROKEN",
        "services.lcm.deployment -> pymongo",
        id="service-imports-driver",
    ),
    pytest.param(
        "dlaas/domain/locations.py",
        "from dlaas.domain import plan",  # plan imports locations
        "No import cycles between the modules of a package BROKEN",
        "No cycles are allowed in dlaas.domain",
        id="cycle",
    ),
]


@pytest.mark.parametrize(("rel", "planted", "contract", "named"), PLANTED)
def test_a_planted_violation_breaks_its_contract(
    tree_copy, monkeypatch, capsys, rel, planted, contract, named
):
    with planted_in(tree_copy, rel, planted) as root:
        report = lint(root, monkeypatch, capsys, root / CACHE)
    assert report.startswith("FAILED"), report
    assert contract in report, report
    assert named in report, report


def test_type_checking_imports_do_not_count(tree_copy, monkeypatch, capsys):
    planted = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import docker"
    with planted_in(tree_copy, "dlaas/domain/status.py", planted) as root:
        report = lint(root, monkeypatch, capsys, root / CACHE)
    assert report.startswith("PASSED"), report
