"""The launch contract (dlaas.domain.launch): every framework's env, the launchers' commands,
the manifest's launcher fields, and how GPUs and MPI keys reach the containers' specs of
both engines (pure: plans and specs, no engine)."""

from __future__ import annotations

import io
import json
import tarfile

import pytest
from cryptography.hazmat.primitives import serialization

from dlaas.adapters.engines.docker_engine import Deployer
from dlaas.adapters.engines.secret_files import secret_files_tar
from dlaas.adapters.engines.swarm_spec import file_secret_name, service_spec
from dlaas.domain import launch
from dlaas.domain.errors import InvalidManifest
from dlaas.domain.job_keys import ssh_private_key
from dlaas.domain.locations import S3Location
from dlaas.domain.manifest import RESERVED_ENV, parse_manifest
from dlaas.domain.plan import deployment_plan


def manifest(framework: str = "name: pytorch, command: python train.py", **top) -> str:
    extra = "".join(f"{k}: {v}\n" for k, v in top.items())
    return f"name: j\nlearners: 2\n{extra}framework: {{{framework}}}\n"


def plan(text: str, gpu_indices=((0, 1), (2, 3)), ssh_key: bytes = b""):
    loc = S3Location("http://s3:8333", "ak", "sk", "results")
    return deployment_plan(
        platform_id="p1",
        job_id="job-1",
        user="alice",
        manifest=parse_manifest(text),
        learners=2,
        gpu_indices=[tuple(g) for g in gpu_indices],
        image="dlaas/learner-pytorch:2.13",
        helper_image="dlaas/learner:latest",
        data=None,
        results=loc,
        code=None,
        nodes=["node-1", "node-2"],
        ssh_key=ssh_key,
    )


# --------------------------------------------------------------------------- the env


def test_every_learner_gets_torch_torchrun_jax_and_ffdl_names():
    env = launch.learner_env("job-1", 1, 3, launcher="torchrun", processes=2)
    assert {k: env[k] for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")} == {
        "MASTER_ADDR": "learner-0",
        "MASTER_PORT": "29500",
        "WORLD_SIZE": "3",
        "RANK": "1",
    }
    assert env["LOCAL_RANK"] == "0" and env["NODE_RANK"] == "1" and env["NNODES"] == "3"
    assert env["PET_NNODES"] == "3" and env["PET_NODE_RANK"] == "1"
    assert env["PET_MASTER_ADDR"] == "learner-0" and env["PET_MASTER_PORT"] == "29500"
    assert env["PET_NPROC_PER_NODE"] == "2"
    assert env["JAX_COORDINATOR_ADDRESS"] == "learner-0:29501"
    assert env["JAX_NUM_PROCESSES"] == "3" and env["JAX_PROCESS_ID"] == "1"
    assert env["LEARNER_ID"] == "1" and env["NUM_LEARNERS"] == "3"
    assert env["TRAINING_ID"] == env["JOB_ID"] == "job-1"
    assert env["GPU_COUNT"] == "0" and "TF_CONFIG" not in env


def test_a_tensorflow_learner_gets_tf_config_with_every_learner_a_worker():
    env = launch.learner_env("job-1", 1, 2, framework="tensorflow")
    assert json.loads(env["TF_CONFIG"]) == {
        "cluster": {"worker": ["learner-0:2222", "learner-1:2222"]},
        "task": {"type": "worker", "index": 1},
    }


def test_gpus_reach_the_learner_as_the_runtime_and_cuda_read_them():
    env = launch.learner_env("job-1", 0, 1, gpus=2, gpu_indices=(2, 3))
    # The runtime mounts the node's devices 2 and 3; CUDA numbers them 0 and 1 inside.
    assert env["NVIDIA_VISIBLE_DEVICES"] == "2,3"
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert env["GPU_COUNT"] == "2"
    cpu = launch.learner_env("job-1", 0, 1)
    assert cpu["NVIDIA_VISIBLE_DEVICES"] == "void" and cpu["CUDA_VISIBLE_DEVICES"] == ""


