"""Empirical privacy: the audit helper itself, then every ERM mechanism on a neighbouring pair
where one record is replaced by its label-flipped twin (the worst case for the gradient).

The pair: λ = 25 keeps every margin, noisy or not, inside Huber's linear piece (|w| ≈ 0.02
± 0.03), so l″ = 0, the Jacobian factor is exactly 1 and the gradients of the replaced record
differ by exactly 2: the privacy loss of each mechanism is its noise part at full sensitivity.
Every release is w = (Σ y_i x_i − b)/(n(λ + Δ)) (or the exact minimiser plus b for output
perturbation), so the statistic z = (n(λ + Δ)·w + 2)/2 is the noise in gradient units, shifted
by 1 between the neighbours: D has mean 1, D′ mean 0, and z − mean is Laplace(1/ε_n) for the
norm-exponential mechanisms (d = 1) or N(0, (σ/2)²) for the Gaussian ones, with ε_n, σ and Δ
derived here by hand (the tests also pin the calibration to them). The objective-perturbation
mechanisms calibrate their objective at ε₁ = ε − ε_r (:mod:`tests.unit.dp._budget`), ε_r paying
for the certified release's noise Z (:mod:`service.dp.optimize.certified`); on this pair Z moves z
by E‖Z‖·n(λ + Δ)/2 ≈ 7·10⁻⁵ on average and the 2⁻³² release grid by ≤ 6·10⁻⁹, far below the
noise scale s ≈ 0.5.

Thresholds. The events are {z > t} for t ∈ {1, 1 + s/2, 1 + s} (Laplace) or
{1 + s/4, 1 + s/2, 1 + 3s/4, 1 + s} (Gaussian), s the hand-derived noise scale of z, fixed
before sampling, so every run counts for the bound (no selection half).
For a shift family with monotone likelihood ratio these are the most powerful events; their
choice affects only the power, never the validity of the bound.

Each mechanism test runs at ε = 2 (the audit's power grows with ε: the events it needs are
less rare) and asserts, at 99 % confidence:

* the correct noise: the lower bound on ε stays below the claim, and comes close to it (the
  pair attains the bound, so a mechanism adding twice the noise it needs would show);
* half the calibrated noise (β × 2, σ × 0.5) is caught: the bound exceeds the claim;
* twice the noise is caught by the tightness check: its true ε on this pair is ε/2 for the
  pure mechanisms and, for the Gaussian ones at δ = 0.05, that of a Gaussian shift of
  μ = 2/(2σ) = 0.42 standard deviations, 0.377 (δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)),
  below the tightness threshold, so no valid audit can reach it.

The half and twice controls show the audit's power, not the mechanisms': they audit draws of z
from the hand-derived law with the noise scaled (no mechanism runs), since the KS law tests
(tests/unit/dp/test_distribution.py, test_certified.py, test_enclosure.py) already pin every
mechanism's noise to that law; they also check the bound stays valid (≤ the mis-scaled
mechanism's true ε) and sees a fifth of it or more.

The Gaussian mechanisms are audited δ-aware (p − δ against e^ε q) at δ = 0.05. On this pair
their true ε at that δ is 1.19 with the calibrated σ (the χ²-tail argument of GOP and Kifer
et al. is not tight in d = 1), 3.47 with half of it and 0.377 with twice. Simulated over 120
seeds, 5000 runs a dataset give lower bounds of 0.73–1.01 (correct), 2.32–2.97 (half) and
0.12–0.29 (twice); at δ = 10⁻² the same margins would take about twice the runs.

The Gaussian audits stop early (:func:`tests.unit.dp._audit.sequential_audit`): looks after
1000, 2000, …, 5000 runs a dataset, each bound at 1 − α/5 (Bonferroni over the looks, so the
bound stays a 99 % one), stopping at the first look where the lower bound passes the tightness
threshold and a 1 − α/5 upper bound on ln((p − δ)/q) for the event {z > 1 + s/2} is below the
claim; its value there is 1.05 with the calibrated σ and 2.85 with half of it, so a mechanism
with half the noise stops early with probability ≤ 1 %. Simulated from the law over 200 seeds:
with the calibrated σ every audit passes, after 1000 (85), 2000 (107) or 3000 (8) runs, 1,615
on average instead of 5000 (a third of the time); with half the noise all 200 are caught (the
fixed 5000-run audit also catches 200 of 200); with twice the noise none reaches the tightness
threshold (the test fails, as it must). What it gives up: at σ × 0.6 the sequential audit
catches 22 % of seeds and the fixed one 35 %, at σ × 0.65 neither catches any; the KS law
tests remain what pins σ itself.
The pure-ε audits used 1000 runs a dataset: over 40 simulated seeds their bounds are 1.35–1.70
(correct; the tightness threshold is 1.2), 2.57–3.55 (half; claim 2) and 0.53–0.81 (twice).
They stop early the same way, with looks after 250, 500, 750 and 1000 runs and the decisive
event {z > 1 − s}: for Laplace noise of scale s, ln(p/q) there is (1 − s)/s' + ln(2 −
e^{−s/s'}) for a mechanism drawing scale s', 1.49 at s' = s and 2.63 at s' = s/2 (above the
claim: above D's mean the ratio is e^ε exactly, so no event there can decide). Simulated from
the law over 200 seeds: with the calibrated noise all 200 pass, after 611 runs a dataset on
average instead of 1000 (the fixed audit: 200); with half the noise all 200 bounds exceed the
claim and with twice none reaches the tightness threshold, as with the fixed audit.
What it gives up (60 simulated seeds, sequential against fixed on the same draws): with the
scale × 0.7 it catches 49–50 and the fixed audit 53–54, at × 0.8 8–10 against 11–12; the KS
law tests remain what pins the scale.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from service.dp.core.base import Calibration, Problem
from service.dp.mechanisms import get_mechanism
from service.dp.optimize import certified
from tests.unit.dp._audit import (
    audit_tests,
    epsilon_lower_bound,
    event_upper_bound,
    sequential_audit,
)
from tests.unit.dp._budget import objective_budget

FloatArray = NDArray[np.float64]
#: Runs per dataset in the mechanism audits (pure ε / Gaussian).
RUNS_PURE = 1000
RUNS_GAUSSIAN = 5000
#: The sequential audits' looks (cumulative runs a dataset), up to RUNS_PURE / RUNS_GAUSSIAN.
PURE_LOOKS = (250, 500, 750, RUNS_PURE)
GAUSSIAN_LOOKS = (1000, 2000, 3000, 4000, 5000)
CONFIDENCE = 0.99

# ---------------------------------------------------------------- the helper


@pytest.mark.statistical
def test_helper_is_valid_and_sharp_on_the_laplace_mechanism() -> None:
    rng = np.random.default_rng(0)
    eps = 1.0
    # Laplace mechanism, sensitivity 1: outputs on D and D′ differ by a shift of 1
    a = rng.laplace(0.0, 1.0 / eps, 5000)
    b = 1.0 + rng.laplace(0.0, 1.0 / eps, 5000)
    lb = epsilon_lower_bound(a, b)
    assert 0.5 < lb < eps
    # the same outputs, claimed at a third of the true ε, are caught
    a3 = rng.laplace(0.0, 1.0 / 3.0, 5000)
    b3 = 1.0 + rng.laplace(0.0, 1.0 / 3.0, 5000)
    assert epsilon_lower_bound(a3, b3) > 2.0


@pytest.mark.statistical
def test_helper_false_alarm_rate_is_below_alpha() -> None:
    rng = np.random.default_rng(1)
    exceed = 0
    trials = 100
    for _ in range(trials):
        a = rng.laplace(0.0, 1.0, 1000)
        b = 1.0 + rng.laplace(0.0, 1.0, 1000)
        exceed += epsilon_lower_bound(a, b, confidence=0.9) > 1.0
    # at most 10 % expected; 20 % would be a clear sign of an invalid bound
    assert exceed <= 20


@pytest.mark.statistical
def test_helper_accounts_for_delta() -> None:
    rng = np.random.default_rng(2)
    # with probability 0.05 the output reveals the dataset outright; otherwise no information
    a = np.where(rng.random(4000) < 0.05, 10.0, rng.normal(size=4000))
    b = rng.normal(size=4000)
    assert epsilon_lower_bound(a, b) > 2.0  # pure DP is clearly violated
    assert epsilon_lower_bound(a, b, delta=0.06) == 0.0  # (0, 0.06)-DP is not


def test_helper_with_fixed_thresholds_and_symmetry() -> None:
    rng = np.random.default_rng(3)
    a = rng.laplace(0.0, 1.0, 4000)
    b = 1.0 + rng.laplace(0.0, 1.0, 4000)
    fixed = epsilon_lower_bound(a, b, thresholds=[-1.0, 0.5, 2.0])
    assert 0.0 < fixed < 1.0
    tests = audit_tests(a, b, thresholds=[0.5])
    assert len(tests) == 4
    assert {(t.event, t.forward) for t in tests} == {
        ("above", True),
        ("above", False),
        ("below", True),
        ("below", False),
    }
    # swapping the two samples gives the same bound (both directions are tested)
    assert epsilon_lower_bound(b, a, thresholds=[-1.0, 0.5, 2.0]) == pytest.approx(fixed)
    # identical samples carry no evidence
    assert epsilon_lower_bound(a, a) == 0.0


def test_event_upper_bound_covers_the_true_ratio_and_is_sharp() -> None:
    rng = np.random.default_rng(4)
    # D = 1 + Laplace(1), D′ = Laplace(1): for {s > 1}, p = 1/2 and q = e⁻¹/2, ln(p/q) = 1
    a = 1.0 + rng.laplace(0.0, 1.0, 4000)
    b = rng.laplace(0.0, 1.0, 4000)
    upper = event_upper_bound(a, b, threshold=1.0, confidence=0.99)
    assert 1.0 <= upper < 1.3
    # δ comes off p: with δ = 1/2 − 10⁻⁹ at most p's sampling error is left
    assert event_upper_bound(a, b, threshold=1.0, confidence=0.99, delta=0.5 - 1e-9) < 0.0
    # an event D never reaches, with δ above p's upper bound: −∞; one D′ never reaches: ∞
    assert event_upper_bound(a, b, threshold=100.0, delta=0.01) == -math.inf
    assert event_upper_bound(a + 100.0, b, threshold=50.0) == math.inf
    with pytest.raises(ValueError, match="confidence"):
        event_upper_bound(a, b, threshold=1.0, confidence=1.0)


def test_sequential_audit_checks_its_looks() -> None:
    def draw(runs: int) -> tuple[FloatArray, FloatArray]:
        return np.zeros(runs), np.zeros(runs)

    for looks in ((), (1000, 1000), (1,)):
        with pytest.raises(ValueError, match="looks"):
            sequential_audit(
                draw, looks=looks, claim=1.0, tight=0.5, decisive=0.0, thresholds=[0.0]
            )


@pytest.mark.parametrize(
    ("a", "b", "kw", "match"),
    [
        ([1.0], [1.0, 2.0], {}, "at least 2"),
        ([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], {}, "at least 4"),
        ([1.0, np.nan], [1.0, 2.0], {}, "non-finite"),
        ([1.0, 2.0], [1.0, 2.0], {"confidence": 1.0}, "confidence"),
        ([1.0, 2.0], [1.0, 2.0], {"delta": 1.0}, "delta"),
        ([1.0, 2.0], [1.0, 2.0], {"thresholds": []}, "thresholds"),
        ([1.0, 2.0], [1.0, 2.0], {"n_selected": 0}, "n_selected"),
    ],
)
def test_helper_rejects_bad_input(
    a: list[float], b: list[float], kw: dict[str, object], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        epsilon_lower_bound(a, b, **kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------- the mechanisms

# Four records with x = 1 (norm 1): D has labels +1, −1, +1, −1; D′ flips the first to −1.
X_PAIR = np.ones((4, 1))
Y_D = np.array([1.0, -1.0, 1.0, -1.0])
Y_D_PRIME = np.array([-1.0, -1.0, 1.0, -1.0])
N, LAMBDA, EPS = 4, 25.0, 2.0
#: Huber h = 0.5: c = 1/(2h) = 1.
C = 1.0
DELTA = 0.05
#: A 99 % lower bound above TIGHT[δ]·ε shows the noise is not doubled (module docstring).
TIGHT = {0.0: 0.6, DELTA: 0.25}


@dataclasses.dataclass(frozen=True)
class Case:
    """A mechanism on the pair, with its hand-derived ridge n(λ + Δ) and noise on z's scale:
    ``laplace`` = 1/ε_n (z − mean ~ Laplace), or ``sigma`` = σ of the gradient noise
    (z − mean ~ N(0, (σ/2)²))."""

    name: str
    delta: float
    ridge: float
    laplace: float = 0.0
    sigma: float = 0.0

    @property
    def scale(self) -> float:
        return self.sigma / 2.0 if self.delta > 0.0 else self.laplace

    @property
    def thresholds(self) -> list[float]:
        """Laplace: from D's mean up (the likelihood ratio is e^ε everywhere above it);
        Gaussian: above D's mean, where p − δ against q is largest for these shifts."""
        steps = (0.25, 0.5, 0.75, 1.0) if self.delta > 0.0 else (0.0, 0.5, 1.0)
        return [1.0 + k * self.scale for k in steps]

    @property
    def decisive(self) -> float:
        """The event of the sequential audit's upper bound (module docstring): {z > 1 + s/2}
        for the Gaussian mechanisms, where ln((p − δ)/q) is 1.05 with the calibrated σ and 2.85
        with half; {z > 1 − s} for the pure ones, 1.49 with the calibrated scale, 2.63 with half."""
        return 1.0 + 0.5 * self.scale if self.delta > 0.0 else 1.0 - self.scale

    @property
    def looks(self) -> tuple[int, ...]:
        return GAUSSIAN_LOOKS if self.delta > 0.0 else PURE_LOOKS


