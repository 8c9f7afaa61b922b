"""Private regression evaluation (:mod:`service.dp.analysis.evaluation_regression`): the grid
terms and their rounding bound, the hand-derived sensitivities and noise scales, the released
noise against its law (KS), a distinguishing audit with a half-noise control, interval coverage
on simulated data and refusals."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from service.dp.analysis.evaluation_regression import (
    GRID_BITS,
    STATISTICS,
    evaluate_regression,
    integer_terms,
    noise_scale,
    noisy_sum,
    regression_metrics,
    terms,
)
from service.dp.core.accounting import ledger_floor
from tests.unit.dp._audit import epsilon_lower_bound

UNITS = 2**GRID_BITS
BY_NAME = {s.name: s for s in STATISTICS}


def test_sensitivities_shares_and_scales_by_hand() -> None:
    """Each term's range [a, b] gives the replace-one sensitivity b − a: r² ∈ [0, 4] (|r| ≤ 2
    as p, y ∈ [−1, 1]) → 4, |r| → 2, y → 2, y² → 1, r⁴ ∈ [0, 16] → 16, y³ → 2, y⁴ → 1. The
    shares are ε/5 for the four main sums and ε/15 for the three variance helpers; they add
    up to ε. The noise scale of a sum (in the sum's units) is Δ/ε_j."""
    expected = {
        "squared_residuals": (4, Fraction(1, 5)),
        "absolute_residuals": (2, Fraction(1, 5)),
        "labels": (2, Fraction(1, 5)),
        "squared_labels": (1, Fraction(1, 5)),
        "fourth_power_residuals": (16, Fraction(1, 15)),
        "cubed_labels": (2, Fraction(1, 15)),
        "fourth_power_labels": (1, Fraction(1, 15)),
    }
    assert {s.name: (s.sensitivity, s.share) for s in STATISTICS} == expected
    assert sum(s.share for s in STATISTICS) == 1
    # at ε = 1: Σr² gets ε/5, scale 4/(1/5) = 20 in r² units = 20·2²⁰ grid units
    assert noise_scale(BY_NAME["squared_residuals"], 1.0) == 20 * UNITS
    assert noise_scale(BY_NAME["fourth_power_residuals"], 1.0) == 16 * 15 * UNITS
    assert noise_scale(BY_NAME["squared_labels"], 0.5) == 10 * UNITS
    # exact: ε's binary value, no float rounding of the scale
    assert noise_scale(BY_NAME["labels"], 0.1) == Fraction(2 * UNITS) / (
        Fraction(1, 5) * Fraction(0.1)
    )


def test_the_worst_replacement_moves_each_grid_sum_by_at_most_its_sensitivity() -> None:
    """Rows at the corners of (prediction, label) ∈ [−1, 1]², plus predictions far outside
    (clipped): the grid term of every statistic spans exactly [a·2²⁰, b·2²⁰] and no more."""
    corners = np.array([-1.0, -0.5, 0.0, 0.5, 1.0, 7.0, -9.0])
    p, y = np.meshgrid(corners, corners[:5])
    per_row = terms(p.ravel(), y.ravel())
    for stat in STATISTICS:
        t = integer_terms(per_row[stat.name], stat)
        assert t.min() >= stat.low * UNITS
        assert t.max() <= stat.high * UNITS
        assert t.max() - t.min() == stat.sensitivity * UNITS, stat.name


def test_the_grid_sum_is_within_its_stated_rounding_bound() -> None:
    rng = np.random.default_rng(0)
    n = 50_000
    per_row = terms(rng.uniform(-1.3, 1.3, n), rng.uniform(-1, 1, n))
    for stat in STATISTICS:
        grid_sum = int(integer_terms(per_row[stat.name], stat).sum()) / UNITS
        assert abs(grid_sum - math.fsum(per_row[stat.name])) <= n * 2.0**-GRID_BITS


@pytest.mark.statistical
@pytest.mark.parametrize("name", ["squared_residuals", "labels", "fourth_power_labels"])
def test_released_noise_follows_the_discrete_laplace_law(name: str) -> None:
    """The released sum minus the true grid sum, in grid units, divided by the hand scale
    Δ·2²⁰/ε_j: at scales of millions of grid units the discrete Laplace law is the Laplace law
    to within 10⁻⁶ in distribution, so a KS test against Laplace(0, 1) checks it."""
    stat = BY_NAME[name]
    epsilon = 2.0
    scale = stat.sensitivity * UNITS / (float(stat.share) * epsilon)
    rng = np.random.default_rng(1)
    grid = integer_terms(rng.uniform(0, 1, 200) * stat.high, stat)
    truth = int(grid.sum())
    draw = random.Random(17).randrange
    z = np.array([noisy_sum(grid, stat, epsilon, draw) * UNITS - truth for _ in range(3000)])
    assert np.all(z == np.round(z))  # integers on the grid
    assert stats.kstest(z / scale, stats.laplace.cdf).pvalue > 1e-3


@pytest.mark.statistical
def test_a_distinguishing_audit_stays_below_epsilon_and_catches_half_the_noise() -> None:
    """Neighbours: one row with r = 0 replaced by one with |r| = 2, so Σr² moves by its full
    sensitivity 4. The released Σr² alone is an (ε/5)-DP release: at the calibrated scale
    the audit's lower bound stays below ε/5 = 1; with half the noise (the release at 2ε) it
    is a 2·(ε/5) mechanism and the audit must see more than 1. The other six sums are
    independent releases of their own shares (sequential composition)."""
    stat = BY_NAME["squared_residuals"]
    epsilon, runs = 5.0, 4000
    d = integer_terms(np.zeros(50), stat)
    d_prime = d.copy()
    d_prime[0] = 4 * UNITS
    draw = random.Random(5).randrange

    def released(grid: np.ndarray, eps: float) -> np.ndarray:
        return np.array([noisy_sum(grid, stat, eps, draw) for _ in range(runs)])

    claim = float(stat.share) * epsilon
    calibrated = epsilon_lower_bound(released(d, epsilon), released(d_prime, epsilon))
    half_noise = epsilon_lower_bound(released(d, 2 * epsilon), released(d_prime, 2 * epsilon))
    print(f"audit lower bounds: calibrated {calibrated:.2f}, half noise {half_noise:.2f}")
    assert calibrated < claim < half_noise


def test_metrics_by_hand_in_the_labels_units() -> None:
    """Exact sums (no noise): predictions 0 for labels ±0.5 → r² = 0.25, |r| = 0.5, V_y = 0.25,
    R² = 0. In the label's units with bounds [10, 30] (s = 10): RMSE = MAE = 5."""
    sums = {
        "squared_residuals": 4 * 0.25,
        "absolute_residuals": 4 * 0.5,
        "labels": 0.0,
        "squared_labels": 4 * 0.25,
        "fourth_power_residuals": 4 * 0.0625,
        "cubed_labels": 0.0,
        "fourth_power_labels": 4 * 0.0625,
    }
    m = regression_metrics(sums, 4, 10.0)
    assert m["rmse"] == pytest.approx(5.0)
    assert m["mae"] == pytest.approx(5.0)
    assert m["r2"] == pytest.approx(0.0)
    # a noisy V_y ≤ 0 leaves R² out rather than dividing by it
    assert regression_metrics({**sums, "squared_labels": 0.0}, 4, 10.0)["r2"] is None


def _population(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    x = rng.uniform(-1, 1, n)
    y = np.clip(0.6 * x + rng.normal(0, 0.3, n), -1, 1)
    return 0.5 * x + 0.05, y


def test_a_release_is_near_the_truth_with_large_n() -> None:
    rng = np.random.default_rng(3)
    p, y = _population(rng, 20_000)
    result = evaluate_regression(
        p,
        y,
        epsilon=1.0,
        lower=0.0,
        upper=80.0,
        randbelow=random.Random(2).randrange,
        bootstrap_rng=rng,
    )
    r = np.clip(p, -1, 1) - y
    truth = {
        "rmse": 40 * math.sqrt(np.mean(r**2)),
        "mae": 40 * np.mean(np.abs(r)),
        "r2": 1 - np.mean(r**2) / np.var(y),
    }
    assert result.n == 20_000
    for name, value in truth.items():
        estimate = result.metrics[name]
        low, high = result.intervals[name]
        assert estimate is not None
        assert low is not None
        assert high is not None
        assert low <= value <= high, name
        assert abs(estimate - value) < 0.03 * abs(value), name
    as_dict = result.to_dict()
    assert as_dict["noise"]["scale"]["squared_residuals"] == 20.0
    assert as_dict["noise"]["rounding_error_bound"] == 20_000 * 2.0**-20
    assert sum(Fraction(v) for v in result.epsilon_split.values()) == pytest.approx(1.0)


@pytest.mark.statistical
@pytest.mark.parametrize(("n", "epsilon"), [(1000, 1.0), (5000, 0.2)])
def test_intervals_cover_the_population_value_at_the_nominal_rate(n: int, epsilon: float) -> None:
    """Evaluation sets of n rows drawn from a fixed population, each released and
    bootstrapped: the 95 % intervals hold the population's RMSE, MAE and R² in ≥ 90 % of 200
    repetitions (R²'s union-bound interval is conservative by design)."""
    rng = np.random.default_rng(2029)
    big_p, big_y = _population(rng, 1_000_000)
    r = np.clip(big_p, -1, 1) - big_y
    truth = {
        "rmse": math.sqrt(np.mean(r**2)),
        "mae": float(np.mean(np.abs(r))),
        "r2": float(1 - np.mean(r**2) / np.var(big_y)),
    }
    draw = random.Random(31).randrange
    hits = dict.fromkeys(truth, 0)
    repetitions = 200
    for _ in range(repetitions):
        p, y = _population(rng, n)
        result = evaluate_regression(
            p, y, epsilon=epsilon, lower=-1, upper=1, randbelow=draw, bootstrap_rng=rng
        )
        for name, value in truth.items():
            low, high = result.intervals[name]
            hits[name] += (low is None or low <= value) and (high is None or value <= high)
    coverage = {name: h / repetitions for name, h in hits.items()}
    print(f"coverage n={n} ε={epsilon}: {coverage}")
    assert all(rate >= 0.9 for rate in coverage.values()), coverage
    assert coverage["rmse"] <= 0.995, coverage
    assert coverage["mae"] <= 0.995, coverage


def test_bad_input_is_refused() -> None:
    p, y = np.zeros(3), np.array([0.0, 0.5, -1.0])
    with pytest.raises(ValueError, match=r"\[-1, 1\].*1 entries"):
        evaluate_regression(p, np.array([0.0, 1.5, 0.0]), epsilon=1.0, lower=0, upper=1)
    with pytest.raises(ValueError, match="finite"):
        evaluate_regression(np.array([0.0, np.inf, 0.0]), y, epsilon=1.0, lower=0, upper=1)
    with pytest.raises(ValueError, match="same length"):
        evaluate_regression(p[:2], y, epsilon=1.0, lower=0, upper=1)
    with pytest.raises(ValueError, match="same length"):
        evaluate_regression(np.zeros(0), np.zeros(0), epsilon=1.0, lower=0, upper=1)
    with pytest.raises(ValueError, match="bounds"):
        evaluate_regression(p, y, epsilon=1.0, lower=1, upper=1)
    with pytest.raises(ValueError, match="confidence"):
        evaluate_regression(p, y, epsilon=1.0, lower=0, upper=1, confidence=1.0)
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="epsilon"):
            evaluate_regression(p, y, epsilon=bad, lower=0, upper=1)


def test_the_noise_is_calibrated_with_the_ledger_floor() -> None:
    """ε = 0.2 is charged as the ledger's amount, a little below the double 0.2: the seven
    shares split that floor exactly (never more ε than charged); the request is reported."""
    floor = ledger_floor(0.2)
    assert floor < 0.2
    result = evaluate_regression(
        np.zeros(10),
        np.zeros(10),
        epsilon=0.2,
        lower=0,
        upper=1,
        randbelow=random.Random(1).randrange,
    )
    assert result.epsilon == 0.2
    assert result.calibrated_epsilon == floor
    assert result.epsilon_split["squared_residuals"] == float(Fraction(floor) / 5)
    assert result.scales["squared_residuals"] == float(4 / (Fraction(floor) / 5))