@pytest.mark.parametrize("name", ["RANK", "WORLD_SIZE", "PET_NNODES", "TF_CONFIG",
                                  "CUDA_VISIBLE_DEVICES", "TRAINING_ID", "JAX_PROCESS_ID"])  # fmt: skip
def test_a_manifest_env_naming_a_reserved_variable_is_refused_naming_it(name):
    assert name in RESERVED_ENV
    with pytest.raises(InvalidManifest) as info:
        parse_manifest(manifest() + f"env: {{{name}: '1'}}\n")
    assert info.value.problems == [f"env: {name} is set by the platform and cannot be overridden"]


# --------------------------------------------------------------------------- torchrun


TORCHRUN_ENV = launch.learner_env("job-1", 1, 2, launcher="torchrun", processes=2)
FLAGS = (
    "torchrun --nnodes=2 --node_rank=1 --nproc_per_node=2 --master_addr=learner-0 "
    "--master_port=29500 --max_restarts=0"
)


@pytest.mark.parametrize(
    ("command", "started"),
    [
        ("python train.py --data ${DATA_DIR}", f"{FLAGS} train.py --data ${{DATA_DIR}}"),
        ("python3 -u train.py", f"{FLAGS} train.py"),
        ('cd src && python -m pkg.train --x "a b"', f'cd src && {FLAGS} -m pkg.train --x "a b"'),
        ("OMP_NUM_THREADS=1 python t.py", f"OMP_NUM_THREADS=1 {FLAGS} t.py"),
        ("/usr/bin/python3.11 t.py; echo done", f"{FLAGS} t.py; echo done"),
        ("pip install x && python t.py", f"pip install x && {FLAGS} t.py"),
        # A command that calls torchrun itself: as written (it reads the PET_* defaults).
        ("torchrun --nproc_per_node 4 t.py", "torchrun --nproc_per_node 4 t.py"),
    ],
)
def test_torchrun_starts_the_first_python_script_with_the_platforms_rendezvous(command, started):
    assert launch.launch_command(command, TORCHRUN_ENV) == started


def test_without_a_launcher_the_command_runs_as_written():
    env = launch.learner_env("job-1", 0, 2)
    assert launch.launch_command("python train.py", env) == "python train.py"


def test_a_torchrun_job_asking_more_processes_than_gpus_is_refused_naming_the_field():
    text = manifest("name: pytorch, command: python t.py, launcher: torchrun, "
                    "processes_per_learner: 4", gpus=2)  # fmt: skip
    with pytest.raises(InvalidManifest) as info:
        parse_manifest(text)
    (problem,) = info.value.problems
    assert "framework.processes_per_learner: 4 torchrun processes" in problem
    assert "each learner has 2 (gpus)" in problem


@pytest.mark.parametrize(
    ("framework", "expected"),
    [
        ("name: tensorflow, command: python t.py, launcher: torchrun",
         "framework: launcher: torchrun cannot run framework 'tensorflow'"),
        ("name: pytorch, command: python t.py, launcher: mpi",
         "framework: launcher: mpi cannot run framework 'pytorch'"),
        ("name: pytorch, command: python t.py, launcher: slurm",
         "framework.launcher: unknown launcher 'slurm'; use one of: none, torchrun, mpi"),
        ("name: pytorch, command: sh run.sh, launcher: torchrun",
         "framework: command: with launcher torchrun, the command runs a Python script"),
        ("name: pytorch, command: python t.py, processes_per_learner: 2",
         "framework: processes_per_learner: needs a launcher"),
    ],
)  # fmt: skip
def test_a_launcher_the_framework_cannot_run_is_refused_naming_the_field(framework, expected):
    with pytest.raises(InvalidManifest) as info:
        parse_manifest(manifest(framework))
    assert info.value.problems[0].startswith(expected), info.value.problems


