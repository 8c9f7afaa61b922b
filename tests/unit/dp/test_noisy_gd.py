"""``noisy_gd``: the accounting by hand and against dp-accounting, the released noise's law,
an empirical audit with its half-noise control, the plan, and refusals.

Hand-derived references (computed once in 40-digit arithmetic with mpmath by bisection on
δ(ε; μ) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2), Balle & Wang 2018, Thm 8):

* ε = 1, δ = 10⁻⁵: μ = 0.268051123211294, so one release of a sum of sensitivity 2 needs
  σ = 2/μ = 7.46126326963188, and T releases σ = 2√T/μ (T-fold adaptive composition of
  μ₁-GDP is √T·μ₁-GDP, Dong, Roth & Su 2022);
* ε = 2, δ = 0.05: μ = 1.1699956410016, σ = 2/μ = 1.70940807804024 for T = 1 (the audit);
* ε = 0.1, δ = 10⁻⁵: μ = 0.0325207840562039.

The tests re-evaluate that curve with scipy's ``norm`` (not the module's log-space code) and
call dp-accounting's PLD and RDP accountants directly.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy import stats

from service.dp import calibrate, fit
from service.dp.core.base import Calibration, Problem
from service.dp.core.plan import plan_from_json, plan_to_json
from service.dp.core.validation import PrivacyParameterError
from service.dp.mechanisms import get_mechanism
from service.dp.mechanisms.noisy_gd import NoisyGDPlan
from tests.unit.dp._audit import epsilon_lower_bound

MECH = get_mechanism("noisy_gd")


def _exact_delta(epsilon: float, mu: float) -> float:
    """δ(ε) of μ-GDP with plain normal CDFs (independent of the module's log-space code)."""
    return float(
        stats.norm.cdf(-epsilon / mu + mu / 2.0)
        - math.exp(epsilon) * stats.norm.cdf(-epsilon / mu - mu / 2.0)
    )


def _problem(
    *,
    n: int = 200,
    d: int = 3,
    epsilon: float = 1.0,
    delta: float = 1e-5,
    loss: str = "logistic",
    regularization: float = 1e-2,
    huber_h: float = 0.5,
    **params: object,
) -> Problem:
    return Problem(
        mechanism="noisy_gd",
        n=n,
        d=d,
        epsilon=epsilon,
        delta=delta,
        loss=loss,
        regularization=regularization,
        huber_h=huber_h,
        params=params,
    )


# ------------------------------------------------------------------ accounting


@pytest.mark.parametrize(
    ("epsilon", "delta", "rounds", "mu"),
    [
        (1.0, 1e-5, 1, 0.268051123211294),
        (1.0, 1e-5, 50, 0.268051123211294),
        (2.0, 0.05, 1, 1.1699956410016),
        (0.1, 1e-5, 20, 0.0325207840562039),
    ],
)
def test_sigma_is_the_hand_derived_gdp_sigma(
    epsilon: float, delta: float, rounds: int, mu: float
) -> None:
    cal = MECH.calibrate(_problem(epsilon=epsilon, delta=delta, iterations=rounds))
    sigma = float(cal.details["sigma"])
    hand = 2.0 * math.sqrt(rounds) / mu
    # never below the exact minimum; above it by no more than the PLD's pessimism (≤ 10⁻⁵)
    assert hand * (1.0 - 1e-12) <= sigma <= hand * (1.0 + 1e-5)
    mu_used = 2.0 * math.sqrt(rounds) / sigma
    assert _exact_delta(epsilon, mu_used) <= delta * (1.0 + 1e-9)
    assert cal.details["noise_multiplier"] == pytest.approx(sigma / 2.0, rel=1e-15)
    assert (cal.epsilon, cal.delta) == (epsilon, delta)


@pytest.mark.parametrize(("epsilon", "rounds"), [(0.1, 10), (0.5, 100), (1.0, 50), (2.0, 100)])
def test_dp_accounting_agrees_and_zcdp_would_need_more_noise(epsilon: float, rounds: int) -> None:
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting.rdp import rdp_privacy_accountant

    delta = 1e-5
    cal = MECH.calibrate(_problem(epsilon=epsilon, delta=delta, iterations=rounds))
    z = float(cal.details["noise_multiplier"])
    pld = pld_privacy_accountant.PLDAccountant()
    pld.compose(dp_event.GaussianDpEvent(z), rounds)
    assert pld.get_epsilon(delta) <= epsilon
    assert pld.get_epsilon(delta) == pytest.approx(epsilon, rel=1e-4)
    # the same release under replace-one neighbours: sensitivity 2C = 2 in dp-accounting's
    # REPLACE_ONE convention is its Gaussian of multiplier σ/C with unit sensitivity doubled
    rdp = rdp_privacy_accountant.RdpAccountant()
    rdp.compose(dp_event.GaussianDpEvent(z), rounds)
    assert epsilon < rdp.get_epsilon(delta)  # RDP (a finite order grid) is looser
    # zCDP by hand: ρ = T/(2z²), Bun–Steinke ε = ρ + 2√(ρ ln(1/δ)) exceeds the request
    rho = rounds / (2.0 * z * z)
    assert rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta)) > epsilon
    assert epsilon < float(cal.details["epsilon_zcdp_at_sigma"])
    # what zCDP (Canonne–Kamath–Steinke conversion) would have needed: more noise
    assert float(cal.details["sigma_zcdp"]) > float(cal.details["sigma"])
    assert 0.03 < float(cal.details["sigma_saving"]) < 0.2


