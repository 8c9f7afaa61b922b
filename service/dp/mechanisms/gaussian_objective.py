"""``gaussian_objective_perturbation``: GOP, Rajkumar & Agarwal 2012 Alg. 4 (seed 002), (ε, δ)-DP.

Requirements: l convex, twice differentiable (a.e.; see below), |l′| ≤ 1, 0 ≤ l″ ≤ c,
‖x_i‖ ≤ 1, y_i ∈ {−1, +1}, λ > 0, 0 < δ < 1.

Calibration (computeSlack with the tight Jacobian bound and no-cliff Δ of
:func:`service.dp.mechanisms._common.jacobian_slack`; seed 002's Procedure 2 squares the
Jacobian factor and uses the paper's cliff branch rule):

    Δ = 0 if ln(1 + c/(nλ)) ≤ ε/2, else Δ = c/(n(e^{ε/2} − 1)) − λ
    ε̃ = ε − ln(1 + c/(n(λ + Δ)))
    q  = χ²_d quantile at 1 − δ,   σ* = (√q + √(q + 2ε̃))/ε̃
    η ~ N(0, σ*² I_d);  release argmin_w J(w) + ηᵀw/n + (Δ/2)‖w‖²

Derivation of σ* (seed 002 appendix, Thm 4.1; checked here). As for objective perturbation,
η = η_D(w) = −Σ_i l′(y_i wᵀx_i) y_i x_i − n(λ + Δ)w is a bijection and the density of the
output is φ_σ(η_D(w))·|det ∇η_D(w)|. For neighbours:

* Jacobian part ≤ ln(1 + c/(n(λ + Δ))) = ε − ε̃ (matrix determinant lemma for a
  replace-one change of a linear model, derived in ``jacobian_slack``; CMS11 Lemma 10's
  square is not needed);
* noise part: with ‖η_D − η_D′‖ ≤ 2,
  ln φ(η_D)/φ(η_D′) = (‖η_D′‖² − ‖η_D‖²)/(2σ²) ≤ (4‖η_D‖ + 4)/(2σ²),
  which is ≤ ε̃ whenever ‖η_D‖ ≤ (σ²ε̃ − 2)/2.

Under M(D), η_D(w) ~ N(0, σ²I), so ‖η_D‖²/σ² ~ χ²_d and the good event has probability
P[χ²_d ≤ (σ²ε̃ − 2)²/(4σ²)] (the appendix's form; Procedure 3's (σε̃ − 2)² is a misprint).
Setting it to 1 − δ: (σ²ε̃ − 2)/(2σ) = √q ⇔ ε̃σ² − 2√q σ − 2 = 0 ⇔ the σ* above (equal to
the note's σ*² = 2(ε̃ + q + √(q² + 2qε̃))/ε̃²). Outside an event of probability δ the
privacy loss is ≤ ε̃ + (ε − ε̃) = ε, which implies (ε, δ)-DP.

``generalized_objective_perturbation`` with δ > 0 is the sharper alternative (its
argument avoids the √d that ‖η‖ brings in); GOP is kept as the paper's mechanism and as the
centralised counterpart of federated PSGD.

Huber: as for objective perturbation, the change of variables holds almost everywhere.

Release in floating point (issue 19 §1): the argument above is about the exact minimiser
for a real b; PrivFit runs it at ε₁ = ε − ε_r (``epsilon_objective``) and releases the
certified minimiser of :mod:`service.dp.optimize.certified` (``certified_release``): (ε₁ + ε_r,
δ)-DP for the released doubles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy import special

from service.dp.core.base import Calibration, FittedModel, Problem, ProgressCallback
from service.dp.core.options import Capabilities, MechanismOptions
from service.dp.core.plan import plan_kind
from service.dp.core.validation import PrivacyParameterError
from service.dp.mechanisms._common import (
    Inputs,
    ObjectivePlan,
    certificate_failure,
    certified_minimiser,
    check_common,
    chi_mean,
    jacobian_slack,
    problem_loss,
    release,
    report,
    require_plan,
    require_smooth_loss,
)
from service.dp.optimize import certified, certified_failure

__all__ = [
    "CAPABILITIES",
    "MECHANISM",
    "GaussianObjectivePerturbation",
    "GaussianObjectivePlan",
    "Options",
    "compute_slack",
    "gop_sigma",
]


# ---- options and capabilities (service.dp.core.options) ---------------------------------


@dataclass(frozen=True, slots=True)
class Options(MechanismOptions):
    """GOP has no options of its own (only the loss's `h`)."""


CAPABILITIES = Capabilities()


def compute_slack(epsilon: float, regularization: float, n: int, c: float) -> tuple[float, float]:
    """computeSlack (seed 002 Procedure 2) made tight: returns (Δ, ε̃) with ε̃ + ε_J = ε,
    ε_J = ln(1 + c/(n(λ + Δ))) (see :func:`~service.dp.mechanisms._common.jacobian_slack`)."""
    extra, epsilon_tilde, _ = jacobian_slack(epsilon, regularization, n, c)
    return extra, epsilon_tilde


def gop_sigma(d: int, epsilon_tilde: float, delta: float) -> tuple[float, float]:
    """(σ*, q): q = χ²_d quantile at 1 − δ, σ* = (√q + √(q + 2ε̃))/ε̃.

    q is ``special.chdtri(d, δ)``, the inverse of the χ²_d survival function (what
    ``scipy.stats.chi2.isf`` evaluates, without importing ``scipy.stats``)."""
    q = float(special.chdtri(d, delta))
    return (math.sqrt(q) + math.sqrt(q + 2.0 * epsilon_tilde)) / epsilon_tilde, q


@plan_kind("gaussian_objective_perturbation")
@dataclass(frozen=True, slots=True)
class GaussianObjectivePlan(ObjectivePlan):
    """GOP's plan (module docstring): Δ, ε̃ = ε₁ − ε_J, the χ²_d quantile q and the Gaussian
    σ* of the objective's noise, the split ε = ε₁ + ε_r and the certified release."""

    mechanism = "gaussian_objective_perturbation"

    epsilon_tilde: float
    chi2_quantile: float

    @property
    def expected_noise_norm(self) -> float:
        return self.noise_sigma * chi_mean(self.inputs.d)

    def details(self) -> dict[str, Any]:
        n, sigma, epsilon_tilde = self.inputs.n, self.noise_sigma, self.epsilon_tilde
        expected = self.expected_noise_norm
        details = self.inputs.details()
        details.update(
            noise="gaussian",
            branch="no_extra_regularization" if self.Delta == 0.0 else "extra_regularization",
            epsilon_objective=self.epsilon_objective,
            epsilon_tilde=epsilon_tilde,
            Delta=self.Delta,
            effective_regularization=self.effective_regularization,
            jacobian_epsilon=self.jacobian_epsilon,
            chi2_quantile=self.chi2_quantile,
            sigma=sigma,
            noise_norm_threshold=(sigma * sigma * epsilon_tilde - 2.0) / 2.0,
            gradient_sensitivity=2.0,
            expected_noise_norm=expected,
            expected_coef_shift_bound=expected / (n * self.effective_regularization),
        )
        details.update(self.certificate.details())
        details.update(self.failure.details())
        return details

    def calibration(self) -> Calibration:
        eps, delta, d = self.inputs.epsilon, self.inputs.delta, self.inputs.d
        return Calibration(
            epsilon=eps,
            delta=delta,
            details=self.details(),
            expected_noise_norm=self.expected_noise_norm,
            composition=(
                f"single release, (ε = {eps:g}, δ = {delta:g}): Gaussian objective perturbation "
                f"(Rajkumar & Agarwal 2012, Alg. 4, tight Jacobian) with "
                f"σ* = {self.noise_sigma:.6g}; the privacy loss is "
                f"≤ ε̃ = {self.epsilon_tilde:.6g} (noise) + "
                f"{self.epsilon_objective - self.epsilon_tilde:.6g} "
                f"(Jacobian) + ε_r = {self.certificate.epsilon:.6g} (release) except when ‖η‖ "
                f"exceeds its χ²_{d} quantile, probability δ; {self.certificate.describe()}. "
                f"{certified_failure.failure_sentence(self.failure.details())}"
            ),
            plan=self,
        )


class GaussianObjectivePerturbation:
    """(ε, δ)-DP Gaussian objective perturbation (GOP)."""

    name = "gaussian_objective_perturbation"
    options = Options
    capabilities = CAPABILITIES

    def validate_params(self, problem: Problem) -> Problem:
        loss = check_common(problem, ())
        require_smooth_loss(loss, self.name)
        if not problem.delta > 0.0:
            raise PrivacyParameterError(
                f"{self.name} is (ε, δ)-DP and needs 0 < delta < 1; got delta = {problem.delta!r}"
            )
        return problem

    def calibrate(self, problem: Problem) -> Calibration:
        return self.plan(problem).calibration()

    def plan(self, problem: Problem) -> GaussianObjectivePlan:
        """The plan of a validated problem (:meth:`validate_params`), from public numbers."""
        loss = problem_loss(problem)
        n, d, lam, eps, delta, c = (
            problem.n,
            problem.d,
            problem.regularization,
            problem.epsilon,
            problem.delta,
            loss.c,
        )

        def public(budget: float) -> tuple[float, float]:
            extra, epsilon_tilde = compute_slack(budget, lam, n, c)
            sigma, _ = gop_sigma(d, epsilon_tilde, delta)
            return lam + extra, certified.gaussian_quantile(d, sigma) / n

        eps_objective, certificate = certified.split(eps, n=n, d=d, c=c, public=public)
        extra, epsilon_tilde = compute_slack(eps_objective, lam, n, c)
        sigma, q = gop_sigma(d, epsilon_tilde, delta)
        effective = lam + extra
        inputs = Inputs.of(problem)
        return GaussianObjectivePlan(
            inputs=inputs,
            noise="gaussian",
            beta=None,
            sigma=sigma,
            Delta=float(extra),
            effective_regularization=effective,
            epsilon_objective=eps_objective,
            jacobian_epsilon=math.log1p(c / (n * effective)),
            certificate=certificate,
            failure=certificate_failure(
                inputs, ("gaussian", None, sigma), certificate, mechanism=self.name
            ),
            epsilon_tilde=epsilon_tilde,
            chi2_quantile=q,
        )

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
        plan = require_plan(calibration, GaussianObjectivePlan)
        report(progress, 0.0)
        coef = certified_minimiser(X, y, plan, regularization=plan.inputs.regularization, rng=rng)
        model = release(coef)
        report(progress, 1.0)
        return model


MECHANISM = GaussianObjectivePerturbation()