def test_a_job_of_its_own_image_may_use_any_launcher():
    m = parse_manifest(
        manifest("name: custom, image: me/mpi:1, command: python t.py, launcher: mpi")
    )
    assert m.framework.launcher == "mpi"


def test_processes_default_to_the_learners_gpus_or_one():
    p = plan(manifest("name: pytorch, command: python t.py, launcher: torchrun", gpus=2))
    assert p.learners[0].env["PET_NPROC_PER_NODE"] == "2"
    p = plan(manifest("name: pytorch, command: python t.py, launcher: torchrun"), ((), ()))
    assert p.learners[0].env["PET_NPROC_PER_NODE"] == "1"


# --------------------------------------------------------------------------- GPUs in the specs


def test_a_two_gpu_two_learner_job_gets_its_gpus_on_both_engines():
    p = plan(manifest("name: pytorch, command: python t.py, launcher: torchrun", gpus=2))
    first, second = p.learners
    assert (first.gpu_indices, second.gpu_indices) == ((0, 1), (2, 3))
    assert second.env["NVIDIA_VISIBLE_DEVICES"] == "2,3"
    assert second.env["CUDA_VISIBLE_DEVICES"] == "0,1"
    # Docker: a device request for exactly the scheduler's devices.
    (request,) = Deployer._gpus(second)
    assert request["DeviceIDs"] == ["2", "3"] and request["Capabilities"] == [["gpu"]]
    # Swarm: a generic-resource reservation of 2 GPUs, and the same env.
    body = service_spec(second, p, "node-id-2", None)
    reservation = body["TaskTemplate"]["Resources"]["Reservations"]["GenericResources"]
    assert reservation == [{"DiscreteResourceSpec": {"Kind": "gpu", "Value": 2}}]
    env = body["TaskTemplate"]["ContainerSpec"]["Env"]
    assert "NVIDIA_VISIBLE_DEVICES=2,3" in env and "CUDA_VISIBLE_DEVICES=0,1" in env
    assert "LOCAL_RANK=0" in env and "PET_NPROC_PER_NODE=2" in env


def test_a_cpu_job_requests_no_gpu_and_sees_none():
    p = plan(manifest(), ((), ()))
    assert Deployer._gpus(p.learners[0]) is None
    assert p.learners[0].env["NVIDIA_VISIBLE_DEVICES"] == "void"


# --------------------------------------------------------------------------- MPI


def test_learner_zero_of_an_mpi_job_runs_the_command_under_mpirun_over_every_slot():
    env = launch.learner_env("job-1", 0, 2, launcher="mpi", processes=2)
    command = launch.mpi_command("python train.py --epochs 3", env, "/job/code")
    assert command.startswith("mpirun -np 4 --hostfile /tmp/dlaas-mpi-hostfile ")
    assert command.endswith(" python train.py --epochs 3")
    assert "-p 2022 -i /run/secrets/dlaas-ssh-key" in command and "--wdir /job/code" in command
    assert "-x DATA_DIR" in command and "-x RANK" not in command and "-x LEARNER_ID" not in command
    assert launch.hostfile(2, 2) == "learner-0 slots=2\nlearner-1 slots=2\n"
    # A command that calls mpirun itself is left as written.
    assert launch.mpi_command("mpirun -np 2 python t.py", env, "/job") == "mpirun -np 2 python t.py"