# The objective's budget (n = 4, d = 1): τ₀ = 1e-10 + 8·5·2⁻⁵³ = 1.0000444089e-10,
# √(nτ₀) = 2.0000444084e-5, κ = √(nτ₀)/(1 + √(nτ₀)) = 2.0000044075e-5, ε_r = εκ = 4.0000088e-5,
# ε₁ = ε − ε_r = 1.99995999991185.
EPS1 = objective_budget(EPS, N, 1)
# ε_J = ln(1 + c/(n(λ + Δ))): ln(1 + 1/100) = 0.00995033 with Δ = 0 (ε_J ≤ ε₁/2 keeps Δ = 0),
# ln(1 + 1/(100 + 1.0000200)) = 0.00985229 with Kifer's Δ_K = 2c/ε₁ = 1.0000200004, i.e.
# Δ = Δ_K/n = 0.2500050001.
EPS_OP = EPS1 - math.log1p(C / (N * LAMBDA))  # 1.99000966906
EPS_KIFER = EPS1 - math.log1p(C / (N * LAMBDA + 2.0 * C / EPS1))  # 1.99010770541
# Output perturbation's certificate (Huber h = ½, c = 1, d = 1, λ = 25): τ = τ₀ =
# 1e-10 + 8(4 + 1)u + 4cγ₁/λ = 1e-10 + 4.441e-15 + 1.8e-17 = 1.0000446e-10 (its floor F ≈ 10⁻¹⁴ is
# far below τ₀/2), so S = 2/(nλ) + 2τ/λ = (2 + 2nτ)/(nλ)
TAU_OUTPUT = 1e-10 + 40 * 2.0**-53 + 4 * 2.0**-53 / (1 - 2.0**-53) * (1 + 2.0**-20) / LAMBDA
CASES = [
    # output perturbation: w = ŵ + b, β = ε/S; z's noise is b·nλ/2, Laplace with scale
    # nλ/(2β) = nλS/(2ε) = (1 + nτ)/ε = (1 + 4.0000018e-10)/2
    Case("output_perturbation", 0.0, N * LAMBDA, laplace=(1.0 + N * TAU_OUTPUT) / EPS),
    # objective perturbation: β = ε_n/2 on the gradient scale, z's noise b/2 has scale 1/ε_n
    # = 1/1.99000966906 = 0.50251012121 (ε_n = ε₁ − ε_J)
    Case("objective_perturbation", 0.0, N * LAMBDA, laplace=1.0 / EPS_OP),
    # Kifer: ridge n(λ + Δ) = 100 + 2c/ε₁ = 101.0000200004, z's scale 1/1.99010770541
    # = 0.50248536664
    Case(
        "generalized_objective_perturbation",
        0.0,
        N * LAMBDA + 2.0 * C / EPS1,
        laplace=1.0 / EPS_KIFER,
    ),
    # Kifer, δ = 0.05, d = 1: u with 2Φ̄(u) = δ is 1.9599640; σ = (u + √(u² + 2ε_n))/ε_n
    # = (1.9599640 + √(3.8414588 + 3.9802154))/1.9901077 = 2.3901669
    Case(
        "generalized_objective_perturbation",
        DELTA,
        N * LAMBDA + 2.0 * C / EPS1,
        sigma=2.3901669233,
    ),
    # GOP: q = χ²₁ quantile at 1 − δ = 3.8414588 (= u²), ε̃ = ε₁ − ln(1 + 1/100) = 1.9900097;
    # σ* = (√q + √(q + 2ε̃))/ε̃ = (1.9599640 + √7.8214782)/1.9900097 = 2.3902671
    Case("gaussian_objective_perturbation", DELTA, N * LAMBDA, sigma=2.3902670580),
]
IDS = [f"{case.name}-delta{case.delta:g}" for case in CASES]


