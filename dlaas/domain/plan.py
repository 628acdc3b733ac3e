"""What a job's deployment looks like: the desired network, volume and containers.

Pure logic. `deployment_plan()` turns a manifest plus its placement into plain container
specs; the Docker adapter (deployer.py) makes the world match them idempotently.

Every container runs the job's code, which the platform treats as hostile, so each spec
carries limits beyond the manifest's CPUs and memory: a process count, a size-bounded
/tmp and a bound on its writable layer (where the engine can enforce one). What holds
for every container alike (all capabilities dropped, no-new-privileges, the job volume
as the only mount) is the deployer's, not a setting.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dlaas.domain import jobspec, launch
from dlaas.domain.frameworks import FRAMEWORK_ALIASES
from dlaas.domain.locations import S3Location
from dlaas.domain.manifest import Manifest

# Processes per container: a fork bomb stops here, not at the node's pid table. Learners
# get room for data-loader workers and their threads; the helper runs a few threads.
LEARNER_PIDS_LIMIT = 4096
HELPER_PIDS_LIMIT = 512
# The helper is the platform's own code, but it runs in the job's network next to the
# job's code and unpacks the job's archive: it is bounded too. Measured with the digits
# example: its peak is far below this (see the README's isolation section).
HELPER_NANO_CPUS = 1_000_000_000
HELPER_MEMORY_MB = 512
# /tmp is a tmpfs of this size (its pages count against the container's memory limit).
# The helper downloads the code archive there: this must exceed the API's
# max_code_archive_mb (64 MiB by default).
LEARNER_TMP_MB = 1024
HELPER_TMP_MB = 256
# The writable layer, where the engine's storage driver can bound it (overlay2 only on
# xfs with pquota; the deployer probes and otherwise leaves it unbounded). A learner's is
# its manifest's `disk` (else the platform's default); the job monitor enforces it on
# every engine (services/jobmonitor/disk.py), and each helper the job volume's share.
LEARNER_DISK_MB = 10240
HELPER_DISK_MB = 1024
MPI_CAPABILITIES = ("SETUID", "SETGID", "SYS_CHROOT")
# The CFS period a container's CPU limit is enforced over, where the engine lets us choose
# (the docker backend; a swarm service's limit is always over Docker's 100 ms). Over 100 ms
# a learner at 0.5 CPU that has used its 50 ms waits out the period even on an idle CPU,
# and a data-parallel gang waits for its slowest member at every step. Over 1 s (the
# kernel's longest period) the learner that is behind runs on while its peers wait in the
# all-reduce, and is still held to its `cpus` over every second; under contention the
# CPU is shared by weight as before. 4 learners at 0.5 CPU on 2 cores, back to back: 400
# of 4,871 periods throttled (6.3 s) and a ratio to bare of 1.251 over 100 ms, 18 of 467
# (0.78 s) and 1.136 over 1 s (docs/benchmarks.md "Training overhead").
CFS_PERIOD_US = 1_000_000
CFS_MIN_QUOTA_US = 1_000  # the kernel's least


def cfs_limit(nano_cpus: int) -> tuple[int, int]:
    """(period, quota) in microseconds for a limit of nano_cpus / 1e9 CPUs."""
    return CFS_PERIOD_US, max(CFS_MIN_QUOTA_US, nano_cpus * CFS_PERIOD_US // 1_000_000_000)


@dataclass(frozen=True)
class ContainerSpec:
    name: str
    role: str
    image: str
    command: list[str]
    env: dict[str, str]
    labels: dict[str, str]
    nano_cpus: int = 0
    cpu_shares: int = 0  # 0: Docker's default weight
    mem_limit_mb: int = 0
    gpu_indices: tuple[int, ...] = ()
    gpus: int = 0
    aliases: tuple[str, ...] = ()
    learner: int | None = None
    pids_limit: int = LEARNER_PIDS_LIMIT
    tmp_mb: int = LEARNER_TMP_MB  # size of the /tmp tmpfs
    disk_mb: int = LEARNER_DISK_MB  # writable layer, where the engine can bound it
    # Capabilities added back after dropping all: none is needed by the helper, the learner
    # wrapper or the examples (they run as root in files root owns).
    cap_add: tuple[str, ...] = ()
    # The node the container runs on ("": the engine's only node). An engine that spans
    # nodes (Swarm) pins the container there; a single engine ignores it.
    node: str = ""
    # Secret files the engine puts in the container before it starts, as (absolute path,
    # content) with mode 0400: never an env value, never in the spec an engine shows.
    files: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True)
class DeploymentPlan:
    job_id: str
    network: str
    volume: str
    bridge: str  # the network's host interface (jobspec.bridge_name): the firewall's handle
    labels: dict[str, str]
    helper: ContainerSpec  # the job's helper, on learner 0's node
    learners: list[ContainerSpec] = field(default_factory=list)
    # A gang spanning nodes has a helper on each other node too: it stages the data and
    # code into that node's job volume and stores its learners' logs and results.
    node_helpers: list[ContainerSpec] = field(default_factory=list)

    @property
    def helpers(self) -> list[ContainerSpec]:
        return [self.helper, *self.node_helpers]

    @property
    def containers(self) -> list[ContainerSpec]:
        return [*self.helpers, *self.learners]


def job_labels(platform_id: str, job_id: str, user: str) -> dict[str, str]:
    return {jobspec.LABEL_MANAGED: platform_id, jobspec.LABEL_JOB: job_id, jobspec.LABEL_USER: user}


def deployment_plan(
    *,
    platform_id: str,
    job_id: str,
    user: str,
    manifest: Manifest,
    learners: int,
    gpu_indices: list[tuple[int, ...]],
    image: str,
    helper_image: str,
    data: S3Location | None,
    results: S3Location,
    code: S3Location | None,
    nodes: list[str] | None = None,
    ssh_key: bytes = b"",
    learner_disk_mb: int = LEARNER_DISK_MB,
) -> DeploymentPlan:
    """The containers of one job: a helper and `learners` learners, with limits and env.

    `nodes[i]` is learner i's node (None: one engine, nothing pinned). A gang on several
    nodes gets a helper per node: learner 0's node has the job's helper (it alone mirrors
    the checkpoints to S3 and prints the events the monitor follows); the helper of each
    other node stages data, code and checkpoints for its learners and stores their logs and
    results. The job volume is per node: its helper bounds it to the disk size of the
    learners on that node (`jobspec.ENV_VOLUME_LIMIT_MB`).
    """
    disk_mb = manifest.disk_mb or learner_disk_mb
    labels = job_labels(platform_id, job_id, user)
    nodes = list(nodes) if nodes else [""] * learners
    helper_env = {
        "JOB_ID": job_id,
        "NUM_LEARNERS": str(learners),
        "DLAAS_S3_ENDPOINT": results.endpoint,
        "AWS_ACCESS_KEY_ID": results.access_key,
        "AWS_SECRET_ACCESS_KEY": results.secret_key,
        "DLAAS_DATA_BUCKET": data.bucket if data else "",
        "DLAAS_DATA_PREFIX": data.prefix if data else "",
        "DLAAS_RESULTS_BUCKET": results.bucket,
        "DLAAS_CODE_BUCKET": code.bucket if code else "",
        "DLAAS_CODE_KEY": code.prefix if code else "",
        jobspec.ENV_CHECKPOINT_PREFIX: jobspec.checkpoint_prefix(job_id),
        jobspec.ENV_CHECKPOINT_INTERVAL: str(manifest.checkpoint.interval_s),
        jobspec.ENV_STORE_FIELD: "" if results.platform else jobspec.STORE_ENDPOINT_FIELD,
    }
    if code is not None and code.endpoint != results.endpoint:
        # The code archive is in the platform's S3 while data/results are elsewhere.
        helper_env.update(
            DLAAS_CODE_ENDPOINT=code.endpoint,
            DLAAS_CODE_ACCESS_KEY=code.access_key,
            DLAAS_CODE_SECRET_KEY=code.secret_key,
        )
    # Learner 0's node first: its helper is the job's helper.
    spanned = list(dict.fromkeys(nodes))
    helpers = []
    for k, node in enumerate(spanned):
        env = dict(helper_env)
        env[jobspec.ENV_VOLUME_LIMIT_MB] = str(disk_mb * nodes.count(node))
        if len(spanned) > 1:
            env[jobspec.ENV_HELPER_LEARNERS] = ",".join(
                str(i) for i, n in enumerate(nodes) if n == node
            )
            env[jobspec.ENV_HELPER_PRIMARY] = "1" if k == 0 else "0"
        helpers.append(
            ContainerSpec(
                name=jobspec.helper_name(job_id) + (f"-{k}" if k else ""),
                role=jobspec.ROLE_HELPER,
                image=helper_image,
                command=["python3", "-m", "services.learner_helper"],
                env=env,
                labels={**labels, jobspec.LABEL_ROLE: jobspec.ROLE_HELPER},
                aliases=("helper",) if k == 0 else (),
                nano_cpus=HELPER_NANO_CPUS,
                mem_limit_mb=HELPER_MEMORY_MB,
                pids_limit=HELPER_PIDS_LIMIT,
                tmp_mb=HELPER_TMP_MB,
                disk_mb=HELPER_DISK_MB,
                node=node,
            )
        )
    fw = manifest.framework
    processes = launch.processes_per_learner(fw.launcher, fw.processes_per_learner, manifest.gpus)
    mpi = fw.launcher == launch.LAUNCHER_MPI
    specs = []
    for i in range(learners):
        gpus = gpu_indices[i] if i < len(gpu_indices) else ()
        env = {
            **manifest.env,
            **launch.learner_env(
                job_id,
                i,
                learners,
                framework=FRAMEWORK_ALIASES.get(fw.name.lower(), fw.name.lower()),
                launcher=fw.launcher,
                processes=processes,
                gpus=manifest.gpus,
                gpu_indices=gpus,
                collective_timeout_s=fw.collective_timeout,
            ),
        }
        specs.append(
            ContainerSpec(
                name=jobspec.learner_name(job_id, i),
                role=jobspec.ROLE_LEARNER,
                image=image,
                command=["python3", "-m", "dlaas.learner.run", "--", manifest.framework.command],
                env=env,
                labels={
                    **labels,
                    jobspec.LABEL_ROLE: jobspec.ROLE_LEARNER,
                    jobspec.LABEL_LEARNER: str(i),
                },
                nano_cpus=int(manifest.cpus * 1e9),
                cpu_shares=jobspec.LEARNER_CPU_SHARES,
                mem_limit_mb=manifest.memory_mb,
                disk_mb=disk_mb,
                gpus=manifest.gpus,
                gpu_indices=gpus,
                aliases=(jobspec.learner_alias(i),),
                learner=i,
                node=nodes[i],
                # sshd switches to its privilege-separation user in a chroot: the three
                # capabilities it needs, for MPI learners only (still no-new-privileges).
                cap_add=MPI_CAPABILITIES if mpi else (),
                files=((launch.SSH_KEY_FILE, ssh_key),) if mpi and ssh_key else (),
            )
        )
    return DeploymentPlan(
        job_id=job_id,
        network=jobspec.network_name(job_id),
        volume=jobspec.volume_name(job_id),
        bridge=jobspec.bridge_name(platform_id, job_id),
        labels=labels,
        helper=helpers[0],
        learners=specs,
        node_helpers=helpers[1:],
    )
