"""Private tuning (:mod:`service.dp.selection`): the split, the exponential mechanism's law,
and that tuning picks a good λ when the data allow it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from service.dp import fit as dp_fit
from service.dp.prepared import PreparedDesign, prepare_design
from service.dp.selection import exponential_mechanism, split_parts, tune


def test_parts_are_disjoint_and_cover_the_rows() -> None:
    parts = split_parts(103, 4, np.random.default_rng(0))
    assert len(parts) == 5
    joined = np.concatenate(parts)
    assert sorted(joined.tolist()) == list(range(103))
    assert {p.size for p in parts} <= {20, 21}


@pytest.mark.statistical
def test_the_exponential_mechanism_follows_its_law() -> None:
    errors = [10, 12, 15, 30]
    epsilon = 0.5
    weights = np.exp(-epsilon * np.asarray(errors) / 2)
    expected = weights / weights.sum()
    rng = np.random.default_rng(7)
    draws = [exponential_mechanism(errors, epsilon, rng)[0] for _ in range(20_000)]
    observed = np.bincount(draws, minlength=4)
    assert (
        stats.chisquare(
            observed[:3], 20_000 * expected[:3] / expected[:3].sum() * (observed[:3].sum() / 20_000)
        ).pvalue
        > 1e-3
    )
    assert np.allclose(exponential_mechanism(errors, epsilon, rng)[1], expected)


def test_the_exponential_mechanism_privacy_ratio() -> None:
    # replacing one held-out row moves each count by at most 1: probabilities change by ≤ e^ε
    epsilon = 0.7
    errors = np.array([5, 9, 6])
    rng = np.random.default_rng(0)
    base = np.asarray(exponential_mechanism(errors.tolist(), epsilon, rng)[1])
    for shift in ([1, 0, 0], [0, -1, 1], [-1, 1, -1]):
        other = np.asarray(exponential_mechanism((errors + shift).tolist(), epsilon, rng)[1])
        assert np.max(np.abs(np.log(base / other))) <= epsilon + 1e-12


def _design(n: int, seed: int) -> PreparedDesign:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = np.where(X @ np.array([1.0, -1.0, 0.5, 0.0, 0.0]) + 0.1 * rng.normal(size=n) > 0, 1.0, -1.0)
    return prepare_design(X, y)


@pytest.mark.statistical
def test_tuning_avoids_a_useless_candidate() -> None:
    """Output perturbation's noise norm is d·2/(mλε) on m rows: at λ = 1e-6 it swamps the
    weights (a random direction, ≈ 50 % error), at λ = 0.05 it is ≈ 0.04 (a good model); the
    held-out error gap of hundreds of rows makes the mechanism pick 0.05 nearly always."""
    design = _design(4000, 1)
    rng = np.random.default_rng(11)
    chosen = []
    for _ in range(10):

        def fit_one(part: PreparedDesign, lam: float) -> object:
            return dp_fit(
                part, None, "output_perturbation", epsilon=2.0, regularization=lam, rng=rng
            )

        result = tune(design, [0.05, 1e-6], epsilon=2.0, fit_one=fit_one, rng=rng)  # type: ignore[arg-type]
        chosen.append(result.chosen)
        assert result.part_sizes == (1334, 1333, 1333)
    assert chosen.count(0) >= 9


def test_tuning_refuses_bad_inputs() -> None:
    design = _design(10, 0)
    with pytest.raises(ValueError):
        tune(design, [], epsilon=1.0, fit_one=lambda p, lam: None, rng=None)  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError):
        tune(design, [0.1] * 5, epsilon=1.0, fit_one=lambda p, lam: None, rng=None)  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError):
        tune(design, [0.1], epsilon=math.inf, fit_one=lambda p, lam: None, rng=None)  # type: ignore[arg-type,return-value]
