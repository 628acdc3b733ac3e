"""Metrics read from log lines (dlaas.domain.metrics): the key=value convention, Keras lines,
JSON lines (FfDL's records and plain objects) and FfDL's regex groups."""

from __future__ import annotations

import json
import math
import operator
from string import ascii_lowercase

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlaas.domain.errors import InvalidManifest
from dlaas.domain.metrics import MAX_SERIES, Extractor, compile_spec, points, series


def series_of(lines, spec=None):
    return series(points(lines, spec))


def test_key_values_at_the_epoch_the_line_names():
    found = series_of(["epoch 3/20 loss=0.42 accuracy=0.91", "epoch 4/20 loss=0.40 accuracy=0.93"])
    assert found == {"loss": [[3, 0.42], [4, 0.40]], "accuracy": [[3, 0.91], [4, 0.93]]}


def test_step_key_wins_over_epoch_and_is_not_a_series():
    found = series_of(["epoch 1 step=250 loss=0.5", "iteration=300 loss=0.4"])
    assert found == {"loss": [[250, 0.5], [300, 0.4]]}


def test_keras_lines_take_the_epoch_of_the_line_before():
    lines = [
        "Epoch 1/2",
        "469/469 [==============================] - 3s 5ms/step - loss: 0.5012 - accuracy: 0.8210",
        "Epoch 2/2",
        "469/469 [==============================] - 2s 4ms/step - loss: 0.3400 - accuracy: 0.8800",
    ]
    found = series_of(lines)
    assert found == {"loss": [[1, 0.5012], [2, 0.34]], "accuracy": [[1, 0.821], [2, 0.88]]}


def test_a_progress_bar_counts_its_last_state():
    line = "epoch 1 loss=0.9\repoch 1 loss=0.7\repoch 1 loss=0.5"
    assert series_of([line]) == {"loss": [[1, 0.5]]}


def test_series_without_a_step_count_their_points():
    assert series_of(["loss=0.9", "noise", "loss=0.8"]) == {"loss": [[0, 0.9], [1, 0.8]]}


def test_lines_that_only_look_alike_give_nothing():
    lines = [
        "https://example.com/?a=1&b=2x",
        "version=1.2.3",
        "--epochs 12 --batch-size 128",
        "loss=nan accuracy=inf",
        "pid 42 started",
    ]
    assert series_of(lines) == {}


def test_a_step_printed_again_keeps_its_last_value_and_order_is_by_step():
    # A job resumed from an earlier checkpoint runs epochs 2 and 3 again.
    lines = ["epoch 1 loss=1", "epoch 2 loss=0.9", "epoch 3 loss=0.8", "epoch 2 loss=0.7"]
    assert series_of(lines) == {"loss": [[1, 1.0], [2, 0.7], [3, 0.8]]}


def test_points_carry_their_line_index():
    found = list(points(["hello", "epoch 1 loss=0.5", "bye", "epoch 2 loss=0.4"]))
    assert [(p.step, p.line) for p in found] == [(1, 1), (2, 3)]


def test_ffdl_emetrics_records():
    record = {
        "meta": {"training_id": "t", "rindex": 1, "time": 0},
        "grouplabel": "test",
        "etimes": {"iteration": {"type": 1, "value": 7}},
        "values": {"accuracy": {"value": 0.95}, "loss": {"value": "0.12"}},
    }
    assert series_of([json.dumps(record)]) == {
        "test/accuracy": [[7, 0.95]],
        "test/loss": [[7, 0.12]],
    }


def test_plain_json_lines_need_a_step_key():
    lines = ['{"epoch": 5, "loss": 0.3, "note": "x"}', '{"pid": 3, "level": "info"}', "{bad json}"]
    assert series_of(lines) == {"loss": [[5, 0.3]]}