def _problem(case: Case) -> Problem:
    return Problem(
        mechanism=case.name,
        n=N,
        d=1,
        epsilon=EPS,
        delta=case.delta,
        loss="huber",
        regularization=LAMBDA,
        huber_h=0.5,
    )


def _calibration(case: Case) -> Calibration:
    """The mechanism's calibration, checked against the hand-derived numbers."""
    cal = get_mechanism(case.name).calibrate(_problem(case))
    assert (cal.epsilon, cal.delta) == (EPS, case.delta)
    ridge = N * float(cal.details.get("effective_regularization", LAMBDA))
    assert ridge == pytest.approx(case.ridge, rel=1e-12)
    if case.name != "output_perturbation":
        assert float(cal.details["epsilon_objective"]) == pytest.approx(EPS1, rel=1e-15)
        release = float(cal.details["certified_release"]["epsilon"])
        assert Fraction(float(cal.details["epsilon_objective"])) + Fraction(release) <= EPS
    if case.delta > 0.0:
        assert float(cal.details["sigma"]) == pytest.approx(case.sigma, rel=1e-9)
    elif case.name == "output_perturbation":
        assert N * LAMBDA / (2.0 * float(cal.details["beta"])) == pytest.approx(
            case.laplace, rel=1e-14
        )
        assert float(cal.details["certificate_tolerance"]) == pytest.approx(TAU_OUTPUT, rel=1e-14)
    else:
        assert 1.0 / (2.0 * float(cal.details["beta"])) == pytest.approx(case.laplace)
    return cal


