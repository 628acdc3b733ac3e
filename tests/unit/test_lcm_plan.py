"""The LCM's deployment plan: names, labels, env, limits and image resolution (pure)."""

import pytest

from dlaas.domain import jobspec
from dlaas.domain import plan as plans
from dlaas.domain.errors import ImageUnavailable
from dlaas.domain.frameworks import resolve_image
from dlaas.domain.locations import S3Location
from dlaas.domain.manifest import parse_manifest
from dlaas.domain.plan import deployment_plan

MANIFEST = """
name: mnist
learners: 2
cpus: 0.5
gpus: 1
memory: 1Gb
framework: {name: python, version: "3", command: python3 train.py}
env: {EPOCHS: 3}
"""


def plan(manifest_text=MANIFEST, learners=2, nodes=None):
    m = parse_manifest(manifest_text)
    loc = S3Location("http://s3:8333", "ak", "sk", "results")
    return deployment_plan(
        platform_id="p1",
        job_id="job-1",
        user="alice",
        manifest=m,
        learners=learners,
        gpu_indices=[(0,), (1,)],
        image="dlaas/learner:latest",
        helper_image="dlaas/learner:latest",
        data=S3Location("http://s3:8333", "ak", "sk", "data"),
        results=loc,
        code=None,
        nodes=nodes,
    )


def test_plan_has_one_helper_and_every_learner_with_the_platform_env():
    p = plan()
    assert p.network == "dlaas-job-1" and p.volume == "dlaas-job-1"
    assert [c.name for c in p.containers] == [
        "dlaas-job-1-helper",
        "dlaas-job-1-learner-0",
        "dlaas-job-1-learner-1",
    ]
    second = p.learners[1]
    assert second.env["LEARNER_ID"] == "1" and second.env["NUM_LEARNERS"] == "2"
    assert second.env["MASTER_ADDR"] == "learner-0" and second.env["EPOCHS"] == "3"
    for key in ("JOB_ID", "MASTER_PORT", "DATA_DIR", "RESULT_DIR", "CHECKPOINT_DIR", "LOG_DIR"):
        assert key in second.env
    assert second.labels[jobspec.LABEL_MANAGED] == "p1"
    assert (
        second.labels[jobspec.LABEL_ROLE] == "learner"
        and second.labels[jobspec.LABEL_LEARNER] == "1"
    )
    assert second.nano_cpus == 500_000_000 and second.mem_limit_mb == 954
    assert second.gpu_indices == (1,) and second.gpus == 1
    assert second.command[-1] == "python3 train.py"


def test_helper_gets_the_store_locations_and_no_limits():
    h = plan().helper
    assert h.env["DLAAS_DATA_BUCKET"] == "data" and h.env["DLAAS_RESULTS_BUCKET"] == "results"
    assert h.env["DLAAS_CODE_KEY"] == "" and h.labels[jobspec.LABEL_ROLE] == "helper"


def test_elastic_job_started_smaller_gets_the_smaller_count():
    p = plan(MANIFEST.replace("learners: 2", "learners: 2\nmin_learners: 1"), learners=1)
    assert len(p.learners) == 1 and p.learners[0].env["NUM_LEARNERS"] == "1"


def test_unknown_framework_without_image_is_refused_with_the_field():
    m = parse_manifest(MANIFEST.replace("name: python", "name: caffe"))
    with pytest.raises(ImageUnavailable, match="framework.name"):
        resolve_image(m, "dlaas/learner:latest")


def test_explicit_image_wins():
    m = parse_manifest(MANIFEST.replace("command:", "image: my/img:1, command:"))
    assert resolve_image(m, "dlaas/learner:latest") == "my/img:1"


def test_a_gang_on_one_node_has_one_helper_with_the_usual_env():
    p = plan(nodes=["n1", "n1"])
    assert [c.name for c in p.helpers] == ["dlaas-job-1-helper"]
    assert jobspec.ENV_HELPER_LEARNERS not in p.helper.env
    assert {c.node for c in p.containers} == {"n1"}


def test_a_gang_spanning_nodes_has_a_helper_per_node_and_the_first_is_learner_0s():
    p = plan(manifest_text=MANIFEST.replace("learners: 2", "learners: 3"), learners=3,
             nodes=["n2", "n1", "n2"])  # fmt: skip
    assert [(c.name, c.node) for c in p.helpers] == [
        ("dlaas-job-1-helper", "n2"),
        ("dlaas-job-1-helper-1", "n1"),
    ]
    first, other = p.helpers
    assert first.env[jobspec.ENV_HELPER_LEARNERS] == "0,2"
    assert first.env[jobspec.ENV_HELPER_PRIMARY] == "1" and first.aliases == ("helper",)
    assert other.env[jobspec.ENV_HELPER_LEARNERS] == "1"
    assert other.env[jobspec.ENV_HELPER_PRIMARY] == "0" and other.aliases == ()
    assert [c.node for c in p.learners] == ["n2", "n1", "n2"]
    # Every learner still finds learner 0 by its alias on the job's network.
    assert {c.env["MASTER_ADDR"] for c in p.learners} == {"learner-0"}


def test_the_helper_is_told_when_its_store_is_the_jobs_own_and_which_field_named_it():
    own = plan().helper  # results in the user's own store (S3Location.platform False)
    assert own.env[jobspec.ENV_STORE_FIELD] == "data_stores[0].connection.auth_url"
    m = parse_manifest(MANIFEST)
    ours = S3Location("http://s3:8333", "ak", "sk", "results", platform=True)
    platform = deployment_plan(
        platform_id="p1",
        job_id="job-1",
        user="alice",
        manifest=m,
        learners=1,
        gpu_indices=[(0,)],
        image="dlaas/learner:latest",
        helper_image="dlaas/learner:latest",
        data=None,
        results=ours,
        code=None,
    ).helper
    assert platform.env[jobspec.ENV_STORE_FIELD] == ""


@pytest.mark.parametrize("cpus", [0.01, 0.5, 1, 4, 1024])
def test_a_cpu_limit_holds_over_a_second_so_a_learner_behind_its_gang_can_catch_up(cpus):
    # Docker's nano_cpus enforces over 100 ms: a gang of 0.5-CPU learners waited at every
    # step for the one that had used its 50 ms. Over 1 s the same share, in bursts.
    period, quota = plans.cfs_limit(int(cpus * 1e9))
    assert period == 1_000_000
    assert quota / period == pytest.approx(cpus)
    assert quota >= 1_000  # the kernel's least quota, even at the manifest's least cpus
