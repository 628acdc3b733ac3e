"""The launch contract: what every learner of a job is told, and how its command is started.

One module for the environment the frameworks' own launchers and rendezvous read, so that
a script written for torchrun, Kubeflow's PyTorchJob, Slurm or a TensorFlow cluster runs
on dlaas unchanged:

- torch's env:// rendezvous (`init_process_group()` with no arguments): MASTER_ADDR,
  MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK, NODE_RANK, NNODES, LOCAL_WORLD_SIZE;
- torchrun's own defaults (it reads PET_<FLAG> for each flag not given): PET_NNODES,
  PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT, PET_NPROC_PER_NODE;
- JAX's `jax.distributed.initialize()`: JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES,
  JAX_PROCESS_ID;
- TensorFlow's TF_CONFIG (framework tensorflow), a worker per learner;
- FfDL's names: LEARNER_ID (0-based, as dlaas always had), NUM_LEARNERS, TRAINING_ID,
  GPU_COUNT, JOB_ID, and the job's paths;
- the learner's GPUs in the form CUDA reads them;
- the bound on one collective operation (DLAAS_COLLECTIVE_TIMEOUT, seconds), which the
  learner images make torch's default process-group timeout (dlaas.learner.torch_hooks),
  and NCCL's error handling that enforces it (TORCH_NCCL_ASYNC_ERROR_HANDLING=1: a
  collective past the timeout ends the process instead of hanging it). A learner whose peer
  hangs fails within the bound, without `timeout=` in the job's code, and the job monitor
  names the peer that stopped answering (services/jobmonitor/gang.py).

A learner is a container; with a launcher it runs several processes (torchrun's
`--nproc_per_node`, MPI's slots). Launchers:
- `none`: the command runs as written, one process per learner (RANK = the learner);
- `torchrun`: the learner wrapper starts `torchrun` with the platform's rendezvous around
  the command's Python script (`launch_command`); torchrun sets RANK/LOCAL_RANK per process;
- `mpi`: learner 0 runs `mpirun` over ssh to the other learners (dlaas.learner.mpi).

Everything is a function of the job, the learner's index and the gang's size, so values are
right after every restart, resize and move, on every engine. Stdlib only: the learner
wrapper imports `launch_command` inside the job image (images/Dockerfile.learner).
"""

from __future__ import annotations

import json
import re

from dlaas.domain import jobspec

LAUNCHER_NONE = "none"
LAUNCHER_TORCHRUN = "torchrun"
LAUNCHER_MPI = "mpi"
LAUNCHERS = (LAUNCHER_NONE, LAUNCHER_TORCHRUN, LAUNCHER_MPI)

# The frameworks each launcher starts (a job with its own framework.image may use any).
LAUNCHER_FRAMEWORKS = {LAUNCHER_TORCHRUN: ("pytorch",), LAUNCHER_MPI: ("mpi",)}

MASTER_PORT = jobspec.MASTER_PORT  # torch's store (torchrun's static rendezvous)
JAX_PORT = MASTER_PORT + 1  # JAX's coordinator, on learner 0
TF_PORT = 2222  # each TensorFlow worker's gRPC server
SSH_PORT = 2022  # the MPI learners' sshd (images/Dockerfile.mpi)

# The collective timeout: torch's NCCL default (10 minutes), for gloo too (whose own default
# is 30); a manifest may set it between these bounds (framework.collective_timeout).
DEFAULT_COLLECTIVE_TIMEOUT_S = 600
MIN_COLLECTIVE_TIMEOUT_S = 5
MAX_COLLECTIVE_TIMEOUT_S = 86400

# Where an MPI learner finds the job's SSH key pair (a file the engine puts in the
# container before it starts: never an env value). Both engines mount it here.
SSH_KEY_FILE = "/run/secrets/dlaas-ssh-key"

# The variable a learner's GPU count sets, and the two GPU lists: the runtime's (the
# node's device indices, which nvidia-container-runtime mounts) and CUDA's (the same
# devices as the container sees them, numbered from 0).
GPU_ENV = ("GPU_COUNT", "NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")


def tf_config(num_learners: int, index: int) -> str:
    """TensorFlow's cluster spec: every learner a worker (MultiWorkerMirroredStrategy's
    shape; worker 0 is the chief)."""
    workers = [f"{jobspec.learner_alias(i)}:{TF_PORT}" for i in range(num_learners)]
    return json.dumps(
        {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}},
        separators=(",", ":"),
    )


def processes_per_learner(launcher: str, asked: int | None, gpus: int) -> int:
    """How many processes a learner runs: what the manifest asks, else one per GPU (at
    least one); always one without a launcher."""
    if launcher == LAUNCHER_NONE:
        return 1
    return asked or max(1, gpus)


