"""The private trivial-model baselines of multi-class and numeric labels
(service/dp/analysis/baseline_tasks.py) and the band on the synthetic reference
(service/dp/analysis/expected_tasks.py): the slice's public rule, the noise scales by hand,
KS tests of the released noise against the hand-derived discrete Laplace law, an audit of the
neighbour sensitivities, the post-processing and the warning's direction."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray
from scipy import stats

from service.dp.analysis import baseline_tasks as bt
from service.dp.analysis import evaluation_multiclass
from service.dp.analysis.evaluation import bootstrap_discrete_laplace
from service.dp.analysis.expected_tasks import (
    REGRESSION_SIGNAL,
    TaskExpectation,
    expected_task_band_synthetic,
    multiclass_reference,
    regression_reference,
)

UNITS = 2**20


@pytest.mark.parametrize(
    ("task", "n", "epsilon", "share"),
    [
        ("multiclass", 90, 1.0, 0.05),  # 2√2/(90·0.01) = 3.1: capped at 5 %
        ("multiclass", 100_000, 1.0, 0.01),  # 2√2/1000 = 0.0028: floored at 1 %
        ("multiclass", 10_000, 1.0, 2 * math.sqrt(2) / 100),  # 0.028: the rule itself
        ("regression", 2_000, 10.0, 0.05),  # √136/200 = 0.058: capped
        ("regression", 200_000, 1.0, 0.01),  # √136/2000 = 0.0058: floored
        ("regression", 50_000, 1.0, math.sqrt(136) / 500),  # 0.0233: the rule itself
    ],
)
def test_the_share_follows_its_public_rule(task: str, n: int, epsilon: float, share: float) -> None:
    assert bt.baseline_share(task, n, epsilon) == pytest.approx(share, rel=1e-12)
    fit, release = bt.split_budget(task, n, epsilon)
    assert release == pytest.approx(share * epsilon, rel=1e-12)
    assert fit + release <= epsilon
    assert fit == pytest.approx(epsilon - share * epsilon, rel=1e-12)


# found by random search: a check in doubles let these splits exceed ε by an ulp
@pytest.mark.parametrize(("n", "epsilon"), [(95_847, 1.091), (81_002, 3.09), (39_172, 0.1176)])
def test_the_split_fits_epsilon_in_exact_arithmetic(n: int, epsilon: float) -> None:
    fit, release = bt.split_budget("multiclass", n, epsilon)
    assert Fraction(fit) + Fraction(release) <= Fraction(epsilon)
    assert Fraction(math.nextafter(fit, math.inf)) + Fraction(release) > Fraction(epsilon)


def test_the_share_constants_are_the_derived_ones() -> None:
    # histogram: sd of one count at scale 2/(ρε) is √2·2/(nρε); spread: with ρε/2 per sum
    # sd(m₂) = 2√2/(nρε), sd(m₁) = 4√2/(nρε), √(sd(m₂)² + 4·sd(m₁)²) = √(8 + 128)/(nρε)
    assert bt.SHARE_CONSTANTS["multiclass"] == pytest.approx(math.sqrt(2) * 2)
    assert bt.SHARE_CONSTANTS["regression"] == pytest.approx(math.sqrt(8 + 4 * 32))


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_a_bad_epsilon_or_task_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="ε"):
        bt.baseline_share("multiclass", 100, bad)
    with pytest.raises(ValueError, match="ε"):
        bt.private_histogram(np.zeros(5), 3, bad, np.random.default_rng(0))
    with pytest.raises(ValueError, match="ε"):
        bt.private_spread(np.zeros(5), bad, np.random.default_rng(0))
    with pytest.raises(ValueError, match="task"):
        bt.baseline_share("binary", 100, 1.0)
    with pytest.raises(ValueError, match="class indices"):
        bt.private_histogram(np.array([0.0, 3.0]), 3, 1.0, np.random.default_rng(0))


def test_noise_scales_by_hand() -> None:
    # discrete Laplace of scale b: Var = 2q/(1 − q)², q = e^{−1/b}; b = 1/ln 2: q = 1/2, Var 4
    assert bt.discrete_laplace_variance(1 / math.log(2.0)) == pytest.approx(4.0, rel=1e-12)
    # large b: ≈ 2b², the continuous Laplace's
    assert bt.discrete_laplace_variance(1e4) == pytest.approx(2e8, rel=1e-6)
    histogram = bt.private_histogram(np.array([0.0, 1.0, 2.0, 2.0]), 3, 0.25, None)
    record = histogram.record()
    assert record["scale"] == 8.0  # b = Δ₁/ε = 2/0.25
    assert record["sensitivity"] == 2
    assert (record["epsilon"], record["delta"]) == (0.25, 0.0)
    assert histogram.sd == pytest.approx(math.sqrt(bt.discrete_laplace_variance(8.0)) / 4)
    # by hand: q = e^{−1/8}, sd = √(2q/(1 − q)²)/n with n = 4
    assert histogram.sd == pytest.approx(2.8265865, rel=1e-7)
    spread = bt.private_spread(np.array([0.5, -0.5]), 0.5, None, half_range=20.0)
    record = spread.record()
    assert record["epsilon_per_sum"] == 0.25
    assert record["scale"] == {"labels": 8.0, "squared_labels": 4.0}  # Δ/(ε/2)
    assert record["sensitivity"] == {"labels": 2, "squared_labels": 1}


def _pit(noise: NDArray[np.int64], scale: float, u: NDArray[np.float64]) -> NDArray[np.float64]:
    """Randomised probability integral transform of integer draws under the discrete Laplace
    of scale b, P[Z = z] = (1 − q)/(1 + q)·q^{|z|}, q = e^{−1/b}: exactly uniform under it."""
    q = math.exp(-1.0 / scale)

    def cdf(z: NDArray[np.int64]) -> NDArray[np.float64]:
        zf = z.astype(np.float64)
        out: NDArray[np.float64] = np.where(
            z < 0, q ** (-zf) / (1 + q), 1.0 - q ** (zf + 1) / (1 + q)
        )
        return out

    return cdf(noise - 1) + u * (cdf(noise) - cdf(noise - 1))


def test_the_histogram_noise_is_discrete_laplace_at_scale_two_over_epsilon() -> None:
    rng = np.random.default_rng(2029)
    epsilon = 0.5
    y = np.array([0.0] * 40 + [1.0] * 25 + [2.0] * 35)
    truth = np.array([40, 25, 35])
    noise = np.concatenate(
        [
            np.asarray(bt.private_histogram(y, 3, epsilon, rng).noisy_counts) - truth
            for _ in range(1500)
        ]
    )
    u = rng.random(noise.size)
    assert stats.kstest(_pit(noise, 2 / epsilon, u), "uniform").pvalue > 1e-3
    # the scale of sensitivity 1 (1/ε) is detected: the test can fail
    assert stats.kstest(_pit(noise, 1 / epsilon, u), "uniform").pvalue < 1e-6
    assert noise.var() == pytest.approx(bt.discrete_laplace_variance(2 / epsilon), rel=0.1)


def test_the_label_sums_noise_is_discrete_laplace_on_the_grid() -> None:
    rng = np.random.default_rng(2030)
    epsilon = 8.0  # ε/2 = 4 per sum: scales 2·2²⁰/4 and 2²⁰/4 grid units
    y = np.linspace(-1.0, 1.0, 41)
    t1, t2 = bt.label_grid_sums(y)
    draws = [bt.private_spread(y, epsilon, rng) for _ in range(2000)]
    n1 = np.array([round(d.noisy_sum * UNITS) - t1 for d in draws])
    n2 = np.array([round(d.noisy_sum_squares * UNITS) - t2 for d in draws])
    u = rng.random(n1.size)
    for noise, scale in ((n1, 2 * UNITS / 4), (n2, UNITS / 4)):
        assert stats.kstest(_pit(noise, scale, u), "uniform").pvalue > 1e-3
        assert stats.kstest(_pit(noise, 2 * scale, u), "uniform").pvalue < 1e-6


def test_neighbours_move_the_statistics_by_at_most_the_sensitivities() -> None:
    rng = np.random.default_rng(7)
    worst = {"histogram": 0, "sum": 0, "squares": 0}
    for trial in range(300):
        n = int(rng.integers(1, 30))
        classes = rng.integers(0, 4, size=n).astype(np.float64)
        labels = rng.uniform(-1.0, 1.0, size=n)
        # the extremes, and values a rounding away from the bounds
        labels[: min(n, 3)] = [-1.0, 1.0 + 1e-12, -1.0 - 1e-12][: min(n, 3)]
        i = int(rng.integers(0, n))
        other_classes, other_labels = classes.copy(), labels.copy()
        other_classes[i] = float(rng.integers(0, 4))
        other_labels[i] = [-1.0, 1.0, 0.0, float(rng.uniform(-1, 1))][trial % 4]
        h = bt.class_histogram(classes, 4) - bt.class_histogram(other_classes, 4)
        worst["histogram"] = max(worst["histogram"], int(np.abs(h).sum()))
        a, b = bt.label_grid_sums(labels), bt.label_grid_sums(other_labels)
        worst["sum"] = max(worst["sum"], abs(a[0] - b[0]))
        worst["squares"] = max(worst["squares"], abs(a[1] - b[1]))
    assert worst["histogram"] == bt.HISTOGRAM_SENSITIVITY  # reached, never exceeded
    assert worst["sum"] == bt.SUM_SENSITIVITY * UNITS
    assert worst["squares"] == bt.SQUARE_SENSITIVITY * UNITS


def test_the_histogram_estimates_are_post_processing() -> None:
    h = bt.PrivateHistogram(noisy_counts=(50, -3, 30), n=80, epsilon=0.5)
    assert h.majority == 50 / 80
    assert h.proportions == (50 / 80, 0.0, 30 / 80)  # negatives clipped, renormalised
    assert bt.PrivateHistogram((-5, -1, -2), 80, 0.5).majority == 1 / 3  # floored at 1/K
    assert bt.PrivateHistogram((-5, -1, -2), 80, 0.5).proportions == (1 / 3,) * 3
    assert bt.PrivateHistogram((120, 0, 0), 80, 0.5).majority == 1.0
    assert bt.reference_proportions((0.625, 0.0, 0.375)) == (0.62, 0.01, 0.37)


def test_the_spread_estimates_are_post_processing() -> None:
    # S̃₁ = 10, S̃₂ = 30 on n = 100: m₁ = 0.1, m₂ = 0.3, V = 0.29, σ = √0.29 (× 20 in units)
    s = bt.PrivateSpread(10.0, 30.0, 100, 0.5, 20.0)
    assert s.mean == 0.1
    assert s.variance == pytest.approx(0.29)
    assert s.rmse == pytest.approx(20 * math.sqrt(0.29))
    b1, b2 = 2 * UNITS / 0.25, UNITS / 0.25
    var1, var2 = bt.discrete_laplace_variance(b1), bt.discrete_laplace_variance(b2)
    sd_v = math.sqrt(var2 + 4 * 0.01 * var1) / (UNITS * 100)
    assert s.variance_sd == pytest.approx(sd_v, rel=1e-9)
    assert s.sd == pytest.approx(20 * min(sd_v / (2 * math.sqrt(0.29)), math.sqrt(sd_v)))
    # clipped: the mean to [−1, 1], the second moment to [m₁², 1]
    assert bt.PrivateSpread(-500.0, -3.0, 100, 0.5).mean == -1.0
    assert bt.PrivateSpread(-500.0, -3.0, 100, 0.5).variance == 0.0
    assert bt.PrivateSpread(0.0, 300.0, 100, 0.5).variance == 1.0
    assert bt.PrivateSpread(0.0, -3.0, 100, 0.5).sd == pytest.approx(
        math.sqrt(bt.PrivateSpread(0.0, -3.0, 100, 0.5).variance_sd)
    )
    assert bt.reference_spread(0.1234, 0.29111) == (0.12, 0.291)


def _band(metric: str, mean: float, baseline: float | None, sd: float) -> TaskExpectation:
    return TaskExpectation(
        task="regression" if metric == "rmse" else "multiclass",
        metric=metric,
        mean=mean,
        p10=mean,
        p90=mean,
        draws=4,
        baseline=baseline,
        reference="synthetic",
        baseline_source="private_sums",
        baseline_sd=sd,
    )


def test_the_warning_compares_with_the_baselines_one_sided_bound() -> None:
    # accuracy: flagged below m̂ + 1.645·sd
    assert _band("accuracy", 0.71, 0.7, 0.01).worse_than_baseline
    assert not _band("accuracy", 0.72, 0.7, 0.01).worse_than_baseline
    # RMSE: flagged above max(0, σ̂ − 1.645·sd)
    assert bt.rmse_warning_threshold(5.0, 1.0) == pytest.approx(5.0 - 1.645)
    assert bt.rmse_warning_threshold(1.0, 1.0) == 0.0
    assert _band("rmse", 4.0, 5.0, 1.0).worse_than_baseline  # below σ̂, within its noise
    assert not _band("rmse", 3.0, 5.0, 1.0).worse_than_baseline
    assert not _band("rmse", 4.0, 5.0, 0.0).worse_than_baseline  # a public one: plain
    assert not _band("rmse", 9.0, None, 0.0).worse_than_baseline  # no baseline yet
    out = _band("rmse", 3.0, 5.0, 1.0).to_dict()
    assert out["warning_threshold"] == pytest.approx(5.0 - 1.645)
    assert out["mean_baseline_rmse"] == 5.0
    assert out["reference"] == "synthetic"


def test_the_synthetic_references_match_the_released_proportions_and_spread() -> None:
    X, y = multiclass_reference(6, (0.6, 0.3, 0.1))
    assert np.allclose(np.linalg.norm(X, axis=1), 1.0)
    assert np.bincount(y.astype(np.int64)) / y.size == pytest.approx([0.6, 0.3, 0.1], abs=0.02)
    assert multiclass_reference(6, (0.6, 0.3, 0.1))[1] is y  # fixed (cached) for its inputs
    X, y = regression_reference(6, 0.2, 0.1)
    assert np.allclose(np.linalg.norm(X, axis=1), 1.0)
    assert float(np.mean(y)) == pytest.approx(0.2, abs=0.02)
    assert float(np.var(y)) == pytest.approx(0.1, rel=0.08)
    # a linear model explains about R² of the variance (the least-squares fit on the rows)
    w, *_ = np.linalg.lstsq(X, y, rcond=None)
    r2 = 1 - np.var(y - X @ w) / np.var(y)
    assert r2 == pytest.approx(REGRESSION_SIGNAL, abs=0.05)


def test_the_synthetic_band_is_set_against_the_private_baseline() -> None:
    common: dict[str, Any] = {
        "regularization": 0.01,
        "params": {},
        "n": 500,
        "d": 5,
        "delta": 0.0,
    }
    weak = expected_task_band_synthetic(
        "output_perturbation",
        task="multiclass",
        n_classes=3,
        epsilon=0.01,
        loss="logistic",
        proportions=(0.4, 0.3, 0.3),
        baseline=0.4,
        baseline_sd=0.01,
        baseline_source="private_count",
        **common,
    )
    strong = expected_task_band_synthetic(
        "objective_perturbation",
        task="multiclass",
        n_classes=3,
        epsilon=20.0,
        loss="logistic",
        proportions=(0.4, 0.3, 0.3),
        baseline=0.4,
        baseline_sd=0.01,
        baseline_source="private_count",
        **common,
    )
    assert weak.worse_than_baseline
    assert not strong.worse_than_baseline
    assert strong.mean > weak.mean
    rmse = expected_task_band_synthetic(
        "objective_perturbation",
        task="regression",
        n_classes=1,
        epsilon=20.0,
        loss="huber",
        half_range=20.0,
        spread=(0.0, 0.1),
        baseline=20 * math.sqrt(0.1),
        baseline_sd=0.1,
        baseline_source="private_sums",
        **common,
    )
    assert rmse.metric == "rmse"
    assert rmse.mean < rmse.threshold  # type: ignore[operator]
    with pytest.raises(ValueError, match="encoded features"):
        expected_task_band_synthetic(
            "objective_perturbation",
            task="multiclass",
            n_classes=3,
            epsilon=1.0,
            loss="logistic",
            baseline_source="private_count",
            **{**common, "d": 10_000},
        )


def test_the_multiclass_bootstrap_draws_from_the_shared_sampler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[float, tuple[int, ...]]] = []

    def spy(rng: np.random.Generator, scale: float, size: tuple[int, ...]) -> NDArray[np.int64]:
        calls.append((scale, size))
        return bootstrap_discrete_laplace(rng, scale, size)

    monkeypatch.setattr(evaluation_multiclass, "bootstrap_discrete_laplace", spy)
    noisy = np.array([[30, 2, 1], [3, 25, 4], [0, 5, 30]])
    evaluation_multiclass.bootstrap_intervals(
        noisy, n=100, epsilon=0.5, replicates=300, rng=np.random.default_rng(0)
    )
    assert calls == [(4.0, (300, 9))]  # the release's scale 2/ε on every cell


@pytest.mark.parametrize("scale", [0.7, 4.0])
def test_the_shared_bootstrap_sampler_has_the_discrete_laplace_law(scale: float) -> None:
    draws = bootstrap_discrete_laplace(np.random.default_rng(11), scale, (20_000,))
    q = math.exp(-1.0 / scale)
    # cells −m … m with the tails folded into ±m: P[X ≥ m] = P[X ≤ −m] = q^m/(1 + q)
    m = 3 if scale < 1 else 12
    cells = np.arange(-m, m + 1)
    law = (1 - q) / (1 + q) * q ** np.abs(cells).astype(np.float64)
    law[0] = law[-1] = q**m / (1 + q)
    assert law.sum() == pytest.approx(1.0)
    clipped = np.clip(draws, -m, m)
    observed = np.array([np.sum(clipped == c) for c in cells])
    assert stats.chisquare(observed, law * draws.size).pvalue > 1e-3
    # and a wrong scale is detected
    wrong = (1 - q**2) / (1 + q**2) * q ** (2 * np.abs(cells).astype(np.float64))
    wrong[0] = wrong[-1] = q ** (2 * m) / (1 + q**2)
    assert stats.chisquare(observed, wrong * draws.size).pvalue < 1e-6
