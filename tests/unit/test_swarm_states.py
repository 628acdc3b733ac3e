"""How a Swarm task's state reads as a container's (dlaas/adapters/engines/swarm_spec.py, pure)."""

from dlaas.adapters.engines.swarm_spec import container_of

SERVICE = {"ID": "s1", "Spec": {"Name": "dlaas-j-learner-0", "Mode": {"Replicated": {"Replicas": 1}},
           "Labels": {"dlaas.job": "j", "dlaas.role": "learner", "dlaas.learner": "0"}}}  # fmt: skip


def task(state, **status):
    return {"ID": "t1", "Status": {"State": state, **status}}


def test_a_completed_task_exited_with_its_code_and_a_failed_one_with_its_own():
    done = container_of(SERVICE, task("complete", ContainerStatus={"ExitCode": 0}), "n1")
    assert (done.state, done.exit_code, done.learner, done.node) == ("exited", 0, 0, "n1")
    failed = container_of(SERVICE, task("failed", ContainerStatus={"ExitCode": 3}), "n1")
    assert (failed.state, failed.exit_code) == ("exited", 3)


def test_an_orphaned_task_is_unknown_never_a_clean_exit():
    # What a manager restart showed: an orphaned task with the default exit code 0 while its
    # container still ran; read as "dead, 0" it completed a job at epoch 0.
    lost = container_of(SERVICE, task("orphaned", ContainerStatus={"ExitCode": 0}), "n1")
    assert lost.state == "unknown" and lost.exit_code is None and not lost.exited


def test_a_task_refused_for_the_jobs_image_is_the_jobs_failure():
    err = "No such image: mine:latest"
    rejected = container_of(SERVICE, task("rejected", Err=err, ContainerStatus={"ExitCode": 0}),
                            "n1")  # fmt: skip
    assert (rejected.state, rejected.exit_code) == ("dead", 125)


def test_a_task_that_ended_with_no_exit_code_went_with_its_engine():
    # What a restart of the manager's dockerd showed: the node's tasks ended with no container
    # exit code; read as 125 the job FAILED for the platform's trouble.
    for state in ("failed", "shutdown", "rejected"):
        gone = container_of(SERVICE, task(state, Err="task: non-zero exit"), "n1")
        assert gone.exited and gone.exit_code == 255, state


def test_a_service_scaled_to_0_whose_task_is_gone_reads_as_stopped():
    stopped = {**SERVICE, "Spec": {**SERVICE["Spec"], "Mode": {"Replicated": {"Replicas": 0}}}}
    gone = container_of(stopped, None, "n1")
    assert (gone.state, gone.exit_code) == ("exited", 143)
    assert container_of(SERVICE, None, "n1").state == "created"  # not scheduled yet


def test_a_task_whose_container_failed_to_start_went_with_its_engine():
    # Chaos on the swarm, seed 1: a job deployed 1.5 s before the manager's dockerd was killed
    # (its learners on that node); both tasks failed with Docker's start-failure code 128 and
    # the job FAILED as "learner 0 exited with code 128", its program never having run.
    for err in (
        "starting container failed: failed to set up container networking: endpoint join failed",
        "starting container failed: network dlaas-job-x not found",
    ):
        gone = container_of(SERVICE, task("failed", Err=err, ContainerStatus={"ExitCode": 128}),
                            "n1")  # fmt: skip
        assert gone.exited and gone.exit_code == 255, err
    # The job's own: a program that exits 128, a command its image does not have.
    own = task("failed", Err="task: non-zero exit (128)", ContainerStatus={"ExitCode": 128})
    assert container_of(SERVICE, own, "n1").exit_code == 128
    missing = task("failed", ContainerStatus={"ExitCode": 127},
                   Err='starting container failed: exec: "python9": executable file not found')  # fmt: skip
    assert container_of(SERVICE, missing, "n1").exit_code == 127
