"""Accounting: validators, composition rules and ledger units against hand-computed numbers."""

from __future__ import annotations

import math
import random
from decimal import Context, Decimal
from fractions import Fraction
from typing import Any, Literal

import mpmath as mp  # type: ignore[import-untyped]
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import optimize, stats

from service.dp.core import accounting as acc
from service.dp.core.accounting import PrivacyCost
from tests.unit.dp._cks import cks_infimum


@pytest.mark.parametrize(
    ("epsilon", "delta"),
    [
        (0.0, 0.0),
        (-1.0, 0.0),
        (math.inf, 0.0),
        (math.nan, 0.0),
        ("1", 0.0),
        (True, 0.0),
        (1.0, -0.1),
        (1.0, 1.0),
        (1.0, math.nan),
        (1.0, None),
    ],
)
def test_check_epsilon_delta_rejects(epsilon: object, delta: object) -> None:
    with pytest.raises(ValueError):
        acc.check_epsilon_delta(epsilon, delta)  # type: ignore[arg-type]


@pytest.mark.parametrize(("epsilon", "delta"), [(1e-6, 0.0), (1.0, 0.999), (50, 1e-12)])
def test_check_epsilon_delta_accepts(epsilon: float, delta: float) -> None:
    acc.check_epsilon_delta(epsilon, delta)


@pytest.mark.parametrize(("epsilon", "delta"), [(-0.1, 0.0), (math.inf, 0.0), (1.0, 1.5)])
def test_privacy_cost_validates(epsilon: float, delta: float) -> None:
    with pytest.raises(ValueError):
        PrivacyCost(epsilon, delta)


def test_basic_composition() -> None:
    total = acc.basic_composition(
        [PrivacyCost(0.5), PrivacyCost(0.25, 1e-6), PrivacyCost(1.0, 2e-6)]
    )
    assert total.epsilon == pytest.approx(1.75)
    assert total.delta == pytest.approx(3e-6)
    assert PrivacyCost(0.5, 1e-6) + PrivacyCost(0.5, 1e-6) == PrivacyCost(1.0, 2e-6)
    assert acc.basic_composition([]) == PrivacyCost(0.0, 0.0)
    assert (PrivacyCost(1.0, 0.7) + PrivacyCost(1.0, 0.7)).delta == 1.0


def test_parallel_composition() -> None:
    total = acc.parallel_composition(
        [PrivacyCost(0.5, 1e-6), PrivacyCost(1.5, 0.0), PrivacyCost(1.0, 5e-6)]
    )
    assert total == PrivacyCost(1.5, 5e-6)
    assert acc.parallel_composition([]) == PrivacyCost(0.0, 0.0)


def test_advanced_composition_hand_numbers() -> None:
    # k = 100 steps of ε = 0.1, δ = 1e-7, δ′ = 1e-5:
    # ε_tot = 0.1·√(2·100·ln(1e5)) + 100·0.1·(e^0.1 − 1)
    #       = 0.1·√(200·11.512925465) + 10·0.105170918 = 4.798526 + 1.051709 = 5.850235
    cost = acc.advanced_composition(PrivacyCost(0.1, 1e-7), 100, 1e-5)
    assert cost.epsilon == pytest.approx(5.850235, abs=2e-6)
    assert cost.delta == pytest.approx(100 * 1e-7 + 1e-5)


def test_best_composition_picks_the_smaller_epsilon_and_shows_both() -> None:
    many = acc.best_composition(PrivacyCost(0.1, 1e-7), 100, 1e-5)
    assert many.method == "advanced"
    assert many.basic.epsilon == pytest.approx(10.0)
    assert many.basic.delta == pytest.approx(1e-5)
    assert many.best == many.advanced
    assert many.best.epsilon == pytest.approx(5.850235, abs=2e-6)
    text = many.describe(100)
    assert "advanced" in text
    assert "basic" in text

    few = acc.best_composition(PrivacyCost(1.0), 2, 1e-5)
    # advanced: 1·√(4·ln 1e5) + 2·(e − 1) = 6.786 + 3.437 > basic 2
    assert few.method == "basic"
    assert few.best == PrivacyCost(2.0, 0.0)
    assert few.advanced.epsilon == pytest.approx(math.sqrt(4 * math.log(1e5)) + 2 * (math.e - 1))


