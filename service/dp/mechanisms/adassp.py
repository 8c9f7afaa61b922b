"""``adassp``: AdaSSP, differentially private linear regression by sufficient-statistics
perturbation with an adaptive ridge (Wang 2018, "Revisiting differentially private linear
regression", Alg. 2), (ε, δ)-DP with δ > 0, for ``task="regression"`` with the squared loss.

Setting. Rows ‖x_i‖ ≤ 1 (exactly: :func:`service.dp.core.validation.validate_design`), labels
y_i ∈ [−1, 1] (the public bounds mapped onto [−1, 1], :mod:`service.dp.core.tasks`), n public
(replace-one neighbours, docs/design.md §2). The non-private target is the ridge solution of
(1/n)Σ(y_i − wᵀx_i)²/2 + (λ/2)‖w‖², i.e. w = (XᵀX + nλI)⁻¹Xᵀy; AdaSSP releases the three
statistics it needs with Gaussian noise and solves with the noisy ones (post-processing):

1. λ̂ = λ_min(XᵀX) + Z₁,        Z₁ ~ N(0, σ₁²);
2. Ĝ = XᵀX + E,                 E symmetric, E_jj ~ N(0, σ₂²), E_jk = E_kj ~ N(0, σ₂²/2);
3. b̂ = Xᵀy + Z₃,               Z₃ ~ N(0, σ₃² I_d);
4. λ̃ = max(0, λ̂ − σ₁t),  λ_A = max(0, σ₂(2√d + t) − λ̃),  t = √(2 ln(3/ρ));
5. release w = (Ĝ + (λ_A + nλ)I)⁻¹ b̂   (a least-squares solve if that matrix is singular).

Sensitivities (replace-one: record (x, y) becomes (x′, y′); derived here, since Wang's are for
add/remove neighbours).

* Xᵀy changes by xy − x′y′: ‖xy − x′y′‖ ≤ |y|‖x‖ + |y′|‖x′‖ ≤ 2, attained by x′ = x, ‖x‖ = 1,
  y = 1, y′ = −1. Δ₃ = 2.
* XᵀX changes by M = xxᵀ − x′x′ᵀ: ‖M‖_F² = ‖x‖⁴ + ‖x′‖⁴ − 2(xᵀx′)² ≤ 2, attained by two
  orthogonal unit rows. Δ₂ = √2 in the Frobenius norm (not 2: the cross term only helps). The
  release adds noise to the d diagonal and d(d − 1)/2 upper entries with standard deviations
  σ₂ and σ₂/√2 (the lower triangle mirrors them, so E is the symmetric "GOE" matrix (G + Gᵀ)/2
  of an i.i.d. N(0, σ₂²) matrix G). Whitened by those standard deviations, the shift of the
  released vector has squared norm Σ_j M_jj²/σ₂² + Σ_{j<k} M_jk²/(σ₂²/2) = ‖M‖_F²/σ₂², so this
  is a Gaussian mechanism of multiplier σ₂/Δ₂ (the same privacy as i.i.d. noise σ₂ on the
  upper triangle, whose sensitivity is also √2, with half the off-diagonal variance).
* λ_min(XᵀX): with A = Σ_{j≠i} x_j x_jᵀ common to both, λ_min(A) ≤ λ_min(A + xxᵀ) ≤
  λ_min(A) + ‖x‖² (Weyl), and the same for x′, so |λ_min(D) − λ_min(D′)| ≤ max(‖x‖², ‖x′‖²)
  ≤ 1. Δ₁ = 1 (as for add/remove).

Floating point (the statistics are computed in doubles). Each entry of fl(XᵀX) and fl(Xᵀy) is
a sum of n products in some BLAS order, within γ_n Σ_i|x_ij||x_ik| + nη of the exact one
(u = 2⁻⁵³, γ_n = nu/(1 − nu), η = 2⁻¹⁰⁷⁴; :mod:`service.dp.data.clipping`, step 3, whose bound
holds for every order), so in Frobenius norm ‖fl(XᵀX) − XᵀX‖_F ≤ E_G = γ_n·n + d·n·η
(Σ_i ‖|x_i||x_i|ᵀ‖_F = Σ_i‖x_i‖² ≤ n) and ‖fl(Xᵀy) − Xᵀy‖ ≤ E(n) = γ_n·n + √d·n·η
(:func:`~service.dp.data.clipping.sum_error_bound` with C = 1). The eigenvalue comes from
LAPACK (``numpy.linalg.eigh``) on the symmetric double matrix A = fl(XᵀX); it is released only
when :func:`certified_min_eigenvalue` has proved |λ̂_min − λ_min(A)| ≤ τ_λ (Bauer–Fike with the
computed residual and orthogonality defect, every rounding bounded), τ_λ = 2⁻²⁰ + 2¹⁰·d·n·u
public; by Weyl |λ_min(A) − λ_min(XᵀX)| ≤ E_G. So the three released values move by at most

    Δ₁ⁿ = 1 + 2E_G + 2τ_λ,   Δ₂ⁿ = √2 + 2E_G,   Δ₃ⁿ = 2 + 2E(n)

between neighbours, and each noise is added at σᵢⁿ, the smallest double ≥ σᵢ·Δᵢⁿ/Δᵢ (σ₂/√2
rounded up for the off-diagonal entries), so every release keeps multiplier ≥ z. The value is
released on the exact 2⁻³² lattice (:class:`service.dp.noise.lattice.GaussianBlock`, the cell
of the real-valued sum, or on the grid sγ for σ > 16 with the subnormal margin of
:func:`service.dp.federated.gaussian_rounds.site_plan`), i.e. post-processing of the continuous
Gaussian mechanism; no ``numpy.random.normal`` takes part. If the eigenvalue certificate fails
(LAPACK far from its usual accuracy), the job fails before any release with
:class:`~service.dp.optimize.solvers.ConvergenceError` and the charge is kept (docs/privacy.md,
"When a certificate fails": that event is not covered).

Accounting (exact composition). Each release is a Gaussian mechanism with noise multiplier
σᵢ/Δᵢ = z, i.e. (1/z)-GDP, and the three compose to √3/z-GDP (Dong, Roth & Su 2022), the same
pair of Gaussians as three rounds of :mod:`service.dp.mechanisms.noisy_gd`: z is found exactly
as there (:func:`~service.dp.mechanisms.noisy_gd.noise_multiplier` with T = 3: the closed-form
GDP curve, then dp-accounting's pessimistic PLD until ε_PLD ≤ ε at δ). Equal multipliers are
Wang's "(ε, δ) split in three", composed tightly instead of by basic composition: at ε = 1,
δ = 10⁻⁶ each σᵢ/Δᵢ is z = 7.32, where three classical Gaussian mechanisms at (ε/3, δ/3)
(σ/Δ = √(2 ln(1.25·3/δ))/(ε/3)) would need 16.5.

The ridge rule (utility only: it reads released values and public constants). With
probability ≥ 1 − ρ/3, Z₁ ≤ σ₁t, so λ̃ ≤ λ_min(XᵀX); with probability ≥ 1 − ρ/3,
‖E‖₂ ≤ ‖G‖₂ ≤ σ₂(2√d + t) (Gordon's E‖G‖ ≤ 2σ₂√d and Gaussian concentration of the
1-Lipschitz ‖·‖₂). λ_A then makes Ĝ + λ_A I ⪰ XᵀX − ‖E‖I + λ_A I ⪰ 0 when the data's own
curvature does not: Wang's rule with the bounds of this noise. ``rho`` (default 0.05) is public.
The user's λ adds nλ on top, so the fit tends to the non-private ridge solution as ε → ∞.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray
from scipy import linalg

from service.dp.core.base import Calibration, FittedModel, LinearModel, Problem, ProgressCallback
from service.dp.core.options import Capabilities, MechanismOptions, option
from service.dp.core.plan import plan_kind
from service.dp.core.validation import PrivacyParameterError
from service.dp.data import clipping
from service.dp.federated.gaussian_rounds import grid_scale
from service.dp.mechanisms._common import (
    Inputs,
    MechanismPlan,
    check_common,
    chi_mean,
    release,
    report,
    require_plan,
)
from service.dp.mechanisms.noisy_gd import checked_noise_multiplier, require_delta
from service.dp.noise import lattice
from service.dp.noise.rounding import KAPPA, UNIT_ROUNDOFF, gamma, norm_up
from service.dp.optimize.solvers import ConvergenceError

__all__ = [
    "CAPABILITIES",
    "DEFAULT_RHO",
    "MAX_ROWS",
    "MECHANISM",
    "AdaSSP",
    "AdaSSPPlan",
    "Options",
    "certified_min_eigenvalue",
    "eigenvalue_tolerance",
    "gram_error_bound",
    "noisy_statistics",
    "ridge_rule",
]

FloatArray = NDArray[np.float64]

NAME: Final[str] = "adassp"
ALLOWED_PARAMS: Final[tuple[str, ...]] = ("rho",)
#: Wang's failure probability of the ridge rule (utility only).
DEFAULT_RHO: Final[float] = 0.05
#: The released XᵀX has entries up to n; the lattice clamps at ±2²⁰, so n stays below 2¹⁹.
MAX_ROWS: Final[int] = 2**19
#: An upper bound on √2 (math.sqrt is correctly rounded; the next double is above √2).
SQRT2_UP: Final[float] = math.nextafter(math.sqrt(2.0), math.inf)
_ETA: Final[Fraction] = Fraction(1, 2**1074)

ACCOUNTING_NOTE: Final[str] = (
    "three Gaussian releases (λ_min(XᵀX), XᵀX, Xᵀy; sensitivities 1, √2, 2 for replace-one "
    "with ‖x‖ ≤ 1, |y| ≤ 1, plus proved floating-point margins) with the same noise multiplier "
    "z are (√3/z)-GDP (Dong, Roth & Su 2022); z is the smallest found with dp-accounting's "
    "pessimistic PLD (GaussianDpEvent(z) composed 3 times) giving ε_PLD ≤ ε at δ; the lattice "
    "release is post-processing of the continuous Gaussian"
)


# ---- public bounds -------------------------------------------------------------------------


def gram_error_bound(n: int, d: int) -> Fraction:
    """E_G = γ_n·n + d·n·η ≥ ‖fl(XᵀX) − XᵀX‖_F for rows of norm ≤ 1 (module docstring)."""
    if n >= 2**50:
        raise ValueError("n is too large for a floating-point bound")
    nu = n * Fraction(1, 2**53)
    return nu / (1 - nu) * n + d * n * _ETA


def eigenvalue_tolerance(n: int, d: int) -> float:
    """τ_λ = 2⁻²⁰ + 2¹⁰·d·n·u: how far the released λ̂_min may be from λ_min(fl(XᵀX)), public
    (LAPACK's error is a small multiple of d·u·‖XᵀX‖₂ ≤ d·n·u; the certificate checks it)."""
    return 2.0**-20 + 2.0**10 * d * n * UNIT_ROUNDOFF


def _noise_for(
    exact: Fraction, error: Fraction, multiplier: float, dim: int
) -> tuple[float, float, int]:
    """(σⁿ, Δⁿ, s) for a release of ``dim`` values whose exact sensitivity is ``exact`` and whose
        computed value is within ``error`` of the exact one: Δⁿ = exact + 2·error (+ 2s⌈√dim⌉2⁻¹⁰⁷⁵
        on the grid sγ, s = :func:`grid_scale` (σⁿ), where value/s may lose a subnormal bit; ``dim``
    counts the terms of the norm the sensitivity is measured in) and
        σⁿ the smallest double ≥ z·Δⁿ, so Δⁿ/σⁿ ≤ 1/z exactly. s is a fixed point (σⁿ grows with
        s), as in :func:`service.dp.federated.gaussian_rounds.site_plan`."""
    root = clipping.ceil_sqrt(dim)
    scale = 1
    while True:
        computed = exact + 2 * error
        if scale > 1:
            computed += 2 * scale * root * Fraction(1, 2**1075)
        sigma = clipping.round_up(Fraction(multiplier) * computed)
        if grid_scale(sigma) <= scale:
            return sigma, clipping.round_up(computed), scale
        scale = grid_scale(sigma)


def _gaussian_release(
    value: FloatArray, sigma: float, rng: np.random.Generator | None
) -> FloatArray:
    """The exact point of the grid sγ for value + N(0, σ²I), s = :func:`grid_scale` (σ)."""
    scale = grid_scale(sigma)
    block = lattice.GaussianBlock(1, int(value.size), sigma=sigma / scale, rng=rng)
    if scale == 1:
        return block.release(0, value)
    out: FloatArray = scale * block.release(0, value / scale)
    return out


# ---- the certified eigenvalue --------------------------------------------------------------


def certified_min_eigenvalue(A: FloatArray, tolerance: float) -> float:
    """λ̂_min of the symmetric double matrix A (LAPACK), returned only when proved within
    ``tolerance`` of λ_min(A); :class:`ConvergenceError` otherwise (nothing released).

    Proof. (Λ̂, V) = eigh(A). R = AV − VΛ̂ and N = VᵀV − I are computed with entrywise errors
    |R̂ − R| ≤ γ_d|A||V| + u|V||Λ̂| + u|R̂| and |N̂ − N| ≤ γ_d|V|ᵀ|V| + u|N̂| (one dot product of
    length d, then one product or subtraction), the nonnegative products |A||V|, |V|ᵀ|V| are
    computed within a factor 1 + 2γ_d, and norm_up bounds every Frobenius norm; so r ≥ ‖R‖₂
    and ν ≥ ‖N‖₂ are proved. If ν < 1, V is invertible with σ_min(V)² ≥ 1 − ν and
    κ(V)² ≤ (1 + ν)/(1 − ν). A = VΛ̂V⁻¹ + F with F = RV⁻¹, ‖F‖₂ ≤ r/σ_min(V). Bauer–Fike
    for the diagonalisable VΛ̂V⁻¹: every eigenvalue of A, λ_min(A) among them, is within
    β = κ(V)‖F‖₂ of some λ̂_i ≥ λ̂_min, so λ_min(A) ≥ λ̂_min − β; and for the symmetric A
    (κ = 1): λ̂_min, an eigenvalue of A − F, is within ‖F‖₂ ≤ β of an eigenvalue of A, so
    λ_min(A) ≤ λ̂_min + β. The certificate is β (rounded up) ≤ ``tolerance``."""
    d = A.shape[0]
    values, V = np.linalg.eigh(A)
    lam_min = float(np.min(values))
    absV = np.abs(V)
    up = 1.0 + 2.0 * gamma(d)
    R = A @ V - V * values
    e_R = (
        gamma(d) * norm_up(((np.abs(A) @ absV) * up).ravel())
        + UNIT_ROUNDOFF * norm_up((absV * np.abs(values)).ravel())
        + UNIT_ROUNDOFF * norm_up(R.ravel())
    )
    r = (norm_up(R.ravel()) + e_R) * KAPPA + d * d * 2.0**-1000
    N = V.T @ V - np.eye(d)
    e_N = gamma(d) * norm_up(((absV.T @ absV) * up).ravel()) + UNIT_ROUNDOFF * norm_up(N.ravel())
    nu = (norm_up(N.ravel()) + e_N) * KAPPA + d * d * 2.0**-1000
    if not (nu < 0.5 and math.isfinite(r)):
        raise ConvergenceError(
            "the smallest eigenvalue of XᵀX could not be certified; nothing was released"
        )
    sigma_min = math.sqrt(1.0 - nu) * (1.0 - 4.0 * UNIT_ROUNDOFF)
    cond = math.sqrt((1.0 + nu) / (1.0 - nu)) * (1.0 + 4.0 * UNIT_ROUNDOFF)
    beta = cond * r / sigma_min * KAPPA
    if not beta <= tolerance:
        raise ConvergenceError(
            "the smallest eigenvalue of XᵀX could not be certified to the tolerance its "
            "sensitivity assumes; nothing was released"
        )
    return lam_min


# ---- options and capabilities (service.dp.core.options) ---------------------------------


@dataclass(frozen=True, slots=True)
class Options(MechanismOptions):
    """AdaSSP's option: the failure probability ρ of its adaptive ridge rule."""

    rho: float = option(
        DEFAULT_RHO,
        "Failure probability of the adaptive ridge rule (public; utility only, never privacy).",
        gt=0.0,
        lt=1.0,
    )


def work_estimate(n: int, d: int, details: Mapping[str, Any]) -> float:
    """Row-feature passes (:mod:`service.dp.analysis.work`): XᵀX is d passes over the design
    and Xᵀy one, n·d·(d + 1); the eigendecomposition, its certificate (two d × d products)
    and the solve about 10·d³ more."""
    del details
    return float(n) * d * (d + 1) + 10.0 * float(d) ** 3


#: Regression only; its work is the Gram matrix (no excess-risk bound).
CAPABILITIES = Capabilities(work=work_estimate, tasks=frozenset({"regression"}))


# ---- the plan --------------------------------------------------------------------------------


@plan_kind("adassp")
@dataclass(frozen=True, slots=True)
class AdaSSPPlan(MechanismPlan):
    """Everything ``run`` does, fixed by ``calibrate`` from public n, d, ε, δ, λ, ρ: the noise
    multiplier z and what the accountants say of it, each release's exact σ, the σ actually
    added (with the floating-point margins) and the sensitivity as computed, the eigenvalue
    tolerance τ_λ and the ridge rule's constants."""

    mechanism = NAME

    rho: float
    tail: float
    noise_multiplier: float
    gdp_mu: float
    epsilon_pld: float
    delta_gdp: float
    eigenvalue_tolerance: float
    sigma_eigenvalue: float
    sigma_eigenvalue_added: float
    sensitivity_eigenvalue_as_computed: float
    sigma_gram: float
    sigma_gram_added: float
    sigma_gram_off_diagonal_added: float
    sensitivity_gram_as_computed: float
    sigma_moment: float
    sigma_moment_added: float
    sensitivity_moment_as_computed: float

    @property
    def expected_noise_norm(self) -> float:
        """E‖Z₃‖ of the noise on Xᵀy (the vector the weights are solved against)."""
        return self.sigma_moment_added * chi_mean(self.inputs.d)

    def details(self) -> dict[str, Any]:
        details = self.inputs.details()
        details.update(
            noise="gaussian",
            releases=["lambda_min(XᵀX)", "XᵀX", "Xᵀy"],
            sensitivity={"eigenvalue": 1.0, "gram_frobenius": math.sqrt(2.0), "moment": 2.0},
            sensitivity_as_computed={
                "eigenvalue": self.sensitivity_eigenvalue_as_computed,
                "gram_frobenius": self.sensitivity_gram_as_computed,
                "moment": self.sensitivity_moment_as_computed,
            },
            noise_multiplier=self.noise_multiplier,
            sigma={
                "eigenvalue": self.sigma_eigenvalue,
                "gram_diagonal": self.sigma_gram,
                "gram_off_diagonal": self.sigma_gram / math.sqrt(2.0),
                "moment": self.sigma_moment,
            },
            sigma_added={
                "eigenvalue": self.sigma_eigenvalue_added,
                "gram_diagonal": self.sigma_gram_added,
                "gram_off_diagonal": self.sigma_gram_off_diagonal_added,
                "moment": self.sigma_moment_added,
            },
            eigenvalue_tolerance=self.eigenvalue_tolerance,
            gdp_mu=self.gdp_mu,
            accountant="dp_accounting.pld (pessimistic PLD), Gaussian composed 3 times",
            epsilon_pld=self.epsilon_pld,
            delta_at_epsilon_exact_gdp=self.delta_gdp,
            accounting=ACCOUNTING_NOTE,
            ridge_rule=(
                "λ_A = max(0, σ₂(2√d + t) − max(0, λ̂_min − σ₁t)), t = √(2 ln(3/ρ)); "
                "weights (Ĝ + (λ_A + nλ)I)⁻¹ b̂"
            ),
            rho=self.rho,
            expected_noise_norm=self.expected_noise_norm,
            release=lattice.RELEASE_NOTE,
        )
        return details

    def calibration(self) -> Calibration:
        eps, delta = self.inputs.epsilon, self.inputs.delta
        return self.calibration_with(
            (
                f"three Gaussian releases (λ_min(XᵀX) σ = {self.sigma_eigenvalue:.6g}, XᵀX "
                f"σ = {self.sigma_gram:.6g} on the diagonal, Xᵀy σ = {self.sigma_moment:.6g}) "
                f"with noise multiplier z = {self.noise_multiplier:.6g} each, exactly on the "
                f"2^-32 grid: μ-GDP with μ = √3/z = {self.gdp_mu:.6g}; dp-accounting's PLD "
                f"gives ε = {self.epsilon_pld:.6g} ≤ {eps:g} at δ = {delta:g} (Wang 2018, "
                f"AdaSSP, with replace-one sensitivities and tight composition)"
            ),
            delta=delta,
        )


# ---- the mechanism ---------------------------------------------------------------------------


class AdaSSP:
    """(ε, δ)-DP linear regression by sufficient-statistics perturbation (module docstring)."""

    name = NAME
    options = Options
    capabilities = CAPABILITIES

    def validate_params(self, problem: Problem) -> Problem:
        check_common(problem, ALLOWED_PARAMS)
        self.calibrate(problem)
        return problem

    def calibrate(self, problem: Problem) -> Calibration:
        return self.plan(problem).calibration()

    def plan(self, problem: Problem) -> AdaSSPPlan:
        """The plan of a validated problem, from public numbers only."""
        if problem.task != "regression" or problem.loss != "squared":
            raise PrivacyParameterError(
                f"{NAME} fits linear regression with the squared loss (task regression, loss "
                f"squared); got task {problem.task}, loss {problem.loss}"
            )
        require_delta(NAME, problem.delta)
        n, d = problem.n, problem.d
        if n > MAX_ROWS:
            raise PrivacyParameterError(
                f"{NAME} releases XᵀX, whose entries reach n; it takes at most {MAX_ROWS} rows"
            )
        rho = _rho(problem.params)
        eps, delta = float(problem.epsilon), float(problem.delta)
        found = checked_noise_multiplier(NAME, eps, delta, 3)
        z = found.multiplier
        e_gram = gram_error_bound(n, d)
        tau = eigenvalue_tolerance(n, d)
        sig1, sens1, _ = _noise_for(Fraction(1), e_gram + Fraction(tau), z, 1)
        # the whitened norm counts an off-diagonal entry twice: d + 2·d(d − 1)/2 = d² terms
        sig2, sens2, _ = _noise_for(Fraction(SQRT2_UP), e_gram, z, d * d)
        off = clipping.round_up(Fraction(sig2) * Fraction(SQRT2_UP) / 2)
        sig3, sens3, _ = _noise_for(Fraction(2), clipping.sum_error_bound(n, d, 1.0), z, d)
        return AdaSSPPlan(
            inputs=Inputs.of(problem),
            rho=rho,
            tail=math.sqrt(2.0 * math.log(3.0 / rho)),
            noise_multiplier=z,
            gdp_mu=found.mu,
            epsilon_pld=found.epsilon_pld,
            delta_gdp=found.delta_gdp,
            eigenvalue_tolerance=tau,
            sigma_eigenvalue=z,
            sigma_eigenvalue_added=sig1,
            sensitivity_eigenvalue_as_computed=sens1,
            sigma_gram=z * math.sqrt(2.0),
            sigma_gram_added=sig2,
            sigma_gram_off_diagonal_added=off,
            sensitivity_gram_as_computed=sens2,
            sigma_moment=2.0 * z,
            sigma_moment_added=sig3,
            sensitivity_moment_as_computed=sens3,
        )

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
        plan = require_plan(calibration, AdaSSPPlan)
        if X.shape != (plan.inputs.n, plan.inputs.d):
            raise ValueError("the data does not have the shape the plan was calibrated for")
        report(progress, 0.0)
        lam_min, gram, moment = noisy_statistics(X, y, plan, rng=rng)
        report(progress, 0.8)
        ridge = ridge_rule(lam_min, plan) + plan.inputs.n * plan.inputs.regularization
        model: LinearModel = release(_solve(gram, moment, ridge))
        report(progress, 1.0)
        return model


def _rho(params: Mapping[str, Any]) -> float:
    value = params.get("rho", DEFAULT_RHO)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PrivacyParameterError("rho must be a number in (0, 1)")
    if not (math.isfinite(value) and 0.0 < value < 1.0):
        raise PrivacyParameterError(f"rho must be a number in (0, 1), got {value!r}")
    return float(value)


def noisy_statistics(
    X: FloatArray, y: FloatArray, plan: AdaSSPPlan, *, rng: np.random.Generator | None
) -> tuple[float, FloatArray, FloatArray]:
    """The three releases of the plan: (λ̂_min, Ĝ symmetric, b̂), each on the lattice."""
    d = plan.inputs.d
    gram = X.T @ X
    upper = np.triu_indices(d)
    sym = np.zeros((d, d))
    sym[upper] = gram[upper]
    sym = sym + np.triu(sym, 1).T  # exact copies: A is the upper triangle, mirrored
    lam = certified_min_eigenvalue(sym, plan.eigenvalue_tolerance)
    lam_noisy = float(_gaussian_release(np.array([lam]), plan.sigma_eigenvalue_added, rng)[0])
    diag = np.diag_indices(d)
    off = np.triu_indices(d, 1)
    noisy = np.zeros((d, d))
    noisy[diag] = _gaussian_release(sym[diag].copy(), plan.sigma_gram_added, rng)
    if d > 1:
        noisy[off] = _gaussian_release(sym[off].copy(), plan.sigma_gram_off_diagonal_added, rng)
    noisy = noisy + np.triu(noisy, 1).T
    moment = _gaussian_release(X.T @ y, plan.sigma_moment_added, rng)
    return lam_noisy, noisy, moment


def ridge_rule(lam_noisy: float, plan: AdaSSPPlan) -> float:
    """λ_A = max(0, σ₂(2√d + t) − max(0, λ̂ − σ₁t)) (module docstring, step 4; the σ's added)."""
    t = plan.tail
    lower = max(0.0, lam_noisy - plan.sigma_eigenvalue_added * t)
    bound = plan.sigma_gram_added * (2.0 * math.sqrt(plan.inputs.d) + t)
    return max(0.0, bound - lower)


def _solve(gram: FloatArray, moment: FloatArray, ridge: float) -> FloatArray:
    """(Ĝ + ridge·I)⁻¹ b̂, or the least-squares solution when that matrix is singular."""
    d = gram.shape[0]
    system = gram + ridge * np.eye(d)
    try:
        return np.asarray(linalg.solve(system, moment, assume_a="sym"), dtype=np.float64)
    except (linalg.LinAlgError, ValueError):
        return np.asarray(np.linalg.lstsq(system, moment, rcond=None)[0], dtype=np.float64)


MECHANISM = AdaSSP()