def learner_env(
    job_id: str,
    index: int,
    num_learners: int,
    *,
    framework: str = "",
    launcher: str = LAUNCHER_NONE,
    processes: int = 1,
    gpus: int = 0,
    gpu_indices: tuple[int, ...] = (),
    collective_timeout_s: int = DEFAULT_COLLECTIVE_TIMEOUT_S,
) -> dict[str, str]:
    """The env learner `index` of `num_learners` gets from the platform.

    `gpu_indices` are the node's GPUs the scheduler gave this learner (empty: the engine
    picks `gpus` of them, and CUDA numbers them from 0 all the same)."""
    master = jobspec.learner_alias(0)
    env = {
        "JOB_ID": job_id,
        "TRAINING_ID": job_id,
        "LEARNER_ID": str(index),
        "NUM_LEARNERS": str(num_learners),
        # torch env://, one process per learner (torchrun overrides these per process).
        "MASTER_ADDR": master,
        "MASTER_PORT": str(MASTER_PORT),
        "WORLD_SIZE": str(num_learners),
        "RANK": str(index),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "NODE_RANK": str(index),
        "NNODES": str(num_learners),
        # torchrun's defaults for the flags not given.
        "PET_NNODES": str(num_learners),
        "PET_NODE_RANK": str(index),
        "PET_MASTER_ADDR": master,
        "PET_MASTER_PORT": str(MASTER_PORT),
        "PET_NPROC_PER_NODE": str(processes),
        # JAX
        "JAX_COORDINATOR_ADDRESS": f"{master}:{JAX_PORT}",
        "JAX_NUM_PROCESSES": str(num_learners),
        "JAX_PROCESS_ID": str(index),
        # The job's launcher, for the learner wrapper (dlaas.learner.run).
        "DLAAS_LAUNCHER": launcher,
        "DLAAS_PROCESSES_PER_LEARNER": str(processes),
        # The bound on a collective (dlaas.learner.torch_hooks), and NCCL's enforcement.
        "DLAAS_COLLECTIVE_TIMEOUT": str(collective_timeout_s),
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "GPU_COUNT": str(gpus),
        "DATA_DIR": jobspec.DATA_DIR,
        "RESULT_DIR": jobspec.RESULT_DIR,
        "CHECKPOINT_DIR": jobspec.CHECKPOINT_DIR,
        "LOG_DIR": jobspec.LOG_DIR,
    }
    if framework == "tensorflow":
        env["TF_CONFIG"] = tf_config(num_learners, index)
    if gpus:
        env["NVIDIA_VISIBLE_DEVICES"] = ",".join(map(str, gpu_indices)) if gpu_indices else "all"
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(gpus))
    else:
        # A CPU learner sees no GPU, even on a node whose runtime would offer all of them.
        env["NVIDIA_VISIBLE_DEVICES"] = "void"
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


# Every name the contract may set: a manifest's `env` may not override any of them.
RESERVED_ENV = frozenset(learner_env("j", 0, 2, framework="tensorflow", gpus=1)) | frozenset(
    GPU_ENV
)


# --- starting the command -------------------------------------------------------------

# The first Python interpreter that starts a command (at the start, or after `&&`, `||`,
# `;` or `|`; after `VAR=value` words and `exec`), with its options other than -m.
_INTERPRETER = re.compile(
    r"(?P<pre>(?:^|&&|\|\||;|\|)\s*(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*(?:exec\s+)?)"
    r"(?:\S*/)?python(?:\d+(?:\.\d+)?)?(?:\s+-(?!m\b)[A-Za-z]+)*(?=\s|$)"
)
_TORCHRUN = re.compile(r"(?:^|[\s;&|/])torchrun(?:\s|$)")


_MPIRUN = re.compile(r"(?:^|[\s;&|/])(?:mpirun|mpiexec)(?:\s|$)")


def launcher_problem(launcher: str, command: str) -> str:
    """ "" when `command` can be started by `launcher`, else what is wrong with it."""
    if launcher == LAUNCHER_NONE:
        return ""
    own, program = (_TORCHRUN, "torchrun") if launcher == LAUNCHER_TORCHRUN else (_MPIRUN, "mpirun")
    if _INTERPRETER.search(command) or own.search(command):
        return ""
    return (
        f"with launcher {launcher}, the command runs a Python script (`python train.py ...`) "
        f"or calls {program} itself"
    )


