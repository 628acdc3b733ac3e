"""ensure_images against the real Docker engine: builds once, then reuses in well under a
second; the image holds the in-container code and nothing it cannot import. Each framework
image (PyTorch 2.13, TensorFlow 2.21, OpenMPI 4.1) is that same code on its framework's
layer, runs the framework, and is reused the same way.

The first run on a fresh machine builds dlaas/base:bookworm with debootstrap (about a
minute, needs root and network access to deb.debian.org) and each framework image (minutes,
see images/README.md); later runs reuse them.
"""

from __future__ import annotations

import re
import time
import urllib.request
import uuid

import pytest

from dlaas.domain.errors import ImageUnavailable
from dlaas.local import images, wheelhouse

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def learner_image(docker_client) -> str:
    return images.ensure_images(docker_client, progress=lambda _line: None)


def test_builds_the_learner_image_labelled_with_its_sources(docker_client, learner_image):
    assert learner_image == images.LEARNER_IMAGE
    image = docker_client.images.get(learner_image)
    dockerfile = images.LEARNER_DOCKERFILE.read_bytes()
    files = images.context_files(images.REPO_ROOT, images.copy_sources(dockerfile.decode()))
    digest = images.source_hash(dockerfile, images.REPO_ROOT, files)
    assert image.labels[images.LABEL_SOURCE_HASH] == digest
    assert image.labels[images.LABEL_BASE_ID] == docker_client.images.get(images.BASE_IMAGE).id


def test_second_call_is_fast_and_does_not_rebuild(docker_client, learner_image):
    before = docker_client.images.get(learner_image).id
    lines: list[str] = []
    started = time.monotonic()
    assert images.ensure_images(docker_client, progress=lines.append) == learner_image
    assert time.monotonic() - started < 5
    assert docker_client.images.get(learner_image).id == before
    assert lines == [f"{learner_image} is up to date"]


def test_image_runs_the_in_container_code(docker_client, learner_image):
    out = docker_client.containers.run(
        learner_image,
        [
            "python3",
            "-c",
            (
                "import dlaas.learner.run, dlaas.learner.checkpoint, services.learner_helper.main;"
                "import numpy, boto3, sys; print('ok', sys.version_info[:2], numpy.__version__)"
            ),
        ],
        remove=True,
        init=True,
    )
    assert out.decode().startswith("ok (3, 11)")


def test_image_holds_only_the_in_container_code(docker_client, learner_image):
    out = docker_client.containers.run(
        learner_image,
        ["sh", "-c", "cd /opt/dlaas && find . -name '*.py' | sort"],
        remove=True,
    ).decode()
    assert "./dlaas/domain/jobspec.py" in out and "./services/learner_helper/main.py" in out
    assert "manifest.py" not in out and "services/lcm" not in out and "examples" not in out


# --------------------------------------------------------------------------- frameworks


def run(client, image: str, command: str, **kwargs) -> str:
    """The output of `sh -c command` in a fresh container of `image`, on no network."""
    kwargs.setdefault("network_mode", "none")
    out = client.containers.run(image, ["sh", "-c", command], remove=True, init=True, **kwargs)
    return out.decode()


# The learner wrapper and the helper import in every framework image.
WRAPPER = (
    "python -c 'import dlaas.learner.run, dlaas.learner.checkpoint, services.learner_helper.main'"
)


@pytest.mark.timeout(900)  # a new machine builds the image first (a few minutes)
def test_the_pytorch_image_is_the_learner_image_on_torch_2_13(docker_client, pytorch_image):
    layer, learner = images.framework_specs("pytorch", "2.13")
    assert pytorch_image == learner.tag == "dlaas/learner-pytorch:2.13"
    assert layer.tag == "dlaas/base-pytorch:2.13"
    # The learner Dockerfile on top of the torch layer, labelled with that layer's id.
    image = docker_client.images.get(pytorch_image)
    assert image.labels[images.LABEL_BASE_ID] == docker_client.images.get(layer.tag).id
    torch_layer = docker_client.images.get(layer.tag)
    assert (
        torch_layer.labels[images.LABEL_BASE_ID] == docker_client.images.get(images.BASE_IMAGE).id
    )
    out = run(
        docker_client,
        pytorch_image,
        # `python`, as FfDL's commands call it; torchrun on PATH; pip for users' commands.
        "python -c 'import torch; x = torch.ones(2, 3, requires_grad=True); "
        "(x * 2).sum().backward(); print(torch.__version__, float(x.grad.sum()))' "
        f"&& torchrun --help | head -1 && pip --version && {WRAPPER} && echo wrapper ok",
    )
    lines = out.splitlines()
    assert lines[0] == "2.13.0+cpu 12.0", out
    assert lines[1].startswith("usage: torchrun") and lines[2].startswith("pip ")
    assert lines[-1] == "wrapper ok"


