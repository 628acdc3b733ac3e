"""How often the helper ships checkpoints while the learners train
(services.learner_helper.main.next_sync_at): paced by the last sync's cost, never later than
the job's interval. The rule as pure logic, and the helper's whole `run` against an in-memory
store whose uploads are slow; the same against a real S3 is tests/integration/test_helper.py.
And what a sync asks the store: the bucket once, not before every upload; and what one tick
ships together: no checkpoint without the log lines printed before it."""

from __future__ import annotations

import itertools
import threading
import time
from types import SimpleNamespace

import botocore.exceptions
import pytest

from dlaas.domain.jobspec import log_object_key
from dlaas.learner.paths import JobPaths
from services.learner_helper import main, store
from services.learner_helper.main import CHECKPOINT_SCAN_S, SYNC_PACE, next_sync_at
from services.learner_helper.sync import CheckpointSync, LearnerLogs


def test_a_cheap_sync_is_followed_by_the_next_scan():
    # A scan that found nothing new, or a fast upload: as soon as before.
    assert next_sync_at(100.0, 0.001, 60) == 100.0 + CHECKPOINT_SCAN_S
    assert next_sync_at(100.0, CHECKPOINT_SCAN_S / SYNC_PACE, 60) == 100.0 + CHECKPOINT_SCAN_S


def test_a_costly_sync_waits_pace_times_its_duration():
    assert next_sync_at(100.0, 0.2, 60) == pytest.approx(100.0 + SYNC_PACE * 0.2)
    # So shipping takes at most about 1 / (SYNC_PACE + 1) of the time.
    took = 0.3
    assert took / (next_sync_at(0.0, took, 60) + took) <= 1 / SYNC_PACE


def test_never_later_than_the_jobs_interval():
    assert next_sync_at(100.0, 30.0, 60) == 160.0  # 10 x 30 s would be 300 s
    assert next_sync_at(100.0, 5.0, 0.1) == 100.0 + CHECKPOINT_SCAN_S  # never a busy loop


# --------------------------------------------------------------------------- through run


def _missing(op: str) -> botocore.exceptions.ClientError:
    return botocore.exceptions.ClientError(
        {"Error": {"Code": "404"}, "ResponseMetadata": {"HTTPStatusCode": 404}}, op
    )


class SlowStore:
    """The boto3 calls the helper makes, in memory; each upload takes `upload_s`."""

    def __init__(self, upload_s: float):
        self.upload_s = upload_s
        self.objects: dict[str, bytes] = {}
        self.checkpoint_uploads: list[float] = []  # when each began (time.monotonic)
        self.bucket_heads = 0
        self.failing = False

    def head_bucket(self, Bucket):
        self.bucket_heads += 1
        return {}

    def head_object(self, Bucket, Key):
        if Key not in self.objects:
            raise _missing("HeadObject")
        return {"ContentLength": len(self.objects[Key]), "Metadata": {}}

    def get_paginator(self, _name):
        objects = self.objects

        class Pages:
            def paginate(self, Bucket, Prefix):
                found = [
                    {"Key": k, "Size": len(v)} for k, v in objects.items() if k.startswith(Prefix)
                ]
                return [{"Contents": found}]

        return Pages()

    def upload_fileobj(self, body, bucket, key, ExtraArgs=None):
        if self.failing:
            raise botocore.exceptions.ClientError(
                {"Error": {"Code": "InternalError"}, "ResponseMetadata": {"HTTPStatusCode": 500}},
                "PutObject",
            )
        if "/checkpoints/" in key:
            self.checkpoint_uploads.append(time.monotonic())
        time.sleep(self.upload_s)
        self.objects[key] = body.read()

    def delete_object(self, Bucket, Key):
        self.objects.pop(Key, None)


def _env(tmp_path) -> dict[str, str]:
    return {
        "JOB_ID": "job-1",
        "DLAAS_S3_ENDPOINT": "http://127.0.0.1:9",
        "AWS_ACCESS_KEY_ID": "AK",
        "AWS_SECRET_ACCESS_KEY": "never-shown",
        "DLAAS_RESULTS_BUCKET": "results",
        "DLAAS_CHECKPOINT_PREFIX": "job-1/checkpoints",
        "DLAAS_CHECKPOINT_INTERVAL_S": "60",
        "DLAAS_JOB_DIR": str(tmp_path),
    }


