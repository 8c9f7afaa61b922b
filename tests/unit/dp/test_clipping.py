"""service.dp.data.clipping: the row-norm bounds, the clip and the summation error bound hold in
exact (rational) arithmetic for the doubles the code computes."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from service.dp.data import clipping


def _exact_sq_norm(row: np.ndarray) -> Fraction:
    return sum((Fraction(float(v)) ** 2 for v in row), Fraction(0))


def _rows() -> np.ndarray:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 37))
    X[:20] /= np.linalg.norm(X[:20], axis=1)[:, None]  # norm 1 as computed
    X[20:30] *= 1e-170  # squares underflow
    X[30:35] *= 1e150
    X[35] = 0.0
    X[36, 5:] = 0.0
    X[37] = 2.0**-1074  # subnormal entries
    return X


def test_row_norm_bounds_are_upper_bounds_and_tight() -> None:
    X = _rows()
    bounds = clipping.row_norm_bounds(X)
    d = X.shape[1]
    for row, r in zip(X, bounds, strict=True):
        exact = _exact_sq_norm(row)
        assert Fraction(float(r)) ** 2 >= exact
        if exact > Fraction(2) ** -900:  # far from underflow: within the (d + 8)2⁻⁵² factor
            assert Fraction(float(r)) ** 2 <= exact * (1 + Fraction(2 * (d + 20), 2**52))
    assert bounds[35] > 0.0


@pytest.mark.parametrize("clip", [1.0, 0.5, 3.0, 1e-3])
def test_every_exact_clipped_term_is_below_the_clip(clip: float) -> None:
    X = _rows()
    bounds = clipping.row_norm_bounds(X)
    rng = np.random.default_rng(1)
    a = rng.standard_normal(X.shape[0]) * np.exp(rng.standard_normal(X.shape[0]) * 30)
    a[:5] = [np.inf, -np.inf, np.nan, 0.0, 1e308]
    caps = clipping.clip_caps(bounds, clip)
    coefficients = clipping.clip_coefficients(a, caps)
    assert abs(coefficients[2]) == caps[2]  # a NaN multiplier is bounded like any other
    assert coefficients[0] == caps[0]
    assert coefficients[1] == -caps[1]
    assert np.all(np.isfinite(coefficients))
    for c, row in zip(coefficients, X, strict=True):
        assert Fraction(float(c)) ** 2 * _exact_sq_norm(row) < Fraction(clip) ** 2
    # a multiplier already small enough is left alone
    small = np.full(X.shape[0], 1e-300)
    np.testing.assert_array_equal(clipping.clip_coefficients(small, caps), small)
    # an overflowing row (bound ∞) contributes nothing
    assert clipping.clip_caps(np.array([np.inf]), clip)[0] == 0.0


def test_the_computed_sum_is_within_the_error_bound_of_the_exact_sum() -> None:
    rng = np.random.default_rng(2)
    for n, d in [(50, 106), (400, 7), (3, 1)]:
        X = rng.standard_normal((n, d))
        X /= np.linalg.norm(X, axis=1)[:, None]
        a = rng.standard_normal(n) * 10
        bounds = clipping.row_norm_bounds(X)
        caps = clipping.clip_caps(bounds, 1.0)
        coefficients = clipping.clip_coefficients(a, caps)
        computed = clipping.clipped_sum(a, X, caps)
        exact = [
            sum(
                (
                    Fraction(float(c)) * Fraction(float(x))
                    for c, x in zip(coefficients, col, strict=True)
                ),
                Fraction(0),
            )
            for col in X.T
        ]
        error_sq = sum(
            ((Fraction(float(v)) - e) ** 2 for v, e in zip(computed, exact, strict=True)),
            Fraction(0),
        )
        assert error_sq <= clipping.sum_error_bound(n, d, 1.0) ** 2


def test_neighbouring_computed_means_differ_by_at_most_the_sensitivity() -> None:
    rng = np.random.default_rng(3)
    n, d = 50, 106
    X = rng.standard_normal((n, d))
    X /= np.linalg.norm(X, axis=1)[:, None]
    a = np.sign(rng.standard_normal(n))
    X2, a2 = X.copy(), a.copy()
    a2[17] = -a[17]  # the replaced record's gradient points the opposite way: the worst case 2C
    m1 = clipping.clipped_mean(a, X, clipping.clip_caps(clipping.row_norm_bounds(X), 1.0))
    m2 = clipping.clipped_mean(a2, X2, clipping.clip_caps(clipping.row_norm_bounds(X2), 1.0))
    diff_sq = sum(
        ((Fraction(float(p)) - Fraction(float(q))) ** 2 for p, q in zip(m1, m2, strict=True)),
        Fraction(0),
    )
    sensitivity = clipping.mean_sensitivity(n, d, 1.0)
    assert diff_sq <= sensitivity**2
    assert sensitivity > Fraction(2, n)
    assert float(sensitivity / Fraction(2, n) - 1) < 1e-12


def test_sensitivities_by_hand() -> None:
    u = Fraction(1, 2**53)
    eta = Fraction(1, 2**1074)
    gamma = 30 * u / (1 - 30 * u)
    error = gamma * 30 * 2 + 4 * 30 * eta  # n = 30, d = 10 (⌈√10⌉ = 4), C = 2
    assert clipping.sum_error_bound(30, 10, 2.0) == error
    assert clipping.sum_sensitivity(30, 10, 2.0) == 4 + 2 * error
    assert clipping.mean_sensitivity(30, 10, 2.0) == Fraction(4, 30) + 2 * (
        (error + u * (60 + error)) / 30 + 4 * eta / 2
    )
    with pytest.raises(ValueError, match="clip"):
        clipping.sum_error_bound(3, 2, -1.0)


def test_scale_for_is_the_largest_admissible_double() -> None:
    for eps, sens in [(1.0, Fraction(2, 7) * (1 + Fraction(1, 10**13))), (0.3, Fraction(1, 3))]:
        beta = clipping.scale_for(eps, sens)
        assert Fraction(beta) * sens <= Fraction(eps)
        assert Fraction(math.nextafter(beta, math.inf)) * sens > Fraction(eps)
    assert Fraction(clipping.round_up(Fraction(1, 3))) >= Fraction(1, 3)


def test_ceil_sqrt_is_exact_where_doubles_are_not() -> None:
    # one ⌈√d⌉ serves the clipped sums, DP-SGD's and ADASSP's release grids and federated rounds
    for d in [*range(0, 200), 10**6, 10**6 + 1, (2**26 + 1) ** 2, (2**26 + 1) ** 2 - 1]:
        root = clipping.ceil_sqrt(d)
        assert (root - 1) ** 2 < d <= root**2 or d == root == 0
    big = (10**20 + 1) ** 2 - 1  # math.ceil(math.sqrt(big)) rounds to 10**20, one too few
    assert clipping.ceil_sqrt(big) == 10**20 + 1