@pytest.mark.parametrize("k", [0, -3, 2.5, True])
def test_composition_rejects_bad_k(k: object) -> None:
    with pytest.raises(ValueError):
        acc.advanced_composition(PrivacyCost(1.0), k, 1e-5)  # type: ignore[arg-type]


@pytest.mark.parametrize("delta_prime", [0.0, 1.0, -1e-5, math.nan])
def test_advanced_composition_rejects_bad_delta_prime(delta_prime: float) -> None:
    with pytest.raises(ValueError):
        acc.advanced_composition(PrivacyCost(1.0), 3, delta_prime)


def test_zcdp_gaussian_and_composition() -> None:
    assert acc.gaussian_zcdp(1.0, 2.0) == pytest.approx(1 / 8)
    assert acc.gaussian_zcdp(2.0, 4.0) == pytest.approx(4 / 32)
    assert acc.zcdp_compose([1 / 8, 1 / 8, 0.25]) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        acc.gaussian_zcdp(1.0, 0.0)
    with pytest.raises(ValueError):
        acc.zcdp_compose([0.1, -0.1])


def test_zcdp_to_dp_hand_numbers() -> None:
    # ρ = 0.25, δ = 1e-5: ε = 0.25 + 2·√(0.25·ln 1e5) = 0.25 + √11.512925 = 3.643070
    cost = acc.zcdp_to_dp(0.25, 1e-5)
    assert cost.epsilon == pytest.approx(3.643070, abs=1e-6)
    assert cost.delta == 1e-5
    with pytest.raises(ValueError):
        acc.zcdp_to_dp(0.25, 0.0)


def _gaussian_delta(mu: float, eps: float) -> float:
    """Exact privacy profile of the Gaussian mechanism with Δ/σ = μ (Balle & Wang 2018):
    δ(ε) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ). It is ρ-zCDP with ρ = μ²/2 and no better."""
    a, b = mu / 2 - eps / mu, -mu / 2 - eps / mu
    return float(stats.norm.cdf(a) - math.exp(eps + stats.norm.logcdf(b)))


@pytest.mark.parametrize("rho", [1e-3, 0.05, 0.5, 4.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-6, 1e-10])
def test_cks_conversion_is_valid_and_tighter(rho: float, delta: float) -> None:
    cks = acc.zcdp_to_dp_cks(rho, delta)
    simple = acc.zcdp_to_dp(rho, delta)
    assert cks.delta == delta
    assert 0.0 < cks.epsilon <= simple.epsilon
    # Valid: the Gaussian mechanism is exactly ρ-zCDP, so its true δ at the CKS ε must not
    # exceed δ (a too-small ε would fail here).
    mu = math.sqrt(2 * rho)
    assert _gaussian_delta(mu, cks.epsilon) <= delta * (1 + 1e-9)
    # Useful: within 30 % of the Gaussian mechanism's exact ε(δ), a lower limit for any
    # conversion that holds for all ρ-zCDP mechanisms.
    exact = optimize.brentq(lambda e: _gaussian_delta(mu, e) - delta, 1e-12, 200.0)
    assert cks.epsilon <= 1.3 * exact + 1e-9
    # And no worse than the closed form at the textbook order α = 1 + √(ln(1/δ)/ρ).
    alpha = 1 + math.sqrt(math.log(1 / delta) / rho)
    at_alpha = alpha * rho + (
        math.log(1 / delta) + (alpha - 1) * math.log(1 - 1 / alpha) - math.log(alpha)
    ) / (alpha - 1)
    assert cks.epsilon <= at_alpha + 1e-9


def test_cks_of_zero_rho_is_zero() -> None:
    assert acc.zcdp_to_dp_cks(0.0, 1e-6) == PrivacyCost(0.0, 1e-6)


def test_to_units_exact_decimal_and_rounding() -> None:
    assert acc.to_units(0.1, unit="epsilon") == 100_000_000
    assert acc.to_units(1e-5, unit="delta") == 10**10
    assert acc.to_units(1 / 3, unit="epsilon") == 333_333_334
    assert acc.to_units(1 / 3, unit="epsilon", rounding="down") == 333_333_333
    assert acc.to_units(0.0, unit="epsilon") == 0
    # docs/design.md §2: spending 0.1 ten times from 1.0 succeeds, an eleventh fails.
    cap = acc.to_units(1.0, unit="epsilon", rounding="down")
    charge = acc.to_units(0.1, unit="epsilon")
    assert 10 * charge <= cap < 11 * charge
    assert acc.from_units(100_000_000, unit="epsilon") == 0.1
    with pytest.raises(ValueError):
        acc.to_units(-0.1, unit="epsilon")
    with pytest.raises(ValueError):
        acc.to_units(0.1, unit="epsilon", rounding="sideways")