def test_noise_actually_added_covers_the_floating_point_sensitivity() -> None:
    n, d = 200, 3
    cal = MECH.calibrate(_problem(n=n, d=d, iterations=5))
    sigma, added = float(cal.details["sigma"]), float(cal.details["sigma_added"])
    # Δ_n = 2C + 2E(n), E(n) = γ_n·n·C + ⌈√d⌉·n·2⁻¹⁰⁷⁴, γ_n = nu/(1 − nu), u = 2⁻⁵³, C = 1
    nu = Fraction(n, 2**53)
    error = nu / (1 - nu) * n + 2 * n * Fraction(1, 2**1074)
    margin_sensitivity = 2 + 2 * error
    # Δ_n/σ_n ≤ 2C/σ exactly: the released sum's multiplier is at least the accounted z
    assert margin_sensitivity / Fraction(added) <= Fraction(2) / Fraction(sigma)
    # and it is the smallest such double: σ·Δ_n/2 rounded up
    assert added == pytest.approx(sigma * (1.0 + float(error)), rel=1e-15)
    assert Fraction(added) >= Fraction(sigma) * margin_sensitivity / 2
    plan = cal.plan
    assert isinstance(plan, NoisyGDPlan)
    assert plan.sigma_added == added


@pytest.mark.parametrize(
    ("epsilon", "delta"), [(1e-6, 1e-5), (1000.0, 1e-5), (0.5, 1e-15), (1000.0, 0.99)]
)
def test_the_accountant_holds_at_the_ends_of_the_ranges(epsilon: float, delta: float) -> None:
    """ε from 10⁻⁶ to 1000 (the API's range) and δ down to the ledger's unit: the closed form
    and the PLD both stay within the request (the PLD's interval scales with ε)."""
    cal = calibrate("noisy_gd", n=1000, d=10, epsilon=epsilon, delta=delta, regularization=0.01)
    assert float(cal.details["epsilon_pld"]) <= epsilon
    assert float(cal.details["delta_at_epsilon_exact_gdp"]) <= delta
    assert float(cal.details["delta_at_epsilon_exact_gdp"]) > 0.5 * delta


