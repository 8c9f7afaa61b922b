"""Private multi-class evaluation (:mod:`service.dp.analysis.evaluation_multiclass`): the
confusion matrix and metrics by hand, the released noise against its hand-derived law, an
empirical distinguishing audit with a half-noise control, interval coverage and refusals."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from service.dp.analysis.evaluation_multiclass import (
    bootstrap_intervals,
    confusion_matrix,
    evaluate_multiclass,
    metrics,
    noisy_matrix,
)
from service.dp.core.accounting import ledger_floor
from tests.unit.dp._audit import epsilon_lower_bound


def _hand_pmf(k: int, b: float) -> float:
    """P(Z = k) ∝ r^|k| with r = e^{−1/b}; Σ_k r^|k| = (1 + r)/(1 − r)."""
    r = math.exp(-1.0 / b)
    return (1 - r) / (1 + r) * r ** abs(k)


def test_the_matrix_rows_are_true_classes_and_columns_the_highest_score() -> None:
    scores = np.array(
        [
            [3.0, 1.0, 0.0],  # true 0 → 0
            [0.0, 2.0, 1.0],  # true 0 → 1
            [1.0, 1.0, 0.0],  # true 1 → 0 (a tie goes to the lowest index)
            [0.0, 0.0, 5.0],  # true 2 → 2
            [0.0, 4.0, 1.0],  # true 2 → 1
            [0.0, 4.0, 1.0],  # true 1 → 1
        ]
    )
    y = np.array([0.0, 0.0, 1.0, 2.0, 2.0, 1.0])
    assert confusion_matrix(scores, y).tolist() == [[1, 1, 0], [1, 1, 0], [0, 1, 1]]


def test_metrics_by_hand() -> None:
    c = np.array([[8, 2, 0], [1, 6, 3], [1, 2, 7]])
    m = metrics(c)
    assert m["accuracy"] == pytest.approx(21 / 30)
    # precision: diagonal over column sums 10, 10, 10; recall: over row sums 10, 10, 10
    assert m["precision"] == pytest.approx([0.8, 0.6, 0.7])
    assert m["recall"] == pytest.approx([0.8, 0.6, 0.7])
    assert m["f1"] == pytest.approx([0.8, 0.6, 0.7])
    assert m["macro_f1"] == pytest.approx(0.7)
    # unequal margins: class 0 has column 4 + 1 = 5, row 4 + 2 = 6
    m = metrics(np.array([[4, 2, 0], [1, 3, 0], [0, 0, 5]]))
    assert m["precision"][0] == pytest.approx(4 / 5)
    assert m["recall"][0] == pytest.approx(4 / 6)
    assert m["f1"][0] == pytest.approx(8 / 11)
    # noisy negative counts are clipped to 0, an empty class scores 0
    m = metrics(np.array([[5, -2, 0], [0, -1, 0], [0, 0, 5]]))
    assert m["accuracy"] == pytest.approx(1.0)
    assert m["precision"][1] == m["recall"][1] == m["f1"][1] == 0.0


@pytest.mark.statistical
@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_released_noise_follows_the_discrete_laplace_law(epsilon: float) -> None:
    """Δ₁ = 2 (one count out of one cell, one into another), so the scale is b = 2/ε; the
    released cells minus the true ones are checked by χ² against the hand pmf."""
    counts = np.array([[40, 3, 1], [2, 30, 5], [0, 4, 15]])
    b = 2.0 / epsilon
    draw = random.Random(11).randrange
    noise = np.concatenate(
        [(noisy_matrix(counts, epsilon, draw) - counts).ravel() for _ in range(1500)]
    )
    cut = max(2, int(3 * b))
    ks = np.arange(-cut + 1, cut)
    probs = np.array([_hand_pmf(int(k), b) for k in ks])
    tail = (1.0 - probs.sum()) / 2
    observed = [np.sum(noise <= -cut), *[np.sum(noise == k) for k in ks], np.sum(noise >= cut)]
    expected = noise.size * np.concatenate([[tail], probs, [tail]])
    assert stats.chisquare(observed, expected).pvalue > 1e-3
    # and the reported scale is the hand-derived one
    scores = np.eye(3)[np.arange(30) % 3]
    result = evaluate_multiclass(scores, np.arange(30.0) % 3, epsilon=epsilon, randbelow=draw)
    assert result.to_dict()["noise"]["scale_confusion_matrix"] == b
    assert result.epsilon_split == {"confusion_matrix": epsilon}


@pytest.mark.statistical
def test_a_distinguishing_audit_stays_below_epsilon_and_catches_half_the_noise() -> None:
    """Neighbours: one row of true class 0 predicted 0 replaced by one of class 1 predicted 1,
    so C₀₀ falls by 1 and C₁₁ rises by 1 (the other cells get independent noise that does not
    depend on the data; the audit reads the two that move). Statistic: C̃₁₁ − C̃₀₀. At the
    calibrated scale the lower bound stays below ε; releasing with half the noise (scale 1/ε,
    as the release at 2ε draws it) is a 2ε mechanism, and the audit must see more than ε."""
    epsilon, runs = 2.0, 5000
    d, d_prime = np.array([5, 6]), np.array([4, 7])
    draw = random.Random(3).randrange

    def statistic(counts: np.ndarray, eps: float) -> np.ndarray:
        return np.array([np.diff(noisy_matrix(counts, eps, draw))[0] for _ in range(runs)])

    calibrated = epsilon_lower_bound(statistic(d, epsilon), statistic(d_prime, epsilon))
    half_noise = epsilon_lower_bound(statistic(d, 2 * epsilon), statistic(d_prime, 2 * epsilon))
    print(f"audit lower bounds: calibrated {calibrated:.2f}, half noise {half_noise:.2f}")
    assert calibrated < epsilon < half_noise


def test_a_release_is_near_the_truth_with_large_n() -> None:
    rng = np.random.default_rng(4)
    n, k = 6000, 4
    y = rng.integers(0, k, n)
    scores = np.eye(k)[y] * 1.2 + rng.normal(size=(n, k))
    result = evaluate_multiclass(
        scores,
        y.astype(float),
        epsilon=1.0,
        classes=["a", "b", "c", "d"],
        randbelow=random.Random(8).randrange,
        bootstrap_rng=rng,
    )
    truth = metrics(confusion_matrix(scores, y.astype(float)))
    assert result.n == n
    for name in ("accuracy", "macro_f1"):
        low, high = result.intervals[name]
        assert low <= truth[name] <= high
        assert abs(result.metrics[name] - truth[name]) < 0.01
    as_dict = result.to_dict()
    assert [c["class"] for c in as_dict["per_class"]] == ["a", "b", "c", "d"]
    assert len(as_dict["confusion_matrix"]["counts"]) == k
    assert set(as_dict["per_class"][0]) == {"class", "precision", "recall", "f1"}


@pytest.mark.statistical
def test_intervals_cover_the_population_value_at_the_nominal_rate() -> None:
    """Evaluation sets of n rows from a population with a known 3 × 3 cell distribution, each
    released at ε = 0.5 and bootstrapped: the 95 % interval holds the population metric in
    ≥ 90 % of 200 repetitions (and is not so wide as to hold it always for accuracy)."""
    p = np.array([[0.25, 0.05, 0.03], [0.04, 0.2, 0.06], [0.02, 0.05, 0.3]])
    truth = metrics(p * 1e9)
    rng = np.random.default_rng(2026)
    draw = random.Random(21).randrange
    n, epsilon, repetitions = 800, 0.5, 200
    hits: dict[str, int] = {}
    for _ in range(repetitions):
        counts = rng.multinomial(n, p.ravel()).reshape(3, 3)
        noisy = noisy_matrix(counts, epsilon, draw)
        intervals = bootstrap_intervals(noisy, n=n, epsilon=epsilon, replicates=400, rng=rng)
        for name in ("accuracy", "macro_f1"):
            low, high = intervals[name]
            hits[name] = hits.get(name, 0) + (low <= truth[name] <= high)
        for name in ("precision", "recall", "f1"):
            for k, (low, high) in enumerate(intervals[name]):
                key = f"{name}_{k}"
                hits[key] = hits.get(key, 0) + (low <= truth[name][k] <= high)
    coverage = {name: h / repetitions for name, h in hits.items()}
    print(f"coverage n={n} ε={epsilon}: {coverage}")
    assert all(rate >= 0.9 for rate in coverage.values()), coverage
    assert coverage["accuracy"] <= 0.995, coverage


def test_the_bootstrap_caps_its_replicates_for_many_classes() -> None:
    k = 150  # 22,500 cells: 444 replicates instead of 2000
    noisy = np.diag(np.full(k, 50)).astype(np.int64)
    out = bootstrap_intervals(noisy, n=50 * k, epsilon=1.0, rng=np.random.default_rng(0))
    assert len(out["f1"]) == k
    low, high = out["accuracy"]
    assert low < high <= 1.0


def test_bad_input_is_refused() -> None:
    y = np.array([0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="K ≥ 3"):
        evaluate_multiclass(np.zeros((3, 2)), y, epsilon=1.0)
    with pytest.raises(ValueError, match="class indices 0 to 2"):
        evaluate_multiclass(np.zeros((3, 3)), np.array([0.0, 1.0, 3.0]), epsilon=1.0)
    with pytest.raises(ValueError, match="class indices"):
        evaluate_multiclass(np.zeros((3, 3)), np.array([0.0, 0.5, 2.0]), epsilon=1.0)
    with pytest.raises(ValueError, match="finite"):
        evaluate_multiclass(np.full((3, 3), np.nan), y, epsilon=1.0)
    with pytest.raises(ValueError, match="one class index per row"):
        evaluate_multiclass(np.zeros((3, 3)), y[:2], epsilon=1.0)
    with pytest.raises(ValueError, match="name the 3 classes"):
        evaluate_multiclass(np.zeros((3, 3)), y, epsilon=1.0, classes=["a", "b"])
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="epsilon"):
            evaluate_multiclass(np.zeros((3, 3)), y, epsilon=bad)


def test_noise_scale_is_exact() -> None:
    """The draw's scale is the exact rational 2/ε of ε's binary value (no float rounding)."""
    seen: list[int] = []
    source = random.Random(0).randrange

    def record(n: int) -> int:
        seen.append(n)
        return source(n)

    noisy_matrix(np.zeros((1, 1), dtype=np.int64), 0.1, record)
    # CKS: the first uniform is on {0..t−1} with b = t/s exactly
    assert seen[0] == (Fraction(2) / Fraction(0.1)).numerator


def test_the_noise_is_calibrated_with_the_ledger_floor() -> None:
    """ε = 0.2 is charged as the ledger's amount, a little below the double 0.2: the noise
    uses that floor (never more ε than charged) and the request is what is reported."""
    assert ledger_floor(0.2) < 0.2
    scores = np.eye(3)[np.arange(30) % 3]
    result = evaluate_multiclass(
        scores, np.arange(30.0) % 3, epsilon=0.2, randbelow=random.Random(1).randrange
    )
    assert result.epsilon == 0.2
    assert result.epsilon_split == {"confusion_matrix": ledger_floor(0.2)}
    assert result.to_dict()["noise"]["scale_confusion_matrix"] == float(
        Fraction(2) / Fraction(ledger_floor(0.2))
    )
