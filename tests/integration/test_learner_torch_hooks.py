"""The learner image's torch hooks (dlaas/learner/torch_hooks.py) in a fresh interpreter,
as the image's sitecustomize runs them: a stand-in `torch.distributed.constants` gets the
platform's collective timeout as it loads, and a torchrun worker that raises leaves
torchrun its error file."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_torchs_constants_module_is_patched_as_it_loads(tmp_path):
    """A stand-in package `torch.distributed.constants`, imported in a fresh interpreter
    after install(), has the platform's timeout; the module that imports the value by name
    (as distributed_c10d does) sees it too."""
    pkg = tmp_path / "torch" / "distributed"
    pkg.mkdir(parents=True)
    (tmp_path / "torch" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "constants.py").write_text(
        "from datetime import timedelta\n"
        "default_pg_timeout = timedelta(minutes=30)\n"
        "default_pg_nccl_timeout = timedelta(minutes=10)\n"
    )
    (pkg / "distributed_c10d.py").write_text(
        "from .constants import default_pg_timeout, default_pg_nccl_timeout\n"
    )
    code = textwrap.dedent(
        """
        from dlaas.learner import torch_hooks
        torch_hooks.install()
        import torch.distributed.distributed_c10d as c
        print(c.default_pg_timeout.total_seconds(), c.default_pg_nccl_timeout.total_seconds())
        """
    )
    env = {"PYTHONPATH": f"{REPO}:{tmp_path}", "DLAAS_COLLECTIVE_TIMEOUT": "42"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["42.0", "42.0"]


def test_a_torchrun_worker_that_raises_writes_the_file_at_exit(tmp_path):
    path = tmp_path / "error.json"
    code = "from dlaas.learner import torch_hooks\ntorch_hooks.install()\nraise ValueError('bad')\n"
    env = {"PYTHONPATH": str(REPO), "TORCHELASTIC_ERROR_FILE": str(path)}
    out = subprocess.run(
        [sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True
    )
    assert out.returncode == 1
    assert "ValueError: bad" in out.stderr  # the ordinary traceback still printed
    assert json.loads(path.read_text())["message"]["message"] == "ValueError: bad"
