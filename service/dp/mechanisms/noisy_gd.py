"""``noisy_gd``: full-batch noisy gradient descent with Gaussian noise and tight (PLD) accounting,
(ε, δ)-DP with δ > 0 (issue 28 §3).

Objective: J(w) = (1/n) Σ_i l(y_i wᵀx_i) + (λ/2)‖w‖², l convex with |l′| ≤ L = 1 and
0 ≤ l″ ≤ c (logistic c = 1/4, Huber c = 1/(2h)), ‖x_i‖ ≤ 1, y_i ∈ {−1, +1}, λ > 0.

Each of T steps (T = ``iterations``, public) releases the clipped gradient SUM at the current
query point v_t plus Gaussian noise, on the exact lattice:

    A_t = γ·round((S(v_t) + Z_t)/γ),   S(v) = Σ_i â_i x_i,   â_i = l′(y_i vᵀx_i)·y_i clipped
    so that |â_i|·‖x_i‖ < C = L = 1,   Z_t ~ N(0, σ_n² I_d) fresh,

(γ = 2⁻³², :class:`service.dp.federated.gaussian_rounds.NoiseStream`, the machinery PSGD and
the distributed Lasso use), then forms g_t = A_t/n + λv_t and takes a gradient step
(schedules below). The released model is the average of the iterates of the second half
(Polyak–Ruppert tail averaging), rounded to the release grid. It is the single-dataset
counterpart of :mod:`service.dp.federated.psgd` (one site that is also its own coordinator)
with a tighter accountant.

Sensitivity (replace-one neighbours D, D′ differing in record i). For every query point v the
terms of the records j ≠ i are the same doubles in both sums, and record i's clipped term has
norm < C in both, so ‖S_D(v) − S_D′(v)‖ ≤ ‖â_i x_i‖ + ‖â′_i x′_i‖ < 2C = 2·max|l′| = 2 in exact
arithmetic; as computed in doubles (any BLAS order) the sums move by at most
Δ_n = 2C + 2E(n) (:func:`service.dp.data.clipping.sum_sensitivity`, E(n) the proved rounding
bound), whatever v is. The noise is added at σ_n, the smallest double ≥ σ·Δ_n/(2C)
(:func:`~service.dp.federated.gaussian_rounds.site_noise`, which also covers the subnormal
term of a scaled grid), so Δ_n/σ_n ≤ 2C/σ = 1/z exactly: every step is a Gaussian mechanism
whose noise multiplier (σ over the sensitivity of the released sum) is at least z = σ/(2C).
The query point v_t is a function of the earlier releases only (post-processing), so the T
releases are an adaptive composition of T such mechanisms.

Which law is released. The lattice sampler (:mod:`service.dp.noise.lattice.exact`) returns,
exactly, the grid cell of S + Z for the *real-valued continuous* Gaussian Z (lazy uniform bits,
Marsaglia's polar method evaluated in rigorous interval arithmetic): the output is a
deterministic, data-independent function of S + Z (the cell map and the public clamp), i.e.
post-processing of the continuous Gaussian mechanism. Its privacy is therefore bounded by the
continuous Gaussian's; no discrete Gaussian (Canonne, Kamath & Steinke 2020) enters, and an
accountant for the continuous Gaussian applies to the released doubles as they are.

Accounting (tight). One step with multiplier z is dominated, for every adaptive choice of
v_t and every pair D, D′, by the pair (N(0, z²), N(1, z²)) (a multivariate Gaussian shift of
norm ≤ 1/z reduces to its direction). T adaptive compositions of μ₁-GDP mechanisms are exactly
√T·μ₁-GDP (Dong, Roth & Su 2022, Cor. 3.3; μ₁ = 1/z), and μ-GDP is (ε, δ(ε))-DP for every ε
with the exact curve (Balle & Wang 2018, Thm 8)

    δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2),   μ = √T/z.

The accountant of record is Google's ``dp-accounting`` privacy-loss-distribution accountant
(``dp_accounting.pld.PLDAccountant``, ``GaussianDpEvent(z)`` composed T times; add-or-remove
neighbouring with sensitivity 1 is the pair above): its *pessimistic* discretisation is an
upper bound on the composed privacy loss (Doroshenko, Ghazi, Kamath, Kumar & Manurangsi 2022,
"connect the dots"; truncated mass is added to δ), so ε_PLD(z, T, δ) ≥ the exact ε. Its loss
grid is 10⁻³·ε wide (:data:`PLD_RELATIVE_DISCRETISATION`), and δ must be ≥ :data:`MIN_DELTA`.
Calibration (:func:`noise_multiplier`): start from the largest μ with δ(ε) ≤ δ by the closed
form above (computed with log Φ, in log space), z = √T/μ, then raise z by relative steps until
the PLD accountant reports ε_PLD(z, T, δ) ≤ ε (none or one step: measured within 10⁻⁶ of the
exact ε, usually 10⁻⁸).
The fit is therefore (ε_PLD, δ)-DP with ε_PLD ≤ ε, and the ledger charges exactly the request
(ε, δ). The records also show what zCDP would need: ρ = T/(2z²) converted by Canonne–Kamath–
Steinke (the federated protocols' accountant, :func:`gaussian_rounds.calibrate_rounds`);
the GDP/PLD σ is 7–10 % smaller on Adult's requests (``sigma_zcdp``, ``sigma_saving``;
dp-accounting's RDP accountant is no tighter than zCDP for a Gaussian, whose Rényi curve is
exactly linear in the order).

Steps (public; they decide utility, never privacy). J is λ-strongly convex with a
(c + λ)-Lipschitz gradient: step 1/(c + λ); ``"nesterov"`` (default) adds the momentum
(√κ − 1)/(√κ + 1), κ = (c + λ)/λ, capped at :data:`MAX_MOMENTUM` (as PSGD); ``"constant"``
is plain gradient descent. T: σ grows like √T while the tail average over T/2 iterates
divides the noise's variance by about as much, so T mainly buys convergence until one step's
noise drowns the gradient; unless ``iterations`` is given, T follows the public rule of
:func:`default_iterations` (n, d, ε, δ only), measured on Adult
(``benchmarks/bench_noisy_gd.py``).

Every step's answer is released with fresh noise and there is no stopping test, no
certificate and no data-dependent failure after the charge: the model is post-processing of
the T releases.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import numpy as np
from numpy.typing import NDArray
from scipy import special

from service.dp.core.base import Calibration, FittedModel, LinearModel, Problem, ProgressCallback
from service.dp.core.options import Capabilities, MechanismOptions, option
from service.dp.core.plan import plan_kind
from service.dp.core.validation import PrivacyParameterError
from service.dp.data import clipping
from service.dp.federated._common import choice_param, int_param
from service.dp.federated.gaussian_rounds import (
    GRADIENT_RELEASE,
    NoiseStream,
    calibrate_rounds,
    site_noise,
)
from service.dp.mechanisms._common import (
    Inputs,
    MechanismPlan,
    check_common,
    chi_mean,
    problem_loss,
    release,
    report,
)
from service.dp.mechanisms.dp_sgd import UPDATE_ROWS

__all__ = [
    "CAPABILITIES",
    "DEFAULT_ITERATIONS",
    "MAX_ITERATIONS",
    "MAX_MOMENTUM",
    "MECHANISM",
    "MIN_DEFAULT_ITERATIONS",
    "MIN_DELTA",
    "SCHEDULES",
    "STEP_NOISE",
    "NoisyGD",
    "NoisyGDPlan",
    "Options",
    "default_iterations",
    "descend",
    "gdp_delta",
    "gdp_mu",
    "noise_multiplier",
    "pld_epsilon",
    "rdp_curve",
    "run_budget",
]

FloatArray = NDArray[np.float64]

NAME: Final[str] = "noisy_gd"
ALLOWED_PARAMS: Final[tuple[str, ...]] = ("iterations", "step_size")
SCHEDULES: Final[tuple[str, ...]] = ("nesterov", "constant")
#: Bounds of the public rule for T (:func:`default_iterations`) and of a requested T.
MIN_DEFAULT_ITERATIONS: Final[int] = 10
DEFAULT_ITERATIONS: Final[int] = 100
MAX_ITERATIONS: Final[int] = 10_000
#: τ of the rule: the largest expected noise norm in one step's mean gradient, E‖Z‖/n ≈ σ√d/n
#: (measured on Adult, benchmarks/bench_noisy_gd.py: more steps than that drown the gradient).
STEP_NOISE: Final[float] = 0.1
#: The clip C of each term (|l′| ≤ 1 and ‖x‖ ≤ 1): the sum's sensitivity is 2C.
CLIP: Final[float] = 1.0
#: Momentum cap of the Nesterov schedule (noise amplification 1/(1 − m) ≤ 10), as PSGD.
MAX_MOMENTUM: Final[float] = 0.9
#: dp-accounting's PLD discretisation, relative to ε: the interval is this times ε. Pessimistic
#: rounding keeps any interval valid; only tightness (connect-the-dots: measured within 10⁻⁸ of
#: the exact ε) and time (the loss range over the interval) depend on it. A fixed interval fails
#: at both ends: 10⁻⁴ is coarser than ε = 10⁻⁶ and takes minutes at ε = 1000; 10⁻¹⁰ at
#: ε = 10⁻⁶ breaks the accountant's numerics (it reports 5.5ε).
PLD_RELATIVE_DISCRETISATION: Final[float] = 1e-3
#: The smallest δ accepted: a tenth of the ledger's δ unit (a request below 10⁻¹⁵ is charged
#: 10⁻¹⁵ anyway), far above the mass the PLD accountant truncates (e⁻⁵⁰ ≈ 2·10⁻²²).
MIN_DELTA: Final[float] = 1e-16
#: Most z increases the calibration tries before refusing (it needs one or two).
_MAX_PLD_STEPS: Final[int] = 60

ACCOUNTING_NOTE: Final[str] = (
    "T adaptive Gaussian releases of a sum of sensitivity 2C with noise multiplier z = σ/(2C) "
    "are exactly (√T/z)-GDP (Dong, Roth & Su 2022); σ is the smallest found with dp-accounting's "
    "pessimistic PLD (PLDAccountant, GaussianDpEvent(z) composed T times) giving ε_PLD ≤ ε at δ, "
    "cross-checked by the closed-form GDP curve δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2); the "
    "lattice release is post-processing of the continuous Gaussian, so the bound applies to it"
)


# ------------------------------------------------------------------ accounting


def gdp_delta(epsilon: float, mu: float) -> float:
    """δ(ε) of μ-GDP (Balle & Wang 2018, Thm 8): Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2), evaluated
    as e^a(1 − e^{ε + b − a}) with a, b the log Φ terms (no cancellation in the tails)."""
    if not (mu > 0.0 and math.isfinite(mu)):
        raise ValueError(f"mu must be a finite number > 0, got {mu!r}")
    a = float(special.log_ndtr(-epsilon / mu + mu / 2.0))
    b = float(special.log_ndtr(-epsilon / mu - mu / 2.0))
    gap = epsilon + b - a  # < 0: the second term is the smaller
    if gap >= 0.0:
        return 0.0
    return math.exp(a) * -math.expm1(gap)


def gdp_mu(epsilon: float, delta: float) -> float:
    """The largest μ (to ~10⁻¹² relative) with :func:`gdp_delta` (ε, μ) ≤ δ; δ(ε) increases
    with μ, so this is a bracketed root, then stepped down until the inequality holds."""

    def excess(log_mu: float) -> float:
        return math.log(max(gdp_delta(epsilon, math.exp(log_mu)), 1e-300)) - math.log(delta)

    lo, hi = math.log(1e-8), math.log(1e3)
    while excess(lo) > 0.0:
        lo -= 5.0
    from scipy import optimize  # here, not at the top: processes that never solve skip it

    log_mu = float(optimize.brentq(excess, lo, hi, xtol=1e-13, rtol=1e-13))
    mu = math.exp(log_mu)
    while gdp_delta(epsilon, mu) > delta:
        mu *= 1.0 - 1e-12
    return mu


@functools.lru_cache(maxsize=256)
def pld_epsilon(multiplier: float, rounds: int, delta: float, interval: float = 1e-4) -> float:
    """ε at δ of ``rounds`` Gaussian releases with noise multiplier z (σ over the L2 sensitivity),
    by dp-accounting's PLD accountant (pessimistic estimate: an upper bound; ∞ when δ is below
    the mass it truncates), privacy losses discretised on ``interval``."""
    from dp_accounting import dp_event  # lazily: the accountant is only needed to calibrate
    from dp_accounting.pld import pld_privacy_accountant

    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=interval)
    accountant.compose(dp_event.GaussianDpEvent(multiplier), rounds)
    return float(accountant.get_epsilon(delta))


@dataclass(frozen=True, slots=True)
class NoiseMultiplier:
    """z for T steps within (ε, δ) and what the accountants say of it."""

    multiplier: float
    mu: float
    epsilon_pld: float
    delta_gdp: float
    pld_steps: int


@functools.lru_cache(maxsize=256)
def noise_multiplier(epsilon: float, delta: float, rounds: int) -> NoiseMultiplier:
    """The smallest z found with T Gaussian releases of multiplier z (ε, δ)-DP by dp-accounting's
    PLD (module docstring): z₀ = √T/μ(ε, δ) from the exact GDP curve, then z ← z·(1 + r) with
    r the relative excess of ε_PLD (at least 10⁻⁹, growing) until ε_PLD(z, T, δ) ≤ ε."""
    mu = gdp_mu(epsilon, delta)
    z = math.sqrt(rounds) / mu
    interval = PLD_RELATIVE_DISCRETISATION * epsilon
    steps, floor = 0, 1e-9
    while (eps_pld := pld_epsilon(z, rounds, delta, interval)) > epsilon:
        if not math.isfinite(eps_pld) or steps >= _MAX_PLD_STEPS:
            raise PrivacyParameterError(
                f"{NAME}: the PLD accountant cannot certify (ε = {epsilon:g}, δ = {delta:g}) "
                "(δ is below the probability mass it truncates); ask for a larger delta"
            )
        z *= 1.0 + min(max((eps_pld - epsilon) / epsilon, floor), 1.0)
        floor *= 2.0
        steps += 1
    final_mu = math.sqrt(rounds) / z
    return NoiseMultiplier(
        multiplier=z,
        mu=final_mu,
        epsilon_pld=eps_pld,
        delta_gdp=gdp_delta(epsilon, final_mu),
        pld_steps=steps,
    )


def require_delta(name: str, delta: float, *, note: str = "") -> None:
    """Refuse (422) a Gaussian mechanism's δ below :data:`MIN_DELTA` (``note`` says why)."""
    if not delta >= MIN_DELTA:
        raise PrivacyParameterError(
            f"{name} is (ε, δ)-DP (Gaussian noise) and needs {MIN_DELTA:g} ≤ delta < 1{note}; "
            f"got delta = {delta!r}"
        )


