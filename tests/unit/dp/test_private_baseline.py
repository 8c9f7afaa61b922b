"""The private majority-class baseline (service/dp/analysis/baseline.py): the slice of ε by
its public rule, the count's noise scale by hand, a KS test of the released noise, and the
warning's threshold."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from service.dp.analysis import baseline as pb
from service.dp.analysis.auto import Expectation


@pytest.mark.parametrize(
    ("n", "epsilon", "share"),
    [
        (200, 1.0, 0.05),  # √2/(200·1·0.01) = 0.707: capped at 5 %
        (30_162, 1.0, 0.01),  # √2/301.62 = 0.00469: floored at 1 %
        (30_162, 0.1, math.sqrt(2) / (30_162 * 0.1 * 0.01)),  # 0.0469: the rule itself
    ],
)
def test_the_share_follows_its_public_rule(n: int, epsilon: float, share: float) -> None:
    assert pb.baseline_share(n, epsilon) == pytest.approx(share, rel=1e-12)
    fit, count = pb.split_budget(n, epsilon)
    assert count == pytest.approx(share * epsilon, rel=1e-12)
    assert fit == pytest.approx(epsilon - share * epsilon, rel=1e-12)
    assert fit + count <= epsilon


# found by random search: a check in doubles let these splits exceed ε by an ulp
@pytest.mark.parametrize(("n", "epsilon"), [(90_508, 4.7), (85_072, 0.27), (14_848, 1.87)])
def test_the_split_fits_epsilon_in_exact_arithmetic(n: int, epsilon: float) -> None:
    fit, count = pb.split_budget(n, epsilon)
    assert Fraction(fit) + Fraction(count) <= Fraction(epsilon)
    assert Fraction(math.nextafter(fit, math.inf)) + Fraction(count) > Fraction(epsilon)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_a_bad_epsilon_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="ε"):
        pb.baseline_share(100, bad)
    with pytest.raises(ValueError, match="ε"):
        pb.private_majority(np.ones(10), bad, np.random.default_rng(0))


def test_noise_scale_by_hand() -> None:
    # ε = ln 2: q = e^{−ε} = 1/2, Var Z = 2q/(1 − q)² = 1/(1/4) = 4
    assert pb.count_noise_variance(math.log(2.0)) == pytest.approx(4.0, rel=1e-12)
    # and sd of the fraction on n = 8 rows: √4/8
    assert pb.count_noise_sd(8, math.log(2.0)) == pytest.approx(0.25, rel=1e-12)
    # small ε: ≈ 2/ε², the continuous Laplace's variance at scale 1/ε
    assert pb.count_noise_variance(1e-3) == pytest.approx(2e6, rel=1e-3)
    released = pb.private_majority(np.array([1.0, -1.0, 1.0]), 0.25, np.random.default_rng(1))
    record = released.record()
    assert record["scale"] == 4.0  # b = 1/ε
    assert record["sensitivity"] == 1
    assert record["epsilon"] == 0.25
    assert record["delta"] == 0.0


def _discrete_laplace_cdf(z: np.ndarray, epsilon: float) -> np.ndarray:
    """F(z) of P[Z = z] = (1 − q)/(1 + q)·q^{|z|}, q = e^{−ε}: q^{−z}/(1 + q) for z < 0,
    1 − q^{z+1}/(1 + q) for z ≥ 0."""
    q = math.exp(-epsilon)
    zf = z.astype(np.float64)
    return np.where(z < 0, q ** (-zf) / (1 + q), 1.0 - q ** (zf + 1) / (1 + q))


def test_the_released_count_noise_is_discrete_laplace_at_scale_one_over_epsilon() -> None:
    rng = np.random.default_rng(2028)
    epsilon = 0.4
    y = np.where(np.arange(500) < 137, 1.0, -1.0)  # 137 positives
    noise = np.array([pb.private_majority(y, epsilon, rng).noisy_count - 137 for _ in range(4000)])
    # randomised probability integral transform: exactly uniform for a discrete law
    u = rng.random(noise.size)
    pit = _discrete_laplace_cdf(noise - 1, epsilon) + u * (
        _discrete_laplace_cdf(noise, epsilon) - _discrete_laplace_cdf(noise - 1, epsilon)
    )
    assert stats.kstest(pit, "uniform").pvalue > 1e-3
    # and the wrong scale is detected (the test can fail)
    wrong = _discrete_laplace_cdf(noise - 1, 2 * epsilon) + u * (
        _discrete_laplace_cdf(noise, 2 * epsilon) - _discrete_laplace_cdf(noise - 1, 2 * epsilon)
    )
    assert stats.kstest(wrong, "uniform").pvalue < 1e-6
    assert noise.var() == pytest.approx(pb.count_noise_variance(epsilon), rel=0.1)


def test_the_estimate_is_post_processing_of_the_count() -> None:
    base = pb.PrivateBaseline(noisy_count=30, n=100, epsilon=0.5)
    assert base.positive_fraction == 0.3
    assert base.majority == 0.7
    assert pb.PrivateBaseline(noisy_count=-4, n=100, epsilon=0.5).majority == 1.0  # clipped
    assert pb.PrivateBaseline(noisy_count=140, n=100, epsilon=0.5).majority == 1.0
    assert base.sd == pytest.approx(math.sqrt(pb.count_noise_variance(0.5)) / 100)
    assert pb.reference_majority(0.7543) == 0.75
    assert pb.reference_majority(1.0) == 0.99
    assert pb.reference_majority(0.5) == 0.5


def test_the_warning_compares_with_the_baselines_upper_bound() -> None:
    def band(mean: float, sd: float) -> Expectation:
        return Expectation(
            mean=mean,
            p10=mean,
            p90=mean,
            draws=4,
            reference="synthetic",
            baseline=0.7,
            baseline_source="private_count",
            baseline_sd=sd,
        )

    assert pb.warning_threshold(0.7, 0.01) == pytest.approx(0.7 + 1.645 * 0.01)
    assert band(0.71, 0.01).below_baseline  # above 0.7, but within the count's noise
    assert not band(0.72, 0.01).below_baseline
    assert not band(0.71, 0.0).below_baseline  # a public baseline: the plain comparison
    assert band(0.69, 0.0).below_baseline
    assert band(0.71, 0.01).to_dict()["warning_threshold"] == pytest.approx(0.71645)
