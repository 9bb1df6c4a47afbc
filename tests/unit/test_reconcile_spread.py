"""A bill's difference over the ledger rows of its span: in proportion, to the micro-unit."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from burst.money.reconcile import spread


def test_a_difference_goes_to_each_row_by_its_amount() -> None:
    """A pool-hour's difference was booked wholly on one of its rows (one job paid for all)."""
    assert spread(1_500_000, [3_000_000, 1_000_000, 2_000_000]) == [750_000, 250_000, 500_000]
    assert spread(-10, [1, 1, 1]) == [-4, -3, -3]
    assert spread(7, [0, 0]) == [4, 3]


@given(st.integers(-(10**9), 10**9), st.lists(st.integers(0, 10**8), min_size=1, max_size=20))
def test_the_parts_add_up_exactly(total: int, weights: list[int]) -> None:
    parts = spread(total, weights)
    assert sum(parts) == total and len(parts) == len(weights)
    if any(weights):
        for part, w in zip(parts, weights, strict=True):
            assert abs(part - total * w / sum(weights)) < 1 + 1e-6
