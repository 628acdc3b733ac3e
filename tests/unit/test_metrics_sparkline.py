"""The CLI's sparkline (dlaas.clients.cli_metrics.sparkline): pure, no server."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dlaas.clients.cli_metrics import BARS, sparkline


def test_lowest_and_highest_get_the_end_bars():
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == BARS
    assert sparkline([3, 1]) == "█▁"


def test_flat_and_empty_series():
    assert sparkline([]) == ""
    assert sparkline([2.0, 2.0, 2.0]) == "▄▄▄"


def test_long_series_are_averaged_into_the_width():
    line = sparkline(list(range(1000)), width=10)
    assert len(line) == 10 and line[0] == "▁" and line[-1] == "█"
    assert list(line) == sorted(line)  # a rising series stays rising


@given(st.lists(st.floats(-1e9, 1e9), min_size=1, max_size=200), st.integers(1, 40))
def test_never_wider_than_asked_and_only_bars(values, width):
    line = sparkline(values, width)
    assert 1 <= len(line) <= width and set(line) <= set(BARS)