def checked_noise_multiplier(
    name: str, epsilon: float, delta: float, rounds: int, *, context: str = ""
) -> NoiseMultiplier:
    """:func:`noise_multiplier`, with the accountant's numerical failures refused (422)
    rather than raised (``context`` is added to the message's public parameters)."""
    try:
        return noise_multiplier(epsilon, delta, rounds)
    except (MemoryError, OverflowError, FloatingPointError) as exc:
        raise PrivacyParameterError(
            f"{name}: the accountant cannot calibrate (ε = {epsilon:g}, δ = {delta:g}{context}) "
            f"({type(exc).__name__})"
        ) from exc


def rdp_curve(multiplier: float, iterations: int, orders: Sequence[float]) -> list[float]:
    """The Rényi DP of a fit with T steps at noise multiplier z, at each order α > 1:

        ε(α) = α·T/(2z²)   (exactly; for every α > 1; order ∞ is unbounded).

    Derivation. One step releases S(v_t) + Z_t, Z_t ~ N(0, σ_n² I_d) (then post-processed by
    the lattice map, which can only shrink divergences). For replace-one neighbours the two
    sums differ by a vector of norm ≤ Δ_n (the sensitivity *as computed in doubles*, module
    docstring), and σ_n is the smallest double ≥ σ·Δ_n/(2C) with σ = 2C·z, so Δ_n/σ_n ≤ 1/z
    holds in exact arithmetic — the floating-point margin is inside σ_n, not an extra term.
    The Rényi divergence of order α between N(a, σ_n² I) and N(b, σ_n² I) is
    α‖a − b‖²/(2σ_n²) ≤ α/(2z²) (Mironov 2017, Prop. 7; a shift reduces to its direction).
    The query point v_t is a function of earlier releases only, so the T releases are an
    adaptive composition, and RDP composes additively at each order (Mironov 2017, Prop. 1):
    T·α/(2z²) = α·μ²/2 with μ = √T/z, the GDP parameter of the module docstring (μ-GDP and
    this curve are the same Gaussian pair). This is what dp-accounting's RDP accountant
    computes for ``GaussianDpEvent(z)`` composed T times."""
    if not (multiplier > 0.0 and math.isfinite(multiplier)) or iterations < 1:
        raise ValueError("the noise multiplier must be finite and > 0, T ≥ 1")
    return [alpha * iterations / (2.0 * multiplier * multiplier) for alpha in orders]


