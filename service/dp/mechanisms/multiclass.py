"""Multi-class (K ≥ 3) fits of the ERM mechanisms: the multinomial logistic loss in ℝ^{K×d}.

The model is C ∈ ℝ^{K×d} (row k = class k's weights, :class:`~service.dp.core.released.
MulticlassModel`), handled as the flat vector vec(C) ∈ ℝ^{dK}: the norm-exponential noise laws,
the exact lattice release and the certified minimiser apply unchanged in dimension dK. The
loss and its constants are derived in :mod:`service.dp.optimize.multinomial`: per-example
gradient (p − e_y)xᵀ with ‖·‖_F ≤ √2; Hessian (diag(p) − ppᵀ) ⊗ xxᵀ, PSD, spectral norm ≤ ½,
trace ≤ 1 − 1/K, rank ≤ K − 1. Labels are class indices 0…K − 1 (:mod:`service.dp.core.tasks`).

Multinomial, not one-vs-rest (issue 29). One-vs-rest fits K binary models, each seeing every
record, so by basic composition each gets ε/K: class k's noise vector in ℝ^d (objective
perturbation, β = ε/(2K)) has E‖b_k‖ = 2dK/ε. The multinomial fit spends the whole ε on one
release in ℝ^{dK} with β = ε/(2√2): E‖b‖ = 2√2·dK/ε, spread over K rows, so a class's row
gets about 2√2·d√K/ε — √(K/2) times less than one-vs-rest (the Jacobian terms aside: ε_J
here, K of them at ε/K each there). Measured on Adult re-targeted to
marital status (7 classes, 30,162 training rows, d = 101, ε = 1, test-split accuracy, mean of
5 seeds, ``benchmarks/bench_multiclass_ovr.py``; majority 0.464, non-private 0.835):
objective perturbation at λ = 10⁻⁴, 10⁻³, 10⁻²: multinomial 0.707, 0.790, 0.757 against
one-vs-rest 0.677, 0.745, 0.747; output perturbation at λ = 10⁻²: 0.753 against 0.728.
Multinomial wins at every λ (tests/unit/dp/test_multiclass_mechanisms.py checks the ordering
on synthetic data), so PrivFit fits the multinomial loss.

Objective perturbation (Chaudhuri, Monteleoni & Sarwate 2011 Alg. 2; Kifer et al. 2012):
release argmin J̃_b, J̃_b(C) = (1/n)Σℓ_i(C) + ((λ + Δ)/2)‖C‖² + ⟨b, vec C⟩/n, b ∝ exp(−β‖b‖)
in ℝ^{dK}. The first-order condition gives the bijection b = b_D(C) = −Σ_i∇ℓ_i(C) −
n(λ + Δ)vec C, so the density of the release is ν(b_D(C))·|det ∇b_D(C)|. For replace-one
neighbours differing in record i:

* noise part: ‖b_D(C) − b_D′(C)‖ = ‖∇ℓ_i − ∇ℓ′_i‖_F ≤ 2√2, so ν(b_D)/ν(b_D′) ≤ e^{2√2β};
  β = ε′/(2√2) (rounded so that β·S ≤ ε′ exactly for the double S = 2·fl(√2) ≥ 2√2);
* Jacobian part: ∇b_D = −(M + E₁), ∇b_D′ = −(M + E₂) with M = Σ_{j≠i}∇²ℓ_j + n(λ + Δ)I
  ⪰ n(λ + Δ)I common to both and E₁, E₂ ⪰ 0 the replaced records' Hessians (rank ≤ K − 1,
  trace ≤ 1 − 1/K). det(M + E₂) ≥ det M, so det(M + E₁)/det(M + E₂) ≤ det(I + M^{-½}E₁M^{-½})
  = Π_{i≤K−1}(1 + ν_i), where the ν_i ≥ 0 sum to tr(M⁻¹E₁) ≤ tr(E₁)/(n(λ + Δ)) ≤
  (1 − 1/K)/(n(λ + Δ)). By AM–GM over the ≤ K − 1 nonzero ν_i,

      Π(1 + ν_i) ≤ (1 + (1 − 1/K)/((K − 1)n(λ + Δ)))^{K−1} = (1 + 1/(Kn(λ + Δ)))^{K−1},

  so ε_J = (K − 1)·ln(1 + 1/(Kn(λ + Δ))) ≤ (1 − 1/K)/(n(λ + Δ)) (the plain trace bound, by
  ln(1 + ν) ≤ ν), tighter by the rank. (The binary code's ln(1 + c/(n(λ + Δ))) is
  the K = 2 case of the same argument: one nonzero eigenvalue.)

The privacy loss is ε′ + ε_J ≤ ε₁ (:func:`jacobian_slack`, the binary code's no-cliff rule:
Δ = 0 when ε_J(0) ≤ ε₁/2, otherwise the Δ with ε_J = ε₁/2; ε_J rounded up, so the sum holds
in real arithmetic, not only in doubles). The release is certified in
floating point exactly as for binary fits (:mod:`service.dp.optimize.certified`, ε = ε₁ + ε_r,
c = ½ and dimension dK in its public numbers; the gradient bound is
:func:`service.dp.optimize.multinomial.gradient_bound`).

Output perturbation (CMS11 Alg. 1): J(C) = (1/n)Σℓ_i + (λ/2)‖C‖² is λ-strongly convex and each
loss is √2-Lipschitz in ‖·‖_F, so the CMS11 Cor. 8 argument (‖∇G‖ ≤ 2√2/n for the difference
of neighbours' objectives) gives ‖C*_D − C*_D′‖_F ≤ 2√2/(nλ); with the certified distance τ/λ
of the released minimiser (as for binary fits) S = 2√2/(nλ) + 2τ/λ and β = ε/S, noise in ℝ^{dK}.

DP-SGD (Song, Chaudhuri & Sarwate 2013, :mod:`service.dp.mechanisms.dp_sgd`): the
per-example gradient (p − e_y)xᵀ (Frobenius norm ≤ √2) is clipped to Frobenius norm < C = 1,
the module's clip: the clipped mean has the same sensitivity 2/b_min (its floating-point
analysis, :mod:`service.dp.data.clipping`, holds column by column and sums in Frobenius to the
same E(n) with √(dK) for √d), so β and the composition are unchanged, with noise in ℝ^{dK}.
Clipping at 1 rather than √2 halves the noise variance; it changes only the steps of rows with
‖x‖‖p − e_y‖ > 1 (confidently misclassified ones). Random projections are not offered for
multi-class fits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

import numpy as np
from numpy.typing import NDArray

from service.dp.core.accounting import remainder_within
from service.dp.core.base import Calibration, Problem, ProgressCallback
from service.dp.core.plan import plan_kind
from service.dp.core.released import MulticlassModel
from service.dp.core.validation import PrivacyParameterError
from service.dp.data.clipping import round_up, scale_for
from service.dp.mechanisms._common import (
    Inputs,
    NormExponentialObjectivePlan,
    OutputPlan,
    log1p_upper,
    report,
)
from service.dp.noise import draws as noise
from service.dp.noise import lattice
from service.dp.noise.rounding import UNIT_ROUNDOFF
from service.dp.optimize import certified, certified_failure, multinomial

__all__ = [
    "GRADIENT_SENSITIVITY",
    "MulticlassObjectivePlan",
    "MulticlassOutputPlan",
    "clipped_minibatch_gradient",
    "jacobian_slack",
    "jacobian_upper",
    "objective_plan",
    "output_plan",
    "release",
    "run_non_private",
    "run_objective",
    "run_output",
]

FloatArray = NDArray[np.float64]

#: A double ≥ √2, the Frobenius bound of one multinomial gradient (fl(√2) > √2).
_SQRT2_UP: Final[float] = math.sqrt(2.0)
#: ≥ 2√2: the gradient-difference sensitivity of replace-one neighbours.
GRADIENT_SENSITIVITY: Final[float] = 2.0 * _SQRT2_UP
#: the non-private fit's solver tolerance on ‖∇J‖_F
_EXACT_TOL: Final[float] = 1e-10


def release(coef: FloatArray) -> MulticlassModel:
    """Round the released K × d weights to the public grid and wrap them."""
    return MulticlassModel(coef=noise.round_to_grid(np.asarray(coef, dtype=np.float64)))


def jacobian_slack(
    epsilon: float, regularization: float, n: int, n_classes: int
) -> tuple[float, float, float]:
    """(Δ, ε′, ε_J) for the multinomial loss (module docstring):
    ε_J(Δ) = (K − 1)·ln(1 + 1/(Kn(λ + Δ))); Δ = 0 if ε_J(0) ≤ ε/2, otherwise the smallest
    Δ with ε_J = ε/2, λ + Δ = 1/(Kn(e^{ε/(2(K−1))} − 1)). ε_J is then recomputed for the
    double λ + Δ used and rounded up (:func:`jacobian_upper`), and ε′ is the largest double
    with ε′ + ε_J ≤ ε exactly (rounding in Δ only moves budget; in ε_J it never overspends)."""
    K = int(n_classes)

    def jacobian(ridge: float) -> float:
        return (K - 1) * math.log1p(1.0 / (K * n * ridge))

    extra = 0.0
    if jacobian(regularization) > epsilon / 2.0:
        extra = max(0.0, 1.0 / (K * n * math.expm1(epsilon / (2.0 * (K - 1)))) - regularization)
    eps_j = jacobian_upper(regularization + extra, n, K)
    eps_prime = remainder_within(epsilon, eps_j)
    if not eps_prime > 0.0:  # pragma: no cover - only reachable through rounding
        raise PrivacyParameterError(
            f"ε = {epsilon:g} leaves no budget for the noise after the Jacobian term"
        )
    return extra, eps_prime, eps_j


def jacobian_upper(ridge: float, n: int, n_classes: int) -> float:
    """A double ≥ ε_J = (K − 1)·ln(1 + 1/(Kn·ridge)) in real arithmetic for the double ridge:
    the argument exact as a fraction, the logarithm bounded above by
    :func:`~service.dp.mechanisms._common.log1p_upper`, the product rounded up."""
    K = int(n_classes)
    return round_up((K - 1) * log1p_upper(Fraction(1) / (K * n * Fraction(ridge))))


def _noise_beta(epsilon_prime: float) -> float:
    """The largest β with β·GRADIENT_SENSITIVITY ≤ ε′ exactly."""
    return scale_for(epsilon_prime, Fraction(GRADIENT_SENSITIVITY))


# ---- objective perturbation ----------------------------------------------------------------


@plan_kind("objective_perturbation_multiclass")
@dataclass(frozen=True, slots=True)
class MulticlassObjectivePlan(NormExponentialObjectivePlan):
    """Objective perturbation's plan for K classes (module docstring): noise ∝ exp(−β‖b‖) in
    ℝ^{dK} with β = ε′/(2√2), ε′ = ε₁ − ε_J, ε_J = (K − 1)ln(1 + 1/(Kn(λ + Δ))), and the
    certified release in dimension dK."""

    mechanism = "objective_perturbation"

    shows_dimension = True

    @property
    def dimension(self) -> int:
        return self.inputs.d * self.inputs.n_classes

    @property
    def gradient_sensitivity(self) -> float:
        return GRADIENT_SENSITIVITY

    def calibration(self) -> Calibration:
        eps, extra, K = self.inputs.epsilon, self.Delta, self.inputs.n_classes
        return self.calibration_with(
            f"single release of the {K}-class multinomial model (noise in dimension "
            f"d·K = {self.dimension}), ε = {eps:g} = noise part ε′ = "
            f"{self.epsilon_prime:.6g} (gradient sensitivity 2√2) + Jacobian part "
            f"(K − 1)ln(1 + 1/(Kn(λ+Δ))) = {self.jacobian_epsilon:.6g} (Chaudhuri et al. "
            f"2011, Alg. 2, rank ≤ K − 1 Hessians, "
            f"{'Δ = 0' if extra == 0.0 else f'Δ = {extra:.6g}'}) + release part "
            f"ε_r = {self.certificate.epsilon:.6g}: {self.certificate.describe()}; no δ is "
            f"spent. {certified_failure.failure_sentence(self.failure.details())}"
        )


def objective_plan(problem: Problem, *, mechanism: str) -> MulticlassObjectivePlan:
    """The multi-class objective-perturbation plan of a validated problem (public numbers)."""
    n, d, K = problem.n, problem.d, problem.n_classes
    lam, eps = problem.regularization, problem.epsilon
    dim = d * K
    c = multinomial.CURVATURE

    def public(budget: float) -> tuple[float, float]:
        extra, eps_noise, _ = jacobian_slack(budget, lam, n, K)
        bound = certified.norm_exponential_quantile(dim, _noise_beta(eps_noise)) / n
        return lam + extra, bound

    eps_objective, certificate = certified.split(eps, n=n, d=dim, c=c, public=public)
    extra, epsilon_prime, jacobian_epsilon = jacobian_slack(eps_objective, lam, n, K)
    beta = _noise_beta(epsilon_prime)
    return MulticlassObjectivePlan.split(
        Inputs.of(problem),
        extra=extra,
        beta=beta,
        split=(eps_objective, epsilon_prime, jacobian_epsilon),
        certificate=certificate,
        failure=multinomial.failure_plan(
            n=n, d=d, n_classes=K, beta=beta, certificate=certificate, mechanism=mechanism
        ),
    )


def run_objective(
    X: FloatArray,
    y: FloatArray,
    plan: MulticlassObjectivePlan,
    *,
    rng: np.random.Generator | None,
    progress: ProgressCallback | None,
) -> MulticlassModel:
    """Draw b (enclosed) in ℝ^{dK} and release the certified minimiser of J̃_b."""
    report(progress, 0.0)
    b = lattice.norm_exponential_enclosure(plan.dimension, beta=plan.noise_beta, rng=rng)
    coef = multinomial.release_minimiser(
        X,
        y,
        plan.inputs.n_classes,
        regularization=plan.inputs.regularization,
        extra_regularization=plan.Delta,
        noise=b,
        release=plan.certificate,
        rng=rng,
    )
    model = release(coef)
    report(progress, 1.0)
    return model


# ---- output perturbation -------------------------------------------------------------------


@plan_kind("output_perturbation_multiclass")
@dataclass(frozen=True, slots=True)
class MulticlassOutputPlan(OutputPlan):
    """Output perturbation's plan for K classes: the certificate's tolerance τ (and its
    floor F at b = 0), S = 2√2/(nλ) + 2τ/λ with its two terms (rounded up) and β = ε/S of
    the norm-exponential noise in ℝ^{dK}."""

    mechanism = "output_perturbation"
    shows_dimension = True

    @property
    def dimension(self) -> int:
        return self.inputs.d * self.inputs.n_classes

    def calibration(self) -> Calibration:
        eps, beta, tau, K = self.inputs.epsilon, self.beta, self.tolerance, self.inputs.n_classes
        return self.calibration_with(
            f"single release of the {K}-class multinomial model, ε = {eps:g}: noise "
            f"∝ exp(−β‖b‖) in dimension d·K = {self.dimension} with β = ε/S = {beta:.6g} "
            f"added to a minimiser whose gradient is proved (in IEEE arithmetic) to be at "
            f"most τ = {tau:.6g}; its L2 sensitivity is S = 2√2/(nλ) + 2τ/λ = "
            f"{self.sensitivity:.10g} (Chaudhuri et al. 2011, Thm 6, with the multinomial "
            f"loss's Lipschitz constant √2); no δ is spent. If the certificate is not met "
            f"the job fails and nothing is released"
        )


def output_plan(problem: Problem) -> MulticlassOutputPlan:
    """The multi-class output-perturbation plan of a validated problem (public numbers)."""
    n, d, K, lam = problem.n, problem.d, problem.n_classes, problem.regularization
    return MulticlassOutputPlan.calibrated(
        problem,
        exact_sensitivity=Fraction(GRADIENT_SENSITIVITY) / (n * Fraction(lam)),
        base_tolerance=certified.tolerance(
            n=n, d=d * K, c=multinomial.CURVATURE, strong_convexity=lam, linear_bound=0.0
        ),
        floor=multinomial.certificate_floor(
            n=n, d=d, n_classes=K, strong_convexity=lam, noise_norm=0.0
        ),
    )


def run_output(
    X: FloatArray,
    y: FloatArray,
    plan: MulticlassOutputPlan,
    *,
    rng: np.random.Generator | None,
    progress: ProgressCallback | None,
) -> MulticlassModel:
    """The certified exact minimiser plus noise ∝ exp(−β‖b‖) in ℝ^{dK}, released exactly."""
    K, d = plan.inputs.n_classes, plan.inputs.d
    report(progress, 0.0)
    coef = multinomial.certified_erm(
        X, y, K, regularization=plan.inputs.regularization, tolerance=plan.tolerance
    )
    report(progress, 0.9)
    released = lattice.norm_exponential_release(coef.ravel(), beta=plan.beta, rng=rng)
    model = release(released.reshape(K, d))
    report(progress, 1.0)
    return model


# ---- non-private ---------------------------------------------------------------------------


def run_non_private(
    X: FloatArray, y: FloatArray, inputs: Inputs, *, progress: ProgressCallback | None
) -> MulticlassModel:
    """The exact multinomial minimiser (Newton–CG to ‖∇J‖_F ≤ 10⁻¹⁰), no noise."""
    report(progress, 0.0)
    coef = multinomial.minimise(X, y, inputs.n_classes, ridge=inputs.regularization, tol=_EXACT_TOL)
    report(progress, 1.0)
    return release(coef)


# ---- DP-SGD --------------------------------------------------------------------------------


def clipped_gradient_mean(R: FloatArray, X: FloatArray, caps: FloatArray) -> FloatArray:
    """fl((1/|B|)Σ_i â_i x_iᵀ), â_i the residual r_i = p_i − e_{y_i} scaled so that
    ‖â_i‖·‖x_i‖ < C exactly. With t_i = fl(cap_i(1 − 4u)) (cap_i = fl(C⁻/r_i) of
    :func:`~service.dp.data.clipping.clip_caps`), N_i ≥ ‖r̂_i‖ (norm with (K + 8)u to spare)
    and f_i = min(1, fl(t_i/N_i)): if f_i = 1 then ‖â_i‖ = ‖r̂_i‖ ≤ N_i ≤ t_i, otherwise
    ‖fl(f_i r̂_i)‖ ≤ (t_i/N_i)(1 + u)²‖r̂_i‖ ≤ t_i(1 + u)²; both are < cap_i, and
    cap_i·‖x_i‖ < C⁻(1 + u) < C (clipping step 2). A NaN or infinite residual gets f_i = 0."""
    K = R.shape[1]
    u = UNIT_ROUNDOFF
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        norms = np.sqrt(np.einsum("ij,ij->i", R, R)) * (1.0 + (K + 8) * u)
        target = caps * (1.0 - 4.0 * u)
        factor = np.where(norms <= target, 1.0, target / norms)
        factor = np.where(np.isfinite(factor) & np.all(np.isfinite(R), axis=1), factor, 0.0)
        # a non-finite residual times its factor 0 is NaN here, and 0 on the next line
        A = np.where(factor[:, None] == 1.0, R, R * factor[:, None])
    A = np.where(np.isfinite(A), A, 0.0)
    out: FloatArray = (A.T @ X) / X.shape[0]
    return out


def clipped_minibatch_gradient(
    X: FloatArray, labels: NDArray[np.intp], W: FloatArray, caps: FloatArray
) -> FloatArray:
    """DP-SGD's update direction (:func:`service.dp.mechanisms.dp_sgd._sgd`) for the
    multinomial loss at the K × d iterate W: the residuals p_i − e_{y_i} of the batch's
    softmax probabilities, clipped and averaged by :func:`clipped_gradient_mean`."""
    S = X @ W.T
    P = np.exp(S - S.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    P[np.arange(labels.size), labels] -= 1.0
    return clipped_gradient_mean(P, X, caps)
