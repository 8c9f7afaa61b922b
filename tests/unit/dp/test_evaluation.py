"""Private evaluation numerics (:mod:`service.dp.analysis.evaluation`): the exact discrete Laplace
sampler against its hand-derived law, the released statistics, and interval coverage."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from service.dp.analysis.evaluation import (
    bootstrap_intervals,
    confusion_counts,
    discrete_laplace_pmf,
    evaluate,
    metrics,
    noise_scale,
    roc_from_histograms,
    sample_discrete_laplace,
    score_histograms,
)


def _hand_pmf(k: int, b: float) -> float:
    """P(Z = k) ∝ r^|k| with r = e^{−1/b}; Σ_k r^|k| = (1 + r)/(1 − r)."""
    r = math.exp(-1.0 / b)
    return (1 - r) / (1 + r) * r ** abs(k)


def _chi_square_p(draws: np.ndarray, b: float, cut: int) -> float:
    """Pearson χ² of draws against the hand pmf over {≤−cut, −cut+1, …, cut−1, ≥cut}."""
    ks = np.arange(-cut + 1, cut)
    probs = np.array([_hand_pmf(int(k), b) for k in ks])
    tail = (1.0 - probs.sum()) / 2
    observed = np.array(
        [np.sum(draws <= -cut)] + [np.sum(draws == k) for k in ks] + [np.sum(draws >= cut)]
    )
    expected = draws.size * np.concatenate([[tail], probs, [tail]])
    return float(stats.chisquare(observed, expected).pvalue)


def test_the_module_pmf_is_the_hand_derived_one() -> None:
    for b in (0.3, 2.0, 40.0):
        ks = np.arange(-20, 21)
        assert np.allclose(discrete_laplace_pmf(ks, b), [_hand_pmf(int(k), b) for k in ks])


@pytest.mark.statistical
@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1.0, 3.0])
def test_released_noise_follows_the_discrete_laplace_law(epsilon: float) -> None:
    # the noise a cell receives at a budget ε: scale 2/ε (L1 sensitivity 2)
    scale = noise_scale(epsilon)
    assert scale == Fraction(2) / Fraction(epsilon)
    rng = random.Random(1234)
    draws = np.array([sample_discrete_laplace(scale, rng.randrange) for _ in range(20_000)])
    b = float(scale)
    cut = max(2, int(3 * b))
    assert _chi_square_p(draws, b, cut) > 1e-3
    r = math.exp(-1 / b)
    sd = math.sqrt(2 * r) / (1 - r)  # Var Z = 2r/(1 − r)²
    assert abs(draws.mean()) < 5 * sd / math.sqrt(draws.size)
    assert draws.var() == pytest.approx(sd**2, rel=0.1)


@pytest.mark.statistical
def test_the_csprng_sampler_follows_the_law_too() -> None:
    scale = noise_scale(1.0)
    draws = np.array([sample_discrete_laplace(scale) for _ in range(10_000)])
    assert _chi_square_p(draws, float(scale), 6) > 1e-4


def test_the_sampler_refuses_a_non_positive_scale() -> None:
    with pytest.raises(ValueError):
        sample_discrete_laplace(Fraction(0))
    with pytest.raises(ValueError):
        noise_scale(0.0)
    with pytest.raises(ValueError):
        noise_scale(math.inf)


def test_counts_histograms_and_their_agreement() -> None:
    rng = np.random.default_rng(0)
    scores = rng.normal(size=1000)
    scores[:5] = 0.0  # exactly on the threshold: predicted negative
    y = np.where(scores + rng.normal(size=1000) > 0, 1.0, -1.0)
    counts = confusion_counts(scores, y)
    assert counts.sum() == 1000
    hist = score_histograms(scores, y, bins=10)
    # the upper half of the bins holds exactly the predicted positives
    assert hist[0, 5:].sum() == counts[0]
    assert hist[1, 5:].sum() == counts[1]
    assert hist[0, :5].sum() == counts[2]
    assert hist[1, :5].sum() == counts[3]
    m = metrics(counts)
    assert m["accuracy"] == pytest.approx((counts[0] + counts[3]) / 1000)
    fpr, tpr, auc = roc_from_histograms(hist)
    assert fpr[0] == tpr[0] == 0.0
    assert fpr[-1] == pytest.approx(1.0)
    u = float(stats.mannwhitneyu(scores[y > 0], scores[y < 0]).statistic)
    exact_auc = u / float(np.sum(y > 0) * np.sum(y < 0))
    assert abs(auc - exact_auc) < 0.02  # binning loses little


def test_a_release_is_near_the_truth_and_reports_its_split() -> None:
    rng = np.random.default_rng(1)
    scores = rng.normal(size=5000)
    y = np.where(scores + rng.normal(size=5000) > 0, 1.0, -1.0)
    result = evaluate(scores, y, epsilon=1.0, randbelow=random.Random(5).randrange)
    truth = metrics(confusion_counts(scores, y))
    assert result.epsilon_split == {"confusion_matrix": 0.5, "roc_histogram": 0.5}
    for name, value in truth.items():
        low, high = result.intervals[name]
        assert low <= value <= high
        assert abs(result.metrics[name] - value) < 0.02
    as_dict = result.to_dict()
    assert as_dict["noise"]["scale_confusion_matrix"] == 4.0


def test_bad_arguments_are_refused() -> None:
    scores, y = np.zeros(4), np.array([1.0, -1.0, 1.0, -1.0])
    with pytest.raises(ValueError):
        evaluate(scores, y, epsilon=0.0)
    with pytest.raises(ValueError):
        evaluate(scores, y, epsilon=1.0, bins=3)


def _population_metrics(p: np.ndarray) -> dict[str, float]:
    return metrics(p * 1e9)


@pytest.mark.statistical
@pytest.mark.slow
@pytest.mark.parametrize(("n", "epsilon"), [(1000, 0.5), (300, 0.1)])
def test_intervals_cover_the_population_value_at_the_nominal_rate(n: int, epsilon: float) -> None:
    """The evaluation set is a sample of n rows from a population with cell probabilities p;
    the 95 % interval should contain the population's metric in ≈ 95 % of repetitions."""
    p = np.array([0.3, 0.1, 0.15, 0.45])
    truth = _population_metrics(p)
    rng = np.random.default_rng(2024)
    draw = random.Random(99).randrange
    scale = noise_scale(epsilon)
    repetitions = 400
    hits = dict.fromkeys(truth, 0)
    for _ in range(repetitions):
        counts = rng.multinomial(n, p)
        noisy = counts + np.array([sample_discrete_laplace(scale, draw) for _ in range(4)])
        intervals = bootstrap_intervals(noisy, n=n, epsilon=epsilon, replicates=1000, rng=rng)
        for name, (low, high) in intervals.items():
            hits[name] += low <= truth[name] <= high
    coverage = {name: h / repetitions for name, h in hits.items()}
    # binomial sd of a 0.95 rate over 400 repetitions ≈ 0.011: ±3.5 sd
    print(f"coverage n={n} ε={epsilon}: {coverage}")
    for name, rate in coverage.items():
        assert 0.91 <= rate <= 0.99, (name, coverage)