@dataclass(frozen=True, slots=True)
class RunBudget:
    """A run's (ε_r, δ_r) whose calibration (:func:`noise_multiplier`) gives a multiplier
    z_r ≥ √T/μ for the GDP parameter μ asked of it, and that z_r."""

    epsilon: float
    delta: float
    iterations: int
    multiplier: float

    @property
    def mu(self) -> float:
        """√T/z_r ≤ the μ asked for."""
        return math.sqrt(self.iterations) / self.multiplier


def run_budget(mu: float, delta: float, iterations: int) -> RunBudget:
    """The (ε_r, δ_r = δ) at which a fit calibrates to a multiplier z_r ≥ √T/μ (for a caller,
    e.g. private selection, that accounts the run by its Rényi curve :func:`rdp_curve` rather
    than by (ε_r, δ_r)). ε_r is the exact GDP curve's ε at (μ, δ) (δ(ε) decreasing in ε,
    bisection), then lowered until δ(ε_r; μ) > δ: then the calibration's μ(ε_r, δ)
    = max{μ′ : δ(ε_r; μ′) ≤ δ} < μ, so z_r ≥ √T/μ(ε_r, δ) > √T/μ (the PLD step can only
    raise z_r further). z_r is computed here as the fit will compute it (same cached
    function), so the caller accounts the run's actual multiplier."""
    if not (mu > 0.0 and math.isfinite(mu)) or not MIN_DELTA <= delta < 1.0:
        raise ValueError("μ must be finite and > 0 and δ in [MIN_DELTA, 1)")
    lo, hi = 0.0, 1.0
    while gdp_delta(hi, mu) > delta:
        hi *= 2.0
    while hi - lo > 1e-13 * hi:
        mid = 0.5 * (lo + hi)
        if gdp_delta(mid, mu) > delta:
            lo = mid
        else:
            hi = mid
    epsilon = lo
    while gdp_delta(epsilon, mu) <= delta:  # pragma: no cover - bisection keeps lo above
        epsilon = math.nextafter(epsilon, 0.0)
    if epsilon <= 0.0:
        raise PrivacyParameterError(f"{NAME}: μ = {mu:g} is too large for δ = {delta:g}")
    found = noise_multiplier(epsilon, delta, iterations)
    return RunBudget(epsilon, delta, iterations, found.multiplier)