def _statistic(
    case: Case, cal: Calibration, y: FloatArray, rng: np.random.Generator | int, runs: int
) -> FloatArray:
    """z = (n(λ + Δ)·w + 2)/2 of ``runs`` seeded releases on (X_PAIR, y)."""
    mech = get_mechanism(case.name)
    problem = _problem(case)
    rng = np.random.default_rng(rng)
    coefs = np.array(
        [
            mech.run(X_PAIR, y, problem, cal, rng=rng, progress=None).coef[0]  # type: ignore[attr-defined]
            for _ in range(runs)
        ]
    )
    z: FloatArray = (case.ridge * coefs + 2.0) / 2.0
    return z


def _sequential_audit(case: Case, cal: Calibration, seed: int) -> float:
    """The audit, stopped at the first of the case's looks where it is decided
    (:func:`tests.unit.dp._audit.sequential_audit`; the module docstring gives its power)."""
    rng_d, rng_dp = np.random.default_rng(seed), np.random.default_rng(seed + 1)

    def draw(runs: int) -> tuple[FloatArray, FloatArray]:
        return _statistic(case, cal, Y_D, rng_d, runs), _statistic(
            case, cal, Y_D_PRIME, rng_dp, runs
        )

    return _decided(case, draw)


def _decided(case: Case, draw: Callable[[int], tuple[FloatArray, FloatArray]]) -> float:
    """The case's sequential audit on ``draw(n)`` (n more statistics on D and on D′)."""
    return sequential_audit(
        draw,
        looks=case.looks,
        claim=EPS,
        tight=TIGHT[case.delta],
        decisive=case.decisive,
        thresholds=case.thresholds,
        confidence=CONFIDENCE,
        delta=case.delta,
    ).bound


