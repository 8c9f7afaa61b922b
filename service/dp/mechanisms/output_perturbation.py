"""``output_perturbation``: ε-DP by adding ν(b) ∝ exp(−β‖b‖) noise to the exact minimiser.

Chaudhuri, Monteleoni & Sarwate 2011 (CMS11) Alg. 1 / Thm 6, via seed 000 Alg. 1.

Objective (public n, λ): J_D(w) = (1/n) Σ_i l(y_i wᵀx_i) + (λ/2)‖w‖², with l convex and
differentiable, |l'| ≤ 1, ‖x_i‖ ≤ 1, y_i ∈ {−1, +1}. Release w_priv = ŵ_D + b with
β = ε/S, S = 2/(nλ) + 2τ/λ (below).

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

Solver tolerance (accounted). The solver returns a ŵ_D with ‖∇J_D(ŵ_D)‖ ≤ τ
(τ = ``DEFAULT_TOLERANCE`` = 1e-10 for this objective, whose linear term is zero; it raises
otherwise, :mod:`service.dp.solvers`). For λ-strongly convex J_D,
λ‖ŵ_D − w*_D‖² ≤ ⟨∇J_D(ŵ_D) − ∇J_D(w*_D), ŵ_D − w*_D⟩ ≤ τ‖ŵ_D − w*_D‖, so
‖ŵ_D − w*_D‖ ≤ τ/λ, and by the triangle inequality the released centre ŵ moves by at most

    S = 2/(nλ) + 2τ/λ

between neighbours. β = ε/S (= nλε/2 up to the factor 1/(1 + nτ)), so the guarantee holds for
the model actually computed, not only for the exact minimiser.

Release in floating point (issue 19 §1). What leaves the service is the grid point
γ·round((ŵ + b)/γ), γ = 2⁻³², clamped to ±2²⁰, with b's law sampled *exactly* (uniform bits
drawn lazily, rigorous interval arithmetic: :mod:`service.dp.lattice`). It is post-processing
of the continuous ŵ + b, so the bound above holds for the released doubles with no δ and no
ε adjustment; every grid point is reachable from every dataset.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from service.dp import lattice
from service.dp.base import Calibration, FittedModel, Problem, ProgressCallback
from service.dp.mechanisms._common import base_details, check_common, release, report
from service.dp.solvers import DEFAULT_TOLERANCE, minimize_erm

__all__ = ["MECHANISM", "OutputPerturbation"]


class OutputPerturbation:
    """ε-DP output perturbation (CMS11 Alg. 1) with sensitivity 2/(nλ) + 2τ/λ."""

    name = "output_perturbation"

    def validate_params(self, problem: Problem) -> Problem:
        check_common(problem, ())
        return problem

    def calibrate(self, problem: Problem) -> Calibration:
        loss = check_common(problem, ())
        n, lam, eps, d = problem.n, problem.regularization, problem.epsilon, problem.d
        exact = 2.0 / (n * lam)
        solver_slack = 2.0 * DEFAULT_TOLERANCE / lam
        sensitivity = exact + solver_slack
        beta = eps / sensitivity
        expected = d / beta
        details = base_details(problem, loss)
        details.update(
            delta=0.0,
            noise="norm_exponential",
            sensitivity=sensitivity,
            sensitivity_exact_minimiser=exact,
            solver_tolerance=DEFAULT_TOLERANCE,
            beta=beta,
            noise_norm_distribution=f"Gamma(shape={d}, scale={1.0 / beta!r})",
            expected_noise_norm=expected,
            release=lattice.RELEASE_NOTE,
        )
        return Calibration(
            epsilon=float(eps),
            delta=0.0,
            details=details,
            expected_noise_norm=expected,
            composition=(
                f"single release, ε = {eps:g}: noise ∝ exp(−β‖b‖) with β = ε/S = {beta:.6g} "
                f"added to the minimiser computed to ‖∇J‖ ≤ τ = {DEFAULT_TOLERANCE:g}, whose L2 "
                f"sensitivity is S = 2/(nλ) + 2τ/λ = {sensitivity:.6g} (Chaudhuri et al. 2011, "
                f"Thm 6, plus twice the distance τ/λ to the exact minimiser); no δ is spent"
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
        coef = minimize_erm(
            X, y, loss, regularization=problem.regularization, tol=DEFAULT_TOLERANCE
        )
        report(progress, 0.9)
        model = release(lattice.norm_exponential_release(coef, beta=beta, rng=rng))
        report(progress, 1.0)
        return model


MECHANISM = OutputPerturbation()
