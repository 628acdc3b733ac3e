"""The docs' commands work as written, in their order: the shell blocks of README.md's first
job and of examples/README.md, run by bash against a fresh platform in a temporary
DLAAS_HOME, as a user would copy them.

A runnable block is marked by a line `<!-- test: run ... -->` before it (invisible on
GitHub and in MkDocs), a fenced block or an indented one. Each block must exit 0: a
`--follow` exits 1 unless its job COMPLETED, so a job the docs describe that fails, a
command they name that does not exist, or an order that does not work (a team added
after a user made it: 409) fails here. The bug it was written for: the README and
examples/README.md told users different ways to upload the data.

Heavy (a platform, every example's framework image, six jobs): run it alone, under
`flock /tmp/dlaas-heavy.lock`.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from dlaas.local import platform

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", REPO / "examples" / "README.md"]
MARK = "<!-- test: run"
BLOCK_TIMEOUT_S = 1800


def marked_blocks(text: str) -> list[str]:
    """The shell block after each MARK line, fenced (```) or indented by 4 spaces."""
    lines = text.splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if not line.startswith(MARK):
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        body: list[str] = []
        if j < len(lines) and lines[j].startswith("```"):
            j += 1
            while j < len(lines) and not lines[j].startswith("```"):
                body.append(lines[j])
                j += 1
        else:
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                body.append(lines[j][4:])
                j += 1
        if not "".join(body).strip():
            raise ValueError(f"line {i + 1}: {MARK!r} is not followed by a code block")
        blocks.append("\n".join(body).strip() + "\n")
    return blocks


BLOCKS = [
    pytest.param(block, id=f"{page.relative_to(REPO)}-{n}")
    for page in PAGES
    for n, block in enumerate(marked_blocks(page.read_text()), 1)
]


def test_the_marked_blocks_are_found():
    # Cheap (no platform): the marks are where the docs' runnable commands are.
    readme, examples = (marked_blocks(page.read_text()) for page in PAGES)
    assert len(readme) == 2 and len(examples) == 2, (readme, examples)
    assert "dlaas data upload digits-data" in readme[0] and "--follow" in readme[0]
    assert "dlaas data upload digits-data" in examples[0]
    assert examples[1].count("dlaas submit") == 6


def test_a_mark_without_a_block_is_an_error():
    with pytest.raises(ValueError, match="line 1"):
        marked_blocks(f"{MARK} -->\n\nsome prose\n")


@pytest.fixture(scope="module")
def user(
    tmp_path_factory, docker_client, learner_image, pytorch_image, tensorflow_image, mpi_image
):
    """A fresh platform in a temporary DLAAS_HOME, and a directory a user works in: the
    repository's examples and .venv (linked), nothing else."""
    home = tmp_path_factory.mktemp("docs-home")
    work = tmp_path_factory.mktemp("docs-work")
    for name in ("examples", ".venv"):
        (work / name).symlink_to(REPO / name)
    platform.up(home, progress=lambda line: None)
    env = {
        **os.environ,
        "DLAAS_HOME": str(home),
        "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO),  # this checkout's code, whatever the .venv installed
    }
    try:
        yield work, env
    finally:
        platform.down(home, progress=lambda line: None)


@pytest.mark.e2e
@pytest.mark.docker
@pytest.mark.parametrize("block", BLOCKS)
def test_the_docs_commands_run_in_their_order(user, block):
    work, env = user
    r = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        check=False,
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
    )
    assert r.returncode == 0, (block, r.stdout[-4000:], r.stderr[-4000:])
    # Every followed job printed its end: COMPLETED.
    ends = re.findall(r"^job-\w+: (\w+)", r.stdout, re.MULTILINE)
    assert ends == ["COMPLETED"] * block.count("--follow"), (ends, r.stdout[-4000:])