def _scaled_noise(cal: Calibration, scale: float, *, release: bool = False) -> Calibration:
    """The calibration whose plan has the noise scale multiplied by ``scale`` (β divided by
    it); with ``release`` the certified release's noise Z too (β_r = ε_r/(2r) ∝ ε_r, so ε_r
    divided). ``run`` reads only the plan."""
    plan: Any = cal.plan
    changes: dict[str, Any]
    if getattr(plan, "sigma", None) is not None:
        changes = {"sigma": float(plan.sigma) * scale}
    else:
        changes = {"beta": float(plan.beta) / scale}
    if release and hasattr(plan, "certificate"):
        cert = plan.certificate
        changes["certificate"] = certified.plan(
            n=cert.n,
            d=cert.d,
            c=cert.c,
            strong_convexity=cert.strong_convexity,
            linear_bound=cert.linear_bound,
            epsilon=cert.epsilon / scale,
        )
    return dataclasses.replace(cal, plan=dataclasses.replace(plan, **changes))


def test_the_pair_releases_the_hand_derived_means() -> None:
    # with the noise switched off (σ → 0, β → ∞) z is exactly 1 on D and 0 on D′, which is
    # what the thresholds assume; a tiny noise keeps the solver's exact-minimiser path. The
    # certified release's Z is silenced too (β_r → ∞): it alone moves z by ≈ 7·10⁻⁵
    for case in CASES:
        quiet = _scaled_noise(_calibration(case), 1e-9, release=True)
        assert _statistic(case, quiet, Y_D, 0, 1)[0] == pytest.approx(1.0, abs=1e-6)
        assert _statistic(case, quiet, Y_D_PRIME, 0, 1)[0] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.statistical
