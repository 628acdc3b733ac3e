"""Metric files below LOG_DIR: which files count and whose they are (dlaas.domain.jobspec), the
points of JSON-lines files and TensorBoard records (dlaas.domain.metrics), TensorBoard's reader on
real event files (dlaas.adapters.metric_files) and the helper's choice of files to upload."""

from __future__ import annotations

import math
import threading
import zlib
from pathlib import Path

import pytest
from tb_events import write_events
from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

from dlaas.adapters import metric_files as files_adapter
from dlaas.adapters.metric_files import (
    MetricFileReader,
    ParsedFiles,
    file_records,
    tensorboard_scalars,
)
from dlaas.domain import jobspec, metrics
from dlaas.domain.locations import S3Location
from dlaas.domain.metric_query import KEEP
from services.learner_helper.sync import metric_files


@pytest.mark.parametrize(
    ("rel", "kind"),
    [
        ("events.out.tfevents.1700000000.host.1.0", jobspec.METRIC_FILE_TENSORBOARD),
        ("tb/train/events.out.tfevents.1700000000.host", jobspec.METRIC_FILE_TENSORBOARD),
        ("metrics.jsonl", jobspec.METRIC_FILE_JSONL),
        ("evaluation-metrics.txt", jobspec.METRIC_FILE_JSONL),
        ("learner-1/evaluation-metrics.txt", jobspec.METRIC_FILE_JSONL),
        ("learner-0.log", None),
        ("learner-0.exit", None),
        ("tb/.events.out.tfevents.tmp", None),
        ("notes.txt", None),
    ],
)
def test_metric_files_are_known_by_name(rel, kind):
    assert jobspec.metric_file_kind(rel) == kind


@pytest.mark.parametrize(
    ("rel", "learner"),
    [
        ("learner-3/tb/events.out.tfevents.1", 3),
        ("learner-12/m.jsonl", 12),
        ("tb/events.out.tfevents.1", 0),
        ("m.jsonl", 0),
        ("learner-x/m.jsonl", 0),
        ("tb/learner-2/m.jsonl", 0),  # only the first folder names a learner
    ],
)
def test_a_file_belongs_to_the_learner_its_first_folder_names_else_the_chief(rel, learner):
    assert jobspec.metric_file_learner(rel) == learner


def test_a_helper_uploads_only_its_own_learners_metric_files():
    local = {
        "learner-0.log": (1, 1),
        "m.jsonl": (1, 1),
        "learner-1/m.jsonl": (1, 1),
        "learner-2/tb/events.out.tfevents.1": (1, 1),
    }
    assert set(metric_files(local, [0, 1])) == {"m.jsonl", "learner-1/m.jsonl"}
    assert set(metric_files(local, [2])) == {"learner-2/tb/events.out.tfevents.1"}


def test_jsonl_points_read_plain_objects_and_ffdl_records():
    lines = [
        '{"step": 1, "loss": 0.9, "acc": 0.5}',
        (
            '{"grouplabel": "test", "etimes": {"iteration": {"value": 200}},'
            ' "values": {"accuracy": {"value": 0.97}}}'
        ),
        "not json at all",
        '{"step": 2, "loss": NaN}',
    ]
    found = metrics.jsonl_points(lines, "m.jsonl")
    assert [(p.name, p.step, p.value, p.line, p.source) for p in found] == [
        ("loss", 1, 0.9, 0, "m.jsonl"),
        ("acc", 1, 0.5, 0, "m.jsonl"),
        ("test/accuracy", 200, 0.97, 1, "m.jsonl"),
    ]


def test_scalar_points_keep_finite_values_and_name_their_source():
    found = metrics.scalar_points(
        [("loss", 0.0, 1.0), ("loss", 1.0, math.nan), ("acc", 2.0, 0.5)], "tb/events.out.x"
    )
    assert [(p.name, p.step, p.value, p.source) for p in found] == [
        ("loss", 0, 1.0, "tb/events.out.x"),
        ("acc", 2, 0.5, "tb/events.out.x"),
    ]
    assert found[0].event() == {
        "name": "loss",
        "step": 0,
        "value": 1.0,
        "line": 0,
        "source": "tb/events.out.x",
    }


