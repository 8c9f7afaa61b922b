"""Hypothesis transfer: an ε-DP fit on a target dataset regularised towards a source model.

Seed 003 (hypothesis transfer, the "H" of PST-H) and docs/design.md §3 ``transfer``. Given a public
source weight vector w₀ (a released model: post-processing) and a transfer strength η ≥ 0, the
target site releases the objective-perturbation minimiser of

    J(w) = (1/n) Σ_i l(y_i wᵀx_i) + (λ/2)‖w‖² + (η/2)‖w − w₀‖² + bᵀw/n + (Δ/2)‖w‖²,

with ε′, Δ and β = ε′/2 the ``objective_perturbation`` calibration for (n, λ + η, ε, c): the
transfer term's strong convexity η counts, because it is public
(:mod:`service.dp.mechanisms.objective_perturbation`). The solve uses ridge λ, the extra Δ and
the centre term (η/2)‖w − w₀‖². η = 0 is plain objective perturbation; a large η pulls the
solution towards w₀ and lowers the noise.

Privacy (CMS11 Thm 9 with one extra public term). The objective is (λ + Δ + η)-strongly
convex, so the minimiser is unique and the first-order condition gives the bijection

    b = b_D(w) = −Σ_i l′(y_i wᵀx_i) y_i x_i − n(λ + Δ + η) w + nη w₀.

* Noise part: the term nη w₀ − nη w depends on w and on the public w₀ only, so it cancels
  between neighbours D, D′ (one record replaced): ‖b_D(w) − b_D′(w)‖ ≤ 2 as before, and
  ν(b_D)/ν(b_D′) ≤ e^{2β} = e^{ε′}.
* Jacobian part: ∇b_D = −(M + uuᵀ) with M = Σ_{j≠i} l″_j x_j x_jᵀ + n(λ + Δ + η)I shared by
  D and D′ and ‖u‖² ≤ c; by the matrix determinant lemma (as in objective perturbation)
  |det ∇b_D′|/|det ∇b_D| ≤ 1 + c/(n(λ + η + Δ)).

The privacy loss is therefore at most ε′ + ln(1 + c/(n(λ + η + Δ))) = ε, exactly the bound
the calibration (run with regularisation λ + η) solved for: the released w is ε-DP for the
target dataset. w₀ must not depend on the target data through anything but released (DP)
models; what the source models themselves cost their own datasets is composed by the caller
(sequentially if a source model was fitted on the target dataset).

PST-H, the same transfer with feature groups (the ``transfer`` method's ``feature_groups``), is
:mod:`service.dp.multisite.stacked_transfer`.

Release in floating point (issue 19 §1): the argument above is about the exact minimiser
for a real b; PrivFit runs it at ε₁ = ε − ε_r (``epsilon_objective``) and releases the
certified minimiser of :mod:`service.dp.optimize.certified` (``certified_release``): (ε₁ + ε_r)-DP
for the released doubles.
The public centre adds η‖w₀‖ to the certificate's bound L
(``objective_perturbation.with_centre``).

Multi-class and numeric labels (issue 29; docs/design.md, "Studies of multi-class and numeric
labels")
------------------------------------------------------------------------------------------
:func:`transfer_fit` with ``task="multiclass"`` releases the K × d model

    C = argmin_C (1/n) Σ_i ℓ(C; x_i, y_i) + (λ/2)‖C‖_F² + (η/2)‖C − C₀‖_F² + ⟨B, C⟩/n
                 + (Δ/2)‖C‖_F²,

ℓ the multinomial loss (:mod:`service.dp.optimize.multinomial`), C₀ the entry-by-entry average
of the study's K × d source models (class k is row k of every model, the study's declared
order) and b = vec B ∝ exp(−β‖b‖) in ℝ^{dK}; with ``task="regression"`` it releases the Huber
residual fit (:mod:`service.dp.core.regression_losses`, width h, y ∈ [−1, 1] in the study's
bounds' units, as the sources' coefficients are)

    w = argmin_w (1/n) Σ_i ℓ_h(y_i − wᵀx_i) + (λ/2)‖w‖² + (η/2)‖w − u‖² + bᵀw/n + (Δ/2)‖w‖²,

u the average of the source vectors. Why the binary argument extends: (η/2)‖v − v₀‖² =
(η/2)‖v‖² − η⟨v, v₀⟩ + (η/2)‖v₀‖². Its Hessian is ηI, exactly a ridge's, and its gradient's
data part is nothing: −ηv₀ is a function of released models (post-processing) and of public
η. The first-order condition is the bijection

    multi-class: b = −Σ_i vec((p_i − e_{y_i})x_iᵀ) − n(λ + Δ + η) vec C + nη vec C₀,
    regression:  b = Σ_i ψ(y_i − wᵀx_i) x_i − n(λ + Δ + η) w + nη u   (ψ = clip(·, −h, h)),

and for replace-one neighbours D, D′ (record i replaced):

* noise part: the terms in C (or w) and C₀ (or u) are shared by D and D′ and cancel, so
  ‖b_D − b_D′‖ is the replaced records' gradient difference, as without the transfer term:
  ≤ 2√2 (‖p − e_y‖‖x‖ ≤ √2 each) for K classes, so β = ε′/(2√2); ≤ 2h (|ψ| ≤ h) for the Huber
  residual loss, so β = ε′/(2h);
* Jacobian part: ∇b_D = −(M + E_i) with M = Σ_{j≠i} ∇²ℓ_j + n(λ + Δ + η)I shared by D and
  D′, now ⪰ n(λ + Δ + η)I. K classes: E_i = (diag(p_i) − p_ip_iᵀ) ⊗ x_ix_iᵀ has rank ≤ K − 1
  and trace ≤ 1 − 1/K, so the determinant ratio is ≤ (1 + 1/(Kn(λ + η + Δ)))^{K−1} (AM–GM
  over its nonzero eigenvalues, :mod:`service.dp.mechanisms.multiclass`): ε_J =
  (K − 1)·ln(1 + 1/(Kn(λ + η + Δ))). Regression: E_i = ℓ″_h(r_i)x_ix_iᵀ, rank one with
  ‖·‖ ≤ c = 1, so ε_J = ln(1 + 1/(n(λ + η + Δ))).

So the release is ε′ + ε_J = ε₁-DP, exactly the objective-perturbation calibration of the
task run with regularisation λ + η (:func:`transfer_calibration`): η only lowers ε_J (and
Δ). What the binary derivation assumes, and what changes:

* the objective is strongly convex, so the bijection holds: yes, (λ + Δ + η) in ℝ^{dK} or ℝ^d;
* the released-noise law: the same norm-exponential law, in dimension dK for K classes, with
  the task's gradient sensitivity (2√2, 2h) in place of 2: β changes with the task, not with
  the centre;
* the certified release (issue 19 §1, :mod:`service.dp.optimize.certified`): the certificate
  proves ‖∇J̃_b(Ĉ)‖ ≤ τ for the *centred* objective (ridge λ + Δ + η, linear term
  b/n − η vec C₀: :func:`~service.dp.optimize.multinomial.gradient_bound` and
  :func:`~service.dp.optimize.regression.regression_gradient_bound` with ``centre``), so the
  certified distance τ/(λ + Δ + η) and the release noise β_r = ε_r/(2r) hold as for the binary
  transfer; the public bound L of the gradient's terms grows by η‖C₀‖_F (η‖u‖), which only
  enlarges τ and the release noise at the same ε_r;
* when the certificate can fail: the task's floor (multinomial: s = √2 + q(1 + ρ_b) + η‖C₀‖;
  regression: s = h + q(1 + ρ_b) + η‖u‖) with the centre's roundings, recorded and not
  refused (the centre is known only when the fit runs, after the charge), as for binary;
* the source: C₀ (u) must depend on the target's rows only through released models — the
  same post-processing condition; its cost is its own datasets'.

PST-H (feature groups) stays binary: its high level fits sigmoid meta-features σ(u_kᵀx_(k)),
probabilities of a binary label, and K classes would need K softmax probabilities per group
and a multi-class high level whose stacked model PrivFit does not release.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from service.dp import as_charged, make_problem
from service.dp.core.base import Calibration, FitResult, FittedModel, Problem, ProgressCallback
from service.dp.core.regression_losses import RegressionHuberLoss
from service.dp.core.tasks import Task
from service.dp.core.validation import PrivacyParameterError, validate_design
from service.dp.mechanisms import multiclass
from service.dp.mechanisms._common import noise_enclosure, release, report, require_plan
from service.dp.mechanisms.objective_perturbation import MECHANISM as OBJECTIVE_PERTURBATION
from service.dp.mechanisms.objective_perturbation import (
    ObjectivePerturbationPlan,
    run_certified,
    with_centre,
)
from service.dp.noise import lattice
from service.dp.noise.rounding import norm_up
from service.dp.optimize import certified_failure, multinomial, regression

__all__ = [
    "MAX_TRANSFER_STRENGTH",
    "check_transfer_strength",
    "transfer_calibration",
    "transfer_fit",
]

#: Largest accepted η (beyond it the fit is the source model up to rounding).
MAX_TRANSFER_STRENGTH = 1e6


def transfer_calibration(
    n: int,
    d: int,
    *,
    epsilon: float,
    transfer_strength: float,
    regularization: float,
    loss: str = "logistic",
    task: Task = "binary",
    n_classes: int = 2,
    **params: Any,
) -> Calibration:
    """The public calibration of :func:`transfer_fit` before its centre is known (the dry run
    and what is charged): ``objective_perturbation`` for the task at strong convexity λ + η
    (module doc), ε in total, no δ; ``params`` the loss's (``h``). The record states λ, η and
    λ + η. Raises :class:`PrivacyParameterError` for bad parameters."""
    eta = check_transfer_strength(transfer_strength)
    problem = _problem(
        n,
        d,
        epsilon=epsilon,
        loss=loss,
        regularization=regularization,
        task=task,
        n_classes=n_classes,
        params=params,
    )
    return _calibrated(problem, eta, epsilon)


def _calibrated(problem: Problem, eta: float, epsilon: float) -> Calibration:
    """:func:`transfer_calibration` of an already built ``problem`` (η already checked)."""
    # the calibration counts the public transfer term's strong convexity: λ + η (module doc)
    calibration = as_charged(
        OBJECTIVE_PERTURBATION.calibrate(
            replace(problem, regularization=problem.regularization + eta)
        ),
        problem,
        epsilon,
        0.0,
    )
    details = dict(calibration.details)
    details.update(
        regularization=float(problem.regularization),
        calibration_strong_convexity=float(problem.regularization + eta),
        transfer_strength=eta,
    )
    return replace(calibration, details=details)


def _problem(
    n: int,
    d: int,
    *,
    epsilon: float,
    loss: str,
    regularization: float,
    task: Task,
    n_classes: int,
    params: dict[str, Any],
) -> Problem:
    """The objective-perturbation :class:`Problem` (ε, no δ) the transfer fit and its
    calibration share; raises :class:`PrivacyParameterError` for bad parameters."""
    _, problem = make_problem(
        OBJECTIVE_PERTURBATION.name,
        n=n,
        d=d,
        epsilon=epsilon,
        delta=0.0,
        loss=loss,
        regularization=regularization,
        params=params,
        task=task,
        n_classes=n_classes,
    )
    if problem.params.get("projection_dim") is not None:
        raise PrivacyParameterError(
            "projection_dim is not offered for transfer fits: the source model (the public "
            "centre) lives in the original d features, not in the projection's k"
        )
    return problem


def _centred_task_plan(
    calibration: Calibration, centre: NDArray[np.float64], eta: float
) -> Calibration:
    """The multi-class or regression calibration with the public centre's term: the
    certificate's bound L grows by η‖C₀‖ (same ε_r), and when it can fail is recomputed
    with the centre (recorded, not refused: module doc)."""
    plan = calibration.plan
    shift = eta * norm_up(np.asarray(centre, dtype=np.float64).ravel())
    if isinstance(plan, multiclass.MulticlassObjectivePlan):
        certificate = plan.certificate.with_linear_bound(plan.certificate.linear_bound + shift)
        failure = multinomial.failure_plan(
            n=plan.inputs.n,
            d=plan.inputs.d,
            n_classes=plan.inputs.n_classes,
            beta=plan.noise_beta,
            certificate=certificate,
            mechanism="transfer",
            check=False,
            centre_norm=shift,
        )
        centred: ObjectivePerturbationPlan | multiclass.MulticlassObjectivePlan = replace(
            plan, certificate=certificate, failure=failure
        )
    else:
        op = require_plan(calibration, ObjectivePerturbationPlan)
        loss = op.inputs.loss_function()
        assert isinstance(loss, RegressionHuberLoss)  # the regression plan refuses the rest
        certificate = op.certificate.with_linear_bound(op.certificate.linear_bound + shift)
        failure = regression.failure_plan(
            n=op.inputs.n,
            d=op.inputs.d,
            loss=loss,
            strong_convexity=certificate.strong_convexity,
            tolerance=certificate.tolerance,
            log10_tail=partial(
                certified_failure.norm_exponential_tail_log10, op.inputs.d, op.noise_beta
            ),
            centre_norm=shift,
        )
        centred = replace(op, certificate=certificate, failure=failure)
    details = dict(calibration.details)
    details.update(centred.certificate.details())
    details.update(centred.failure.details())
    return replace(calibration, details=details, plan=centred)


def _run_task(
    X: NDArray[np.float64],
    y: NDArray[np.float64],
    calibration: Calibration,
    *,
    regularization: float,
    centre: NDArray[np.float64],
    eta: float,
    rng: np.random.Generator | None,
) -> FittedModel:
    """The certified release of the centred multi-class or regression objective (module doc):
    the plan's noise b, its Δ, ridge λ and the centre term η."""
    plan = calibration.plan
    if isinstance(plan, multiclass.MulticlassObjectivePlan):
        b = lattice.norm_exponential_enclosure(plan.dimension, beta=plan.noise_beta, rng=rng)
        coef = multinomial.release_minimiser(
            X,
            y,
            plan.inputs.n_classes,
            regularization=regularization,
            extra_regularization=plan.Delta,
            noise=b,
            release=plan.certificate,
            rng=rng,
            centre=centre,
            centre_weight=eta,
        )
        return multiclass.release(coef)
    op = require_plan(calibration, ObjectivePerturbationPlan)
    loss = op.inputs.loss_function()
    assert isinstance(loss, RegressionHuberLoss)
    w = regression.release_regression_minimiser(
        X,
        y,
        loss,
        regularization=regularization,
        extra_regularization=op.Delta,
        noise=noise_enclosure(op, rng),
        release=op.certificate,
        rng=rng,
        centre=centre,
        centre_weight=eta,
    )
    return release(w)


