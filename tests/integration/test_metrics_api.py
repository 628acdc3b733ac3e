"""`GET /v1/jobs/{id}/metrics` against the real S3 and job store (test_api's `env`):
series from a learner's stored log, owner-checked, with FfDL regex groups from the
manifest, from the metric files the helper stored (TensorBoard, JSON lines), and
`follow` as JSON lines."""

from __future__ import annotations

import json
import threading

from tb_events import scalars, write_events
from test_api import ALICE, BOB, auth, env, put_log  # noqa: F401 - env is a fixture

from dlaas.domain import jobspec

LINES = [
    "starting",
    "epoch 1/3 loss=0.90 accuracy=0.50",
    "epoch 2/3 loss=0.60 accuracy=0.70",
    "epoch 3/3 loss=0.40 accuracy=0.85",
    "done",
]


def get_metrics(env, job_id: str, token=ALICE, **params):  # noqa: F811
    return env.client.get(f"/v1/jobs/{job_id}/metrics", params=params, headers=auth(token))


def test_series_come_from_the_stored_log(env):  # noqa: F811
    job_id = env.submit().json()["job_id"]
    put_log(env, job_id, 0, LINES)
    env.finish(job_id)
    r = get_metrics(env, job_id)
    assert r.status_code == 200, r.text
    assert r.json() == {
        "job_id": job_id,
        "learner": 0,
        "series": {
            "loss": [[1, 0.9], [2, 0.6], [3, 0.4]],
            "accuracy": [[1, 0.5], [2, 0.7], [3, 0.85]],
        },
        "truncated": False,
        "next_since_step": None,
        "reading": [],
        "left_out": {},
    }


def test_a_job_without_a_log_yet_has_no_series(env):  # noqa: F811
    job_id = env.submit().json()["job_id"]
    r = get_metrics(env, job_id)
    assert r.status_code == 200
    assert r.json()["series"] == {}


def test_each_learner_has_its_own_series(env):  # noqa: F811
    job_id = env.submit(manifest=env.manifest(learners=2)).json()["job_id"]
    put_log(env, job_id, 0, LINES)
    put_log(env, job_id, 1, ["step=10 loss=2.5"])
    env.finish(job_id)
    assert get_metrics(env, job_id, learner=1).json()["series"] == {"loss": [[10, 2.5]]}
    r = get_metrics(env, job_id, learner=2)
    assert r.status_code == 422
    assert r.json()["message"].startswith("learner:")


def test_another_users_job_is_not_found(env):  # noqa: F811
    job_id = env.submit().json()["job_id"]
    put_log(env, job_id, 0, LINES)
    r = get_metrics(env, job_id, token=BOB)
    assert r.status_code == 404
    assert "loss" not in r.text
    assert get_metrics(env, "job-000000000000").status_code == 404


def with_metrics_section(env, section: str) -> str:  # noqa: F811
    return env.manifest() + section


def test_ffdl_regex_groups_of_the_manifest(env):  # noqa: F811
    section = (
        "evaluation_metrics:\n"
        "  type: optivist\n"
        "  groups:\n"
        "    train:\n"
        "      regex: '.*Iteration %{INT:it}, loss = %{FLOAT:loss}'\n"
        "      scalars:\n"
        "        loss: {type: FLOAT, value: $loss}\n"
        "      etimes:\n"
        "        iteration: {type: INT, value: $it}\n"
    )
    r = env.submit(manifest=with_metrics_section(env, section))
    assert r.status_code == 201, r.text
    job_id = r.json()["job_id"]
    put_log(env, job_id, 0, ["I0101 solver.cpp:218] Iteration 100, loss = 0.25"])
    env.finish(job_id)
    series = get_metrics(env, job_id).json()["series"]
    assert series["train/loss"] == [[100, 0.25]]


def test_a_bad_regex_group_is_reported_naming_the_field(env):  # noqa: F811
    section = (
        "evaluation_metrics:\n"
        "  groups:\n"
        "    train:\n"
        "      regex: 'Iteration (%{INT:it}'\n"
        "      scalars: {loss: {value: $it}}\n"
    )
    job_id = env.submit(manifest=with_metrics_section(env, section)).json()["job_id"]
    r = get_metrics(env, job_id)
    assert r.status_code == 422
    assert r.json()["problems"][0].startswith("evaluation_metrics.groups.train.regex:")


def test_follow_streams_points_as_json_lines_until_the_job_ends(env):  # noqa: F811
    job_id = env.submit().json()["job_id"]
    done = threading.Event()

    def later():
        done.wait(0.3)
        put_log(env, job_id, 0, LINES)
        env.finish(job_id)

    threading.Thread(target=later).start()
    r = get_metrics(env, job_id, follow="true")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/x-ndjson")
    events = [json.loads(line) for line in r.text.splitlines()]
    assert [(e["name"], e["step"], e["value"], e["line"]) for e in events[:2]] == [
        ("loss", 1, 0.9, 1),
        ("accuracy", 1, 0.5, 1),
    ]
    assert len(events) == 6


def put_metric_file(env, job_id: str, rel: str, body: bytes) -> None:  # noqa: F811
    """A metric file as the helper stores it (services.learner_helper.sync.MetricFiles)."""
    env.s3.put_object(Bucket=env.results, Key=jobspec.metrics_prefix(job_id) + rel, Body=body)


def test_series_of_tensorboard_and_jsonl_files_join_the_logs(env, tmp_path):  # noqa: F811
    job_id = env.submit(manifest=env.manifest(learners=2)).json()["job_id"]
    put_log(env, job_id, 0, LINES)
    events = write_events(tmp_path, scalars("tb_loss", {0: 1.0, 1: 0.5}))
    put_metric_file(env, job_id, "tb/" + events.name, events.read_bytes())
    put_metric_file(env, job_id, "evaluation-metrics.txt", b'{"step": 7, "val_acc": 0.8}\n')
    put_metric_file(env, job_id, "learner-1/m.jsonl", b'{"step": 1, "loss": 3.0}\n')
    env.finish(job_id)
    series = get_metrics(env, job_id).json()["series"]
    assert series["tb_loss"] == [[0, 1.0], [1, 0.5]]
    assert series["val_acc"] == [[7, 0.8]]
    assert series["loss"] == [[1, 0.9], [2, 0.6], [3, 0.4]]  # learner 1's file is not here
    assert get_metrics(env, job_id, learner=1).json()["series"] == {"loss": [[1, 3.0]]}


def test_follow_streams_file_points_once_with_their_source(env):  # noqa: F811
    job_id = env.submit().json()["job_id"]
    done = threading.Event()

    def later():
        put_metric_file(env, job_id, "m.jsonl", b'{"step": 1, "loss": 0.5}\n')
        done.wait(0.3)
        # The file grows: only its new point is sent.
        put_metric_file(
            env, job_id, "m.jsonl", b'{"step": 1, "loss": 0.5}\n{"step": 2, "loss": 0.4}\n'
        )
        done.wait(0.3)
        put_log(env, job_id, 0, ["epoch 1 acc=0.7"])
        env.finish(job_id)

    threading.Thread(target=later).start()
    r = get_metrics(env, job_id, follow="true")
    assert r.status_code == 200
    events = [json.loads(line) for line in r.text.splitlines()]
    from_file = [(e["name"], e["step"], e["value"]) for e in events if e.get("source") == "m.jsonl"]
    assert from_file == [("loss", 1, 0.5), ("loss", 2, 0.4)]
    assert [(e["name"], e["step"]) for e in events if "source" not in e] == [("acc", 1)]
