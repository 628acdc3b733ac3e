"""Every module of the product and its benchmarks stays at 500 lines or fewer, each named for
one concern: a module that outgrows it is split by concern, not trimmed of its comments.
(Generated gRPC code and the tests are not counted.)"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAX_LINES = 500
PACKAGES = ("dlaas", "services", "benchmarks")


def long_modules(root: Path, limit: int = MAX_LINES) -> dict[str, int]:
    """Modules under `root`'s packages with more than `limit` lines, by path."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if "_pb2" in path.name or "__pycache__" in path.parts:
                continue
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines > limit:
                found[str(path.relative_to(root))] = lines
    return found


def test_no_module_is_over_500_lines():
    assert long_modules(REPO) == {}


def test_the_check_finds_a_long_module(tmp_path):
    (tmp_path / "services").mkdir()
    (tmp_path / "services" / "big.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "services" / "fine.py").write_text("x = 1\n" * MAX_LINES)
    assert long_modules(tmp_path) == {"services/big.py": MAX_LINES + 1}
