"""bench.common.percentile: the one percentile of the benchmark and the lab."""
from __future__ import annotations

import math

from bench.common import percentile


def test_percentile_is_linear_between_closest_ranks() -> None:
    values = [40.0, 10.0, 30.0, 20.0]  # any order
    assert percentile(values, 0) == 10.0
    assert percentile(values, 50) == 25.0
    assert percentile(values, 100) == 40.0
    assert math.isclose(percentile(values, 99), 39.7)
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))