def test_the_default_number_of_steps_follows_the_public_rule() -> None:
    # T = min(100, max(10, ⌊(τμn/(2√d))²⌋)), τ = 0.1; Adult's n = 30162, d = 106
    # ε = 0.1: (0.1·0.0325207840562039·30162/(2√106))² = 22.64… → 22
    cal = calibrate("noisy_gd", n=30162, d=106, epsilon=0.1, delta=1e-5, regularization=1e-3)
    assert cal.details["iterations"] == 22
    # ε = 1: (0.1·0.268051·30162/(2√106))² ≈ 1538 → the cap, 100
    cal = calibrate("noisy_gd", n=30162, d=106, epsilon=1.0, delta=1e-5, regularization=1e-3)
    assert cal.details["iterations"] == 100
    # n = 1000: (0.1·0.0325208·1000/(2√106))² ≈ 0.025 → the floor, 10
    cal = calibrate("noisy_gd", n=1000, d=106, epsilon=0.1, delta=1e-5, regularization=1e-3)
    assert cal.details["iterations"] == 10
    assert "requested" not in cal.details["iterations_rule"]
    cal = calibrate(
        "noisy_gd", n=1000, d=106, epsilon=0.1, delta=1e-5, regularization=1e-3, iterations=7
    )
    assert (cal.details["iterations"], cal.details["iterations_rule"]) == (7, "requested")


# ------------------------------------------------------------------ the plan


def test_the_plan_round_trips_and_run_reads_only_the_plan() -> None:
    problem = _problem(n=40, d=3, iterations=6)
    cal = MECH.calibrate(problem)
    assert isinstance(cal.plan, NoisyGDPlan)
    assert plan_from_json(plan_to_json(cal.plan)) == cal.plan
    # logistic c = 1/4, λ = 0.01: L_J = 0.26, κ = 26, m = (√26 − 1)/(√26 + 1) = 0.67208
    assert cal.plan.momentum == pytest.approx(0.6720784389125772, rel=1e-15)
    assert cal.plan.step == pytest.approx(1.0 / 0.26, rel=1e-15)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    y = np.where(rng.random(40) < 0.5, -1.0, 1.0)
    first = MECH.run(X, y, problem, cal, rng=np.random.default_rng(5), progress=None)
    # a different problem with the same plan: the same release (run reads the plan only)
    other = dataclasses.replace(problem, regularization=3.0, loss="huber", params={})
    second = MECH.run(X, y, other, cal, rng=np.random.default_rng(5), progress=None)
    assert np.array_equal(first.coef, second.coef)  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        MECH.run(X, y, problem, dataclasses.replace(cal, plan=None), rng=None, progress=None)


def test_a_fresh_process_derives_the_very_same_plan() -> None:
    """The worker re-derives the plan and must agree exactly with the one stored at submission
    (:func:`service.dp.core.plan.require_same_plan`): the PLD accountant is deterministic."""
    import json
    import subprocess
    import sys

    code = (
        "import json; from service.dp import calibrate; from service.dp.core.plan import "
        "plan_to_json; c = calibrate('noisy_gd', n=30162, d=106, epsilon=0.5, delta=1e-5, "
        "regularization=1e-3); print(json.dumps(plan_to_json(c.plan)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    here = calibrate("noisy_gd", n=30162, d=106, epsilon=0.5, delta=1e-5, regularization=1e-3)
    assert here.plan is not None
    assert plan_from_json(json.loads(out.stdout)) == here.plan


def test_progress_reaches_one_and_the_fit_reports_the_request() -> None:
    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 4)) / 3.0
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    seen: list[float] = []
    res = fit(
        X, y, "noisy_gd", epsilon=0.3, delta=1e-6, regularization=0.1, rng=rng,
        progress=seen.append, iterations=4,
    )  # fmt: skip
    assert (res.epsilon, res.delta) == (0.3, 1e-6)
    assert (seen[0], seen[-1]) == (0.0, 1.0)
    assert seen == sorted(seen)
    assert res.coef is not None
    assert res.coef.shape == (4,)
    assert np.all(res.coef * 2.0**32 == np.round(res.coef * 2.0**32))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"delta": 0.0}, "delta"),
        ({"delta": 1e-17}, "delta"),
        ({"iterations": 0}, "iterations"),
        ({"iterations": 1.5}, "iterations"),
        ({"step_size": "adam"}, "step_size"),
        ({"batch_size": 10}, "batch_size"),
    ],
)
def test_bad_requests_are_refused_before_any_data(changes: dict[str, Any], message: str) -> None:
    params = {k: v for k, v in changes.items() if k != "delta"}
    delta = float(changes.get("delta", 1e-5))
    with pytest.raises(PrivacyParameterError, match=message):
        calibrate("noisy_gd", n=100, d=3, epsilon=1.0, delta=delta, regularization=0.1, **params)


