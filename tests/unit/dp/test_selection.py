"""Private tuning (:mod:`service.dp.analysis.selection`): the split, the exponential mechanism's
law,
the grid of λ × η, and that tuning picks a good λ (or DP-SGD step size) when the data allow it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from service.dp import fit as dp_fit
from service.dp.analysis.selection import (
    MAX_CANDIDATES,
    Setting,
    exponential_mechanism,
    grid,
    split_parts,
    tune,
)
from service.dp.data.prepared import PreparedDesign, prepare_design


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


def test_the_grid_is_the_product_lambda_major_and_capped() -> None:
    assert grid([0.1, 0.01]) == [Setting(0.1), Setting(0.01)]
    assert grid([0.1, 0.01], [1.0, 0.5]) == [
        Setting(0.1, 1.0),
        Setting(0.1, 0.5),
        Setting(0.01, 1.0),
        Setting(0.01, 0.5),
    ]
    assert len(grid([0.1, 0.2], [1.0] * 5)) == MAX_CANDIDATES
    with pytest.raises(ValueError, match="11 points"):
        grid([0.1], [float(i + 1) for i in range(11)])
    with pytest.raises(ValueError, match="at most"):
        grid([0.1, 0.2, 0.3], [1.0, 2.0, 3.0, 4.0])
    with pytest.raises(ValueError):
        grid([0.1], [])


def test_the_record_shows_the_grid_the_choice_and_the_split() -> None:
    design = _design(40, 2)
    settings = grid([0.1, 0.01], [1.0, 0.25])
    seen: list[Setting] = []

    def fit_one(part: PreparedDesign, setting: Setting) -> object:
        seen.append(setting)
        return dp_fit(
            part,
            None,
            "dp_sgd",
            epsilon=1.0,
            regularization=setting.regularization,
            eta=setting.eta,
            rng=np.random.default_rng(0),
        )

    result = tune(design, settings, epsilon=1.0, fit_one=fit_one, rng=np.random.default_rng(3))  # type: ignore[arg-type]
    assert seen == settings
    record = result.record(1.0, 0.0)
    chosen = settings[result.chosen]
    assert record["candidates"] == [0.1, 0.01]
    assert record["step_size_candidates"] == [1.0, 0.25]
    assert record["grid"] == [s.to_dict() for s in settings]
    assert (record["chosen_regularization"], record["chosen_eta"]) == (
        chosen.regularization,
        chosen.eta,
    )
    assert record["part_sizes"] == [8, 8, 8, 8, 8]
    assert record["epsilon_split"]["total"] == 1.0
    # without η candidates the record keeps the λ-only shape
    plain = tune(
        design,
        grid([0.1]),
        epsilon=1.0,
        fit_one=lambda p, s: dp_fit(
            p, None, "output_perturbation", epsilon=1.0, regularization=s.regularization
        ),
        rng=None,
    ).record(1.0, 0.0)
    assert "step_size_candidates" not in plain
    assert "chosen_eta" not in plain
    assert plain["grid"] == [{"regularization": 0.1}]


@pytest.mark.statistical
def test_tuning_avoids_a_useless_step_size() -> None:
    """DP-SGD with a constant step η and λ = 1: at η = 1/λ each update forgets the past,
    w_t = −η(ḡ_t + z_t), so the release is one batch's gradient plus one noise draw (≈ 27 %
    test error here, measured); at η = 0.01 it averages ≈ 20 updates (≈ 7 %). On 1000 held-out
    rows that is a gap of ≈ 200 errors, so the exponential mechanism at ε = 1 (weights
    ∝ exp(−ε e/2)) picks η = 0.01 nearly always."""
    design = _design(3000, 5)
    rng = np.random.default_rng(12)
    settings = grid([1.0], [0.01, 1.0])
    chosen = []
    for _ in range(10):

        def fit_one(part: PreparedDesign, setting: Setting) -> object:
            return dp_fit(
                part,
                None,
                "dp_sgd",
                epsilon=1.0,
                regularization=setting.regularization,
                eta=setting.eta,
                schedule="constant",
                rng=rng,
            )

        result = tune(design, settings, epsilon=1.0, fit_one=fit_one, rng=rng)  # type: ignore[arg-type]
        assert result.part_sizes == (1000, 1000, 1000)
        chosen.append(result.chosen)
    assert chosen.count(0) >= 8
