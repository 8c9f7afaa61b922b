"""``output_perturbation``: ε-DP by adding ν(b) ∝ exp(−β‖b‖) noise to the exact minimiser.

Chaudhuri, Monteleoni & Sarwate 2011 (CMS11) Alg. 1 / Thm 6, via seed 000 Alg. 1.

Objective (public n, λ): J_D(w) = (1/n) Σ_i l(y_i wᵀx_i) + (λ/2)‖w‖², with l convex and
differentiable, |l'| ≤ 1, ‖x_i‖ ≤ 1, y_i ∈ {−1, +1}. Release w_priv = w*_D + b with
β = nλε/2.

Sensitivity (derived; CMS11 Cor. 8). Let D, D′ differ in record i, so
J_D′ = J_D + G with G(w) = (1/n)[l(y′wᵀx′) − l(y wᵀx)] and
‖∇G(w)‖ = (1/n)‖l′(·)y′x′ − l′(·)y x‖ ≤ 2/n. Both objectives are λ-strongly convex. From
∇J_D(w*_D) = 0 and ∇J_D(w*_D′) = −∇G(w*_D′),
λ‖w*_D − w*_D′‖² ≤ ⟨∇J_D(w*_D′) − ∇J_D(w*_D), w*_D′ − w*_D⟩ ≤ (2/n)‖w*_D − w*_D′‖,
so ‖w*_D − w*_D′‖ ≤ 2/(nλ). (Seed 001's code uses 2C/N with sklearn's C = 1/(nλ), i.e.
2/(n²λ): n times too little noise. Not repeated here.)

Privacy. The density of w_priv at v is ∝ exp(−β‖v − w*_D‖), so by the triangle inequality
p_D(v)/p_D′(v) ≤ exp(β‖w*_D − w*_D′‖) ≤ exp(2β/(nλ)) = e^ε. The noise is sampled as
‖b‖ ~ Gamma(d, 1/β) with a uniform direction; E‖b‖ = d/β = 2d/(nλε).

Convergence: the sensitivity bound is about the exact minimiser; the solver stops at
‖∇J‖ ≤ 1e-10·(scale) and raises otherwise (see :mod:`service.dp.solvers`).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from service.dp import noise
from service.dp.base import Calibration, FittedModel, Problem, ProgressCallback
from service.dp.mechanisms._common import base_details, check_common, release, report
from service.dp.solvers import minimize_erm

__all__ = ["MECHANISM", "OutputPerturbation"]


class OutputPerturbation:
    """ε-DP output perturbation (CMS11 Alg. 1) with sensitivity 2/(nλ)."""

    name = "output_perturbation"

    def validate_params(self, problem: Problem) -> Problem:
        check_common(problem, ())
        return problem

    def calibrate(self, problem: Problem) -> Calibration:
        loss = check_common(problem, ())
        n, lam, eps, d = problem.n, problem.regularization, problem.epsilon, problem.d
        sensitivity = 2.0 / (n * lam)
        beta = n * lam * eps / 2.0
        expected = d / beta
        details = base_details(problem, loss)
        details.update(
            delta=0.0,
            noise="norm_exponential",
            sensitivity=sensitivity,
            beta=beta,
            noise_norm_distribution=f"Gamma(shape={d}, scale={1.0 / beta!r})",
            expected_noise_norm=expected,
        )
        return Calibration(
            epsilon=float(eps),
            delta=0.0,
            details=details,
            expected_noise_norm=expected,
            composition=(
                f"single release, ε = {eps:g}: noise ∝ exp(−β‖b‖) with β = nλε/2 = {beta:.6g} "
                f"added to the exact minimiser, whose L2 sensitivity is 2/(nλ) = "
                f"{sensitivity:.6g} (Chaudhuri et al. 2011, Thm 6); no δ is spent"
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
        beta = float(calibration.details["beta"])
        report(progress, 0.0)
        coef = minimize_erm(X, y, loss, regularization=problem.regularization)
        report(progress, 0.9)
        b = noise.norm_exponential_vector(problem.d, beta=beta, rng=rng)
        model = release(coef + b)
        report(progress, 1.0)
        return model


MECHANISM = OutputPerturbation()
