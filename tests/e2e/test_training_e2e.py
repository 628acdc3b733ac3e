"""End to end, the training people write when it goes wrong, and FfDL's own examples:
submitted over REST to a platform brought up for this module (`dlaas.local.platform.up`, the
machine's Docker engine), in the framework images (`dlaas images build`). A torchrun worker
that dies ends the gang naming its learner; a learner that hangs ends it within the
collective timeout; FfDL's examples run with their own code.

The examples' own jobs (DDP, torchrun, mpi4py, Keras: COMPLETED, every worker with the same
weights) run once, as examples/README.md tells users to run them: tests/e2e/test_docs_commands.py.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import test_platform_e2e as platform_e2e
from test_platform_e2e import logs, submit, wait_cleaned, wait_final

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

REPO = Path(__file__).resolve().parents[2]

# The platform of this module, brought up as test_platform_e2e brings up its own.
home = platform_e2e.home
live = platform_e2e.live


DIES = """\
import os, sys, time
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 3:
    print("rank 3: giving up", flush=True)
    sys.exit(7)
dist.barrier()  # the others wait here for a rank that is gone
print("never", flush=True)
"""


@pytest.mark.timeout(900)
def test_a_torchrun_worker_that_dies_ends_the_gang_naming_its_learner(
    live, pytorch_image, tmp_path
):
    http, _, docker_client = live
    (tmp_path / "dies.py").write_text(DIES)
    manifest = (
        "name: dies\nlearners: 2\ncpus: 0.5\nmemory: 1GiB\n"
        "framework: {name: pytorch, command: python dies.py, launcher: torchrun, "
        "processes_per_learner: 2}\n"
    )
    job_id = submit(http, manifest, tmp_path)
    job = wait_final(http, job_id, timeout=300)
    assert job["status"] == "FAILED", job["history"]
    reason = job["history"][-1]["reason"]
    assert "learner 1" in reason, reason  # rank 3 is learner 1's second process
    wait_cleaned(docker_client, job_id)


HANGS = """\
import sys, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")  # no timeout=: the platform's applies
rank = dist.get_rank()
for epoch in (1, 2):
    dist.all_reduce(torch.ones(4))
    print(f"rank {rank} epoch {epoch}", flush=True)
if rank == 1:
    print("rank 1: stuck", flush=True)  # a deadlock, a stuck read, a frozen device
    time.sleep(3600)
print(f"rank {rank} blocked_at={time.time():.3f}", flush=True)
dist.all_reduce(torch.ones(4))  # waits for rank 1
print("never", flush=True)
"""
# Waited out whole by the test: short, yet above the skew of two workers' first collectives
# (they start together after torchrun's rendezvous), loaded machine included.
COLLECTIVE_TIMEOUT_S = 10


@pytest.mark.timeout(900)
def test_a_hung_learner_ends_the_gang_within_the_collective_timeout_naming_it(
    live, pytorch_image, tmp_path
):
    """Learner 1 hangs outside any collective; learner 0 waits for it in an all_reduce.
    The platform's collective timeout (the job's code passes none) ends learner 0's wait,
    the gang ends within the timeout and a few seconds, and the reason names learner 1."""
    http, _, docker_client = live
    (tmp_path / "hangs.py").write_text(HANGS)
    manifest = (
        "name: hangs\nlearners: 2\ncpus: 0.5\nmemory: 1GiB\n"
        "framework: {name: pytorch, command: python hangs.py, launcher: torchrun, "
        f"collective_timeout: {COLLECTIVE_TIMEOUT_S}}}\n"
    )
    job_id = submit(http, manifest, tmp_path)
    job = wait_final(http, job_id, timeout=300)
    assert job["status"] == "FAILED", job["history"]
    text = "\n".join(logs(http, job_id, 0))
    blocked = float(re.search(r"rank 0 blocked_at=([0-9.]+)", text).group(1))
    ended = job["history"][-1]
    reason = ended["reason"]
    assert reason.startswith("learner 1 stopped answering the gang's collectives"), reason
    assert (
        "collective_timeout" in reason
        and f"Timed out waiting {COLLECTIVE_TIMEOUT_S * 1000}ms" in reason
    ), reason
    took = ended["at"] - blocked
    print(f"blocked -> {ended['status']} in {took:.1f} s (timeout {COLLECTIVE_TIMEOUT_S} s)")
    assert COLLECTIVE_TIMEOUT_S <= took < COLLECTIVE_TIMEOUT_S + 12, job["history"]
    wait_cleaned(docker_client, job_id)


FFDL = REPO / "tests" / "fixtures" / "ffdl"


@pytest.mark.timeout(1200)
@pytest.mark.parametrize(
    ("name", "buckets", "image_fixture"),
    [
        ("pytorch-model", ["tf_training_data"], "pytorch_image"),
        ("pytorch-launch-dist", ["tf_training_data"], "pytorch_image"),
        ("keras-test", ["dlaas-ci-keras-training-data"], "tensorflow_image"),
    ],
)
def test_ffdls_own_examples_run_with_their_own_code(live, request, name, buckets, image_fixture):
    """FfDL's pytorch-model, keras-test and pytorch-launch-dist in their shapes (fixtures
    written by us: their manifests' fields, '_' bucket names, their commands and scripts),
    changed only as the docs say (no connection block: the platform's own store)."""
    request.getfixturevalue(image_fixture)
    http, _, docker_client = live
    spec = importlib.util.spec_from_file_location("prepare", REPO / "examples/digits/prepare.py")
    prepare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prepare)
    for bucket in buckets:  # FfDL's names, '_' and all, as a user uploads to them
        reply = http.put(f"/v1/data/{bucket}/digits.npz", content=prepare.digits_npz())
        assert reply.status_code == 200, reply.text
    job_id = submit(http, (FFDL / name / "manifest.yml").read_text(), FFDL / name)
    job = wait_final(http, job_id, timeout=600)
    learners = len(job["learners"]) or 1
    texts = ["\n".join(logs(http, job_id, i)) for i in range(learners)]
    assert job["status"] == "COMPLETED", ([(h["status"], h["reason"]) for h in job["history"]],
                                          [t[-2500:] for t in texts])  # fmt: skip
    wait_cleaned(docker_client, job_id)