@given(st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False))
def test_to_units_is_conservative(value: float) -> None:
    up = acc.to_units(value, unit="epsilon")
    down = acc.to_units(value, unit="epsilon", rounding="down")
    exact = Decimal(repr(value)) * acc.EPSILON_UNITS_PER_ONE
    assert down <= exact <= up
    assert up - down <= 1
    assert acc.from_units(up, unit="epsilon") >= value
    assert acc.from_units(down, unit="epsilon") <= value


# --- issue 19 §4: the ledger never charges less than a mechanism uses ------------------------

_amounts = st.floats(min_value=0.0, max_value=1e5, allow_nan=False, allow_infinity=False)


@given(_amounts, st.sampled_from(["epsilon", "delta"]))
def test_the_calibrated_amount_never_exceeds_the_charge(value: float, unit: str) -> None:
    from fractions import Fraction

    from service.domain.ledger.units import DELTA_UNIT, EPSILON_UNIT
    from service.domain.ledger.units import to_units as ledger_units

    if unit == "delta" and value >= 1.0:
        value = value / 1e5
    kind: Literal["epsilon", "delta"] = "epsilon" if unit == "epsilon" else "delta"
    per_one = acc.EPSILON_UNITS_PER_ONE if kind == "epsilon" else acc.DELTA_UNITS_PER_ONE
    charged_units = ledger_units(value, EPSILON_UNIT if kind == "epsilon" else DELTA_UNIT, "up")
    assert charged_units == acc.to_units(value, unit=kind)  # the dp and ledger views agree
    used = acc.ledger_floor(value, unit=kind)  # what every mechanism calibrates with
    # exact comparison of the binary value used against the decimal charged
    assert Fraction(used) <= Fraction(charged_units, per_one)
    assert Fraction(used) <= Fraction(value)
    # one ulp at most below the request, and charged the very same units
    assert used in (value, math.nextafter(value, -math.inf))
    assert acc.to_units(used, unit=kind) == charged_units


def test_a_tenth_is_calibrated_just_below_the_charged_tenth() -> None:
    from fractions import Fraction

    from service.dp import calibrate

    cal = calibrate("output_perturbation", n=100, d=3, epsilon=0.1, regularization=0.1)
    used = cal.details["epsilon_calibrated"]
    assert Fraction(0.1) > Fraction(1, 10)  # the double 0.1 exceeds the decimal 0.1 ...
    assert used == math.nextafter(0.1, 0.0)  # ... so the noise is calibrated one ulp below
    assert Fraction(used) <= Fraction(1, 10)
    assert cal.epsilon == 0.1  # the quote shows the charged amount
    # β = ε/S for the ε used, S = 2/(nλ) + 2τ/λ (the certificate's tolerance τ), to a few ulps
    # (the mechanism takes the largest double with β·S ≤ ε in exact arithmetic)
    beta, sensitivity = cal.details["beta"], cal.details["sensitivity"]
    tau = cal.details["certificate_tolerance"]
    assert sensitivity == pytest.approx(2 / (100 * 0.1) + 2 * tau / 0.1, rel=1e-15)
    assert beta == pytest.approx(used / sensitivity, rel=4e-16)
    assert beta * sensitivity <= used * (1 + 2**-52)
    assert acc.to_units(cal.epsilon, unit="epsilon") * 10 == acc.to_units(1.0, unit="epsilon")


@pytest.mark.parametrize("protocol", ["noisy_average", "admm", "psgd"])
def test_federated_protocols_calibrate_with_the_ledger_floor(protocol: str) -> None:
    from service.dp.federated import federated_calibrate

    delta = 0.0 if protocol != "psgd" else 0.3e-5  # 3e-6 as a double exceeds its decimal
    cal = federated_calibrate(
        protocol, site_sizes=[100, 120], d=3, epsilon=0.1, delta=delta, regularization=0.1
    )
    # the noise is calibrated with the floor, one ulp below the double 0.1 ...
    assert cal.details["epsilon_calibrated"] == acc.ledger_floor(0.1) < 0.1
    assert cal.details["delta_calibrated"] == acc.ledger_floor(delta, unit="delta") <= delta
    # ... and every dataset's cost is at most the request, which is what the ledger charges
    assert all(cost.epsilon <= 0.1 and cost.delta <= delta for cost in cal.site_costs)
    assert max(cost.epsilon for cost in cal.site_costs) == pytest.approx(0.1, rel=1e-12)


