"""The learner helper's mirrors against a real SeaweedFS: checkpoints kept in step with S3
(keep-K, restore, adopt) and the learner log restored across runs. The pure parts (the
sync plan, the scan) are in tests/unit/test_learner_lib.py.
"""

from __future__ import annotations

from dlaas.learner import checkpoint
from services.learner_helper import sync


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