def test_a_learner_that_checkpoints_often_gets_paced_syncs_and_its_last_checkpoint_stored(
    tmp_path, monkeypatch
):
    # A scan every 0.05 s and uploads of 0.3 / SYNC_PACE s: unpaced, a sync about every
    # 0.05-0.1 s; paced, one every SYNC_PACE x upload = 0.3 s at the soonest.
    upload_s = 0.3 / SYNC_PACE
    monkeypatch.setattr(main, "CHECKPOINT_SCAN_S", 0.05)
    fake = SlowStore(upload_s=upload_s)
    monkeypatch.setattr(store, "make_client", lambda *a, **k: fake)
    stop = threading.Event()
    codes: list[int] = []
    env = _env(tmp_path)
    helper = threading.Thread(target=lambda: codes.append(main.run(env, stop)))
    helper.start()
    paths = JobPaths.from_env(env)
    checkpoints = paths.checkpoint_dir
    deadline = time.monotonic() + 10
    while not paths.ready_mark.exists():
        assert time.monotonic() < deadline, "the helper never got ready"
        time.sleep(0.01)
    step = 0
    until = time.monotonic() + 0.9
    while time.monotonic() < until:  # a checkpoint every 0.02 s
        step += 1
        (checkpoints / "ckpt.pt").write_text(f"step {step}")
        time.sleep(0.02)
    stopped = time.monotonic()
    stop.set()
    helper.join(timeout=10)
    assert codes == [0]
    during = [
        t for t in fake.checkpoint_uploads if t < stopped
    ]  # the final sync at finish is never paced
    assert len(during) >= 2
    gaps = [b - a for a, b in itertools.pairwise(during)]
    assert min(gaps) >= SYNC_PACE * upload_s * 0.9, gaps
    assert fake.objects["job-1/checkpoints/ckpt.pt"] == f"step {step}".encode()


def test_a_sync_asks_for_the_bucket_once_and_again_after_a_failed_upload(tmp_path):
    fake = SlowStore(upload_s=0.0)
    ckpt = CheckpointSync(fake, "results", "job-1/checkpoints", tmp_path / "ck")
    logs = LearnerLogs(fake, "results", "job-1", tmp_path / "logs")
    (tmp_path / "ck").mkdir()
    (tmp_path / "logs").mkdir()
    for step in range(3):
        (tmp_path / "ck" / "ckpt.pt").write_text(f"step {step}")
        (tmp_path / "logs" / "learner-0.log").write_text(f"line {step}\n")
        assert logs.upload_changed() == [0]
        assert ckpt.sync().uploaded == 1
    assert fake.bucket_heads == 2  # one for each; 6 before
    fake.failing = True
    (tmp_path / "ck" / "ckpt.pt").write_text("step 3")
    with pytest.raises(store.StoreError):
        ckpt.sync()
    fake.failing = False
    assert ckpt.sync().uploaded == 1
    assert fake.bucket_heads == 3  # asked again: the bucket may have gone
    assert fake.objects["job-1/checkpoints/ckpt.pt"] == b"step 3"


def test_a_checkpoint_saved_while_the_logs_upload_waits_for_the_next_tick(tmp_path):
    # The learner prints "epoch N", then saves its checkpoint. Saved while the helper reads
    # and uploads the log (after the log's read), a checkpoint shipped in the same tick would
    # be in S3 without its line: a gang resumed from it (its node killed meanwhile) never
    # shows that line. Found by the chaos benchmark, 2026-11-23 and 2026-11-27.
    fake = SlowStore(upload_s=0.0)
    ck, log_dir = tmp_path / "ck", tmp_path / "logs"
    ck.mkdir()
    log_dir.mkdir()
    ckpt = CheckpointSync(fake, "results", "job-1/checkpoints", ck)
    logs = LearnerLogs(fake, "results", "job-1", log_dir)
    cfg = SimpleNamespace(primary=True, checkpoint_interval_s=60)
    log = log_dir / "learner-0.log"

    def train(epoch: int) -> None:
        with open(log, "a") as f:
            f.write(f"epoch {epoch}\n")
        (ck / f"ckpt-{epoch}.pt").write_text(f"epoch {epoch}")
        (ck / "model.pt").write_text(f"weights of epoch {epoch}")  # overwritten each epoch

    upload_logs = logs.upload_changed

    def upload_while_the_learner_trains() -> list[int]:
        uploaded = upload_logs()
        train(3)
        return uploaded

    def shipped() -> tuple[set[str], bytes, bytes]:
        names = {k.rsplit("/", 1)[1] for k in fake.objects if "/checkpoints/" in k}
        model = fake.objects["job-1/checkpoints/model.pt"]
        return names, fake.objects[log_object_key("job-1", 0)], model

    train(1)
    assert main.tick(cfg, ckpt, logs, with_logs=False)
    train(2)
    logs.upload_changed = upload_while_the_learner_trains  # type: ignore[method-assign]
    assert main.tick(cfg, ckpt, logs, with_logs=False)
    names, log_text, model = shipped()
    assert names == {"ckpt-1.pt", "ckpt-2.pt", "model.pt"}
    assert log_text == b"epoch 1\nepoch 2\n"
    # Overwritten since the scan: the weights of epoch 3 wait for their line.
    assert model == b"weights of epoch 1"

    logs.upload_changed = upload_logs  # type: ignore[method-assign]
    assert main.tick(cfg, ckpt, logs, with_logs=False)
    names, log_text, model = shipped()
    assert names == {"ckpt-1.pt", "ckpt-2.pt", "ckpt-3.pt", "model.pt"}
    assert log_text == b"epoch 1\nepoch 2\nepoch 3\n"
    assert model == b"weights of epoch 3"
