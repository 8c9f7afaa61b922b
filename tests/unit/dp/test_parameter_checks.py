"""The shared option checks (service.dp.core.validation) that DP-SGD, stacking and federated
ADMM use: accepted values, and the exact refusals each of them gave before sharing one home."""

from __future__ import annotations

import math

import numpy as np
import pytest

from service.dp.core.validation import PrivacyParameterError, check_int_in, check_positive_number
from service.dp.mechanisms import dp_sgd


def test_check_int_in_accepts_python_and_numpy_integers_in_range() -> None:
    assert check_int_in(3, "k", 1, 3) == 3
    out = check_int_in(np.int64(1), "k", 1, 3)
    assert out == 1
    assert type(out) is int


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, "k must be an integer"),
        (2.0, "k must be an integer"),
        ("2", "k must be an integer"),
        (0, "k must lie between 1 and 3, got 0"),
        (np.int32(4), "k must lie between 1 and 3, got 4"),
    ],
)
def test_check_int_in_refuses(value: object, message: str) -> None:
    with pytest.raises(PrivacyParameterError) as info:
        check_int_in(value, "k", 1, 3)
    assert str(info.value) == message


def test_check_positive_number() -> None:
    assert check_positive_number(2, "eta") == 2.0
    assert check_positive_number(0.5, "eta") == 0.5
    for value, message in [
        (False, "eta must be a number"),
        ("1", "eta must be a number"),
        (0, "eta must be a finite number > 0, got 0"),
        (-1.5, "eta must be a finite number > 0, got -1.5"),
        (math.inf, "eta must be a finite number > 0, got inf"),
    ]:
        with pytest.raises(PrivacyParameterError) as info:
            check_positive_number(value, "eta")
        assert str(info.value) == message


def test_dp_sgd_option_helpers_pass_none_through() -> None:
    assert dp_sgd._int_param({}, "projection_dim", None, 1, 10) is None
    assert dp_sgd._int_param({"epochs": 4}, "epochs", 1, 1, 10) == 4
    assert dp_sgd._positive_float({"radius": None}, "radius", 2.0) is None
    assert dp_sgd._positive_float({}, "eta", 2) == 2.0