CAFFE_GROUPS = {
    "line_lookahead": 2,
    "groups": {
        "train": {
            "regex": r".*Iteration %{INT:iteration}, loss = %{FLOAT:loss}\n",
            "meta": {"time": "$iteration"},
            "scalars": {"loss": {"type": "FLOAT", "value": "$loss"}},
            "etimes": {"iteration": {"type": "INT", "value": "$iteration"}},
        },
        "test": {
            "regex": r".*Iteration %{INT:it}, Testing net.*\n.*accuracy = %{FLOAT:acc}\n",
            "values": {"accuracy": {"value": "$acc"}},
            "etimes": {"iteration": {"value": "$it"}},
        },
    },
}


def test_ffdl_regex_groups_over_a_window_of_lines():
    spec = compile_spec(CAFFE_GROUPS)
    lines = [
        "I0101 10:00:00.000 solver.cpp:218] Iteration 100, loss = 0.25",
        "I0101 10:00:01.000 solver.cpp:330] Iteration 200, Testing net (#0)",
        "I0101 10:00:02.000 solver.cpp:397]     Test net output #0: accuracy = 0.97",
    ]
    found = series_of(lines, spec)
    assert found["train/loss"] == [[100, 0.25]]
    assert found["test/accuracy"] == [[200, 0.97]]


def test_a_manifest_without_groups_has_no_regex_spec():
    assert compile_spec(None) is None
    assert compile_spec({"type": "tensorboard", "in": "$JOB_STATE_DIR/tb"}) is None


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (
            {"groups": {"g": {"regex": "(", "scalars": {"x": "1"}}}},
            "evaluation_metrics.groups.g.regex",
        ),
        ({"groups": {"g": {"regex": "%{NOPE:x}", "scalars": {"x": "$x"}}}}, "groups.g.regex"),
        ({"groups": {"g": {"regex": "(?P<a>1)", "scalars": {"x": "$b"}}}}, "groups.g.scalars.x"),
        ({"groups": {"g": {"regex": "(?P<a>1)"}}}, "groups.g.scalars"),
        ({"groups": {"g": {"scalars": {"x": "1"}}}}, "groups.g.regex"),
        ({"groups": []}, "evaluation_metrics.groups"),
        ({"groups": {"g": "x"}}, "groups.g"),
        ({"line_lookahead": 0, "groups": {}}, "line_lookahead"),
        ({"line_lookahead": "four", "groups": {}}, "line_lookahead"),
    ],
)
def test_bad_regex_specs_are_refused_naming_the_field(spec, field):
    with pytest.raises(InvalidManifest, match=field.replace(".", r"\.")):
        compile_spec(spec)


def test_series_are_bounded():
    line = " ".join(f"m{i}=1" for i in range(MAX_SERIES + 10))
    assert len(series_of([line])) == MAX_SERIES


finite = st.floats(allow_nan=False, allow_infinity=False, width=32)
# [a-z][a-z_]{0,8}, built from characters: drawing from st.from_regex cost twice as much.
names = st.builds(
    operator.add, st.sampled_from(ascii_lowercase), st.text(ascii_lowercase + "_", max_size=8)
).filter(lambda n: n not in ("step", "iter", "iteration", "epoch", "global_step"))


# 50 examples, not the default 100: each example is itself a list of lines (5-6 on average,
# up to 4 pairs each), and every line is read on its own, so 50 still round-trip ~500
# key=value pairs; generating these nested examples was the slowest thing in tests/unit
# (1-3 s of CPU at 100).
@settings(max_examples=50)
@given(st.lists(st.tuples(st.integers(0, 10**6), st.dictionaries(names, finite, max_size=4))))
def test_any_key_value_line_round_trips(rows):
    lines = [f"step={s} " + " ".join(f"{k}={v!r}" for k, v in m.items()) for s, m in rows]
    expected: dict[str, dict[int, float]] = {}
    for s, m in rows:
        for k, v in m.items():
            expected.setdefault(k, {})[s] = float(repr(v))
    found = series_of(lines)
    assert found == {k: [[s, v[s]] for s in sorted(v)] for k, v in expected.items()}


@given(st.lists(st.text(max_size=80), max_size=20))
def test_any_text_gives_finite_points_and_never_raises(lines):
    extractor = Extractor(compile_spec(CAFFE_GROUPS))
    for line in lines:
        for p in extractor.feed(line):
            assert math.isfinite(p.value) and math.isfinite(p.step)