def default_iterations(n: int, d: int, mu: float) -> int:
    """T from public quantities: the largest T in [10, 100] whose per-step noise in the mean
    gradient, E‖Z_t‖/n ≈ σ√d/n with σ = 2C·√T/μ (μ the GDP parameter the whole fit may
    spend, :func:`gdp_mu`, which does not depend on T), stays ≤ τ = :data:`STEP_NOISE`:
    2√(T d)/(μ n) ≤ τ ⇔ T ≤ (τ μ n/(2√d))². A tiny budget gets few, less noisy steps; a large
    one the cap (beyond it more steps mostly cost time: σ ∝ √T and the tail average cancels
    the rest)."""
    bound = (STEP_NOISE * mu * n / (2.0 * CLIP * math.sqrt(d))) ** 2
    return int(min(DEFAULT_ITERATIONS, max(MIN_DEFAULT_ITERATIONS, math.floor(bound))))


# ---- options and capabilities (service.dp.core.options) ---------------------------------


@dataclass(frozen=True, slots=True)
class Options(MechanismOptions):
    """noisy_gd's options: the number of steps T and the step schedule."""

    iterations: int | None = option(
        None,
        "Number of full-batch steps T (each one noisy gradient-sum release).",
        ge=1,
        le=MAX_ITERATIONS,
        computed_default=(
            f"min({DEFAULT_ITERATIONS}, max({MIN_DEFAULT_ITERATIONS}, ⌊(τμn/(2C√d))²⌋)) from "
            "public n, d, ε, δ"
        ),
    )
    step_size: Literal["nesterov", "constant"] = option(
        "nesterov",
        "Step schedule: step 1/(c + λ) with Nesterov momentum (capped at 0.9), or without.",
    )


