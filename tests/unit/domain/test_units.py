"""Ledger units: exact decimal conversion, conservative rounding, the 0.1 × 10 = 1.0 rule."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.domain.ledger.units import (
    DELTA_UNIT,
    EPSILON_UNIT,
    MAX_UNITS,
    from_units,
    to_units,
)

UNITS = pytest.mark.parametrize("unit", [EPSILON_UNIT, DELTA_UNIT])

epsilons = st.floats(min_value=0.0, max_value=1e9, allow_nan=False, allow_infinity=False)
deltas = st.floats(min_value=0.0, max_value=1.0, allow_nan=False, allow_infinity=False)


def test_tenth_is_exact_and_ten_tenths_make_one() -> None:
    tenth = to_units(0.1, EPSILON_UNIT, "up")
    assert tenth == 100_000_000
    assert 10 * tenth == to_units(1.0, EPSILON_UNIT, "down")
    assert 11 * tenth > to_units(1.0, EPSILON_UNIT, "down")


def test_delta_units() -> None:
    assert to_units(1e-6, DELTA_UNIT, "down") == 10**9
    assert to_units(1e-15, DELTA_UNIT, "up") == 1
    assert from_units(10**9, DELTA_UNIT) == 1e-6


@UNITS
def test_sub_unit_amounts_round_in_the_safe_direction(unit: float) -> None:
    assert to_units(unit / 3, unit, "up") == 1
    assert to_units(unit / 3, unit, "down") == 0
    assert to_units(0.0, unit, "up") == 0
    assert to_units(5e-324, unit, "up") == 1


@given(x=epsilons)
def test_epsilon_round_trip_is_conservative(x: float) -> None:
    up = to_units(x, EPSILON_UNIT, "up")
    down = to_units(x, EPSILON_UNIT, "down")
    assert from_units(up, EPSILON_UNIT) >= x
    assert from_units(down, EPSILON_UNIT) <= x
    assert 0 <= up - down <= 1


@given(x=deltas)
def test_delta_round_trip_is_conservative(x: float) -> None:
    up = to_units(x, DELTA_UNIT, "up")
    down = to_units(x, DELTA_UNIT, "down")
    assert from_units(up, DELTA_UNIT) >= x
    assert from_units(down, DELTA_UNIT) <= x
    assert 0 <= up - down <= 1


@given(k=st.integers(min_value=0, max_value=10**15 - 1))
def test_whole_units_survive_a_round_trip(k: int) -> None:
    # Up to 15 significant digits a float's repr is the decimal it came from: exact both ways.
    x = from_units(k, EPSILON_UNIT)
    assert to_units(x, EPSILON_UNIT, "down") == k == to_units(x, EPSILON_UNIT, "up")


@given(xs=st.lists(st.floats(min_value=0, max_value=10, allow_nan=False), max_size=20))
def test_sum_of_charges_never_undercounts_the_float_sum(xs: list[float]) -> None:
    total = sum(to_units(x, EPSILON_UNIT, "up") for x in xs)
    assert from_units(total, EPSILON_UNIT) >= math.fsum(xs) * (1 - 1e-15)


@pytest.mark.parametrize("bad", [-1e-12, -1.0, math.nan, math.inf, -math.inf])
def test_rejects_negative_and_non_finite(bad: float) -> None:
    with pytest.raises(ValueError, match="finite number >= 0"):
        to_units(bad, EPSILON_UNIT)


def test_rejects_bool_bad_rounding_bad_unit_and_overflow() -> None:
    with pytest.raises(ValueError, match="must be a number"):
        to_units(True, EPSILON_UNIT)
    with pytest.raises(ValueError, match="rounding"):
        to_units(1.0, EPSILON_UNIT, "nearest")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unit must be"):
        to_units(1.0, 0.0)
    with pytest.raises(ValueError, match="ledger's range"):
        to_units(1e12, EPSILON_UNIT)
    assert to_units(MAX_UNITS * EPSILON_UNIT * 0.5, EPSILON_UNIT) < MAX_UNITS
    with pytest.raises(ValueError, match=">= 0"):
        from_units(-1, EPSILON_UNIT)
    with pytest.raises(ValueError, match="must be an int"):
        from_units(1.5, EPSILON_UNIT)  # type: ignore[arg-type]
