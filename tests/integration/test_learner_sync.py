"""The learner helper's mirrors against a real SeaweedFS: checkpoints kept in step with S3
(keep-K, restore, adopt) and the learner log restored across runs. The pure parts (the
sync plan, the scan) are in tests/unit/test_learner_lib.py.
"""

from __future__ import annotations

import os
import time

from dlaas.learner import checkpoint
from services.learner_helper import store, sync, volume


def test_checkpoint_sync_mirrors_keep_k_and_restores(tmp_path, s3_client, s3_bucket):
    work = tmp_path / "ck"
    mirror = sync.CheckpointSync(s3_client, s3_bucket, "j/checkpoints", work)

    def remote() -> list[str]:
        listing = s3_client.list_objects_v2(Bucket=s3_bucket, Prefix="j/checkpoints/")
        return sorted(o["Key"].removeprefix("j/checkpoints/") for o in listing.get("Contents", []))

    for step in range(1, 4):
        checkpoint.save({"step": step}, step=step, directory=work, keep=2)
    (work / ".tmp-ckpt-000000000009.pkl-1").write_bytes(b"half written")
    done = mirror.sync()
    assert (done.uploaded, done.deleted, done.files) == (2, 0, 2)
    assert remote() == ["ckpt-000000000002.pkl", "ckpt-000000000003.pkl"]
    assert mirror.sync().uploaded == 0  # nothing changed, nothing sent
    checkpoint.save({"step": 4}, step=4, directory=work, keep=2)
    done = mirror.sync()
    assert (done.uploaded, done.deleted) == (1, 1)  # keep-K holds in S3 too
    assert remote() == ["ckpt-000000000003.pkl", "ckpt-000000000004.pkl"]

    fresh = tmp_path / "fresh"
    again = sync.CheckpointSync(s3_client, s3_bucket, "j/checkpoints/", fresh)
    assert again.restore(lambda: False) == 2
    assert checkpoint.load_latest(fresh) == (4, {"step": 4})
    assert again.restore(lambda: False) == 0  # idempotent
    assert again.sync().uploaded == 0  # what was restored is not sent back

    rejoined = sync.CheckpointSync(s3_client, s3_bucket, "j/checkpoints/", work)
    (work / "ckpt-000000000003.pkl").unlink()  # gone while no helper watched
    rejoined.adopt()
    done = rejoined.sync()
    assert (done.uploaded, done.deleted) == (0, 1)
    assert remote() == ["ckpt-000000000004.pkl"]


def test_log_restore_takes_the_longer_copy_and_marks_where_the_run_starts(
    tmp_path, s3_client, s3_bucket
):
    key = "j/logs/learner-0.log"
    s3_client.put_object(Bucket=s3_bucket, Key=key, Body=b"one\ntwo\nthr")  # ended mid-line
    logs = sync.LearnerLogs(s3_client, s3_bucket, "j", tmp_path / "new-volume")
    assert logs.restore(learners=range(2)) == 3  # learner 1 has no log yet
    assert (tmp_path / "new-volume" / "learner-0.log").read_bytes() == b"one\ntwo\nthr\n"
    head = s3_client.head_object(Bucket=s3_bucket, Key=key)
    assert head["Metadata"] == {"dlaas-run-start-line": "3"} and head["ContentLength"] == 12
    assert logs.run_start == {0: 3, 1: 0}

    kept = tmp_path / "kept-volume"  # a volume that saw more than S3 did
    kept.mkdir()
    (kept / "learner-0.log").write_bytes(b"one\ntwo\nthree\nfour\n")
    logs = sync.LearnerLogs(s3_client, s3_bucket, "j", kept)
    assert logs.restore(learners=range(1)) == 4
    body = s3_client.get_object(Bucket=s3_bucket, Key=key)
    assert body["Body"].read() == b"one\ntwo\nthree\nfour\n"
    assert body["Metadata"] == {"dlaas-run-start-line": "4"}

    rejoined = sync.LearnerLogs(s3_client, s3_bucket, "j", kept)
    rejoined.adopt(learners=range(1))
    assert rejoined.run_start == {0: 4}