def work_estimate(n: int, d: int, details: Mapping[str, Any]) -> float:
    """T full-batch steps, each a pass over the design plus one exact noise release (counted
    as :data:`~service.dp.mechanisms.dp_sgd.UPDATE_ROWS` rows): T·(n + U)·d."""
    return float(details["iterations"]) * (n + UPDATE_ROWS) * d


CAPABILITIES = Capabilities(work=work_estimate)


# ------------------------------------------------------------------ the plan


@plan_kind("noisy_gd")
@dataclass(frozen=True, slots=True)
class NoisyGDPlan(MechanismPlan):
    """Everything ``run`` does, fixed by ``calibrate`` from public quantities: the inputs
    (n, d, ε, δ, loss, λ), T and whether the public rule chose it, the public σ (for the exact
    sensitivity 2C) and σ_n, the noise actually added (with the floating-point margin), the
    step, the momentum, where the tail average starts, and the accountant's figures the record
    shows."""

    mechanism = NAME

    clip: float
    iterations: int
    iterations_by_rule: bool
    schedule: str
    noise_multiplier: float
    gdp_mu: float
    epsilon_pld: float
    delta_gdp: float
    sigma: float
    sigma_added: float
    sensitivity_as_computed: float
    float_margin: float
    sigma_zcdp: float
    step: float
    momentum: float
    average_from: int

    @property
    def expected_noise_norm(self) -> float:
        return self.sigma_added * chi_mean(self.inputs.d)

    def details(self) -> dict[str, Any]:
        inputs = self.inputs
        details = inputs.details()
        details.update(
            noise="gaussian",
            iterations=self.iterations,
            iterations_rule=(
                f"T = min({DEFAULT_ITERATIONS}, max({MIN_DEFAULT_ITERATIONS}, ⌊(τμn/(2C√d))²⌋)), "
                f"τ = {STEP_NOISE:g}: the most steps whose mean-gradient noise σ√d/n is ≤ τ"
                if self.iterations_by_rule
                else "requested"
            ),
            step_size=self.schedule,
            clip=self.clip,
            sensitivity=2.0 * self.clip,
            sensitivity_as_computed=self.sensitivity_as_computed,
            float_margin=self.float_margin,
            noise_multiplier=self.noise_multiplier,
            sigma=self.sigma,
            sigma_added=self.sigma_added,
            gdp_mu=self.gdp_mu,
            accountant="dp_accounting.pld (pessimistic PLD), Gaussian composed T times",
            epsilon_pld=self.epsilon_pld,
            delta_at_epsilon_exact_gdp=self.delta_gdp,
            sigma_zcdp=self.sigma_zcdp,
            epsilon_zcdp_at_sigma=_zcdp_epsilon(
                self.noise_multiplier, self.iterations, inputs.delta
            ),
            sigma_saving=1.0 - self.sigma / self.sigma_zcdp,
            accounting=ACCOUNTING_NOTE,
            smoothness_bound=inputs.c + inputs.regularization,
            step=self.step,
            momentum=self.momentum,
            averaging_from=self.average_from,
            expected_noise_norm=self.expected_noise_norm,
            release=GRADIENT_RELEASE.replace("each site's", "the").replace("coordinator", "fit"),
        )
        return details

    def calibration(self) -> Calibration:
        eps, delta = self.inputs.epsilon, self.inputs.delta
        return self.calibration_with(
            (
                f"{self.iterations} full-batch gradient-sum releases (sensitivity 2C = "
                f"{2 * self.clip:g}) with Gaussian noise σ = {self.sigma:.6g} (noise multiplier "
                f"z = {self.noise_multiplier:.6g}), exactly on the 2^-32 grid: adaptive "
                f"composition is μ-GDP with μ = √T/z = {self.gdp_mu:.6g}; dp-accounting's PLD "
                f"gives ε = {self.epsilon_pld:.6g} ≤ {eps:g} at δ = {delta:g} (zCDP with the "
                f"Canonne–Kamath–Steinke conversion would need σ = {self.sigma_zcdp:.6g})"
            ),
            delta=delta,
        )