@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_empirical_epsilon_stays_below_the_claim_and_close_to_it(case: Case) -> None:
    lower = _sequential_audit(case, _calibration(case), seed=100)
    assert lower < EPS
    # the pair attains the bound: the audit sees most of ε (twice the noise cannot)
    assert lower > TIGHT[case.delta] * EPS


def _simulated_audit(case: Case, noise_scale: float, seed: int) -> float:
    """The audit on z drawn from the hand-derived law with its noise scaled by
    ``noise_scale``: D centred at 1, D′ at 0 (the KS law tests pin each mechanism to it);
    sequential, as the audit of the mechanism is."""
    rng = np.random.default_rng(seed)
    scale = case.scale * noise_scale

    def noise(runs: int) -> FloatArray:
        if case.delta > 0.0:
            return rng.normal(0.0, scale, runs)
        return rng.laplace(0.0, scale, runs)

    return _decided(case, lambda runs: (1.0 + noise(runs), noise(runs)))


#: The true ε on the pair with half / twice the noise (module docstring): pure 2ε and ε/2;
#: Gaussian at δ = 0.05, the shift of μ = 2/σ (half) or 1/(2σ) (twice) standard deviations.
TRUE_EPS = {(0.0, 0.5): 2.0 * EPS, (0.0, 2.0): EPS / 2.0, (DELTA, 0.5): 3.47, (DELTA, 2.0): 0.377}


@pytest.mark.statistical
@pytest.mark.parametrize("noise_scale", [0.5, 2.0])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_audit_catches_half_and_twice_the_noise(case: Case, noise_scale: float) -> None:
    lower = _simulated_audit(case, noise_scale, seed=200)
    # valid: never above the true ε of the mis-scaled mechanism, and sees a good part of it
    true = TRUE_EPS[(case.delta, noise_scale)]
    assert 0.2 * true < lower <= true
    if noise_scale < 1.0:
        assert lower > EPS
    else:
        assert lower <= TIGHT[case.delta] * EPS