# ------------------------------------------------------------------ the released noise

#: A problem where every gradient is known by hand: Huber (h = ½, c = 1) has l′ = −1 for
#: margins below 1 − h = ½, and λ = 50 keeps every iterate tiny (|margins| ≪ ½), so
#: S(v) = −Σ â_i y_i x_i at every query point; constant steps s = 1/(c + λ) = 1/51.
N_LAW, D_LAW, LAMBDA_LAW, T_LAW = 5, 3, 50.0, 4


def _law_data() -> tuple[np.ndarray, np.ndarray]:
    X = np.array(
        [[0.6, 0.0, 0.0], [0.0, 0.5, 0.0], [0.0, 0.0, 0.4], [0.3, 0.3, 0.3], [-0.2, 0.1, 0.0]]
    )
    y = np.array([1.0, -1.0, 1.0, 1.0, -1.0])
    return X, y


def _law_calibration() -> tuple[Problem, Calibration]:
    problem = _problem(
        n=N_LAW,
        d=D_LAW,
        loss="huber",
        regularization=LAMBDA_LAW,
        iterations=T_LAW,
        step_size="constant",
    )
    return problem, MECH.calibrate(problem)


def test_the_released_average_has_the_hand_derived_gaussian_law() -> None:
    """w_{t+1} = a·w_t − (s/n)(S + Z_t), a = 1 − sλ = 1/51; the tail average (w₃ + w₄)/2 is
    Σ_t c_t·(−(s/n))(S + Z_t) with c = ((a² + a³)/2, (a + a²)/2, (1 + a)/2, 1/2): Gaussian with
    mean −(s/n)(Σc)S and per-coordinate sd (s/n)σ_n·√(Σc²) — fresh noise in every step (a
    reused Z would give (Σc)² instead of Σc²) at the calibrated σ_n (KS over 300 runs × 3)."""
    problem, cal = _law_calibration()
    X, y = _law_data()
    s, a = 1.0 / 51.0, 1.0 - 50.0 / 51.0
    c = np.array([(a**2 + a**3) / 2, (a + a**2) / 2, (1 + a) / 2, 0.5])
    sigma_n = float(cal.details["sigma_added"])
    # the plan's numbers are the hand-derived ones
    plan = cal.plan
    assert isinstance(plan, NoisyGDPlan)
    assert (plan.step, plan.momentum, plan.average_from) == (s, 0.0, 2)
    S = -(y[:, None] * X).sum(axis=0)  # the clip never binds here (‖x_i‖ ≤ 0.6)
    mean = -(s / N_LAW) * c.sum() * S
    sd = (s / N_LAW) * sigma_n * math.sqrt(float(np.sum(c * c)))
    rng = np.random.default_rng(11)
    coefs = np.array(
        [MECH.run(X, y, problem, cal, rng=rng, progress=None).coef for _ in range(300)]  # type: ignore[attr-defined]
    )
    assert np.max(np.abs(coefs)) < 0.25  # every margin stayed in Huber's linear piece
    standardised = ((coefs - mean) / sd).ravel()
    assert stats.kstest(standardised, "norm").pvalue > 1e-3


# ------------------------------------------------------------------ empirical privacy

#: The audit's pair (as tests/unit/dp/test_audit.py): four records x = 1, D with labels
#: +1, −1, +1, −1 and D′ flipping the first. One step (T = 1) at w = 0, Huber h = ½ (l′(0) = −1):
#: the release is w₁ = −s·A/n with A = S + Z, S_D = 0 and S_D′ = 2 (the full sensitivity), so
#: the statistic −n·w₁/s is A: N(0, σ_n²) under D, N(2, σ_n²) under D′.
X_PAIR = np.ones((4, 1))
Y_D = np.array([1.0, -1.0, 1.0, -1.0])
Y_D_PRIME = np.array([-1.0, -1.0, 1.0, -1.0])
EPS_AUDIT, DELTA_AUDIT = 2.0, 0.05
#: σ = 2/μ for (ε, δ) = (2, 0.05), T = 1 (module docstring)
SIGMA_AUDIT = 1.70940807804024
RUNS_AUDIT = 5000


