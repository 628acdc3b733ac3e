"""Metric files below LOG_DIR: which files count and whose they are (dlaas.domain.jobspec), the
points of JSON-lines files and TensorBoard records (dlaas.domain.metrics), TensorBoard's reader on
real event files (dlaas.adapters.metric_files) and the helper's choice of files to upload."""

from __future__ import annotations

import math

import pytest
from tb_events import write_events
from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2

from dlaas.adapters.metric_files import file_records, tensorboard_scalars
from dlaas.domain import jobspec, metrics
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
