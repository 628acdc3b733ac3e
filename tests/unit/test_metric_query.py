"""The metric query's checks and cut (dlaas.domain.metric_query): every bad filter is refused
naming its field; `select` filters by name and step and pages by whole steps."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest

from dlaas.domain.errors import InvalidRequest
from dlaas.domain.metric_query import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    MAX_POINTS,
    Decimated,
    check_learner,
    downsample,
    merge_series,
    metric_query,
    select,
    wanted,
)
from dlaas.domain.metrics import MAX_SERIES, Point

SERIES = {
    "loss": [[1, 0.9], [2, 0.6], [3, 0.4]],
    "accuracy": [[1, 0.5], [2, 0.7], [3, 0.85]],
    "lr": [[2, 0.01]],
}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"since_step": -1}, "since_step: must be 0 or more"),
        ({"since_step": math.nan}, "since_step: must be a finite number"),
        ({"since_step": math.inf}, "since_step: must be a finite number"),
        ({"limit": MAX_LIMIT + 1}, "limit: must be 1 to"),
        ({"limit": 10**18}, "limit: must be 1 to"),
        ({"limit": -1}, "limit: must be 1 to"),
        ({"learner": -1}, "learner: must be 0 to"),
        ({"learner": 10**12}, "learner: must be 0 to"),
        ({"names": [""]}, "names: each name"),
        ({"names": ["n" * 129]}, "names: each name"),
        ({"names": [f"s{i}" for i in range(MAX_SERIES + 1)]}, "names: at most"),
    ],
)
def test_bad_filters_are_refused_naming_the_field(kwargs, field):
    with pytest.raises(InvalidRequest) as refused:
        metric_query(**kwargs)
    assert refused.value.message.startswith(field)


def test_defaults_and_a_good_query():
    assert metric_query().limit == DEFAULT_LIMIT
    q = metric_query(learner=2, names=["loss", "loss"], since_step=0, limit=MAX_LIMIT)
    assert (q.learner, q.names, q.since_step, q.limit) == (2, {"loss"}, 0, MAX_LIMIT)


def test_a_learner_the_job_never_had_is_named():
    check_learner(1, 2)
    with pytest.raises(InvalidRequest, match=r"^learner: the job has learners 0\.\.1, not 2"):
        check_learner(2, 2)


def test_select_filters_names_and_steps_after_since():
    got = select(SERIES, metric_query(names=["loss", "nope"], since_step=1))
    assert got.series == {"loss": [[2, 0.6], [3, 0.4]]}
    assert (got.truncated, got.next_since_step) == (False, None)
    assert select(SERIES, metric_query(since_step=3)).series == {}


def test_select_stops_at_a_whole_step_and_paging_gets_every_point_once():
    seen: list[tuple[str, float]] = []
    since = None
    pages = 0
    while True:
        got = select(SERIES, metric_query(since_step=since, limit=3))
        pages += 1
        for name, points in got.series.items():
            seen += [(name, p[0]) for p in points]
        steps = {p[0] for points in got.series.values() for p in points}
        # A page ends at a step boundary: every series' point of each step it has.
        for step in steps:
            assert all(
                [step, v] in got.series.get(name, []) for name, pts in SERIES.items()
                for s, v in pts if s == step
            )  # fmt: skip
        if not got.truncated:
            break
        since = got.next_since_step
    expected = [(name, p[0]) for name, points in SERIES.items() for p in points]
    assert sorted(seen) == sorted(expected) and len(seen) == len(expected)
    assert pages == 3  # step 1 (2 points), step 2 (3 points), step 3 (2 points)


def test_a_first_step_larger_than_the_limit_comes_whole():
    got = select(SERIES, metric_query(limit=1))
    assert got.series == {"loss": [[1, 0.9]], "accuracy": [[1, 0.5]]}
    assert (got.truncated, got.next_since_step) == (True, 1)


def test_wanted_is_the_follow_filter():
    q = metric_query(names=["loss"], since_step=2)
    assert wanted(Point("loss", 3, 0.1, 0), q)
    assert not wanted(Point("loss", 2, 0.1, 0), q)  # since is exclusive
    assert not wanted(Point("acc", 3, 0.1, 0), q)
    assert wanted(Point("acc", 0, 0.1, 0), metric_query())


# --------------------------------------------------------------------------- bounds


def test_a_long_series_is_kept_in_at_most_keep_points_evenly_with_its_ends():
    kept = Decimated(keep=10)  # 10,000 times the bound, as before with keep=100
    for step in range(100_000):
        kept.add(step, step / 2)
    points = kept.points()
    assert len(points) <= 11
    assert points[0] == (0, 0) and points[-1] == (99_999, 99_999 / 2)
    gaps = {b[0] - a[0] for a, b in pairwise(points[:-1])}
    assert gaps == {kept.stride}  # evenly spread over the run


def test_a_step_given_again_replaces_its_point():
    kept = Decimated(keep=10)
    for step, value in [(1, 0.9), (2, 0.8), (2, 0.7), (3, 0.6)]:
        kept.add(step, value)
    assert kept.points() == [(1, 0.9), (2, 0.7), (3, 0.6)]
    assert kept.points(after=2) == [(3, 0.6)]


def test_merged_sources_are_by_step_with_the_last_value_of_a_step():
    merged = merge_series([{"loss": [(2, 0.5), (1, 1.0)]}, {"loss": [(2, 0.4)], "acc": [(1.5, 1)]}])
    assert merged == {"loss": [[1, 1.0], [2, 0.4]], "acc": [[1.5, 1]]}


def test_downsample_keeps_the_ends_and_at_most_max_points():
    points = [[i, i] for i in range(1000)]
    cut = downsample(points, 10)
    assert len(cut) == 10 and cut[0] == [0, 0] and cut[-1] == [999, 999]
    assert downsample(points, 0) is points and downsample(points[:5], 10) == points[:5]


def test_a_page_is_downsampled_per_series_before_the_limit():
    series = {"loss": [[i, 1.0 / (i + 1)] for i in range(10_000)]}
    page = select(series, metric_query(max_points=500))
    assert len(page.series["loss"]) == 500 and not page.truncated
    assert page.series["loss"][-1][0] == 9_999
    page = select(series, metric_query(limit=1000))
    assert len(page.series["loss"]) == 1000 and page.next_since_step == 999


@pytest.mark.parametrize("max_points", [-1, 1, MAX_POINTS + 1])
def test_max_points_out_of_range_is_refused_naming_it(max_points):
    with pytest.raises(InvalidRequest, match="^max_points:"):
        metric_query(max_points=max_points)
