"""The committed gRPC stubs in dlaas/v1/ are exactly what protos/ generates.

Regenerates into a temp dir with the flags of scripts/gen_protos.sh (run from the repo
root with relative paths, so the generated files embed the same names) and compares.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STUBS = Path("dlaas/v1")
HINT = "stubs are stale: run scripts/gen_protos.sh and commit dlaas/v1/"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def generate(out: Path) -> None:
    protos = sorted(str(p.relative_to(REPO)) for p in (REPO / "protos/dlaas/v1").glob("*.proto"))
    assert protos, "no .proto files under protos/dlaas/v1"
    cmd = [sys.executable, "-m", "grpc_tools.protoc", "-I", "protos"]
    cmd += [f"--python_out={out}", f"--pyi_out={out}", f"--grpc_python_out={out}", *protos]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"protoc failed:\n{done.stderr}"


def differences(fresh: Path, committed: Path) -> list[str]:
    """What differs between a fresh generation and the committed stubs, one line each."""
    fresh_files = {p.name for p in fresh.iterdir() if p.is_file()}
    committed_files = {
        p.name for p in committed.iterdir() if p.is_file() and p.name.endswith(GENERATED_SUFFIXES)
    }
    out = [f"missing: {committed / n}" for n in sorted(fresh_files - committed_files)]
    out += [f"no longer generated: {committed / n}" for n in sorted(committed_files - fresh_files)]
    out += [
        f"differs: {committed / n}"
        for n in sorted(fresh_files & committed_files)
        if (fresh / n).read_bytes() != (committed / n).read_bytes()
    ]
    return out


def test_committed_stubs_match_a_fresh_generation(tmp_path):
    generate(tmp_path)
    diff = differences(tmp_path / STUBS, REPO / STUBS)
    assert not diff, HINT + ":\n" + "\n".join(diff)


def test_differences_reports_changed_missing_and_stale_files(tmp_path):
    fresh, committed = tmp_path / "fresh", tmp_path / "committed"
    fresh.mkdir()
    committed.mkdir()
    for name, text in {"a_pb2.py": "A", "b_pb2.pyi": "B", "c_pb2_grpc.py": "C"}.items():
        (fresh / name).write_text(text)
    (committed / "__init__.py").write_text("")  # hand-written: not compared
    (committed / "a_pb2.py").write_text("A")
    (committed / "b_pb2.pyi").write_text("B, edited by hand")
    (committed / "old_pb2.py").write_text("gone")
    assert differences(fresh, committed) == [
        f"missing: {committed}/c_pb2_grpc.py",
        f"no longer generated: {committed}/old_pb2.py",
        f"differs: {committed}/b_pb2.pyi",
    ]
    (committed / "b_pb2.pyi").write_text("B")
    (committed / "c_pb2_grpc.py").write_text("C")
    (committed / "old_pb2.py").unlink()
    assert differences(fresh, committed) == []
