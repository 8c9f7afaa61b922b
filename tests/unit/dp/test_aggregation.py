"""The average method's maths (seed 000, Alg. 4): known vectors, public weights, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from service.dp.aggregation import average_coefficients, normalised_weights
from service.dp.noise import RELEASE_GRID


def test_unweighted_average_of_known_vectors() -> None:
    f1 = [1.0, -2.0, 0.5]
    f2 = [3.0, 0.0, -0.5]
    f3 = [2.0, 5.0, 3.0]
    got = average_coefficients([f1, f2, f3])
    np.testing.assert_allclose(got, [2.0, 1.0, 1.0], atol=RELEASE_GRID)


def test_weights_are_normalised_to_sum_one() -> None:
    got = average_coefficients([[4.0, 0.0], [0.0, 8.0]], weights=[1.0, 3.0])
    np.testing.assert_allclose(got, [1.0, 6.0], atol=RELEASE_GRID)
    np.testing.assert_allclose(normalised_weights(2, [1.0, 3.0]), [0.25, 0.75])
    np.testing.assert_allclose(normalised_weights(4), [0.25] * 4)


def test_a_zero_weight_drops_a_model() -> None:
    got = average_coefficients([[1.0, 1.0], [100.0, -100.0]], weights=[2.0, 0.0])
    np.testing.assert_allclose(got, [1.0, 1.0], atol=RELEASE_GRID)


def test_one_model_is_returned_unchanged_up_to_the_release_grid() -> None:
    rng = np.random.default_rng(3)
    w = rng.normal(size=7)
    got = average_coefficients([w])
    assert np.max(np.abs(got - w)) <= RELEASE_GRID / 2
    assert np.all(np.round(got / RELEASE_GRID) * RELEASE_GRID == got)


def test_average_matches_the_mean_of_random_vectors() -> None:
    rng = np.random.default_rng(11)
    M = rng.normal(size=(5, 9))
    np.testing.assert_allclose(average_coefficients(list(M)), M.mean(axis=0), atol=RELEASE_GRID)


@pytest.mark.parametrize(
    ("coefficients", "weights", "message"),
    [
        ([], None, "at least one model"),
        ([[1.0, 2.0], [1.0]], None, "same, non-zero number"),
        ([[1.0, float("nan")]], None, "finite"),
        ([[1.0], [2.0]], [1.0], "expected 2 weights"),
        ([[1.0], [2.0]], [1.0, -1.0], "non-negative"),
        ([[1.0], [2.0]], [0.0, 0.0], "not all be zero"),
        ([[1.0], [2.0]], [1.0, float("inf")], "finite"),
    ],
)
def test_bad_input_is_a_value_error(
    coefficients: list[list[float]], weights: list[float] | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        average_coefficients(coefficients, weights)