def test_evaluation_and_tuning_noise_use_the_ledger_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    from service.dp.analysis import evaluation, selection

    scales: list[object] = []
    real = evaluation.noise_scale

    def record(epsilon: float) -> object:
        scales.append(epsilon)
        return real(epsilon)

    monkeypatch.setattr(evaluation, "noise_scale", record)
    result = evaluation.evaluate(np.array([1.0, -1.0]), np.array([1.0, -1.0]), epsilon=0.2)
    assert result.epsilon == 0.2  # the request is what is reported (and charged)
    assert scales[:2] == [acc.ledger_floor(0.2) / 2] * 2
    assert acc.ledger_floor(0.2) < 0.2

    seen: list[float] = []
    real_em = selection.exponential_mechanism

    def spy(errors: object, epsilon: float, rng: object, **kwargs: Any) -> object:
        seen.append(epsilon)
        return real_em(errors, epsilon, rng, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(selection, "exponential_mechanism", spy)
    from service.dp import fit
    from service.dp.data.prepared import prepare_design

    rng = np.random.default_rng(0)
    X = rng.uniform(-0.5, 0.5, (60, 2))
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    selection.tune(
        prepare_design(X, y),
        [0.1, 1.0],
        epsilon=0.1,
        fit_one=lambda part, lam: fit(
            part, None, "objective_perturbation", epsilon=0.1, regularization=lam, rng=rng
        ),
        rng=rng,
    )
    assert seen == [acc.ledger_floor(0.1)]


def test_figures_equal_to_the_floor_are_shown_as_requested_at_any_depth() -> None:
    floor = acc.ledger_floor(0.1)
    details = {
        "epsilon": floor,
        "sigma": floor,  # not an ε figure: left alone
        "advanced_total": {"epsilon": floor, "delta": 0.0},
        "sites": [{"epsilon_site": floor}, {"epsilon_site": 0.05}],
    }
    shown = acc.shown_as_requested(details, epsilon=(floor, 0.1), delta=(0.0, 0.0))
    assert shown["epsilon"] == 0.1
    assert shown["sigma"] == floor
    assert shown["advanced_total"] == {"epsilon": 0.1, "delta": 0.0}
    assert [s["epsilon_site"] for s in shown["sites"]] == [0.1, 0.05]
    assert (shown["epsilon_calibrated"], shown["delta_calibrated"]) == (floor, 0.0)


def _advanced_lower(eps: float, k: int, delta_prime: float) -> Fraction:
    """A rational ≤ ε√(2k ln(1/δ′)) + kε(e^ε − 1) for the doubles given (80-digit decimals,
    less 10⁻⁶⁰ relative, far more than their rounding)."""
    ctx = Context(prec=80)
    s = Decimal(eps)
    root = ctx.sqrt(ctx.multiply(2 * k, ctx.ln(ctx.divide(1, Decimal(delta_prime)))))
    value = ctx.add(ctx.multiply(s, root), ctx.multiply(ctx.multiply(k, s), ctx.exp(s) - 1))
    return Fraction(value) * (1 - Fraction(1, 10**60))


# found by random search: here the double evaluation of the advanced bound lies below the real one
@pytest.mark.parametrize(
    ("eps", "k", "delta_prime"),
    [
        (0.0995435087091941, 116, 1.667393297425864e-05),
        (1.7796176140422681, 156, 7.975526095053391e-08),
        (0.3273460305003912, 27, 6.1458271139168965e-09),
    ],
)
def test_advanced_composition_is_an_upper_bound_in_real_arithmetic(
    eps: float, k: int, delta_prime: float
) -> None:
    cost = acc.advanced_composition(PrivacyCost(eps, 1e-7), k, delta_prime)
    assert Fraction(cost.epsilon) >= _advanced_lower(eps, k, delta_prime)
    assert Fraction(cost.delta) >= k * Fraction(1e-7) + Fraction(delta_prime)
    # and tight: one ulp below the charge is already below the real bound's upper bound
    assert Fraction(math.nextafter(cost.epsilon, 0.0)) < acc.advanced_upper(eps, k, delta_prime)
    choice = acc.best_composition(PrivacyCost(eps, 1e-7), k, delta_prime)
    assert choice.advanced == cost


def test_best_composition_basic_total_is_rounded_up() -> None:
    # 3·0.3 in doubles is 0.8999999999999999, below the exact 3·fl(0.3) = 0.89999999999999996…
    choice = acc.best_composition(PrivacyCost(0.3, 0.1), 3, 1e-5)
    assert Fraction(choice.basic.epsilon) >= 3 * Fraction(0.3)
    assert choice.basic.epsilon == math.nextafter(3 * 0.3, math.inf)
    assert Fraction(choice.basic.delta) >= 3 * Fraction(0.1)


def test_advanced_composition_overflow_is_reported() -> None:
    with pytest.raises(OverflowError):
        acc.advanced_composition(PrivacyCost(800.0), 3, 1e-5)
    with pytest.raises(OverflowError):
        acc.advanced_composition(PrivacyCost(1e300), 3, 1e-5)


# found by random search: the double evaluations below lay under the real values
def test_zcdp_to_dp_is_an_upper_bound_in_real_arithmetic() -> None:
    for rho, delta in [
        (4.923114122197424, 2.3185026177708776e-10),
        (0.7054920869333204, 7.050340248957493e-09),
    ]:
        ctx = Context(prec=90)
        real = Decimal(rho) + 2 * ctx.sqrt(ctx.multiply(Decimal(rho), -ctx.ln(Decimal(delta))))
        lower = Fraction(real) * (1 - Fraction(1, 10**70))
        assert Fraction(acc.zcdp_to_dp(rho, delta).epsilon) >= lower


def test_gaussian_rho_and_its_composition_are_rounded_up() -> None:
    sens, sigma = 1.834931336030829, 13.485213008301471
    exact = Fraction(sens) ** 2 / (2 * Fraction(sigma) ** 2)
    assert Fraction(acc.gaussian_zcdp(sens, sigma)) >= exact
    assert acc.gaussian_zcdp(sens, sigma) == acc.round_up(exact)
    # ten rounds of 0.1 sum to 0.9999999999999999 in doubles, below 10·fl(0.1)
    assert Fraction(acc.zcdp_compose([0.1] * 10)) >= 10 * Fraction(0.1)


@pytest.mark.parametrize(
    ("rho", "delta"),
    [
        (0.056796532807889856, 0.0003477747005349059),
        (1.199521258993983e-05, 1.3731450805298199e-09),
        (0.00035985213688173487, 2.2891975512524046e-05),
    ],
)
def test_cks_conversion_is_never_below_the_real_infimum(rho: float, delta: float) -> None:
    # the infimum over α = 1 + e^t, by golden-section search in 50-digit arithmetic; the
    # doubles' minimum used to lie an ulp or two below it
    with mp.workdps(50):
        infimum = cks_infimum(rho, delta)
    cks = acc.zcdp_to_dp_cks(rho, delta).epsilon
    assert mp.mpf(cks) >= infimum * (1 - mp.mpf(10) ** -40)
    assert cks <= acc.zcdp_to_dp(rho, delta).epsilon


def test_largest_share_and_remainder_match_the_loops_they_replace() -> None:
    # the step-down loops DP-SGD, repetition, certified release and objective perturbation had
    rng = random.Random(7)
    for _ in range(3000):
        eps = rng.choice([0.1, 0.3, 0.9, 1.0, 7.0]) * rng.uniform(0.5, 2.0)
        parts = rng.randint(1, 300)
        share = eps / parts
        while Fraction(share) * parts > Fraction(eps):
            share = math.nextafter(share, 0.0)
        assert acc.largest_share(eps / parts, parts, eps) == share
        assert parts * Fraction(share) <= Fraction(eps)
        used = eps * rng.uniform(0.0, 0.6)
        rest = eps - used
        while rest > 0.0 and Fraction(rest) + Fraction(used) > Fraction(eps):
            rest = math.nextafter(rest, 0.0)
        assert acc.remainder_within(eps, used) == rest
        assert Fraction(rest) + Fraction(used) <= Fraction(eps)
    assert acc.remainder_within(1.0, 1.5) <= 0.0
