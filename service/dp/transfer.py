"""Hypothesis transfer: an ε-DP fit on a target dataset regularised towards a source model.

Seed 003 (hypothesis transfer, the "H" of PST-H) and DESIGN §3 ``transfer``. Given a public
source weight vector w₀ (a released model: post-processing) and a transfer strength η ≥ 0, the
target site releases the objective-perturbation minimiser of

    J(w) = (1/n) Σ_i l(y_i wᵀx_i) + (λ/2)‖w‖² + (η/2)‖w − w₀‖² + bᵀw/n + (Δ/2)‖w‖²,

with ε′, Δ and β = ε′/2 calibrated exactly as ``objective_perturbation`` calibrates them for
(n, λ, ε, c), i.e. *without* counting η (:mod:`service.dp.mechanisms.objective_perturbation`).
η = 0 is plain objective perturbation; a large η pulls the solution towards w₀.

Privacy (CMS11 Thm 9 with one extra public term). The objective is (λ + Δ + η)-strongly
convex, so the minimiser is unique and the first-order condition gives the bijection

    b = b_D(w) = −Σ_i l′(y_i wᵀx_i) y_i x_i − n(λ + Δ + η) w + nη w₀.

* Noise part: the term nη w₀ − nη w depends on w and on the public w₀ only, so it cancels
  between neighbours D, D′ (one record replaced): ‖b_D(w) − b_D′(w)‖ ≤ 2 as before, and
  ν(b_D)/ν(b_D′) ≤ e^{2β} = e^{ε′}.
* Jacobian part: ∇b_D = −(A + E) with A = Σ_i l″ x_i x_iᵀ + n(λ + Δ + η)I ⪰ n(λ + Δ + η)I and
  E of rank ≤ 2 with |eigenvalues| ≤ c, so |det ∇b_D′|/|det ∇b_D| ≤ (1 + c/(n(λ+Δ+η)))²
  ≤ (1 + c/(n(λ+Δ)))² (CMS11 Lemma 10; η ≥ 0 only helps).

The privacy loss is therefore at most ε′ + 2 ln(1 + c/(n(λ + Δ))) = ε, exactly the bound the
calibration solved for: the released w is ε-DP for the target dataset. w₀ must not depend on
the target data through anything but released (DP) models; what the source models themselves
cost their own datasets is composed by the caller (sequentially if a source model was fitted
on the target dataset). Calibrating with λ instead of λ + η is conservative (it may add more
noise than needed for large η), never less private.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from service.dp import make_problem, noise
from service.dp.base import FitResult, ProgressCallback
from service.dp.mechanisms._common import problem_loss, release, report
from service.dp.solvers import minimize_erm
from service.dp.validation import PrivacyParameterError, validate_design

__all__ = ["MAX_TRANSFER_STRENGTH", "transfer_fit"]

#: Largest accepted η (beyond it the fit is the source model up to rounding).
MAX_TRANSFER_STRENGTH = 1e6


def transfer_fit(
    X: ArrayLike,
    y: ArrayLike,
    source: ArrayLike,
    *,
    epsilon: float,
    transfer_strength: float,
    regularization: float,
    loss: str = "logistic",
    rng: np.random.Generator | None = None,
    progress: ProgressCallback | None = None,
) -> FitResult:
    """ε-DP objective perturbation on (X, y) centred on ``source`` with weight η (module doc).

    Raises :class:`PrivacyParameterError` (a ``ValueError``) for bad parameters or data
    (source of the wrong length or not finite, η negative, non-finite or above
    :data:`MAX_TRANSFER_STRENGTH`), and ``ConvergenceError`` when the solver does not reach
    the exact minimiser.
    """
    Xf, yf = validate_design(X, y)
    eta = float(transfer_strength)
    if not math.isfinite(eta) or eta < 0 or eta > MAX_TRANSFER_STRENGTH:
        raise PrivacyParameterError(
            f"transfer_strength must be a finite number in [0, {MAX_TRANSFER_STRENGTH:g}]"
        )
    w0 = np.asarray(source, dtype=np.float64).reshape(-1)
    if w0.size != Xf.shape[1] or not np.all(np.isfinite(w0)):
        raise PrivacyParameterError(
            f"the source model must have {Xf.shape[1]} finite weights, one per feature"
        )
    mech, problem = make_problem(
        "objective_perturbation",
        n=int(Xf.shape[0]),
        d=int(Xf.shape[1]),
        epsilon=epsilon,
        delta=0.0,
        loss=loss,
        regularization=regularization,
        params={},
    )
    calibration = mech.calibrate(problem)
    details = dict(calibration.details)
    beta = float(details["beta"])
    extra = float(details["Delta"])
    report(progress, 0.0)
    b = noise.norm_exponential_vector(problem.d, beta=beta, rng=rng)
    coef = minimize_erm(
        Xf,
        yf,
        problem_loss(problem),
        regularization=problem.regularization,
        linear=b,
        extra_regularization=extra,
        centre=w0,
        centre_weight=eta,
    )
    model = release(coef)
    report(progress, 1.0)
    details.update(transfer_strength=eta, source_norm=float(np.linalg.norm(w0)))
    return FitResult(
        mechanism="transfer",
        model=model,
        epsilon=calibration.epsilon,
        delta=0.0,
        details=details,
        composition=(
            calibration.composition
            + f"; the regulariser (η/2)‖w − w₀‖² with η = {eta:g} and a public source w₀ "
            "only adds strong convexity and a data-independent term, so the same bound holds"
        ),
        expected_noise_norm=calibration.expected_noise_norm,
        seeded=rng is not None,
    )