def test_an_upload_stores_the_file_it_opened_whatever_the_learner_swaps_in_meanwhile(
    tmp_path, s3_client, s3_bucket
):
    """A hostile learner changes what a checkpoint's path names while the helper uploads it:
    the upload neither follows a link into the helper's files nor waits on bytes it
    announced and cannot send (the store then waits out the client's 60 s read timeout)."""
    work, secret = tmp_path / "ck", tmp_path / "helper-env"
    work.mkdir()
    secret.write_bytes(b"AWS_SECRET_ACCESS_KEY=never-stored" * 100)
    target = work / "race.bin"
    mirror = sync.CheckpointSync(s3_client, s3_bucket, "j/checkpoints", work)
    swaps: list = []

    def during_send(**_kwargs) -> None:
        if swaps:
            swaps.pop(0)()

    def stored() -> bytes:
        return s3_client.get_object(Bucket=s3_bucket, Key="j/checkpoints/race.bin")["Body"].read()

    def to_link() -> None:
        (work / ".l").symlink_to(secret)
        os.replace(work / ".l", target)

    def shorter_file() -> None:
        (work / ".f").write_bytes(b"short")
        os.replace(work / ".f", target)

    def truncated() -> None:
        os.truncate(target, 10)

    s3_client.meta.events.register("before-send.s3.PutObject", during_send)
    for swap, content in ((to_link, b"a" * 3000), (shorter_file, b"b" * 3000)):
        target.unlink(missing_ok=True)
        target.write_bytes(content)
        swaps.append(swap)
        started = time.monotonic()
        assert mirror.sync().uploaded == 1
        assert time.monotonic() - started < 10, swap.__name__
        assert stored() == content, swap.__name__  # what was opened, not what is there now

    target.write_bytes(b"c" * 3000)
    swaps.append(truncated)
    started = time.monotonic()
    assert mirror.sync().uploaded == 0  # cut short while sent: given up at once ...
    assert time.monotonic() - started < 10
    assert mirror.sync().uploaded == 1  # ... and sent as it is now
    assert stored() == b"c" * 10


def test_open_below_follows_no_link_and_opens_only_regular_files(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "dir").mkdir(parents=True)
    outside.mkdir()
    (outside / "x").write_bytes(b"helper's")
    (root / "dir" / "x").write_bytes(b"learner's")
    (root / "linked-dir").symlink_to(outside)
    (root / "linked-file").symlink_to(outside / "x")
    os.mkfifo(root / "fifo")  # opened as a reader, it would block until a writer came
    fd = volume.open_below(root, "dir/x")
    assert fd is not None and os.read(fd, 100) == b"learner's"
    os.close(fd)
    for rel in ("linked-dir/x", "linked-file", "fifo", "dir", "missing", "../outside/x", ""):
        assert volume.open_below(root, rel) is None, rel


def test_a_restore_writes_through_no_link_a_learner_left_in_the_volume(
    tmp_path, s3_client, s3_bucket
):
    """A learner of an earlier run left links where the next helper restores (to the
    helper's own files, its Python packages say): the restore removes them and writes real
    files in real folders; what they pointed at is untouched."""
    outside = tmp_path / "helper-files"
    outside.mkdir()
    (outside / "x.py").write_bytes(b"helper's own")
    s3_client.put_object(Bucket=s3_bucket, Key="j/checkpoints/sub/x.py", Body=b"checkpoint")
    s3_client.put_object(Bucket=s3_bucket, Key="j/logs/learner-0.log", Body=b"line\n")
    s3_client.put_object(Bucket=s3_bucket, Key="data/sub/x.py", Body=b"data")

    ckpt_dir, log_dir, data_dir = tmp_path / "ck", tmp_path / "logs", tmp_path / "data"
    for d in (ckpt_dir, log_dir, data_dir):
        d.mkdir()
        (d / "sub").symlink_to(outside)
    (log_dir / "learner-0.log").symlink_to(outside / "x.py")

    mirror = sync.CheckpointSync(s3_client, s3_bucket, "j/checkpoints", ckpt_dir)
    assert mirror.restore(lambda: False) == 1
    logs = sync.LearnerLogs(s3_client, s3_bucket, "j", log_dir)
    assert logs.restore(learners=range(1)) == 1
    assert store.download_prefix(s3_client, s3_bucket, "data", data_dir, lambda: False) == (1, 4)

    assert sorted(p.name for p in outside.iterdir()) == ["x.py"]
    assert (outside / "x.py").read_bytes() == b"helper's own"
    assert (ckpt_dir / "sub" / "x.py").read_bytes() == b"checkpoint"
    assert (data_dir / "sub" / "x.py").read_bytes() == b"data"
    assert not (log_dir / "learner-0.log").is_symlink()
    assert (log_dir / "learner-0.log").read_bytes() == b"line\n"
    for d in (ckpt_dir, data_dir):
        assert not (d / "sub").is_symlink()


def test_real_dirs_makes_every_folder_on_the_way_real(tmp_path):
    root, outside = tmp_path / "job", tmp_path / "outside"
    (outside / "b").mkdir(parents=True)
    root.mkdir()
    (root / "a").symlink_to(outside)
    (root / "f").write_bytes(b"a file where a folder goes")
    volume.real_dirs(root, root / "a" / "b")
    volume.real_dirs(root, root / "f")
    assert (root / "a" / "b").is_dir() and not (root / "a").is_symlink()
    assert (root / "f").is_dir()
    assert sorted(p.name for p in outside.iterdir()) == ["b"]
