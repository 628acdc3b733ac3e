"""In-container code without Docker: safe archive extraction, checkpoints, the learner
wrapper's pure parts, helper config and S3 key mapping, image context. The wrapper as a
real child process is tests/integration/test_learner_wrapper.py."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from dlaas.domain.errors import ImageUnavailable
from dlaas.learner import checkpoint
from dlaas.learner.paths import JobPaths
from dlaas.learner.run import exit_code, parse_command
from dlaas.local import images
from services.learner_helper import config, store, sync, volume
from services.learner_helper.archive import UnsafeArchive, check_members, safe_extract
from services.learner_helper.config import ConfigError, HelperConfig

REPO = Path(__file__).resolve().parents[2]

# --------------------------------------------------------------------------- archives


def make_tar(path: Path, members: list[tuple]) -> Path:
    """members: ("file", name, bytes[, mode]) | ("dir", name) | ("sym", name, target) |
    ("hard", name, target) | ("fifo", name)."""
    with tarfile.open(path, "w:gz") as tar:
        for kind, name, *rest in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                data = rest[0]
                info.size = len(data)
                info.mode = rest[1] if len(rest) > 1 else 0o644
                tar.addfile(info, io.BytesIO(data))
                continue
            if kind == "dir":
                info.type = tarfile.DIRTYPE
            elif kind == "sym":
                info.type, info.linkname = tarfile.SYMTYPE, rest[0]
            elif kind == "hard":
                info.type, info.linkname = tarfile.LNKTYPE, rest[0]
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            tar.addfile(info)
    return path


def test_extracts_files_dirs_modes_and_inner_links(tmp_path):
    archive = make_tar(
        tmp_path / "code.tar.gz",
        [
            ("dir", "./"),
            ("file", "./train.py", b"print('hi')\n"),
            ("file", "bin/run.sh", b"#!/bin/sh\n", 0o755),
            ("sym", "lib", "bin"),
            ("sym", "bin/again", "../train.py"),
            ("hard", "copy.py", "train.py"),
        ],
    )
    dest = tmp_path / "code"
    assert safe_extract(archive, dest) == 3
    assert (dest / "train.py").read_bytes() == b"print('hi')\n"
    assert os.access(dest / "bin" / "run.sh", os.X_OK)
    assert not os.access(dest / "train.py", os.X_OK)
    assert (dest / "lib").is_symlink() and (dest / "lib" / "run.sh").is_file()
    assert (dest / "bin" / "again").read_bytes() == b"print('hi')\n"
    assert (dest / "copy.py").read_bytes() == b"print('hi')\n"


@pytest.mark.parametrize(
    ("members", "says"),
    [
        ([("file", "/etc/evil", b"x")], "absolute"),
        ([("file", "../evil", b"x")], "'..'"),
        ([("file", "a/../../evil", b"x")], "'..'"),
        ([("sym", "out", "/etc")], "outside"),
        ([("sym", "out", "../../etc")], "outside"),
        ([("sym", "a/b", "../../x")], "outside"),
        ([("hard", "h", "/etc/passwd")], "absolute"),
        ([("hard", "h", "missing.txt")], "not a file earlier"),
        ([("fifo", "pipe")], "special files"),
        # a link inside the archive, then a write through it
        ([("sym", "d", "sub"), ("dir", "sub"), ("file", "d/x", b"x")], "through a symbolic link"),
    ],
)
def test_refuses_escapes_by_name(tmp_path, members, says):
    archive = make_tar(tmp_path / "bad.tar.gz", members)
    dest = tmp_path / "code"
    with pytest.raises(UnsafeArchive, match=says):
        safe_extract(archive, dest)
    assert not (tmp_path / "evil").exists()


def test_refuses_a_chain_of_links_that_escapes_only_on_disk(tmp_path):
    # "x" -> "." and "y" -> "x/.." each look inside by name; together y is the parent.
    archive = make_tar(tmp_path / "chain.tar.gz", [("sym", "x", "."), ("sym", "y", "x/..")])
    dest = tmp_path / "code"
    with pytest.raises(UnsafeArchive, match="resolves outside"):
        safe_extract(archive, dest)
    assert not (dest / "y").is_symlink()  # no way out is left behind


def test_refuses_garbage(tmp_path):
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"this is not a tar file at all" * 10)
    with pytest.raises(UnsafeArchive, match="cannot be extracted"):
        safe_extract(junk, tmp_path / "code")


def test_check_members_keeps_order_and_drops_the_root(tmp_path):
    archive = make_tar(tmp_path / "a.tar.gz", [("dir", "."), ("file", "./a/b.txt", b"1")])
    with tarfile.open(archive) as tar:
        assert [rel for rel, _ in check_members(tar.getmembers())] == ["a/b.txt"]


# --------------------------------------------------------------------------- checkpoints


def test_checkpoint_roundtrip_keeps_the_last_k(tmp_path):
    assert checkpoint.load_latest(tmp_path) is None
    for step in range(1, 6):
        checkpoint.save({"step": step, "w": [step] * 3}, step=step, directory=tmp_path, keep=2)
    assert [s for s, _ in checkpoint.list_checkpoints(tmp_path)] == [4, 5]
    assert checkpoint.load_latest(tmp_path) == (5, {"step": 5, "w": [5, 5, 5]})
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]


def test_checkpoint_bytes_and_env_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CHECKPOINT_DIR", str(tmp_path / "ck"))
    checkpoint.save(b"\x00raw", step=7)
    assert checkpoint.load_latest() == (7, b"\x00raw")
    checkpoint.save({"a": 1}, step=7)  # the same step again replaces it
    assert checkpoint.list_checkpoints() == [(7, tmp_path / "ck" / "ckpt-000000000007.pkl")]


def test_checkpoint_skips_a_damaged_newest_and_ignores_partial_writes(tmp_path):
    checkpoint.save({"ok": True}, step=1, directory=tmp_path)
    (tmp_path / "ckpt-000000000002.pkl").write_bytes(b"\x80\x05garbage")
    (tmp_path / ".tmp-ckpt-000000000003.pkl-1").write_bytes(b"half")
    assert checkpoint.load_latest(tmp_path) == (1, {"ok": True})


@pytest.mark.parametrize(
    ("state", "step"), [({"a": 1}, -1), ({"a": 1}, 1.5), ("text", 1), ({"a": 1}, True)]
)
def test_checkpoint_rejects_bad_input(tmp_path, state, step):
    with pytest.raises((ValueError, TypeError)):
        checkpoint.save(state, step=step, directory=tmp_path)


# --------------------------------------------------------------------------- wrapper


def test_parse_command_and_exit_codes():
    assert parse_command(["--", "python3 train.py --epochs 2"]) == "python3 train.py --epochs 2"
    assert parse_command(["--", "echo", "a"]) == "echo a"
    assert parse_command(["--"]) is None
    assert exit_code(0) == 0 and exit_code(3) == 3 and exit_code(-15) == 143


def test_paths_follow_the_job_dir(tmp_path):
    p = JobPaths.from_env({"DLAAS_JOB_DIR": str(tmp_path), "RESULT_DIR": "/elsewhere"})
    assert p.data_dir == tmp_path / "data" and p.code_dir == tmp_path / "code"
    assert p.ready_mark == tmp_path / ".data_ready" and p.result_dir == Path("/elsewhere")
    assert JobPaths.from_env({}).learner_log(3) == Path("/job/logs/learner-3.log")


# --------------------------------------------------------------------------- helper pieces

GOOD_ENV = {
    "JOB_ID": "j1",
    "DLAAS_S3_ENDPOINT": "http://s3:8333",
    "AWS_ACCESS_KEY_ID": "ak",
    "AWS_SECRET_ACCESS_KEY": "very-secret",
    "DLAAS_RESULTS_BUCKET": "results",
}


def test_helper_config_names_what_is_missing_and_hides_the_secret():
    cfg = HelperConfig.from_env(GOOD_ENV)
    assert cfg.num_learners == 1 and cfg.data_bucket == "" and "very-secret" not in repr(cfg)
    with pytest.raises(ConfigError, match="JOB_ID, DLAAS_RESULTS_BUCKET"):
        HelperConfig.from_env({**GOOD_ENV, "JOB_ID": "", "DLAAS_RESULTS_BUCKET": " "})
    with pytest.raises(ConfigError, match="NUM_LEARNERS"):
        HelperConfig.from_env({**GOOD_ENV, "NUM_LEARNERS": "zero"})
    with pytest.raises(ConfigError, match="together"):
        HelperConfig.from_env({**GOOD_ENV, "DLAAS_CODE_KEY": "code.tgz"})
    with pytest.raises(ConfigError, match="DLAAS_CODE_SECRET_KEY must be set together"):
        HelperConfig.from_env({**GOOD_ENV, "DLAAS_CODE_ENDPOINT": "http://other:8333"})
    other = HelperConfig.from_env(
        {
            **GOOD_ENV,
            "DLAAS_CODE_ENDPOINT": "http://other:8333",
            "DLAAS_CODE_ACCESS_KEY": "cak",
            "DLAAS_CODE_SECRET_KEY": "code-secret",
        }
    )
    assert other.code_endpoint == "http://other:8333" and "code-secret" not in repr(other)


def test_object_keys_map_inside_the_data_dir():
    assert config.folder_prefix("train") == "train/" and config.folder_prefix("") == ""
    assert store.local_name("train/a/b.npz", "train/") == "a/b.npz"
    assert store.local_name("train/", "train/") is None
    assert store.local_name("train/../../etc/x", "train/") is None
    assert store.local_name("//x.npz", "") == "x.npz"


# --------------------------------------------------------------------------- image context


def test_image_context_is_what_the_dockerfile_copies_and_the_hash_tracks_it(tmp_path):
    sources = images.copy_sources(images.LEARNER_DOCKERFILE.read_text())
    assert "dlaas/domain/jobspec.py" in sources and "services/learner_helper/" in sources
    files = images.context_files(REPO, sources)
    assert "dlaas/learner/run.py" in files and "services/learner_helper/main.py" in files
    assert not any(
        "__pycache__" in f or f.startswith(("dlaas/domain/manifest", "examples")) for f in files
    )

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("a = 1\n")
    h1 = images.source_hash(b"FROM x", tmp_path, ["pkg/a.py"])
    assert h1 == images.source_hash(b"FROM x", tmp_path, ["pkg/a.py"])
    (tmp_path / "pkg" / "a.py").write_text("a = 2\n")
    assert h1 != images.source_hash(b"FROM x", tmp_path, ["pkg/a.py"])
    with tarfile.open(fileobj=images.context_tar(b"FROM x", tmp_path, ["pkg/a.py"])) as tar:
        assert tar.getnames() == ["Dockerfile", "pkg/a.py"]


def test_the_pytorch_image_is_two_specs_and_its_wheels_are_part_of_the_hash():
    layer, learner = images.framework_specs("pytorch", "2.13")
    assert (layer.tag, layer.base) == ("dlaas/base-pytorch:2.13", images.BASE_IMAGE)
    assert layer.buildargs == {"REQUIREMENTS": "torch==2.13.0+cpu"} and layer.needs_network
    # The learner Dockerfile, unchanged, on the torch layer: the same in-container code.
    assert (learner.tag, learner.base) == ("dlaas/learner-pytorch:2.13", layer.tag)
    assert learner.dockerfile == images.LEARNER_DOCKERFILE and not learner.needs_network
    assert not learner.wheels
    # Dockerfile.pytorch copies nothing: its context is the Dockerfile alone (the wheels
    # are served to the build, never sent in the context).
    assert images.copy_sources(layer.dockerfile.read_text()) == []
    text = layer.dockerfile.read_bytes()
    args = {"REQUIREMENTS": "torch==2.13.0+cpu"}
    assert images.source_hash(text, REPO, [], args) != images.source_hash(
        text, REPO, [], {"REQUIREMENTS": "torch==2.14.0+cpu"}
    )
    wheel = ("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", 191794682)
    with_wheel = images.source_hash(text, REPO, [], args, [wheel])
    assert with_wheel != images.source_hash(text, REPO, [], args)
    assert with_wheel != images.source_hash(text, REPO, [], args, [(wheel[0], wheel[1] + 1)])
    # No build argument and no wheel hash as before: the learner image's label did not change.
    assert images.source_hash(text, REPO, [], {}, []) == images.source_hash(text, REPO, [])
    assert images.all_frameworks() == [("pytorch", "2.13"), ("tensorflow", "2.21"), ("mpi", "4.1")]


@pytest.mark.parametrize(("name", "version"), [("pytorch", "1.13"), ("tensorflow", "1.15")])
def test_a_framework_image_that_is_not_built_is_refused_naming_what_is(name, version):
    with pytest.raises(
        ImageUnavailable,
        match=f"framework {name} {version}; known: pytorch 2.13, tensorflow 2.21, mpi 4.1",
    ):
        images.framework_specs(name, version)


def test_helper_config_checkpoint_env():
    cfg = HelperConfig.from_env(GOOD_ENV)
    assert cfg.checkpoint_prefix == "j1/checkpoints/" and cfg.checkpoint_interval_s == 0
    cfg = HelperConfig.from_env(
        {**GOOD_ENV, "DLAAS_CHECKPOINT_PREFIX": "/x/ck", "DLAAS_CHECKPOINT_INTERVAL_S": "2.5"}
    )
    assert cfg.checkpoint_prefix == "x/ck/" and cfg.checkpoint_interval_s == 2.5
    for bad in ("-1", "soon", "nan"):
        with pytest.raises(ConfigError, match="DLAAS_CHECKPOINT_INTERVAL_S"):
            HelperConfig.from_env({**GOOD_ENV, "DLAAS_CHECKPOINT_INTERVAL_S": bad})
    for bad in ("/", "a/../b"):  # never the whole bucket: the sync deletes below it
        with pytest.raises(ConfigError, match="DLAAS_CHECKPOINT_PREFIX"):
            HelperConfig.from_env({**GOOD_ENV, "DLAAS_CHECKPOINT_PREFIX": bad})


# --------------------------------------------------------------------------- checkpoint sync


def test_sync_plan_uploads_new_and_changed_and_deletes_only_ours():
    local = {"a": (1, 10), "b": (2, 20), "c": (3, 30)}
    synced = {"a": (1, 10), "b": (2, 19), "gone": (4, 40)}
    plan = sync.plan_sync(local, synced, owned={"a", "b", "gone"})
    assert plan.uploads == ["b", "c"] and plan.deletes == ["gone"]
    # an object never restored nor uploaded (a restore cut short) is left alone
    assert sync.plan_sync({}, {}, owned=set()).deletes == []


def test_sync_skips_temporary_names_and_counts_lines(tmp_path):
    (tmp_path / "sub").mkdir()
    for name in ("ckpt-1.pkl", ".tmp-ckpt-2.pkl-7", "sub/model.pt", ".part-x", "sub/.hid"):
        (tmp_path / name).write_bytes(b"x")
    assert sorted(volume.scan(tmp_path)) == ["ckpt-1.pkl", "sub/model.pt"]
    assert volume.hidden(".tmp-a") and volume.hidden("d/.part-b") and not volume.hidden("d/a.b")
    assert volume.count_lines(b"") == 0 and volume.count_lines(b"a\nb\n") == 2
    assert (
        volume.count_lines(b"a\nb") == 2
    )  # a last line without newline counts, as in dlaas.adapters.logs


def test_a_node_helper_knows_its_learners_and_only_the_jobs_helper_mirrors_checkpoints():
    cfg = HelperConfig.from_env(
        {
            **GOOD_ENV,
            "NUM_LEARNERS": "3",
            "DLAAS_HELPER_LEARNERS": "1,2",
            "DLAAS_HELPER_PRIMARY": "0",
        }
    )
    assert cfg.learners == (1, 2) and not cfg.primary
    assert HelperConfig.from_env({**GOOD_ENV, "NUM_LEARNERS": "2"}).learners == (0, 1)
    assert HelperConfig.from_env(GOOD_ENV).primary
    with pytest.raises(ConfigError, match="DLAAS_HELPER_LEARNERS"):
        HelperConfig.from_env({**GOOD_ENV, "NUM_LEARNERS": "2", "DLAAS_HELPER_LEARNERS": "2"})


def test_secrets_handed_over_as_a_file_join_the_env(tmp_path):
    from services.learner_helper.main import with_secret_file

    secret = tmp_path / "env"
    secret.write_text("AWS_SECRET_ACCESS_KEY=s3cr=et\nAWS_ACCESS_KEY_ID=ak\n")
    env = {k: v for k, v in GOOD_ENV.items() if not k.startswith("AWS_")}
    cfg = HelperConfig.from_env(with_secret_file({**env, "DLAAS_SECRET_ENV_FILE": str(secret)}))
    assert cfg.secret_key == "s3cr=et" and cfg.access_key == "ak"
    with pytest.raises(ConfigError, match="cannot read") as err:
        with_secret_file({**env, "DLAAS_SECRET_ENV_FILE": str(tmp_path / "none")})
    assert "s3cr" not in str(err.value)