def test_unseen_hands_out_each_point_of_a_reread_file_once():
    unseen = metrics.Unseen()
    first = metrics.scalar_points([("loss", 0.0, 1.0)], "f")
    again = metrics.scalar_points([("loss", 0.0, 1.0), ("loss", 1.0, 0.5)], "f")
    assert unseen.new(first) == first
    assert [p.step for p in unseen.new(again)] == [1]
    assert unseen.new(metrics.scalar_points([("loss", 0.0, 1.0)], "other")) != []


def test_a_step_written_again_by_a_resumed_learner_replaces_its_point():
    before = metrics.scalar_points([("loss", 1.0, 0.9), ("loss", 2.0, 0.8)], "events.1")
    after = metrics.scalar_points([("loss", 2.0, 0.7), ("loss", 3.0, 0.6)], "events.2")
    assert metrics.series(before + after) == {"loss": [[1, 0.9], [2, 0.7], [3, 0.6]]}


def scalar_tensor_value(tag: str, value: float) -> summary_pb2.Summary.Value:
    """A TF2 `tf.summary.scalar` value: a scalar tensor with the scalars plugin's metadata."""
    tensor = tensor_pb2.TensorProto(
        dtype=types_pb2.DT_DOUBLE,
        double_val=[value],
        tensor_shape=tensor_shape_pb2.TensorShapeProto(),
    )
    plugin = summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
    return summary_pb2.Summary.Value(
        tag=tag, tensor=tensor, metadata=summary_pb2.SummaryMetadata(plugin_data=plugin)
    )


def test_tensorboard_reader_finds_tf1_and_tf2_scalars(tmp_path):
    image = summary_pb2.Summary.Value(tag="sample", image=summary_pb2.Summary.Image(height=1))
    path = write_events(
        tmp_path,
        [
            (0, summary_pb2.Summary.Value(tag="loss", simple_value=2.0)),  # TF1
            (1, summary_pb2.Summary.Value(tag="loss", simple_value=1.0)),
            (1, image),  # not a scalar: left out
            (10, scalar_tensor_value("val/acc", 0.75)),  # TF2
        ],
    )
    assert list(tensorboard_scalars(path)) == [
        ("loss", 0.0, 2.0),
        ("loss", 1.0, 1.0),
        ("val/acc", 10.0, 0.75),
    ]
    found = list(file_records(jobspec.METRIC_FILE_TENSORBOARD, path))
    assert found == [("loss", 0.0, 2.0), ("loss", 1.0, 1.0), ("val/acc", 10.0, 0.75)]


def test_an_event_file_cut_mid_record_yields_its_complete_records(tmp_path):
    path = write_events(
        tmp_path, [(s, summary_pb2.Summary.Value(tag="loss", simple_value=s)) for s in range(3)]
    )
    data = path.read_bytes()
    path.write_bytes(data[:-5])  # the writer is still busy with the last record
    assert [step for _, step, _ in tensorboard_scalars(path)] == [0.0, 1.0]


def test_file_records_of_a_jsonl_file(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"epoch": 1, "loss": 0.5}\n{"epoch": 2, "loss": 0.25}')  # no last newline
    assert list(file_records(jobspec.METRIC_FILE_JSONL, path)) == [
        ("loss", 1, 0.5),
        ("loss", 2, 0.25),
    ]


# --------------------------------------------------------------------------- bounded reads


class FakeS3:
    """FAKE S3 (in memory): a listing of one prefix and whole-object downloads, counted;
    `gate` holds every download until it is set."""

    def __init__(self, objects: dict[str, bytes]):
        self.objects = objects
        self.downloads: list[str] = []
        self.gate = threading.Event()
        self.gate.set()

    def get_paginator(self, _name):
        s3 = self

        class Pages:
            def paginate(self, Bucket, Prefix):
                return [{"Contents": [
                    {"Key": k, "ETag": f'"{zlib.crc32(v)}"', "Size": len(v)}
                    for k, v in s3.objects.items() if k.startswith(Prefix)
                ]}]  # fmt: skip

        return Pages()

    def download_file(self, bucket, key, path):
        self.gate.wait(10)
        self.downloads.append(key)
        Path(path).write_bytes(self.objects[key])