# ------------------------------------------------------------------ the mechanism


class NoisyGD:
    """(ε, δ)-DP full-batch noisy gradient descent (module docstring)."""

    name = NAME
    options = Options
    capabilities = CAPABILITIES

    def validate_params(self, problem: Problem) -> Problem:
        check_common(problem, ALLOWED_PARAMS)
        self.calibrate(problem)
        return problem

    def calibrate(self, problem: Problem) -> Calibration:
        loss = problem_loss(problem)
        require_delta(NAME, problem.delta, note=" (the ledger charges any δ below 1e-15 as 1e-15)")
        rule = "iterations" not in problem.params
        iterations = int_param(
            problem.params, "iterations", DEFAULT_ITERATIONS, minimum=1, maximum=MAX_ITERATIONS
        )
        schedule = choice_param(problem.params, "step_size", "nesterov", SCHEDULES)
        n, d, lam, eps, delta = (
            problem.n,
            problem.d,
            problem.regularization,
            problem.epsilon,
            problem.delta,
        )
        try:
            clipping.sum_error_bound(n, d, CLIP)
        except ValueError as exc:
            raise PrivacyParameterError(str(exc)) from exc
        if rule:
            iterations = default_iterations(n, d, gdp_mu(float(eps), float(delta)))
        found = checked_noise_multiplier(
            NAME, float(eps), float(delta), iterations, context=f", T = {iterations}"
        )
        sigma = 2.0 * CLIP * found.multiplier
        own = site_noise(n, d, CLIP, sigma)
        zcdp = calibrate_rounds(eps, delta, rounds=iterations, clip=CLIP, conversion="cks")
        smooth = loss.c + lam
        kappa = smooth / lam
        momentum = 0.0
        if schedule == "nesterov":
            momentum = min((math.sqrt(kappa) - 1.0) / (math.sqrt(kappa) + 1.0), MAX_MOMENTUM)
        plan = NoisyGDPlan(
            inputs=Inputs.of(problem),
            clip=CLIP,
            iterations=iterations,
            iterations_by_rule=rule,
            schedule=schedule,
            noise_multiplier=found.multiplier,
            gdp_mu=found.mu,
            epsilon_pld=found.epsilon_pld,
            delta_gdp=found.delta_gdp,
            sigma=sigma,
            sigma_added=float(own["sigma"]),
            sensitivity_as_computed=float(own["sensitivity"]),
            float_margin=float(own["float_margin"]),
            sigma_zcdp=float(zcdp.sigma),
            step=1.0 / smooth,
            momentum=momentum,
            average_from=iterations // 2,
        )
        return plan.calibration()

    def run(
        self,
        X: FloatArray,
        y: FloatArray,
        problem: Problem,
        calibration: Calibration,
        *,
        rng: np.random.Generator | None,
        progress: ProgressCallback | None,
    ) -> FittedModel:
        del problem  # everything the run needs is in the plan
        plan = calibration.plan
        if not isinstance(plan, NoisyGDPlan):
            raise TypeError(f"{NAME} runs a NoisyGDPlan, got {type(plan).__name__}")
        if X.shape != (plan.inputs.n, plan.inputs.d):
            raise ValueError("the data does not have the shape the plan was calibrated for")
        report(progress, 0.0)
        coef = descend(X, y, plan, rng=rng, progress=progress)
        model: LinearModel = release(coef)
        report(progress, 1.0)
        return model


