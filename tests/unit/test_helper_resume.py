"""The helper's fast start (services.learner_helper.resume): when a restarted gang may train
on its volume as the job's last run stored it, and the standard-library S3 signing it uses.
Pure functions, plus files in a temporary job dir; the whole start against a real S3 is
tests/integration/test_helper.py."""

from __future__ import annotations

import datetime as dt
import hashlib

import pytest

from dlaas.learner.paths import JobPaths
from services.learner_helper import resume, s3lite
from services.learner_helper.config import HelperConfig

ENV = {
    "JOB_ID": "job-1",
    "DLAAS_S3_ENDPOINT": "http://127.0.0.1:9",
    "AWS_ACCESS_KEY_ID": "AK",
    "AWS_SECRET_ACCESS_KEY": "never-shown",
    "DLAAS_RESULTS_BUCKET": "results",
    "DLAAS_DATA_BUCKET": "data",
    "DLAAS_CODE_BUCKET": "code",
    "DLAAS_CODE_KEY": "job-1.tar.gz",
}


def test_the_signature_is_aws_s_own_example():
    # AWS's documented Signature V4 example for S3 (GET /test.txt with a Range header).
    creds = s3lite.Credentials(
        "https://examplebucket.s3.amazonaws.com",
        "AKIAIOSFODNN7EXAMPLE",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    )
    headers = s3lite.sign(
        "GET", "examplebucket.s3.amazonaws.com", "/test.txt", {}, {"Range": "bytes=0-9"},
        s3lite.EMPTY_SHA256, creds, dt.datetime(2013, 5, 24, tzinfo=dt.UTC),
    )  # fmt: skip
    assert headers["Authorization"].endswith(
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
    )
    assert "wJalrXUtnFEMI" not in repr(creds)


def test_keys_and_queries_are_uri_encoded_once():
    assert s3lite.object_path("b", "logs/learner 0.log") == "/b/logs/learner%200.log"
    assert s3lite.canonical_query({"prefix": "a b/", "list-type": "2"}) == (
        "list-type=2&prefix=a%20b%2F"
    )


def test_checkpoints_match_only_the_same_names_and_sizes():
    remote = {"ck/a.pkl": 3, "ck/.tmp-b": 9, "ck/": 0}
    assert resume.checkpoints_match({"a.pkl": 3}, remote, "ck/")
    assert not resume.checkpoints_match({"a.pkl": 4}, remote, "ck/")  # rewritten
    assert not resume.checkpoints_match({}, remote, "ck/")  # one added by a run elsewhere
    assert not resume.checkpoints_match({"a.pkl": 3, "b.pkl": 1}, remote, "ck/")


def test_a_log_matches_its_object_byte_for_byte_only():
    data = b"epoch 1/3\nepoch 2/3\n"
    head = {
        "content-length": str(len(data)),
        "etag": f'"{hashlib.md5(data, usedforsecurity=False).hexdigest()}"',
    }
    assert resume.log_matches(data, head)
    assert not resume.log_matches(data + b"epoch 3/3\n", head)  # printed since it was stored
    longer = data + b"x\n"
    other = {"content-length": str(len(longer)), "etag": '"0123"'}
    assert not resume.log_matches(longer, other)  # same size, other bytes
    cut = b"epoch 1/3\nepo"
    cut_head = {
        "content-length": str(len(cut)),
        "etag": hashlib.md5(cut, usedforsecurity=False).hexdigest(),
    }
    assert not resume.log_matches(cut, cut_head)  # restore must add the newline
    assert resume.log_matches(b"", None)  # no log anywhere yet
    assert not resume.log_matches(data, None)  # never stored


def test_the_prepared_mark_names_the_jobs_data_and_code(tmp_path):
    paths = JobPaths.from_env({"DLAAS_JOB_DIR": str(tmp_path)})
    cfg = HelperConfig.from_env(ENV)
    assert not resume.is_prepared(paths, cfg)
    resume.mark_prepared(paths, cfg)
    assert resume.is_prepared(paths, cfg)
    other = HelperConfig.from_env({**ENV, "DLAAS_CODE_KEY": "other.tar.gz"})
    assert not resume.is_prepared(paths, other)
    resume.forget_prepared(paths)
    assert not resume.is_prepared(paths, cfg)


def test_no_fast_start_without_a_prepared_volume_or_beside_running_learners(tmp_path):
    env = {**ENV, "DLAAS_JOB_DIR": str(tmp_path)}
    paths = JobPaths.from_env(env)
    said: list[str] = []
    assert not resume.fast_start(env, said.append, 0.0)  # nothing prepared: no S3 call made
    resume.mark_prepared(paths, HelperConfig.from_env(env))
    paths.ready_mark.touch()  # a helper restarted beside running learners: main.run's rejoin
    assert not resume.fast_start(env, said.append, 0.0)
    assert said == []
    assert not resume.fast_start({**env, "JOB_ID": ""}, said.append, 0.0)  # bad env: run() says


def test_a_refusal_is_asked_again_a_few_times_then_stands(monkeypatch):
    # The platform's store refuses a fresh identity for a moment (store.retry_refusal).
    answers = [403, 403, 200]
    calls, waits = [], []
    monkeypatch.setattr(s3lite.time, "sleep", waits.append)

    def request(*args, **kwargs):
        calls.append(args)
        return answers.pop(0), {"etag": '"e"'}, b""

    monkeypatch.setattr(s3lite, "request", request)
    creds = s3lite.Credentials("http://s3:8333", "AK", "SK")
    assert s3lite.head(creds, "b", "k") == {"etag": '"e"'}
    assert len(calls) == 3 and waits == [0.1, 0.2]
    answers[:] = [403] * 4
    with pytest.raises(s3lite.S3LiteError, match="403"):
        s3lite.head(creds, "b", "k")