@pytest.mark.timeout(900)
def test_torchrun_in_the_pytorch_image_runs_a_gloo_all_reduce(docker_client, pytorch_image):
    script = (
        "import torch, torch.distributed as dist; dist.init_process_group('gloo'); "
        "t = torch.tensor([dist.get_rank() + 1.0]); dist.all_reduce(t); "
        "print(f'rank {dist.get_rank()} of {dist.get_world_size()} {float(t)}'); "
        "dist.destroy_process_group()"
    )
    out = run(
        docker_client,
        pytorch_image,
        f'printf "%s" "{script}" > /tmp/ar.py && '
        "OMP_NUM_THREADS=1 timeout 120 torchrun --standalone --nproc_per_node 2 /tmp/ar.py",
        # c10d looks its own host name up; with no network only /etc/hosts can answer.
        hostname="learner-0",
        extra_hosts={"learner-0": "127.0.0.1"},
    )
    # The two processes share one unbuffered stdout: a line and its newline may part.
    assert sorted(re.findall(r"rank (\d) of 2 3\.0", out)) == ["0", "1"], out


@pytest.mark.timeout(900)
def test_the_tensorflow_image_runs_tensorflow_2_21_keras_3_and_tf_keras(
    docker_client, tensorflow_image
):
    assert tensorflow_image == "dlaas/learner-tensorflow:2.21"
    out = run(
        docker_client,
        tensorflow_image,
        "python -c 'import tensorflow as tf, keras, tf_keras; "
        'print(tf.__version__, keras.__version__.split(".")[0], tf_keras.__version__, '
        "float(tf.reduce_sum(tf.ones([2, 3]) * 2)))' "
        # tf.keras is Keras 2 where a job asks for it; one TensorFlow distribution only.
        "&& TF_USE_LEGACY_KERAS=1 python -c 'import tensorflow as tf; print(tf.keras.__name__.split(\".\")[0])' "
        "&& pip list 2>/dev/null | grep -c '^tensorflow' "
        f"&& pip --version && {WRAPPER} && echo wrapper ok",
    )
    lines = out.splitlines()
    assert "2.21.0 3 2.21.0 12.0" in lines, out  # Keras 3, and Keras 2 as tf_keras
    assert "tf_keras" in lines and "1" in lines, out  # legacy tf.keras; tensorflow_cpu alone
    assert lines[-1] == "wrapper ok" and any(line.startswith("pip ") for line in lines)


@pytest.mark.timeout(900)
def test_the_mpi_image_runs_openmpi_4_1_and_mpi4py(docker_client, mpi_image):
    assert mpi_image == "dlaas/learner-mpi:4.1"
    out = run(
        docker_client,
        mpi_image,
        "mpirun --version | head -1 && python3 -c 'from mpi4py import MPI; print(\"mpi4py ok\")' "
        "&& timeout 120 mpirun -np 2 --oversubscribe python3 -c 'from mpi4py import MPI; import numpy as np; "
        "c = MPI.COMM_WORLD; y = np.zeros(1); c.Allreduce(np.array([c.rank + 1.0]), y); "
        # Rank 0 prints what both ranks hold: two ranks' prints may share a line.
        'v = c.gather(float(y[0])); c.rank or print("allreduce", v)\' '
        # No host key is baked in; the sshd settings are dlaas.conf's.
        "&& ls /etc/ssh/ | grep -c ssh_host_ ; ssh-keygen -A > /dev/null && /usr/sbin/sshd -T "
        "| grep -E '^(port|permitrootlogin|passwordauthentication|usepam|strictmodes|"
        f"authorizedkeysfile) ' && {WRAPPER} && echo wrapper ok",
    )
    lines = out.splitlines()
    assert lines[0].startswith("mpirun (Open MPI) 4.1"), out
    assert "mpi4py ok" in lines and "allreduce [3.0, 3.0]" in lines, out
    assert "0" in lines  # no ssh_host_* file in the image
    assert {
        "port 2022",
        "permitrootlogin without-password",
        "passwordauthentication no",
        "usepam no",
        "strictmodes no",
        "authorizedkeysfile /etc/dlaas/ssh/authorized_keys",
    } <= set(lines), out
    assert lines[-1] == "wrapper ok"


# What the platform gives back to an MPI learner of the capabilities it drops: sshd's
# privilege separation changes uid and gid and chroots (each one was checked to be needed).
SSHD_CAPS = ["SETUID", "SETGID", "SYS_CHROOT"]