def test_mpi_learners_get_the_jobs_key_as_a_file_and_only_sshds_capabilities():
    key = ssh_private_key(b"platform-secret", "job-1")
    p = plan(manifest("name: mpi, command: python t.py, launcher: mpi"), ((), ()), ssh_key=key)
    for learner in p.learners:
        assert learner.files == ((launch.SSH_KEY_FILE, key),)
        assert learner.cap_add == ("SETUID", "SETGID", "SYS_CHROOT")
        assert key.decode() not in json.dumps(learner.env)  # never an env value
    assert p.helper.files == () and p.helper.cap_add == ()
    # Docker: a tar unpacked at / before the start, the key 0400.
    with tarfile.open(fileobj=io.BytesIO(secret_files_tar(p.learners[0].files))) as tar:
        member = tar.getmember("run/secrets/dlaas-ssh-key")
        assert member.mode == 0o400 and tar.extractfile(member).read() == key
    # Swarm: a secret mounted at the same path, not in the service's env.
    made = {file_secret_name(p, key): {"ID": "s1", "Spec": {"Name": "n"}}}
    body = service_spec(p.learners[1], p, "node-id", None, made)
    container = body["TaskTemplate"]["ContainerSpec"]
    assert container["Secrets"][0]["File"] == {"Name": "dlaas-ssh-key", "UID": "0", "GID": "0",
                                               "Mode": 0o400}  # fmt: skip
    assert container["CapabilityAdd"] == ["SETUID", "SETGID", "SYS_CHROOT"]
    assert key.decode() not in json.dumps(body)


def test_the_jobs_ssh_key_is_its_own_and_the_same_on_every_replica():
    def public_half(key: bytes) -> bytes:
        loaded = serialization.load_ssh_private_key(key, password=None)
        return loaded.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )

    one = ssh_private_key(b"secret", "job-1")
    assert one.startswith(b"-----BEGIN OPENSSH PRIVATE KEY-----")
    assert public_half(one) == public_half(ssh_private_key(b"secret", "job-1"))
    assert public_half(one) != public_half(ssh_private_key(b"secret", "job-2"))
    assert public_half(one) != public_half(ssh_private_key(b"other", "job-1"))


def test_the_env_follows_the_gang_after_a_resize_or_a_move():
    text = manifest("name: pytorch, command: python t.py, launcher: torchrun",
                    min_learners=1, max_learners=4)  # fmt: skip
    loc = S3Location("http://s3:8333", "ak", "sk", "results")

    def deployed(learners: int, nodes: list[str]):
        return deployment_plan(platform_id="p1", job_id="job-1", user="alice",
                               manifest=parse_manifest(text), learners=learners,
                               gpu_indices=[() for _ in nodes], image="i", helper_image="h",
                               data=None, results=loc, code=None, nodes=nodes)  # fmt: skip

    for learners, nodes in ((3, ["a", "b", "a"]), (1, ["c"])):
        for i, spec in enumerate(deployed(learners, nodes).learners):
            env = spec.env
            assert (env["WORLD_SIZE"], env["PET_NNODES"], env["NUM_LEARNERS"]) == (
                str(learners),
            ) * 3
            assert env["RANK"] == env["PET_NODE_RANK"] == env["LEARNER_ID"] == str(i)
            assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "learner-0"


def test_every_learner_gets_the_collective_timeout_and_nccls_error_handling():
    default = plan(manifest()).learners
    assert {s.env["DLAAS_COLLECTIVE_TIMEOUT"] for s in default} == {"600"}
    assert {s.env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] for s in default} == {"1"}
    short = plan(manifest("name: pytorch, command: python t.py, collective_timeout: 90s"))
    assert [s.env["DLAAS_COLLECTIVE_TIMEOUT"] for s in short.learners] == ["90", "90"]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("2", "greater than or equal to 5"),
        ("2d", "less than or equal to 86400"),
        ("soon", "is not a duration"),
        ("yes", "must be seconds or a duration"),
    ],
)
def test_a_bad_collective_timeout_is_refused_naming_the_field(value, says):
    text = manifest(f"name: pytorch, command: python t.py, collective_timeout: {value}")
    with pytest.raises(InvalidManifest, match=f"framework.collective_timeout: .*{says}"):
        parse_manifest(text)


def test_the_collective_timeout_is_the_platforms_to_set_not_an_env_entry():
    for name in ("DLAAS_COLLECTIVE_TIMEOUT", "TORCH_NCCL_ASYNC_ERROR_HANDLING"):
        with pytest.raises(InvalidManifest, match=f"env: {name} is set by the platform"):
            parse_manifest(manifest(env={name: "5"}))