def reader_of(s3, parsed, wait_s=10.0):
    results = S3Location("", "", "", "res")
    return MetricFileReader(s3, results, "job-1", 0, parsed=parsed, wait_s=wait_s)


def jsonl(steps, name="loss") -> bytes:
    return b"".join(b'{"step": %d, "%s": %d}\n' % (s, name.encode(), s) for s in steps)


def key(rel: str) -> str:
    return jobspec.metrics_prefix("job-1") + rel


def test_a_file_version_is_parsed_once_and_a_new_version_again():
    s3 = FakeS3({key("m.jsonl"): jsonl(range(3))})
    parsed = ParsedFiles()
    for _ in range(3):
        found = reader_of(s3, parsed).read()
        assert found.parts["m.jsonl"].snapshot() == {"loss": [(0, 0), (1, 1), (2, 2)]}
    assert s3.downloads == [key("m.jsonl")] and parsed.parses == 1
    s3.objects[key("m.jsonl")] = jsonl(range(4))  # the helper uploaded it again
    found = reader_of(s3, parsed).read()
    assert len(found.parts["m.jsonl"].snapshot()["loss"]) == 4 and parsed.parses == 2


def test_a_long_file_is_kept_in_bounded_series(monkeypatch):
    # A bound of 256 points over 20,000 lines (78 times the bound, as 320,000 lines would
    # be of the real KEEP): the same decimation, a fiftieth of the parsing.
    keep = 256
    assert keep < KEEP
    monkeypatch.setattr(files_adapter, "KEEP", keep)
    s3 = FakeS3({key("m.jsonl"): jsonl(range(20_000))})
    found = reader_of(s3, ParsedFiles()).read()
    points = found.parts["m.jsonl"].snapshot()["loss"]
    assert len(points) <= keep + 1
    assert points[0] == (0, 0) and points[-1] == (19_999, 19_999)


def test_files_past_the_count_and_size_limits_are_left_out_naming_why(monkeypatch):
    monkeypatch.setattr(files_adapter, "MAX_FILES", 2)
    monkeypatch.setattr(files_adapter, "MAX_FILE_BYTES", 100)
    s3 = FakeS3({key(f"m{i}.jsonl"): jsonl([i]) for i in range(3)})
    s3.objects[key("big.jsonl")] = jsonl(range(100))
    found = reader_of(s3, ParsedFiles()).read()
    assert sorted(found.parts) == ["m0.jsonl", "m1.jsonl"]
    assert "byte limit" in found.left_out["big.jsonl"]
    assert "more than 2 metric files" in found.left_out["m2.jsonl"]
    assert sorted(s3.downloads) == [key("m0.jsonl"), key("m1.jsonl")]


def test_a_request_does_not_wait_past_its_bound_for_a_parse():
    s3 = FakeS3({key("m.jsonl"): jsonl(range(3))})
    s3.gate.clear()  # the download takes its time
    parsed = ParsedFiles()
    found = reader_of(s3, parsed, wait_s=0.05).read()
    assert found.reading == ["m.jsonl"]
    s3.gate.set()
    found = reader_of(s3, parsed).read()
    assert found.reading == [] and parsed.parses == 1


def test_parsed_versions_are_dropped_least_recently_used_first_past_the_bound():
    s3 = FakeS3({key(f"m{i}.jsonl"): jsonl(range(100)) for i in range(3)})
    parsed = ParsedFiles(max_points=250)  # room for two files of 101 points
    reader_of(s3, parsed).read()
    assert len(parsed._files) == 2
    reader_of(s3, parsed).read()  # the dropped one is parsed again
    assert parsed.parses >= 4