def descend(
    X: FloatArray,
    y: FloatArray,
    plan: NoisyGDPlan,
    *,
    rng: np.random.Generator | None,
    progress: ProgressCallback | None = None,
) -> FloatArray:
    """The T steps of the plan and the tail average of the iterates (module docstring)."""
    loss = plan.inputs.loss_function()
    caps = clipping.clip_caps(clipping.row_norm_bounds(X), plan.clip)
    d = plan.inputs.d
    noise = NoiseStream(d)
    lam, n = plan.inputs.regularization, plan.inputs.n
    w = np.zeros(d)
    query = w.copy()
    tail = np.zeros(d)
    count = 0
    for t in range(plan.iterations):
        slopes = loss.derivative(y * (X @ query)) * y
        answer = noise.release(clipping.clipped_sum(slopes, X, caps), plan.sigma_added, rng)
        w_next = query - plan.step * (answer / n + lam * query)
        query = w_next + plan.momentum * (w_next - w) if plan.momentum else w_next
        w = w_next
        if t >= plan.average_from:
            tail += w
            count += 1
        report(progress, (t + 1) / (plan.iterations + 1))
    out: FloatArray = tail / count
    return out


def _zcdp_epsilon(multiplier: float, rounds: int, delta: float) -> float:
    """ε at δ of ρ = T/(2z²)-zCDP, Canonne–Kamath–Steinke conversion (for the record)."""
    from service.dp.core.accounting import zcdp_to_dp_cks

    return float(zcdp_to_dp_cks(rounds / (2.0 * multiplier * multiplier), delta).epsilon)


MECHANISM = NoisyGD()