def _audit_problem() -> Problem:
    return _problem(
        n=4,
        d=1,
        epsilon=EPS_AUDIT,
        delta=DELTA_AUDIT,
        loss="huber",
        regularization=1.0,
        iterations=1,
        step_size="constant",
    )


def _thresholds(scale: float) -> list[float]:
    """Events {A ≤ t} below D′'s mean 2 and {A > t} near it, fixed before sampling (the
    likelihood ratio is monotone; thresholds decide power only)."""
    return [2.0 - k * scale for k in (0.25, 0.5, 0.75, 1.0)]


def test_the_audit_pair_releases_the_hand_derived_means() -> None:
    cal = MECH.calibrate(_audit_problem())
    assert float(cal.details["sigma"]) == pytest.approx(SIGMA_AUDIT, rel=1e-5)
    quiet = dataclasses.replace(
        cal,
        plan=dataclasses.replace(cal.plan, sigma_added=1e-9),  # type: ignore[type-var]
    )
    plan = quiet.plan
    assert isinstance(plan, NoisyGDPlan)
    for y, expected in ((Y_D, 0.0), (Y_D_PRIME, 2.0)):
        w = MECH.run(
            X_PAIR, y, _audit_problem(), quiet, rng=np.random.default_rng(0), progress=None
        )
        released = -4.0 * w.coef[0] / plan.step  # type: ignore[attr-defined]
        assert released == pytest.approx(expected, abs=1e-6)


def _audit_statistic(cal: Calibration, y: np.ndarray, seed: int) -> np.ndarray:
    plan = cal.plan
    assert isinstance(plan, NoisyGDPlan)
    rng = np.random.default_rng(seed)
    problem = _audit_problem()
    coefs = np.array(
        [
            MECH.run(X_PAIR, y, problem, cal, rng=rng, progress=None).coef[0]  # type: ignore[attr-defined]
            for _ in range(RUNS_AUDIT)
        ]
    )
    out: np.ndarray = -4.0 * coefs / plan.step
    return out


@pytest.mark.statistical
@pytest.mark.heavy
def test_empirical_epsilon_stays_below_the_claim_and_close_to_it() -> None:
    cal = MECH.calibrate(_audit_problem())
    sigma = float(cal.details["sigma_added"])
    a_d = _audit_statistic(cal, Y_D, 300)
    a_dp = _audit_statistic(cal, Y_D_PRIME, 301)
    lower = epsilon_lower_bound(
        a_dp, a_d, confidence=0.99, delta=DELTA_AUDIT, thresholds=_thresholds(sigma)
    )
    assert lower < EPS_AUDIT
    # the GDP calibration is tight (δ(ε) = δ exactly on this pair): the audit sees most of ε
    assert lower > 0.25 * EPS_AUDIT


@pytest.mark.statistical
def test_audit_catches_half_the_noise() -> None:
    """The control: A drawn from the hand-derived law with σ/2 (μ doubled, true ε at δ = 0.05
    from the GDP curve) — the audit's bound exceeds the claim and stays below the truth."""
    mu_half = 2.0 * 2.0 / SIGMA_AUDIT
    true_eps = float(
        __import__("scipy").optimize.brentq(
            lambda e: _exact_delta(e, mu_half) - DELTA_AUDIT, 0.0, 20.0
        )
    )
    rng = np.random.default_rng(400)
    half = SIGMA_AUDIT / 2.0
    a_d = rng.normal(0.0, half, RUNS_AUDIT)
    a_dp = 2.0 + rng.normal(0.0, half, RUNS_AUDIT)
    lower = epsilon_lower_bound(
        a_dp, a_d, confidence=0.99, delta=DELTA_AUDIT, thresholds=_thresholds(SIGMA_AUDIT)
    )
    assert EPS_AUDIT < lower <= true_eps
