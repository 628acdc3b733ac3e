"""The bare side of benchmarks/training_overhead.py: the learner image's file system to
run the bare processes in (entered with chroot), a CPU cgroup of each one's own
(`--bare-cgroups`), and the same processes in plain containers (`--plain-containers`)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import docker


def export_image(root: Path, image: str) -> tuple[Path, dict[str, str]]:
    """`image`'s file system and its env (PATH, PYTHONPATH=/opt/dlaas, ...) for the bare
    runs: the same binaries and the same libraries (the example saves its checkpoints with
    dlaas.learner.checkpoint, fsync and all, wherever it can import it)."""
    root.mkdir(parents=True, exist_ok=True)
    api = docker.from_env(timeout=600)
    env = dict(e.split("=", 1) for e in api.images.get(image).attrs["Config"]["Env"] or [])
    made = api.containers.create(image, command=["true"])
    try:
        tar = subprocess.Popen(["tar", "-x", "-C", str(root)], stdin=subprocess.PIPE)
        for chunk in made.export():
            tar.stdin.write(chunk)
        tar.stdin.close()
        if tar.wait() != 0:
            raise RuntimeError("unpacking the image failed")
    finally:
        made.remove(force=True)
        api.close()
    (root / "etc" / "resolv.conf").write_text("")
    # As a container has them: /proc, /dev (and its /dev/shm) of the host.
    subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], check=True)
    subprocess.run(["mount", "--bind", "/dev", str(root / "dev")], check=True)
    return root, env


def release_image(root: Path) -> bool:
    """Unmount what export_image mounted; whether nothing of the host is mounted there now
    (only then may the folder be deleted: a bound /dev would go with it)."""
    for mount in ("dev", "proc"):
        if os.path.ismount(root / mount):
            subprocess.run(["umount", "-l", str(root / mount)], check=False)
    return not any(os.path.ismount(root / m) for m in ("dev", "proc"))


class OwnCgroups:
    """A CPU cgroup of its own for each bare process (`--bare-cgroups`), with no limit: what
    a container adds to the CPU scheduler and nothing else (no quota, no network, no file
    system). cgroup v1's cpu hierarchy, or v2's root with the cpu controller on."""

    def __init__(self, count: int):
        v1 = Path("/sys/fs/cgroup/cpu")
        root = v1 if v1.is_dir() else Path("/sys/fs/cgroup")
        if root == v1 or "cpu" in (root / "cgroup.subtree_control").read_text().split():
            self.paths = [root / f"dlaas-bare-{os.getpid()}-{k}" for k in range(count)]
        else:
            raise SystemExit("--bare-cgroups: no cpu controller in /sys/fs/cgroup")
        for path in self.paths:
            path.mkdir(exist_ok=True)

    def enter(self, k: int, cmd: list[str]) -> list[str]:
        """`cmd`, run by a shell that first moves itself into cgroup k."""
        procs = self.paths[k] / "cgroup.procs"
        return ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh", *cmd]

    def remove(self) -> None:
        for path in self.paths:
            with contextlib.suppress(OSError):
                path.rmdir()


def plain_containers(
    image: str, work: Path, env: dict[str, str], learners: int, cpus: float, command: str
) -> list[str]:
    """`command` (run in /bench) as `learners` plain containers of `image`, each held to
    `cpus` the way the platform holds a learner (dlaas.domain.plan.cfs_limit), all on one
    bridge network, rank 0 reached by its name (`--plain-containers`): what a container
    costs with nothing of the platform (no wrapper, no helper, no job volume, no control
    plane). `work` (the bare side's folder: data and code) is mounted at /bench, each rank's
    results and checkpoints go below it as the bare ranks' do. Each rank's output."""
    from dlaas.domain.plan import cfs_limit

    api = docker.from_env(timeout=600)
    tag = f"dlaas-plain-{os.getpid()}"
    network = api.networks.create(tag, driver="bridge")
    period, quota = cfs_limit(int(cpus * 1e9))
    made = []
    try:
        for rank in range(learners):
            rank_env = {
                **env, "OMP_NUM_THREADS": "1", "RANK": str(rank),
                "WORLD_SIZE": str(learners), "LOCAL_RANK": "0", "MASTER_ADDR": f"{tag}-0",
                "MASTER_PORT": "29500", "DATA_DIR": "/bench/data",
                "RESULT_DIR": f"/bench/{tag}/results-{rank}",
                "CHECKPOINT_DIR": f"/bench/{tag}/checkpoints-{rank}",
            }  # fmt: skip
            made.append(api.containers.run(
                image, ["sh", "-c", f"cd /bench && {command}"], name=f"{tag}-{rank}",
                hostname=f"{tag}-{rank}", network=tag, environment=rank_env, detach=True,
                volumes={str(work): {"bind": "/bench", "mode": "rw"}},
                cpu_period=period, cpu_quota=quota, init=True,
            ))  # fmt: skip
        for c in made:
            c.wait(timeout=900)
        return [c.logs().decode(errors="replace") for c in made]
    finally:
        for c in made:
            with contextlib.suppress(docker.errors.APIError):
                c.remove(force=True)
        network.remove()
        api.close()
