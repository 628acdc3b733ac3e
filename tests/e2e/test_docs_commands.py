"""The docs' commands work as written, in their order: the shell blocks of README.md's first
job and of examples/README.md, run by bash against a fresh platform in a temporary
DLAAS_HOME, as a user would copy them.

A runnable block is marked by a line `<!-- test: run ... -->` before it (invisible on
GitHub and in MkDocs), a fenced block or an indented one. Each block must exit 0: a
`--follow` exits 1 unless its job COMPLETED, so a job the docs describe that fails, a
command they name that does not exist, or an order that does not work (a team added
after a user made it: 409) fails here. The bug it was written for: the README and
examples/README.md told users different ways to upload the data.

The examples' jobs these blocks submit are also the e2e test of the training people write
(issue 23): the DDP example (one process per learner and through torchrun, two per
learner), mpi4py and Keras MultiWorkerMirroredStrategy each end COMPLETED with every worker
printing the same `weights_sha256=`; `WORKERS` says how many workers each example has.
A `dlaas submit` line that an earlier block ran word for word (examples/README.md repeats
the README's first jobs) is not run again: each example runs once.

Heavy (a platform, every example's framework image, six jobs): run it alone, under
`flock /tmp/dlaas-heavy.lock`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import httpx
import pytest
from test_platform_e2e import logs

from dlaas.local import platform

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", REPO / "examples" / "README.md"]
MARK = "<!-- test: run"
BLOCK_TIMEOUT_S = 1800
HASH = re.compile(r"(?:(?:rank|worker) (\d+) )?weights_sha256=([0-9a-f]{64})")
# The distributed examples by their manifests' names: how many workers print their weights'
# hash (the same one), and the ranks they name where they name one.
WORKERS = {
    "pytorch-ddp-digits": 2,  # one process per learner
    "pytorch-ddp-torchrun-digits": 4,  # 2 learners x 2 torchrun processes, ranks 0-3
    "mpi-digits": 2,  # mpirun on learner 0 gathers every rank's output into its log
    "keras-digits": 2,
}


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


def unseen_submits(block: str, seen: set[str]) -> str:
    """`block` without the `dlaas submit` lines an earlier block ran word for word (the
    README's first jobs are examples/README.md's too: one run each says as much); adds the
    block's submit lines to `seen`."""
    kept = []
    for line in block.splitlines():
        words = line.split("#", 1)[0].split()
        if words[:2] == ["dlaas", "submit"]:
            if " ".join(words) in seen:
                continue
            seen.add(" ".join(words))
        kept.append(line)
    return "\n".join(kept) + "\n"


def test_a_submit_an_earlier_block_ran_is_not_run_again():
    seen: set[str] = set()
    first = "dlaas data upload d x\ndlaas submit a.yaml --code a --follow  # the first\n"
    assert unseen_submits(first, seen) == first
    again = "dlaas data upload d x\ndlaas  submit a.yaml --code a --follow\ndlaas submit b.yaml\n"
    assert unseen_submits(again, seen) == "dlaas data upload d x\ndlaas submit b.yaml\n"


SUBMITTED: set[str] = set()  # the module's blocks run in their order, sharing one platform


@pytest.mark.e2e
@pytest.mark.docker
@pytest.mark.parametrize("block", BLOCKS)
def test_the_docs_commands_run_in_their_order(user, block):
    work, env = user
    block = unseen_submits(block, SUBMITTED)
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
    ends = re.findall(r"^(job-\w+): (\w+)", r.stdout, re.MULTILINE)
    assert [end for _, end in ends] == ["COMPLETED"] * block.count("--follow"), (
        ends,
        r.stdout[-4000:],
    )
    for job_id, _ in ends:
        workers_agree(env["DLAAS_HOME"], job_id)


def workers_agree(home: str, job_id: str) -> None:
    """A distributed example's workers ended with the same weights (each prints its hash at
    its end), all of them (`WORKERS`); torchrun's agents leave without a traceback."""
    cfg = json.loads((Path(home) / "client.json").read_text())
    auth = {"Authorization": f"Bearer {cfg['token']}"}
    with httpx.Client(base_url=cfg["url"], headers=auth, timeout=30) as http:
        job = http.get(f"/v1/jobs/{job_id}").json()
        texts = ["\n".join(logs(http, job_id, i)) for i in range(len(job["learners"]) or 1)]
    workers = WORKERS.get(job["name"])
    if workers is None:
        return  # not a distributed example
    found = [m for text in texts for m in HASH.findall(text)]
    assert len(found) == workers, (job["name"], [t[-2000:] for t in texts])
    assert len({digest for _, digest in found}) == 1, (job["name"], found)
    ranks = {int(rank) for rank, _ in found if rank}
    assert not ranks or ranks == set(range(workers)), (job["name"], found)
    if job["name"] == "pytorch-ddp-torchrun-digits":
        # torchrun's agents leave quietly: no "Error waiting on exit barrier" traceback on
        # learner 1 when learner 0's store is gone (dlaas/learner/torch_hooks.py).
        assert not [t for t in texts if "Traceback" in t], [t[-3000:] for t in texts]
