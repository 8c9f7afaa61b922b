"""Exact and certified minimisers of the regression objectives (residual losses).

The objective, for rows ‖x_i‖ ≤ 1, labels y_i ∈ [−1, 1] and a residual loss ℓ
(:mod:`service.dp.core.regression_losses`, ψ = ℓ′ 1-Lipschitz):

    J̃(w) = (1/n) Σ_i ℓ(y_i − x_iᵀw) + (μ/2)‖w‖² + gᵀw,   μ = λ + Δ,  g = b/n,

μ-strongly convex; ∇J̃(w) = −(1/n)Σ ψ(r_i)x_i + μw + g with r_i = y_i − x_iᵀw. The margin
solvers of :mod:`service.dp.optimize.solvers` assume l(y·wᵀx); this module is their counterpart
for residuals, with the same certificate (:mod:`service.dp.optimize.certified`: a release only
when a *proved* bound on ‖∇J̃_b(ŵ)‖ for the real b is ≤ τ):

* ``squared``: the closed form (XᵀX/n + μI)w = Xᵀy/n − g (Cholesky);
* ``huber``: semismooth Newton from the squared solution, H = (1/n)Σ_{|r_i|<h} x_i x_iᵀ + μI,
  Armijo backtracking (near the optimum, a step that lowers ‖∇J̃‖ is accepted); the active set
  stabilises and the last step is exact for the quadratic it then is.

Certified gradient (:func:`regression_gradient_sum`). ẑ_i = fl(x_iᵀw) is within
e_z = γ_d‖w‖ of x_iᵀw, r̂_i = fl(y_i − ẑ_i) within u|r̂_i| of y_i − ẑ_i (one subtraction),
ψ̂_i = clip(r̂_i, −h, h) is exact given r̂_i, and ψ is 1-Lipschitz, so
|ψ̂_i − ψ(r_i)| ≤ e_z + u|r̂_i| =: e_i; the blocked sum adds what
:func:`~service.dp.optimize.certified.loss_gradient_sum` adds (γ_B Σ|ψ̂_i| and the compensated
combination of the blocks). The rest of the bound (μw, b/n and their roundings) is
:func:`~service.dp.optimize.certified.gradient_bound`'s own tail.

When a certificate can fail (:func:`certificate_floor`, :func:`failure_plan`): as
:func:`service.dp.optimize.certified_failure.certificate_floor`, with |ψ| ≤ L = h in place of
|l′| ≤ 1 (so ‖θ‖ ≤ (L + q)/μ) and c = 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Final

import numpy as np
from numpy.typing import NDArray
from scipy import linalg

from service.dp.core.regression_losses import RegressionHuberLoss, RegressionLoss
from service.dp.noise import lattice
from service.dp.noise.rounding import KAPPA, UNIT_ROUNDOFF, gamma, norm_up
from service.dp.optimize import certified, certified_failure
from service.dp.optimize.certified import BLOCK_ROWS, _bound_from_loss_sum
from service.dp.optimize.solvers import ConvergenceError

__all__ = [
    "certificate_floor",
    "certified_regression_erm",
    "failure_plan",
    "minimize_regression",
    "regression_gradient",
    "regression_gradient_bound",
    "regression_gradient_sum",
    "release_regression_minimiser",
]

FloatArray = NDArray[np.float64]

_ARMIJO: Final[float] = 1e-4
_MAX_ITER: Final[int] = 100
_TINY: Final[float] = 2.0**-1074
_SAFE: Final[float] = 1.0 + 2.0**-30


def _bound(loss: RegressionLoss) -> float:
    """L, the bound on |ψ| the certificate and its floor use (finite for Huber only)."""
    if not isinstance(loss, RegressionHuberLoss):
        raise ValueError(f"no certified release for the regression loss {loss.name!r}")
    return float(loss.h)


def regression_gradient(
    X: FloatArray, y: FloatArray, loss: RegressionLoss, w: FloatArray, mu: float, g: FloatArray
) -> FloatArray:
    """∇J̃(w) = −(1/n)Xᵀψ(y − Xw) + μw + g, in float64."""
    psi = loss.derivative(y - X @ w)
    grad: FloatArray = -(X.T @ psi) / X.shape[0] + mu * w + g
    return grad


def _objective(
    X: FloatArray, y: FloatArray, loss: RegressionLoss, w: FloatArray, mu: float, g: FloatArray
) -> float:
    return float(loss.value(y - X @ w).mean()) + 0.5 * mu * float(w @ w) + float(g @ w)


def _ridge(X: FloatArray, y: FloatArray, mu: float, g: FloatArray) -> FloatArray:
    n, d = X.shape
    system = X.T @ X / n + mu * np.eye(d)
    return np.asarray(
        linalg.cho_solve(linalg.cho_factor(system), X.T @ y / n - g), dtype=np.float64
    )


def minimize_regression(
    X: FloatArray,
    y: FloatArray,
    loss: RegressionLoss,
    *,
    regularization: float,
    linear: FloatArray | None = None,
    extra_regularization: float = 0.0,
    tol: float = 1e-10,
    initial: FloatArray | None = None,
) -> FloatArray:
    """argmin J̃ (module docstring) to ‖∇J̃‖ ≤ tol·(1 + ‖g‖), g = ``linear``/n;
    :class:`ConvergenceError` when Newton stalls above it."""
    n, d = X.shape
    mu = regularization + extra_regularization
    g = np.zeros(d) if linear is None else np.asarray(linear, dtype=np.float64) / n
    target = tol * (1.0 + float(np.linalg.norm(g)))
    w = _ridge(X, y, mu, g) if initial is None else np.array(initial, dtype=np.float64)
    if not isinstance(loss, RegressionHuberLoss):
        for _ in range(3):  # the closed form, refined: the test is the computed gradient
            grad = regression_gradient(X, y, loss, w, mu, g)
            if float(np.linalg.norm(grad)) <= target:
                return w
            system = X.T @ X / n + mu * np.eye(d)
            w = w - linalg.cho_solve(linalg.cho_factor(system), grad)
        raise ConvergenceError("the regression minimiser did not reach its tolerance")
    h = float(loss.h)
    for _ in range(_MAX_ITER):
        r = y - X @ w
        grad = -(X.T @ np.clip(r, -h, h)) / n + mu * w + g
        norm = float(np.linalg.norm(grad))
        if norm <= target:
            return w
        active = np.abs(r) < h
        Xa = X[active]
        hessian = Xa.T @ Xa / n + mu * np.eye(d)
        step = -linalg.cho_solve(linalg.cho_factor(hessian), grad)
        w = _line_search(X, y, loss, w, step, mu, g, grad, norm)
    raise ConvergenceError("the regression minimiser did not reach its tolerance")


def _line_search(
    X: FloatArray,
    y: FloatArray,
    loss: RegressionLoss,
    w: FloatArray,
    step: FloatArray,
    mu: float,
    g: FloatArray,
    grad: FloatArray,
    norm: float,
) -> FloatArray:
    """Armijo backtracking on J̃; near the optimum (objective differences lost to rounding) the
    first trial that lowers ‖∇J̃‖ is taken."""
    f0 = _objective(X, y, loss, w, mu, g)
    slope = float(grad @ step)
    t = 1.0
    for _ in range(60):
        trial = w + t * step
        if _objective(X, y, loss, trial, mu, g) <= f0 + _ARMIJO * t * slope:
            return trial
        if float(np.linalg.norm(regression_gradient(X, y, loss, trial, mu, g))) < norm:
            return trial
        t *= 0.5
    raise ConvergenceError("the regression minimiser did not reach its tolerance")


# ---- the certificate ------------------------------------------------------------------------


def regression_gradient_sum(
    X: FloatArray, y: FloatArray, loss: RegressionLoss, w: FloatArray
) -> tuple[FloatArray, float]:
    """t̂ ≈ t = −Σ_i ψ(y_i − x_iᵀw) x_i (the loss part of n∇J̃, in the sign convention of
    :func:`~service.dp.optimize.certified.loss_gradient_sum`) and a proved bound on ‖t̂ − t‖
    (module docstring)."""
    X = np.asarray(X, dtype=np.float64)
    n, d = X.shape
    e_z = gamma(d) * norm_up(w)
    parts = []
    abs_psi = 0.0
    abs_r = 0.0
    for start in range(0, n, BLOCK_ROWS):
        block = X[start : start + BLOCK_ROWS]
        r = y[start : start + BLOCK_ROWS] - block @ w
        psi = loss.derivative(r)
        parts.append(-(block.T @ psi))
        abs_psi += float(np.abs(psi).sum())
        abs_r += float(np.abs(r).sum())
    t, combine = certified.block_total(parts)
    up = 1.0 + 2.0 * gamma(n)
    error = gamma(min(n, BLOCK_ROWS)) * abs_psi * up + combine
    error += (n * e_z + 2.0 * UNIT_ROUNDOFF * abs_r) * up
    return t, error * KAPPA


def regression_gradient_bound(
    X: FloatArray,
    y: FloatArray,
    loss: RegressionLoss,
    w: FloatArray,
    *,
    regularization: float,
    extra_regularization: float,
    noise: lattice.Enclosure,
    centre: FloatArray | None = None,
    centre_weight: float = 0.0,
) -> float:
    """A proved upper bound on ‖∇J̃_b(w)‖ for the real b enclosed by ``noise``; with a public
    ``centre`` u and weight η, of J̃_b + (η/2)‖w − u‖² (ridge λ + Δ + η, linear term −ηu:
    the tail's own centred case)."""
    t, e_t = regression_gradient_sum(X, y, loss, np.asarray(w, dtype=np.float64))
    return _bound_from_loss_sum(
        t,
        e_t,
        np.asarray(w, dtype=np.float64),
        n=int(X.shape[0]),
        regularization=regularization,
        extra_regularization=extra_regularization,
        noise=noise,
        centre=centre,
        centre_weight=centre_weight if centre is not None else 0.0,
    )


def _certified_solve(
    X: FloatArray,
    y: FloatArray,
    loss: RegressionLoss,
    *,
    regularization: float,
    extra_regularization: float,
    noise: lattice.Enclosure,
    threshold: float,
    tol: float,
    failure: str,
    centre: FloatArray | None = None,
    centre_weight: float = 0.0,
) -> FloatArray:
    """A minimiser of J̃_b̂ whose proved gradient bound is ≤ ``threshold`` (asked for ``tol``,
    then once for tol/64); :class:`ConvergenceError` with ``failure`` otherwise. A public
    ``centre`` u with weight η adds (η/2)‖w − u‖²: the solver sees ridge λ + η and the linear
    term b − nηu (the same objective up to a constant)."""
    _bound(loss)
    linear = noise.value
    ridge = regularization
    if centre is not None and centre_weight != 0.0:
        linear = linear - X.shape[0] * centre_weight * np.asarray(centre, dtype=np.float64)
        ridge = regularization + centre_weight

    def attempt(tol: float, initial: FloatArray | None) -> FloatArray:
        try:
            return minimize_regression(
                X,
                y,
                loss,
                regularization=ridge,
                linear=linear,
                extra_regularization=extra_regularization,
                tol=tol,
                initial=initial,
            )
        except ConvergenceError:
            raise ConvergenceError(failure) from None

    def bound(coef: FloatArray) -> float:
        return regression_gradient_bound(
            X,
            y,
            loss,
            coef,
            regularization=regularization,
            extra_regularization=extra_regularization,
            noise=noise,
            centre=centre,
            centre_weight=centre_weight,
        )

    return certified.first_certified(attempt, bound, threshold=threshold, tol=tol, failure=failure)


def certified_regression_erm(
    X: FloatArray,
    y: FloatArray,
    loss: RegressionLoss,
    *,
    regularization: float,
    tolerance: float,
    failure: str = certified.SENSITIVITY_FAILURE,
) -> FloatArray:
    """ŵ with a proved ‖∇J(ŵ)‖ ≤ τ for the noise-free objective (b = 0, Δ = 0): within τ/λ of
    the exact minimiser (output perturbation). :class:`ConvergenceError` with ``failure``
    otherwise."""
    return certified.noise_free(
        partial(_certified_solve, X, y, loss),
        int(X.shape[1]),
        regularization=regularization,
        tolerance=tolerance,
        failure=failure,
    )


def release_regression_minimiser(
    X: FloatArray,
    y: FloatArray,
    loss: RegressionLoss,
    *,
    regularization: float,
    extra_regularization: float,
    noise: lattice.Enclosure,
    release: certified.CertifiedRelease,
    rng: np.random.Generator | None,
    centre: FloatArray | None = None,
    centre_weight: float = 0.0,
) -> FloatArray:
    """The certified release of argmin J̃_b (objective perturbation): solve to the proved
    ‖∇J̃_b(ŵ)‖ ≤ τ, then the exact lattice release γ·round((ŵ + Z)/γ), Z ∝ exp(−β_r‖z‖)
    (:mod:`service.dp.optimize.certified`, steps 3–4). An optional public ``centre`` u with
    weight η adds (η/2)‖w − u‖² (transfer, :mod:`service.dp.multisite.transfer`)."""
    g = noise.value / X.shape[0]
    if centre is not None and centre_weight != 0.0:
        g = g - centre_weight * np.asarray(centre, dtype=np.float64)
    scale = 1.0 + float(np.linalg.norm(g))
    coef = certified.perturbed(
        partial(_certified_solve, X, y, loss, centre=centre, centre_weight=centre_weight),
        regularization=regularization,
        extra_regularization=extra_regularization,
        noise=noise,
        release=release,
        scale=scale,
    )
    return lattice.norm_exponential_release(coef, beta=release.beta, rng=rng)


# ---- when a certificate can fail ------------------------------------------------------------


def certificate_floor(
    *,
    n: int,
    d: int,
    loss: RegressionLoss,
    strong_convexity: float,
    noise_norm: float,
    centre_norm: float = 0.0,
) -> float:
    """F(q) for the regression objective: a public upper bound on the proved bound at the double
    ŵ nearest θ = argmin J̃_b for ‖b̂‖/n = q (``certified_failure.certificate_floor`` with |ψ| ≤ L
    and c = 1): s = L + q(1 + ρ_b) bounds ‖(1/n)Σψx − b/n‖, so ‖θ‖ ≤ s/μ and
    ‖ŵ‖ ≤ W = s(1 + 2u)/μ; the residuals are at most 1 + W(1 + γ_d); each e_i ≤ γ_d W(1 + (d + 8)u)
    + 2u(1 + W(1 + γ_d)); the other terms are the margin floor's with ‖t/n‖ ≤ L. Affine in q.
    A public centre term (η/2)‖w − u‖² adds η‖u‖ = ``centre_norm`` to s (the linear term is
    b/n − ηu) and its roundings to the tail, as in the margin floor."""
    u = UNIT_ROUNDOFF
    big_l = _bound(loss)
    mu = strong_convexity * (1.0 - 4.0 * u)
    mu_hat = strong_convexity * (1.0 + 4.0 * u)
    q = noise_norm
    rho_b = certified_failure.NOISE_RADIUS_RATIO
    s = big_l + q * (1.0 + rho_b) + centre_norm
    width = s * (1.0 + 2.0 * u) / mu
    rows = min(n, BLOCK_ROWS)
    blocks = -(-n // BLOCK_ROWS)
    up = 1.0 + 2.0 * gamma(n)
    e_bar = gamma(d) * width * (1.0 + (d + 8) * u) + 2.0 * u * (1.0 + width * (1.0 + gamma(d)))
    combine = (2.0 * u + gamma(blocks) ** 2) * 1.01 * big_l if n > BLOCK_ROWS else 0.0
    loss_sum = (gamma(rows) * (1.0 + 2.0 * u) * big_l * up + combine + e_bar * up) * KAPPA
    partial = 1.01 * big_l + mu_hat * width
    tail = (
        u * 1.01 * big_l
        + (2.0 * u + gamma(2)) * mu_hat * width
        + u * (2.0 * centre_norm + partial)
        + u * q
        + rho_b * q
        + u * (2.0 * partial + centre_norm + q)
    )
    error = (loss_sum + tail) * KAPPA
    rounding = (1.0 + mu_hat) * (u * s / mu + math.sqrt(d) * _TINY)
    return (rounding + 2.0 * error) * _SAFE


def failure_plan(
    *,
    n: int,
    d: int,
    loss: RegressionLoss,
    strong_convexity: float,
    tolerance: float,
    log10_tail: Callable[[float], float],
    centre_norm: float = 0.0,
) -> certified_failure.CertificateFailure:
    """When the regression certificate can fail: T = n·q*(1 − 2ρ_b), q* the largest q with
    :func:`certificate_floor` ≤ τ (−1 when none, even at b = 0), and a bound on P[‖b‖ > T];
    ``centre_norm`` = η‖u‖ for a centred (transfer) objective."""

    def floor(q: float) -> float:
        return certificate_floor(
            n=n,
            d=d,
            loss=loss,
            strong_convexity=strong_convexity,
            noise_norm=q,
            centre_norm=centre_norm,
        )

    q = certified_failure.largest_feasible(floor, tolerance)
    return certified_failure.failure_at(n, q, log10_tail)