def torchrun_flags(env: dict[str, str]) -> list[str]:
    """torchrun's flags for this learner, from the contract's env: the platform's static
    rendezvous on learner 0, no restarts of its own (a failed worker ends the learner, and
    the platform restarts the whole gang from its checkpoint)."""
    return [
        "torchrun",
        f"--nnodes={env['PET_NNODES']}",
        f"--node_rank={env['PET_NODE_RANK']}",
        f"--nproc_per_node={env['PET_NPROC_PER_NODE']}",
        f"--master_addr={env['PET_MASTER_ADDR']}",
        f"--master_port={env['PET_MASTER_PORT']}",
        "--max_restarts=0",
    ]


def launch_command(command: str, env: dict[str, str]) -> str:
    """The shell command the learner wrapper runs for the job's `command`.

    With launcher torchrun, the first Python interpreter that starts a command becomes
    torchrun with the platform's flags (`python -u train.py --lr 1` ->
    `torchrun --nnodes=2 ... train.py --lr 1`; `python -m pkg.train` -> `torchrun ... -m
    pkg.train`); a command that calls torchrun itself runs as written (torchrun reads the
    PET_* variables for the flags it is not given). The rest of the command, `${DATA_DIR}`,
    quotes and `cd dir &&` included, is left to the shell exactly as written."""
    if env.get("DLAAS_LAUNCHER") != LAUNCHER_TORCHRUN or _TORCHRUN.search(command):
        return command
    flags = " ".join(torchrun_flags(env))
    return _INTERPRETER.sub(lambda m: m.group("pre") + flags, command, count=1)


def hostfile(num_learners: int, slots: int) -> str:
    """OpenMPI's hostfile: every learner with its slots."""
    return "".join(f"{jobspec.learner_alias(i)} slots={slots}\n" for i in range(num_learners))


# In the learner's container, whose /tmp is a tmpfs of its own.
MPI_HOSTFILE = "/tmp/dlaas-mpi-hostfile"  # noqa: S108
# Per-learner names that each rank's own container sets; never forwarded from learner 0.
_NOT_FORWARDED = frozenset(
    {
        "HOSTNAME",
        "HOME",
        "PWD",
        "OLDPWD",
        "SHLVL",
        "_",
        "LEARNER_ID",
        "RANK",
        "LOCAL_RANK",
        "NODE_RANK",
        "PET_NODE_RANK",
        "JAX_PROCESS_ID",
        "TF_CONFIG",
        "NVIDIA_VISIBLE_DEVICES",
        "CUDA_VISIBLE_DEVICES",
    }
)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def mpirun_flags(env: dict[str, str], cwd: str, network: str = "") -> list[str]:
    """mpirun's flags on learner 0: every learner's slots from the hostfile, ssh to the
    learners' sshd with the job's key, the job's env forwarded (ssh starts each rank in a
    fresh session), each rank in the job's working directory. Shared-memory copies go
    through a buffer (no ptrace: the containers drop that capability)."""
    learners = int(env.get("NUM_LEARNERS", "1"))
    slots = int(env.get("DLAAS_PROCESSES_PER_LEARNER", "1"))
    ssh = (
        f"-p {SSH_PORT} -i {SSH_KEY_FILE} -o StrictHostKeyChecking=no "
        "-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes"
    )
    flags = [
        "mpirun",
        f"-np {learners * slots}",
        f"--hostfile {MPI_HOSTFILE}",
        "--allow-run-as-root",
        "--bind-to none",
        f"--wdir {cwd}",
        f"--mca plm_rsh_args '{ssh}'",
        "--mca btl_vader_single_copy_mechanism none",
    ]
    if network:
        # The job network only (a swarm container also has the node's gateway bridge,
        # where the other learners are not): OpenMPI's control and data traffic both.
        flags += [f"--mca oob_tcp_if_include {network}", f"--mca btl_tcp_if_include {network}"]
    flags += [
        f"-x {name}"
        for name in sorted(env)
        if name not in _NOT_FORWARDED and _ENV_NAME.match(name) and not name.startswith("OMPI_")
    ]
    return flags


def mpi_command(command: str, env: dict[str, str], cwd: str, network: str = "") -> str:
    """Learner 0's command of an MPI job: the first Python interpreter that starts a command
    runs under mpirun (`python train.py` -> `mpirun -np 4 ... python train.py`); a command
    that calls mpirun or mpiexec itself gets the hostfile through OpenMPI's env instead."""
    if _MPIRUN.search(command):
        return command
    flags = " ".join(mpirun_flags(env, cwd, network))
    return _INTERPRETER.sub(
        lambda m: m.group("pre") + flags + " " + m.group(0)[len(m.group("pre")) :], command, count=1
    )
