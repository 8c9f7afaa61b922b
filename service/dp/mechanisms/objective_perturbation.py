"""``objective_perturbation``: ε-DP by minimising a randomly tilted objective.

Chaudhuri, Monteleoni & Sarwate 2011 (CMS11) Alg. 2 / Thm 9, via seed 000 Alg. 2 and
seed 003 Alg. 1 (PLR). Requirements: l convex, twice differentiable (a.e. with the Huber
corollary of CMS11), |l′| ≤ 1, 0 ≤ l″ ≤ c; ‖x_i‖ ≤ 1; y_i ∈ {−1, +1}; λ > 0.

Calibration (public n, λ, ε, c; branch rule exactly as CMS11 Alg. 2):

    ε′ = ε − 2 ln(1 + c/(nλ))
    if ε′ > 0:  Δ = 0
    else:       Δ = c/(n(e^{ε/4} − 1)) − λ,  ε′ = ε/2
    β = ε′/2,   b ~ ν(b) ∝ exp(−β‖b‖)   (‖b‖ ~ Gamma(d, 2/ε′), direction uniform)
    release w_priv = argmin_w J(w) + bᵀw/n + (Δ/2)‖w‖²,  J(w) = (1/n)Σ l(y_i wᵀx_i) + (λ/2)‖w‖²

(e^{ε/4}: seed 000 misprints e^{c/(2Λ)} and seed 002 exp(c/4), DESIGN §3.)

Privacy argument (CMS11 Thm 9, restated). The first-order condition gives a bijection
b = b_D(w) = −n∇[J + (Δ/2)‖·‖²](w) = −Σ_i l′(y_i wᵀx_i) y_i x_i − n(λ + Δ) w, so the density
of w_priv is p_D(w) = ν(b_D(w)) |det ∇b_D(w)|. For neighbours differing in one record:

* noise part: ‖b_D(w) − b_D′(w)‖ = ‖l′(·)y x − l′(·)y′x′‖ ≤ 2, so
  ν(b_D)/ν(b_D′) ≤ e^{2β} = e^{ε′};
* Jacobian part: ∇b_D = −(A + E) with A ⪰ n(λ + Δ)I and E of rank ≤ 2 with
  eigenvalues bounded by c in absolute value, whence
  |det ∇b_D′|/|det ∇b_D| ≤ (1 + c/(n(λ + Δ)))² (CMS11 Lemma 10).

The privacy loss is at most ε′ + 2 ln(1 + c/(n(λ + Δ))). In the first branch this equals
ε′ + (ε − ε′) = ε. In the second, λ + Δ = c/(n(e^{ε/4} − 1)), so the Jacobian term is
2·ε/4 = ε/2 and the noise term ε′ = ε/2: again ε. Δ ≥ 0 there because ε′ ≤ 0 means
c/(nλ) ≥ e^{ε/2} − 1 > e^{ε/4} − 1.

Known weakness (seed 000 note §3.3): just above the threshold ε ≈ 2 ln(1 + c/(nλ)) the first
branch leaves a tiny ε′ and so huge noise; choosing λ ≥ c/(n(e^{ε/2} − 1)) avoids it. The
calibration reports ``epsilon_prime`` so a dry run shows it.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from service.dp import noise
from service.dp.base import Calibration, FittedModel, Problem, ProgressCallback
from service.dp.mechanisms._common import (
    base_details,
    check_common,
    release,
    report,
    require_smooth_loss,
)
from service.dp.solvers import minimize_erm

__all__ = ["MECHANISM", "ObjectivePerturbation"]


class ObjectivePerturbation:
    """ε-DP objective perturbation (CMS11 Alg. 2)."""

    name = "objective_perturbation"

    def validate_params(self, problem: Problem) -> Problem:
        loss = check_common(problem, ())
        require_smooth_loss(loss, self.name)
        return problem

    def calibrate(self, problem: Problem) -> Calibration:
        loss = check_common(problem, ())
        require_smooth_loss(loss, self.name)
        n, d, lam, eps, c = problem.n, problem.d, problem.regularization, problem.epsilon, loss.c
        epsilon_prime = eps - 2.0 * math.log1p(c / (n * lam))
        if epsilon_prime > 0.0:
            branch = "no_extra_regularization"
            extra = 0.0
        else:
            branch = "extra_regularization"
            # > 0 in exact arithmetic (see the docstring); max() only absorbs rounding, and a
            # larger ridge only tightens the Jacobian bound
            extra = max(0.0, c / (n * math.expm1(eps / 4.0)) - lam)
            epsilon_prime = eps / 2.0
        beta = epsilon_prime / 2.0
        effective = lam + extra
        jacobian_epsilon = 2.0 * math.log1p(c / (n * effective))
        expected = d / beta
        details = base_details(problem, loss)
        details.update(
            delta=0.0,
            noise="norm_exponential",
            branch=branch,
            epsilon_prime=epsilon_prime,
            Delta=extra,
            effective_regularization=effective,
            beta=beta,
            gradient_sensitivity=2.0,
            noise_epsilon=2.0 * beta,
            jacobian_epsilon=jacobian_epsilon,
            noise_norm_distribution=f"Gamma(shape={d}, scale={1.0 / beta!r})",
            expected_noise_norm=expected,
            expected_coef_shift_bound=expected / (n * effective),
        )
        return Calibration(
            epsilon=float(eps),
            delta=0.0,
            details=details,
            expected_noise_norm=expected,
            composition=(
                f"single release, ε = {eps:g} = noise part ε′ = {epsilon_prime:.6g} + Jacobian "
                f"part 2 ln(1 + c/(n(λ+Δ))) = {jacobian_epsilon:.6g} (Chaudhuri et al. 2011, "
                f"Alg. 2, {'Δ = 0' if extra == 0.0 else f'Δ = {extra:.6g}'}); no δ is spent"
            ),
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
        loss = check_common(problem, ())
        require_smooth_loss(loss, self.name)
        beta = float(calibration.details["beta"])
        extra = float(calibration.details["Delta"])
        report(progress, 0.0)
        b = noise.norm_exponential_vector(problem.d, beta=beta, rng=rng)
        coef = minimize_erm(
            X, y, loss, regularization=problem.regularization, linear=b, extra_regularization=extra
        )
        model = release(coef)
        report(progress, 1.0)
        return model


MECHANISM = ObjectivePerturbation()
