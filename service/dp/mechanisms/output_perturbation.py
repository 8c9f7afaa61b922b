"""``output_perturbation``: ε-DP by adding ν(b) ∝ exp(−β‖b‖) noise to the exact minimiser.

Chaudhuri, Monteleoni & Sarwate 2011 (CMS11) Alg. 1 / Thm 6, via seed 000 Alg. 1.

Objective (public n, λ): J_D(w) = (1/n) Σ_i l(y_i wᵀx_i) + (λ/2)‖w‖², with l convex and
differentiable, |l'| ≤ 1, ‖x_i‖ ≤ 1, y_i ∈ {−1, +1}. Release w_priv = ŵ_D + b with
β = ε/S, S = 2/(nλ) + 2τ/λ (below; τ the public tolerance of the proved gradient bound).

Sensitivity of the exact minimiser (derived; CMS11 Cor. 8). Let D, D′ differ in record i, so
J_D′ = J_D + G with G(w) = (1/n)[l(y′wᵀx′) − l(y wᵀx)] and
‖∇G(w)‖ = (1/n)‖l′(·)y′x′ − l′(·)y x‖ ≤ 2/n. Both objectives are λ-strongly convex. From
∇J_D(w*_D) = 0 and ∇J_D(w*_D′) = −∇G(w*_D′),
λ‖w*_D − w*_D′‖² ≤ ⟨∇J_D(w*_D′) − ∇J_D(w*_D), w*_D′ − w*_D⟩ ≤ (2/n)‖w*_D − w*_D′‖,
so ‖w*_D − w*_D′‖ ≤ 2/(nλ). (Seed 001's code uses 2C/N with sklearn's C = 1/(nλ), i.e.
2/(n²λ): n times too little noise. Not repeated here.)

Privacy. The density of w_priv at v is ∝ exp(−β‖v − w*_D‖), so by the triangle inequality
p_D(v)/p_D′(v) ≤ exp(β‖ŵ_D − ŵ_D′‖) ≤ exp(βS) = e^ε. The noise is sampled as
‖b‖ ~ Gamma(d, 1/β) with a uniform direction; E‖b‖ = d/β = dS/ε.

Stopping on a proved bound (issue 25 §4). The solver's answer ŵ_D is released only when
:func:`service.dp.optimize.certified.certified_erm` has *proved*, in IEEE-754 arithmetic, that the
real-arithmetic gradient satisfies ‖∇J_D(ŵ_D)‖ ≤ τ (the certified release's bound on the
margins, the loss derivatives, the blocked gradient sum and every later rounding; a float
check of the solver's own gradient norm is not enough: it is itself rounded). τ is public:

    τ = max(τ₀, 2F),  τ₀ = 10⁻¹⁰ + 8(min(n, 4096) + d)u + 4c·γ_d/λ

(τ₀ = :func:`service.dp.optimize.certified.tolerance` with L = 0; F =
:func:`service.dp.optimize.certified_failure.certificate_floor` at b = 0, a public bound on the
certificate at the double nearest w*, so a point meeting τ exists for every dataset, with a factor 2
to spare; F > τ₀/2 only where the margin terms ∝ c/λ dominate τ₀: λ ≲ 10⁻⁶ with few features, the
Huber loss with d ≤ 4)
(u = 2⁻⁵³, γ_d = du/(1 − du)). For λ-strongly convex J_D,
λ‖ŵ_D − w*_D‖² ≤ ⟨∇J_D(ŵ_D) − ∇J_D(w*_D), ŵ_D − w*_D⟩ ≤ τ‖ŵ_D − w*_D‖, so
‖ŵ_D − w*_D‖ ≤ τ/λ (λ is the double given, so μ = λ exactly), and by the triangle inequality
the released centre moves by at most

    S = 2/(nλ) + 2τ/λ

between neighbours. β is the largest double with β·S ≤ ε in exact rational arithmetic
(:func:`service.dp.data.clipping.scale_for`), so the guarantee holds for the model actually
computed, not only for the exact minimiser. Whatever the solver does (it is deterministic, but
any ŵ_D within τ/λ of w*_D would do: the density of ŵ_D + b is a mixture of centres within S
of every centre of the neighbour's mixture), p_D(v) ≤ e^{βS}p_D′(v).

When the certificate cannot be met. No noise enters this objective, so a failure is not a
noise event, and a point that meets τ exists for every dataset (τ ≥ 2F above). A failure
means that the solver (Newton, then L-BFGS-B, then once more asked for τ/256) did not reach
such a point. The job then fails with nothing released (the charge is kept); that event
depends on D and is not covered by the guarantee (docs/privacy.md, "When a certificate
fails").

Release in floating point (issue 19 §1). What leaves the service is the grid point
γ·round((ŵ + b)/γ), γ = 2⁻³², clamped to ±2²⁰, with b's law sampled *exactly* (uniform bits
drawn lazily, rigorous interval arithmetic: :mod:`service.dp.noise.lattice`). It is post-processing
of the continuous ŵ + b, so the bound above holds for the released doubles with no δ and no
ε adjustment; every grid point is reachable from every dataset.

Regression (``task="regression"``, the Huber loss ℓ of the residual with width h,
y ∈ [−1, 1]; :mod:`service.dp.core.regression_losses`). J_D(w) = (1/n)Σ ℓ(y_i − wᵀx_i) +
(λ/2)‖w‖² is λ-strongly convex and replacing record i adds G with
‖∇G(w)‖ = (1/n)‖ψ(r′)x′ − ψ(r)x‖ ≤ 2h/n (|ψ| = |ℓ′| ≤ h), so the argument above gives
‖w*_D − w*_D′‖ ≤ 2h/(nλ) and S = 2h/(nλ) + 2τ/λ, with τ = max(τ₀, 2F) and F the regression
certificate floor at b = 0 (:mod:`service.dp.optimize.regression`, which also proves the
gradient bound). The squared loss has no such h and is refused (``adassp`` fits it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from service.dp.core.base import Calibration, FittedModel, Problem, ProgressCallback
from service.dp.core.options import Capabilities, MechanismOptions
from service.dp.core.plan import plan_kind
from service.dp.core.regression_losses import RegressionHuberLoss
from service.dp.core.validation import PrivacyParameterError
from service.dp.mechanisms import multiclass
from service.dp.mechanisms._common import (
    OutputPlan,
    check_common,
    problem_loss,
    release,
    report,
    require_plan,
)
from service.dp.noise import lattice
from service.dp.optimize import certified, certified_failure, regression

__all__ = [
    "CAPABILITIES",
    "MECHANISM",
    "Options",
    "OutputPerturbation",
    "OutputPerturbationPlan",
    "regression_plan",
    "run_regression",
]


@plan_kind("output_perturbation")
@dataclass(frozen=True, slots=True)
class OutputPerturbationPlan(OutputPlan):
    """Output perturbation's plan (:class:`~service.dp.mechanisms._common.OutputPlan`): the
    certificate's tolerance τ (and its floor F), the sensitivity S = 2/(nλ) + 2τ/λ
    (2h/(nλ) + 2τ/λ for Huber regression) with its two terms (each rounded up) and the
    norm-exponential noise rate β = ε/S of the released minimiser."""

    mechanism = "output_perturbation"

    def calibration(self) -> Calibration:
        eps, beta, tau = self.inputs.epsilon, self.beta, self.tolerance
        if self.inputs.task == "regression":
            return self._regression_calibration()
        return self.calibration_with(
            f"single release, ε = {eps:g}: noise ∝ exp(−β‖b‖) with β = ε/S = {beta:.6g} "
            f"added to a minimiser whose gradient is proved (in IEEE arithmetic) to be at "
            f"most τ = {tau:.6g}, so within τ/λ of the exact one; its L2 sensitivity is "
            f"S = 2/(nλ) + 2τ/λ = {self.sensitivity:.10g} (Chaudhuri et al. 2011, Thm 6, "
            f"plus twice the distance τ/λ to the exact minimiser); no δ is spent. If the "
            f"certificate is not met the job fails and nothing is released"
        )

    def _regression_calibration(self) -> Calibration:
        eps, beta, tau = self.inputs.epsilon, self.beta, self.tolerance
        return self.calibration_with(
            f"single release, ε = {eps:g}: noise ∝ exp(−β‖b‖) with β = ε/S = {beta:.6g} "
            f"added to a Huber regression minimiser whose gradient is proved (in IEEE "
            f"arithmetic) to be at most τ = {tau:.6g}; its L2 sensitivity is "
            f"S = 2h/(nλ) + 2τ/λ = {self.sensitivity:.10g} (|ℓ′| ≤ h = "
            f"{self.inputs.huber_h:g}); no δ is spent. If the certificate is not met the "
            f"job fails and nothing is released"
        )


# ---- options and capabilities (service.dp.core.options) ---------------------------------


@dataclass(frozen=True, slots=True)
class Options(MechanismOptions):
    """Output perturbation has no options of its own (only the loss's `h`)."""


def excess_risk_terms(
    details: Mapping[str, Any], expected_noise_norm: float | None
) -> tuple[float, float] | None:
    """The planner's terms (:mod:`service.dp.analysis.planning`): the released weights are
    w* + b, so the shift is E‖b‖ (the expected noise norm) and J is (c + λ)-smooth."""
    if expected_noise_norm is None:
        return None
    return float(expected_noise_norm), float(details["c"]) + float(details["regularization"])


CAPABILITIES = Capabilities(
    excess_risk=excess_risk_terms,
    meta_level=True,
    tasks=frozenset({"binary", "multiclass", "regression"}),
)


class OutputPerturbation:
    """ε-DP output perturbation (CMS11 Alg. 1) with sensitivity 2/(nλ) + 2τ/λ, τ proved."""

    name = "output_perturbation"
    options = Options
    capabilities = CAPABILITIES

    def validate_params(self, problem: Problem) -> Problem:
        check_common(problem, ())
        if problem.task == "regression":
            regression_plan(problem)  # refuses the squared loss
        return problem

    def calibrate(self, problem: Problem) -> Calibration:
        if problem.task == "regression":
            return regression_plan(problem).calibration()
        if problem.task == "multiclass":
            return multiclass.output_plan(problem).calibration()
        loss = problem_loss(problem)
        n, lam, d = problem.n, problem.regularization, problem.d
        plan = OutputPerturbationPlan.calibrated(
            problem,
            exact_sensitivity=Fraction(2) / (n * Fraction(lam)),  # 2/(nλ), exactly
            base_tolerance=certified.tolerance(
                n=n, d=d, c=float(loss.c), strong_convexity=lam, linear_bound=0.0
            ),
            floor=certified_failure.certificate_floor(
                n=n, d=d, loss=loss, strong_convexity=lam, noise_norm=0.0
            ),
        )
        return plan.calibration()

    def run(
        self,
        X: NDArray[np.float64],
        y: NDArray[np.float64],
        problem: Problem,
        calibration: Calibration,
        *,
        rng: np.random.Generator | None,
        progress: ProgressCallback | None,
    ) -> FittedModel:
        del problem  # the plan holds the objective
        if isinstance(calibration.plan, multiclass.MulticlassOutputPlan):
            return multiclass.run_output(X, y, calibration.plan, rng=rng, progress=progress)
        plan = require_plan(calibration, OutputPerturbationPlan)
        loss = plan.inputs.loss_function()
        report(progress, 0.0)
        if plan.inputs.task == "regression":
            return run_regression(X, y, plan, rng=rng, progress=progress)
        coef = certified.certified_erm(
            X,
            y,
            loss,
            regularization=plan.inputs.regularization,
            tolerance=plan.tolerance,
            failure=certified.SENSITIVITY_FAILURE,
        )
        report(progress, 0.9)
        model = release(lattice.norm_exponential_release(coef, beta=plan.beta, rng=rng))
        report(progress, 1.0)
        return model


def run_regression(
    X: NDArray[np.float64],
    y: NDArray[np.float64],
    plan: OutputPerturbationPlan,
    *,
    rng: np.random.Generator | None,
    progress: ProgressCallback | None,
) -> FittedModel:
    """The regression plan's release: the certified Huber minimiser plus ν(b) ∝ exp(−β‖b‖)."""
    loss = plan.inputs.loss_function()
    if not isinstance(loss, RegressionHuberLoss):  # pragma: no cover - the plan decides
        raise TypeError("a regression plan of output_perturbation names the huber loss")
    coef = regression.certified_regression_erm(
        X, y, loss, regularization=plan.inputs.regularization, tolerance=plan.tolerance
    )
    report(progress, 0.9)
    model = release(lattice.norm_exponential_release(coef, beta=plan.beta, rng=rng))
    report(progress, 1.0)
    return model


def regression_plan(problem: Problem) -> OutputPerturbationPlan:
    """The plan for ``task="regression"`` with the Huber loss of width h (module docstring):
    τ = max(τ₀, 2F) with the regression floor F, S = 2h/(nλ) + 2τ/λ exactly, β = ε/S."""
    loss = problem_loss(problem)
    if not isinstance(loss, RegressionHuberLoss):
        raise PrivacyParameterError(
            "output_perturbation fits regression with the huber loss only: the squared loss "
            "has no bound on its derivative (use adassp for it)"
        )
    n, lam, d = problem.n, problem.regularization, problem.d
    return OutputPerturbationPlan.calibrated(
        problem,
        exact_sensitivity=2 * Fraction(loss.lipschitz) / (n * Fraction(lam)),
        base_tolerance=certified.tolerance(
            n=n, d=d, c=float(loss.c), strong_convexity=lam, linear_bound=0.0
        ),
        floor=regression.certificate_floor(
            n=n, d=d, loss=loss, strong_convexity=lam, noise_norm=0.0
        ),
    )


MECHANISM = OutputPerturbation()
