"""The MPI side of the learner wrapper (launcher `mpi`, dlaas.domain.launch).

Every learner of an MPI job runs sshd on the job network, accepting the job's own key (a
file the engine put in the container: launch.SSH_KEY_FILE, never an env value). Learner 0
waits until every other learner's sshd answers, writes OpenMPI's hostfile and runs the
job's command under `mpirun` (launch.mpi_command), which starts the ranks over ssh. The
other learners only serve: each ends, with 0, once learner 0's sshd has gone away (its
mpirun ended and it stopped, or its container did), so the job ends when learner 0's
mpirun ends, with learner 0's exit code.

Stdlib only: this runs inside the MPI job image (images/Dockerfile.mpi).
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct
import subprocess
import time
from pathlib import Path

from dlaas.domain import jobspec, launch

SIOCGIFADDR, SIOCGIFNETMASK = 0x8915, 0x891B  # Linux ioctls: an interface's address, mask
AUTHORIZED_KEYS = Path("/tmp/dlaas-ssh/authorized_keys")
PEER_WAIT_S = 180.0  # learners start together; an image pull or a slow node is the wait
POLL_S = 0.5
GONE_AFTER = 3  # failed looks in a row before learner 0 counts as gone


class MpiError(RuntimeError):
    """The MPI set-up failed (no key, sshd would not start, a peer never answered)."""


def start_sshd(key_file: str = launch.SSH_KEY_FILE) -> subprocess.Popen:
    """Host keys, the job's public key as the only authorized key, and sshd on SSH_PORT."""
    if not Path(key_file).is_file():
        raise MpiError(f"the job's SSH key is missing ({key_file}): the engine did not put it")
    public = subprocess.run(
        ["ssh-keygen", "-y", "-f", key_file], capture_output=True, text=True, check=False
    )
    if public.returncode != 0:
        raise MpiError(f"the job's SSH key is unreadable: {public.stderr.strip()[:200]}")
    AUTHORIZED_KEYS.parent.mkdir(parents=True, exist_ok=True)
    AUTHORIZED_KEYS.write_text(public.stdout)
    os.chmod(AUTHORIZED_KEYS, 0o600)
    subprocess.run(["ssh-keygen", "-A"], capture_output=True, check=False)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    options = {
        "Port": str(launch.SSH_PORT),
        "AuthorizedKeysFile": str(AUTHORIZED_KEYS),
        "PasswordAuthentication": "no",
        "KbdInteractiveAuthentication": "no",
        "PermitRootLogin": "prohibit-password",
        "UsePAM": "no",
        "StrictModes": "no",
        "PrintMotd": "no",
    }
    argv = ["/usr/sbin/sshd", "-D", "-e"]
    for name, value in options.items():
        argv += ["-o", f"{name}={value}"]
    sshd = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.2)
    if sshd.poll() is not None:
        raise MpiError(f"sshd exited at start with code {sshd.returncode}")
    return sshd


def answers(host: str, port: int = launch.SSH_PORT, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for_peers(num_learners: int, timeout_s: float = PEER_WAIT_S) -> None:
    """Until every other learner's sshd answers; MpiError naming the first that does not."""
    deadline = time.monotonic() + timeout_s
    for i in range(1, num_learners):
        host = jobspec.learner_alias(i)
        while not answers(host):
            if time.monotonic() > deadline:
                raise MpiError(f"learner {i} ({host}) did not answer on port {launch.SSH_PORT}")
            time.sleep(POLL_S)


def serve_until_master_gone(stopped) -> int:
    """A worker learner: wait while learner 0 answers (once it has), then return 0.
    `stopped()` says whether a stop signal came (then 143)."""
    master = jobspec.learner_alias(0)
    seen, misses = False, 0
    while True:
        if stopped():
            return 143
        if answers(master):
            seen, misses = True, 0
        else:
            misses += 1
            if seen and misses >= GONE_AFTER:
                return 0
        time.sleep(POLL_S)


def job_network() -> str:
    """The job network's CIDR (the subnet of the interface holding learner 0's address,
    read from the kernel), or "" where it cannot be told: then OpenMPI picks."""
    try:
        own = socket.gethostbyname(jobspec.learner_alias(0))
    except OSError:
        return ""
    for name in sorted(os.listdir("/sys/class/net")):
        request = struct.pack("256s", name.encode()[:15])
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                address = socket.inet_ntoa(fcntl.ioctl(s.fileno(), SIOCGIFADDR, request)[20:24])
                mask = socket.inet_ntoa(fcntl.ioctl(s.fileno(), SIOCGIFNETMASK, request)[20:24])
            except OSError:
                continue  # no IPv4 address on it
        if address == own:
            return str(ipaddress.ip_network(f"{address}/{mask}", strict=False))
    return ""


def prepare_master(command: str, env: dict[str, str], cwd: str) -> str:
    """Learner 0: the peers answer, the hostfile is written; the command to run."""
    learners = int(env.get("NUM_LEARNERS", "1"))
    slots = int(env.get("DLAAS_PROCESSES_PER_LEARNER", "1"))
    wait_for_peers(learners)
    Path(launch.MPI_HOSTFILE).write_text(launch.hostfile(learners, slots))
    env["OMPI_MCA_orte_default_hostfile"] = launch.MPI_HOSTFILE
    env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
    env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    return launch.mpi_command(command, env, cwd, job_network())