# A worker learner: the job's public key authorised, host keys made at start, sshd on 2022.
SSHD_WORKER = (
    'printf "%s\\n" "$PUB" > /etc/dlaas/ssh/authorized_keys'
    " && ssh-keygen -A > /dev/null && exec /usr/sbin/sshd -D -e"
)
# Learner 0: the job's private key, ssh to the worker once it answers, then mpirun on both
# (the image's ssh client config gives learner-* port 2022 and no host key checking).
LAUNCHER = (
    'umask 077 && mkdir -p /root/.ssh && printf "%s" "$KEY" > /root/.ssh/id_ed25519'
    ' && for i in $(seq 50); do ssh -o BatchMode=yes "$WORKER" true 2>/dev/null && break;'
    ' sleep 0.2; done; ssh -o BatchMode=yes "$WORKER" "echo via ssh \\$(hostname)"'
    ' && timeout 120 mpirun -np 2 --host "localhost:1,$WORKER:1" python3 -c "import socket;'
    " from mpi4py import MPI; import numpy as np; c = MPI.COMM_WORLD; y = np.zeros(1);"
    " c.Allreduce(np.array([c.rank + 1.0]), y); v = c.gather((socket.gethostname(), y[0]));"
    # Rank 0 prints what both ranks hold: two ranks' prints may share a line.
    " c.rank or print(chr(10).join(f'rank {r} {h} {x}' for r, (h, x) in enumerate(v)))\""
)


@pytest.mark.timeout(900)
def test_mpirun_reaches_a_learner_whose_sshd_runs_with_three_capabilities(docker_client, mpi_image):
    suffix = uuid.uuid4().hex[:8]
    worker_name = f"learner-1-{suffix}"  # a learner-* name, as on a job network
    network = docker_client.networks.create(f"dlaas-test-mpi-{suffix}", driver="bridge")
    worker = None
    try:
        keys = run(
            docker_client,
            mpi_image,
            "ssh-keygen -q -t ed25519 -N '' -f /tmp/k && cat /tmp/k.pub && cat /tmp/k",
        )
        public, private = keys.split("\n", 1)
        confined = {"cap_drop": ["ALL"], "security_opt": ["no-new-privileges"]}
        worker = docker_client.containers.run(
            mpi_image,
            ["sh", "-c", SSHD_WORKER],
            name=worker_name,
            hostname="learner-1",
            environment={"PUB": public},
            network=network.name,
            cap_add=SSHD_CAPS,
            detach=True,
            **confined,
        )
        out = docker_client.containers.run(
            mpi_image,
            ["sh", "-c", LAUNCHER],
            name=f"learner-0-{suffix}",
            hostname="learner-0",
            environment={"KEY": private, "WORKER": worker_name},
            network=network.name,
            remove=True,
            **confined,
        ).decode()
        lines = out.splitlines()
        assert "via ssh learner-1" in lines, out + worker.logs().decode()
        assert {"rank 0 learner-0 3.0", "rank 1 learner-1 3.0"} <= set(lines), out
    finally:
        if worker is not None:
            worker.remove(force=True)
        network.remove()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", ["pytorch", "tensorflow", "mpi"])
def test_a_second_framework_call_rebuilds_nothing(docker_client, request, name):
    image = request.getfixturevalue(f"{name}_image")
    version = image.rsplit(":", 1)[1]
    before = docker_client.images.get(image).id
    lines: list[str] = []
    started = time.monotonic()
    assert images.ensure_framework_image(docker_client, name, version, lines.append) == image
    assert time.monotonic() - started < 5
    assert docker_client.images.get(image).id == before
    assert lines == [f"dlaas/base-{name}:{version} is up to date", f"{image} is up to date"]


def test_a_framework_version_that_is_not_built_is_refused_before_any_build(docker_client):
    with pytest.raises(ImageUnavailable, match=r"framework pytorch 0\.4; known: pytorch 2\.13"):
        images.ensure_framework_image(docker_client, "pytorch", "0.4", lambda _line: None)
    assert not docker_client.images.list(name="dlaas/learner-pytorch:0.4")


def test_the_wheelhouse_is_served_as_an_index_pip_can_follow(tmp_path):
    name = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    (tmp_path / name).write_bytes(b"wheel bytes")
    with wheelhouse.serve(tmp_path) as url:
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url, timeout=5) as index:
            assert 'href="torch-2.13.0%2Bcpu-cp311' in index.read().decode()
        with urllib.request.urlopen(url + name.replace("+", "%2B"), timeout=5) as wheel:
            assert wheel.read() == b"wheel bytes"
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=2)