def _source(source: ArrayLike, d: int, task: Task, k: int) -> NDArray[np.float64]:
    """The source as the model's shape, (K, d) or (d,); 422-style error otherwise."""
    w0 = np.asarray(source, dtype=np.float64)
    if task == "multiclass":
        if w0.shape != (k, d) or not np.all(np.isfinite(w0)):
            raise PrivacyParameterError(
                f"the source model must have {k} × {d} finite weights, one row per class"
            )
        return w0
    w0 = w0.reshape(-1)
    if w0.size != d or not np.all(np.isfinite(w0)):
        raise PrivacyParameterError(
            f"the source model must have {d} finite weights, one per feature"
        )
    return w0


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
    task: Task = "binary",
    n_classes: int = 2,
    **params: Any,
) -> FitResult:
    """ε-DP objective perturbation on (X, y) centred on ``source`` with weight η (module doc):
    binary (the source a d-vector), ``task="multiclass"`` (labels 0…K − 1, the source K × d,
    multinomial loss) or ``task="regression"`` (y ∈ [−1, 1], the Huber residual loss,
    ``params`` may give its width ``h``).

    Raises :class:`PrivacyParameterError` (a ``ValueError``) for bad parameters or data
    (source of the wrong shape or not finite, η negative, non-finite or above
    :data:`MAX_TRANSFER_STRENGTH`), and ``ConvergenceError`` when the solver does not reach
    the exact minimiser.
    """
    Xf, yf = validate_design(X, y, task, n_classes)
    n, d = int(Xf.shape[0]), int(Xf.shape[1])
    eta = check_transfer_strength(transfer_strength)
    problem = _problem(
        n,
        d,
        epsilon=epsilon,
        loss=loss,
        regularization=regularization,
        task=task,
        n_classes=n_classes,
        params=params,
    )
    w0 = _source(source, d, problem.task, problem.n_classes)
    calibration = _calibrated(problem, eta, epsilon)
    report(progress, 0.0)
    model: FittedModel
    if problem.task == "binary":
        # the public centre enlarges the certificate's bound L by η‖w₀‖
        # (service.dp.optimize.certified)
        calibration = with_centre(calibration, w0, eta)
        coef = run_certified(Xf, yf, problem, calibration, rng=rng, centre=w0, centre_weight=eta)
        model = release(coef)
        what = "w₀"
    else:
        calibration = _centred_task_plan(calibration, w0, eta)
        model = _run_task(
            Xf,
            yf,
            calibration,
            regularization=problem.regularization,
            centre=w0,
            eta=eta,
            rng=rng,
        )
        what = "C₀ (K × d)" if problem.task == "multiclass" else "u"
    report(progress, 1.0)
    details = dict(calibration.details)
    details.update(source_norm=float(np.linalg.norm(w0)))
    return FitResult(
        mechanism="transfer",
        model=model,
        epsilon=calibration.epsilon,
        delta=0.0,
        details=details,
        composition=(
            calibration.composition
            + f"; calibrated at strong convexity λ + η = {problem.regularization + eta:g}: the "
            f"regulariser (η/2)‖w − {what}‖² with η = {eta:g} and a public source {what} adds "
            "strong convexity ηI and a data-independent term"
        ),
        expected_noise_norm=calibration.expected_noise_norm,
        seeded=rng is not None,
    )


def check_transfer_strength(transfer_strength: float) -> float:
    """η as a float, checked finite and in [0, MAX_TRANSFER_STRENGTH] (plain and PST-H transfer)."""
    eta = float(transfer_strength)
    if not math.isfinite(eta) or eta < 0 or eta > MAX_TRANSFER_STRENGTH:
        raise PrivacyParameterError(
            f"transfer_strength must be a finite number in [0, {MAX_TRANSFER_STRENGTH:g}]"
        )
    return eta
