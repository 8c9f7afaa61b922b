"""The multinomial (softmax) logistic objective in ℝ^{K×d}: solver and certified gradient bound.

Model and loss. C ∈ ℝ^{K×d} (row k = class k's weights; vec(C) ∈ ℝ^{dK} is what the noise laws,
the lattice release and the certificate see), scores s = Cx ∈ ℝ^K, p = softmax(s), and for a
class index y ∈ {0, …, K − 1}

    ℓ(C; x, y) = log Σ_k e^{s_k} − s_y,   ∇_C ℓ = (p − e_y) xᵀ,   ∇²ℓ = (diag(p) − ppᵀ) ⊗ xxᵀ.

Constants (‖x‖ ≤ 1), used by every multi-class mechanism:

* gradient: ‖∇ℓ‖_F = ‖p − e_y‖·‖x‖ and ‖p − e_y‖² = (1 − p_y)² + Σ_{k≠y} p_k²
  ≤ (1 − p_y)² + (Σ_{k≠y} p_k)² = 2(1 − p_y)² ≤ 2, so ‖∇ℓ‖_F ≤ √2 (:data:`LIPSCHITZ`);
* curvature: A = diag(p) − ppᵀ is PSD (vᵀAv = Var_p(v) ≥ 0), A·1 = 0 so rank A ≤ K − 1,
  tr A = 1 − ‖p‖² ≤ 1 − 1/K, and by Gershgorin (row k: p_k(1 − p_k) on the diagonal,
  Σ_{l≠k}|p_k p_l| = p_k(1 − p_k) off it) λ_max(A) ≤ 2p_k(1 − p_k) ≤ ½. The eigenvalues of
  A ⊗ xxᵀ are those of A times ‖x‖² (and zeros): ∇²ℓ ⪰ 0, ‖∇²ℓ‖ ≤ ½ (:data:`CURVATURE`, the
  smoothness; softmax is ½-Lipschitz in ℓ₂), tr ∇²ℓ ≤ 1 − 1/K, rank ≤ K − 1.

The perturbed objective (objective perturbation; b = 0, Δ = 0 for output perturbation and the
non-private fit) is

    J̃_b(C) = (1/n)Σ_i ℓ(C; x_i, y_i) + ((λ + Δ)/2)‖C‖_F² + ⟨B, C⟩/n,   B = b as a K × d matrix,

(λ + Δ)-strongly convex, minimised by Newton's method with conjugate gradients on Hessian–vector
products (:func:`minimise`). :func:`gradient_bound` proves ‖∇J̃_b(Ĉ)‖_F for the real b enclosed
by the double b̂ (the analysis of :mod:`service.dp.optimize.certified` with the margin loss
replaced by the softmax; derivation in :func:`loss_gradient_sum`), so the certified release and
its failure plan (:func:`failure_plan`) carry over in dimension dK with c = ½ and Lipschitz √2.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray
from scipy import sparse

from service.dp.noise import lattice
from service.dp.noise.lattice.fast import LN2_LO
from service.dp.noise.rounding import KAPPA, UNIT_ROUNDOFF, gamma, norm_up
from service.dp.optimize import certified, certified_failure
from service.dp.optimize.certified import _DEGREE, _TINY, BLOCK_ROWS, exp_enclosure
from service.dp.optimize.solvers import ConvergenceError

__all__ = [
    "CURVATURE",
    "LIPSCHITZ",
    "certificate_floor",
    "certified_erm",
    "certified_solve",
    "failure_plan",
    "gradient",
    "gradient_bound",
    "loss_gradient_sum",
    "minimise",
    "objective",
    "release_minimiser",
]

FloatArray = NDArray[np.float64]

#: sup ‖∇_C ℓ‖_F over ‖x‖ ≤ 1 (module docstring)
LIPSCHITZ: Final[float] = math.sqrt(2.0)
#: sup ‖∇²ℓ‖ (spectral norm) over ‖x‖ ≤ 1: the smoothness c of the multinomial loss
CURVATURE: Final[float] = 0.5
_MAX_NEWTON: Final[int] = 200
_SAFE: Final[float] = 1.0 + 2.0**-30


def _labels(y: FloatArray, n: int) -> NDArray[np.intp]:
    idx = np.asarray(y).astype(np.intp)
    if idx.shape != (n,):
        raise ValueError("y must hold one class index per row of X")
    return idx


def _probabilities(S: FloatArray) -> FloatArray:
    S = S - S.max(axis=1, keepdims=True)
    E = np.exp(S)
    P: FloatArray = E / E.sum(axis=1, keepdims=True)
    return P


def objective(
    X: FloatArray, y: FloatArray, C: FloatArray, *, ridge: float, linear: FloatArray | None = None
) -> float:
    """J̃(C) = (1/n)Σ ℓ + (ridge/2)‖C‖² + ⟨linear, C⟩ (linear = B/n as a K × d matrix)."""
    n = X.shape[0]
    S = X @ C.T
    m = S.max(axis=1)
    lse = m + np.log(np.exp(S - m[:, None]).sum(axis=1))
    value = float((lse - S[np.arange(n), _labels(y, n)]).mean()) + 0.5 * ridge * float(
        np.sum(C * C)
    )
    if linear is not None:
        value += float(np.sum(linear * C))
    return value


def gradient(
    X: FloatArray, y: FloatArray, C: FloatArray, *, ridge: float, linear: FloatArray | None = None
) -> FloatArray:
    """∇J̃(C) = (1/n)(P − Y)ᵀX + ridge·C + linear, a K × d matrix."""
    n = X.shape[0]
    R = _probabilities(X @ C.T)
    R[np.arange(n), _labels(y, n)] -= 1.0
    g: FloatArray = R.T @ X / n + ridge * C
    if linear is not None:
        g = g + linear
    return g


@dataclass
class _State:
    C: FloatArray
    value: float
    grad: FloatArray
    P: FloatArray


def minimise(
    X: FloatArray,
    y: FloatArray,
    n_classes: int,
    *,
    ridge: float,
    linear: FloatArray | None = None,
    tol: float,
    initial: FloatArray | None = None,
) -> FloatArray:
    """argmin J̃ to ‖∇J̃‖_F ≤ ``tol`` (as computed): Newton's method, each step solved by
    preconditioned conjugate gradients (:func:`_kron_solve`) on Hessian–vector products
    H[V] = (1/n)Σ_i (P_i ⊙ (Vx_i) − P_i⟨P_i, Vx_i⟩) x_iᵀ + ridge·V, computed in single
    precision (forcing term min(½, max(√‖g‖, 10⁻³))) and in double precision if a step
    fails, with a backtracking Armijo line search (a step is also taken when it lowers ‖g‖,
    where J̃'s changes fall below its rounding). The gradient is always double. J̃ is
    ridge-strongly convex, so the iteration converges from any start; the solver's path
    never matters for privacy (the certificate is checked afterwards).
    :class:`ConvergenceError` if it does not converge in 200 steps."""
    X = np.asarray(X, dtype=np.float64)
    n, d = X.shape
    idx = _labels(y, n)
    K = int(n_classes)
    rows = np.arange(n)
    # Hessian–vector products in single precision (the gradient stays in double, so only the
    # Newton direction is approximate: each step still multiplies ‖g‖ by ~10⁻³); back to
    # double precision if a step fails
    Xs = _sparse_copy(X)
    (scores, back), (scores32, back32) = _products(X, Xs)
    gram = _gram_eigen(X) if d <= _GRAM_MAX_D else None
    # Jacobi's products with X∘X only when the Gram preconditioner is off
    back_sq = (
        None if gram is not None else _pair(X * X if Xs is None else Xs.multiply(Xs).tocsr())[1]
    )
    single = [True]
    # row sums as products with a vector of ones: numpy's reductions along a short last axis
    # (K entries a row) are several times slower
    ones, ones32 = np.ones(K), np.ones(K, dtype=np.float32)

    def state(C: FloatArray) -> _State:
        S = scores(C)
        m = _row_max(S)
        Z = np.exp(S - m[:, None])
        tot = Z @ ones
        value = float((m + np.log(tot) - S[rows, idx]).mean()) + 0.5 * ridge * float(np.sum(C * C))
        P = Z / tot[:, None]
        R = P.copy()
        R[rows, idx] -= 1.0
        g = back(R) / n + ridge * C
        if linear is not None:
            value += float(np.sum(linear * C))
            g = g + linear
        return _State(C=C, value=value, grad=g, P=P)

    def hess(P: FloatArray, P32: NDArray[np.floating], V: FloatArray) -> FloatArray:
        if single[0]:
            PU32 = P32 * scores32(V.astype(np.float32))
            Q32 = PU32 - P32 * (PU32 @ ones32)[:, None]
            approx: FloatArray = np.asarray(back32(Q32), dtype=np.float64) / n + ridge * V
            return approx
        PU = P * scores(V)
        Q = PU - P * (PU @ ones)[:, None]
        out: FloatArray = back(Q) / n + ridge * V
        return out

    C0 = np.zeros((K, d)) if initial is None else np.array(initial, dtype=np.float64)
    st = state(C0)
    for _ in range(_MAX_NEWTON):
        gnorm = float(np.linalg.norm(st.grad))
        if not math.isfinite(gnorm):
            break
        if gnorm <= tol:
            return st.C
        forcing = min(0.5, max(math.sqrt(gnorm), 1e-3 if single[0] else 0.0))
        if back_sq is None:
            assert gram is not None
            precondition = partial(_kron_solve, gram, _class_eigen(st.P), ridge)
        else:
            # Jacobi: diag H = (1/n)Σ_i p_ik(1 − p_ik)x_ij² + ridge
            weights = st.P * (1.0 - st.P)
            precondition = partial(np.multiply, 1.0 / (back_sq(weights) / n + ridge))
        P32 = st.P.astype(np.float32) if single[0] else st.P
        step = _cg(partial(hess, st.P, P32), -st.grad, forcing * gnorm, 4 * K * d, precondition)
        slope = float(np.sum(st.grad * step))
        t = 1.0
        for _ in range(40):
            trial = state(st.C + t * step)
            armijo = trial.value <= st.value + 1e-4 * t * slope
            if armijo or float(np.linalg.norm(trial.grad)) < gnorm * (1.0 - 1e-4 * t):
                break
            t *= 0.5
        else:
            if single[0]:
                single[0] = False
                continue
            break
        st = trial
    raise ConvergenceError(
        "the multinomial solver did not converge to the tolerance asked; no model was released"
    )


def _row_max(S: NDArray[np.floating]) -> NDArray[np.floating]:
    """max_k S_ik for each row, one column at a time (exact, as ``S.max(axis=1)``)."""
    m: NDArray[np.floating] = S[:, 0].copy()
    for k in range(1, S.shape[1]):
        np.maximum(m, S[:, k], out=m)
    return m


#: below this share of nonzero entries the solver multiplies with a sparse copy of X
_SPARSE_DENSITY: Final[float] = 0.3


_Product = Callable[[NDArray[np.floating]], NDArray[np.floating]]


def _pair(M: Any) -> tuple[_Product, _Product]:
    """V ↦ MVᵀ (n × K) and R ↦ RᵀM (K × d) for a dense or CSR matrix M."""
    if isinstance(M, np.ndarray):
        return (lambda V: np.asarray(M @ V.T), lambda R: np.asarray(R.T @ M))
    Mt = M.transpose().tocsr()
    return (lambda V: np.asarray(M @ V.T), lambda R: np.asarray(Mt @ R).T)


def _sparse_copy(X: FloatArray) -> sparse.csr_matrix | None:
    """A CSR copy of X when under ``_SPARSE_DENSITY`` of its entries are nonzero (one-hot
    designs: Adult's rows have 13 nonzeros of 101), else None. Built straight from the
    nonzero mask (row pointers from its row counts, column indices from the flat positions),
    without scipy's COO pass; the same matrix as ``sparse.csr_matrix(X)``."""
    n, d = X.shape
    if not X.size:
        return None
    mask = X != 0
    counts = mask.sum(axis=1)
    if int(counts.sum()) >= _SPARSE_DENSITY * X.size:
        return None
    index = np.int32 if X.size < 2**31 else np.int64
    flat = np.flatnonzero(mask)
    indptr = np.zeros(n + 1, dtype=index)
    np.cumsum(counts, out=indptr[1:])
    return sparse.csr_matrix(
        (X.ravel()[flat], (flat % d).astype(index), indptr), shape=(n, d), copy=False
    )


def _products(
    X: FloatArray, Xs: sparse.csr_matrix | None
) -> tuple[tuple[_Product, _Product], tuple[_Product, _Product]]:
    """The solver's products with X and with X in single precision, through the CSR copy
    ``Xs`` when there is one. Only the solver uses them; the certificate's products are
    dense and analysed in :func:`loss_gradient_sum`."""
    if Xs is not None:
        return _pair(Xs), _pair(Xs.astype(np.float32))
    return _pair(X), _pair(X.astype(np.float32))


#: the Kronecker Gram preconditioner is used up to this many features (an eigh of d × d)
_GRAM_MAX_D: Final[int] = 2000


def _gram_eigen(X: FloatArray) -> tuple[FloatArray, FloatArray]:
    """The eigendecomposition (Λ, Q) of XᵀX/n, once per solve (a dense product even for
    one-hot designs: BLAS's XᵀX beats the sparse product at d ≈ 100)."""
    n = X.shape[0]
    G = X.T @ X / n
    values, vectors = np.linalg.eigh(G)
    return np.maximum(values, 0.0), vectors


def _class_eigen(P: FloatArray) -> tuple[FloatArray, FloatArray]:
    """The eigendecomposition (a, U) of Ā = (1/n)Σ_i (diag(p_i) − p_ip_iᵀ), the mean of the
    K × K class factors of the Hessian (PSD, Ā·1 = 0)."""
    n = P.shape[0]
    A = np.diag(P.mean(axis=0)) - (P.T @ P) / n
    values, vectors = np.linalg.eigh(A)
    return np.maximum(values, 0.0), vectors


def _kron_solve(
    gram: tuple[FloatArray, FloatArray],
    classes: tuple[FloatArray, FloatArray],
    ridge: float,
    R: FloatArray,
) -> FloatArray:
    """M⁻¹R for the preconditioner M = Ā ⊗ XᵀX/n + ridge·I, i.e. V ↦ ĀV(XᵀX/n) + ridge·V:
    the Hessian with every row's class factor diag(p_i) − p_ip_iᵀ replaced by their mean Ā
    (:func:`_class_eigen`). With Ā = U diag(a) Uᵀ and XᵀX/n = Q diag(g) Qᵀ its inverse is
    R ↦ U[(UᵀRQ) / (a_k g_j + ridge)]Qᵀ. Unlike the class-blocked diag(Ā) ⊗ XᵀX/n it keeps
    the coupling −p_ik p_il between classes, and with it H's exact action ridge·V on the
    directions V = 1wᵀ (every class factor annihilates 1). It captures the features'
    covariance (one-hot blocks, the intercept), which is what makes H ill-conditioned; on
    Adult (marital status) a fit takes about 25 % fewer conjugate-gradient steps than with
    the class-blocked one, which itself took about 30 % fewer than diag(H)."""
    g, Q = gram
    a, U = classes
    out: FloatArray = U @ (((U.T @ R @ Q) / (a[:, None] * g[None, :] + ridge)) @ Q.T)
    return out


def _cg(
    hv: Callable[[FloatArray], FloatArray],
    rhs: FloatArray,
    tol: float,
    max_iter: int,
    precondition: Callable[[FloatArray], FloatArray],
) -> FloatArray:
    """Preconditioned conjugate gradients for H s = rhs (H ≻ 0 given by ``hv``, M⁻¹ by
    ``precondition``) to ‖residual‖ ≤ tol."""
    s = np.zeros_like(rhs)
    r = rhs.copy()
    z = precondition(r)
    p = z.copy()
    rz = float(np.sum(r * z))
    for _ in range(max_iter):
        if math.sqrt(float(np.sum(r * r))) <= tol:
            break
        Hp = hv(p)
        curv = float(np.sum(p * Hp))
        if not curv > 0.0:
            break
        alpha = rz / curv
        s += alpha * p
        r -= alpha * Hp
        z = precondition(r)
        rz_new = float(np.sum(r * z))
        p = z + (rz_new / rz) * p
        rz = rz_new
    return s


# ---- the certificate ------------------------------------------------------------------------


def _exp_error_max() -> float:
    """A bound on every error of :func:`~service.dp.optimize.certified.exp_enclosure` at v ≤ 0
    (2^k(1.5γ₂₇ + 2⁻⁵⁷ + 1.5e_r)κ(1 + 2u) + 2⁻¹⁰⁷⁴ with 2^k|k| ≤ ½; as in
    :func:`~service.dp.optimize.certified_failure.derivative_error_bound`)."""
    u = UNIT_ROUNDOFF
    e_r = u * 0.35 + 0.5 * (u * LN2_LO + 2.0**-86)
    return (1.5 * gamma(2 * _DEGREE + 1) + 2.0**-57 + 1.5 * e_r) * KAPPA * (1 + 2 * u) + _TINY


def loss_gradient_sum(X: FloatArray, y: FloatArray, C: FloatArray) -> tuple[FloatArray, float]:
    """T̂ ≈ T = Σ_i (p_i − e_{y_i}) x_iᵀ (K × d, p_i = softmax(Cx_i)) and a proved bound on
    ‖T̂ − T‖_F. Needs ‖x_i‖ ≤ 1. Error analysis (u = 2⁻⁵³, γ_k = ku/(1 − ku); BLAS in any
    order, FMA or not), per row i:

    * scores Ŝ = XCᵀ: |ŝ_ik − c_kᵀx_i| ≤ γ_d‖x_i‖‖c_k‖, so ‖ŝ_i − s_i‖₂ ≤ γ_d‖C‖_F =: e_s;
      softmax is ½-Lipschitz in ℓ₂ (its Jacobian diag(p) − ppᵀ has norm ≤ ½), so the exact
      softmax at ŝ_i is within ½e_s of p_i;
    * shift: v̂_k = fl(ŝ_k − m), m = max_k ŝ_k, so v̂ ≤ 0 with v̂_m = 0 exactly and
      ‖v̂ − (ŝ − m)‖ ≤ u‖v̂‖(1 + 2u); softmax is shift-invariant, so this moves p by ≤ ½ of it;
    * Ê_k = exp(v̂_k) within e_k (:func:`~service.dp.optimize.certified.exp_enclosure`); the
      exact sum T = Σ e^{v̂_k} ≥ 1 (the term e⁰), so with Σ_k e_k = ē < 1:
      ‖Ê/ΣÊ − e^{v̂}/T‖₂ ≤ (‖e‖ + ‖p‖ē)/(1 − ē) ≤ 2ē/(1 − ē);
    * the computed sum and division add ≤ γ_{K+1} relative per entry, ≤ γ_{K+2} in ℓ₂
      (‖p̂‖₂ ≤ 1 + 2ē);
    * r̂_i = p̂_i − e_{y_i}: the one subtraction p̂_y − 1 adds ≤ u.

    So ‖r̂_i − r_i‖ ≤ err_i = ½e_s + ½u‖v̂_i‖(1 + 2u) + 2ē/(1 − ē) + γ_{K+2}(1 + 2ē) + u. Then
    T̂ = Σ_blocks R̂_bᵀX_b (blocks of B = ``BLOCK_ROWS`` rows, combined by compensated sums):
    |T̂_kj − Σ_i r̂_ik x_ij| ≤ γ_B Σ_i|r̂_ik||x_ij| per block, and over (k, j) in Frobenius
    ‖(Σ_i|r̂_ik||x_ij|)‖_F ≤ Σ_i‖r̂_i‖‖x_i‖ ≤ Σ_i‖r̂_i‖; the errors of r̂ move the sum by
    ≤ Σ_i err_i‖x_i‖. Altogether ‖T̂ − T‖_F ≤ γ_BΣ‖r̂_i‖ + (block combination) + Σ err_i
    (sums of nonnegative terms taken up by 1 + 2γ_n), times κ = 1 + 2⁻²⁰."""
    X = np.asarray(X, dtype=np.float64)
    C = np.asarray(C, dtype=np.float64)
    n, d = X.shape
    K = C.shape[0]
    idx = _labels(y, n)
    u = UNIT_ROUNDOFF
    e_s = gamma(d) * norm_up(C.ravel())
    row_norm = 1.0 + (K + 8) * u
    gamma_k = gamma(K + 2)
    parts = []
    abs_r = 0.0
    sum_err = 0.0
    for start in range(0, n, BLOCK_ROWS):
        block = X[start : start + BLOCK_ROWS]
        yb = idx[start : start + BLOCK_ROWS]
        S = block @ C.T
        V = S - S.max(axis=1, keepdims=True)
        E, e_E = exp_enclosure(V)
        P = E / E.sum(axis=1, keepdims=True)
        R = P
        R[np.arange(block.shape[0]), yb] -= 1.0
        parts.append((R.T @ block).ravel())
        abs_r += float(np.sqrt(np.einsum("ij,ij->i", R, R)).sum()) * row_norm
        e_bar = e_E.sum(axis=1) * (1.0 + 2.0 * gamma(K))
        if not np.all(e_bar < 0.5):  # pragma: no cover - e_E is O(u)
            raise ValueError("the softmax enclosure failed")
        v_norm = np.sqrt(np.einsum("ij,ij->i", V, V)) * row_norm
        err = (
            0.5 * e_s
            + 0.5 * u * v_norm * (1.0 + 2.0 * u)
            + 2.0 * e_bar / (1.0 - e_bar) * (1.0 + 2.0 * u)
            + gamma_k * (1.0 + 2.0 * e_bar)
            + u
        )
        sum_err += float(err.sum())
    t, combine = certified.block_total(parts)
    up = 1.0 + 2.0 * gamma(n)
    error = gamma(min(n, BLOCK_ROWS)) * abs_r * up + combine + sum_err * up
    return t.reshape(K, d), error * KAPPA


def gradient_bound(
    X: FloatArray,
    y: FloatArray,
    C: FloatArray,
    *,
    regularization: float,
    extra_regularization: float,
    noise: lattice.Enclosure,
    centre: FloatArray | None = None,
    centre_weight: float = 0.0,
) -> float:
    """A proved upper bound on ‖∇J̃_b(C)‖_F for the real b enclosed by ``noise`` (ℝ^{dK},
    vec(C) = C.ravel()): :func:`loss_gradient_sum`, then the tail of
    :func:`service.dp.optimize.certified.gradient_bound` (the ridge, b/n and the roundings
    of their sums are the same computation in dimension dK). With a public ``centre`` C₀
    (K × d) and weight η the objective has the extra term (η/2)‖C − C₀‖_F² (transfer,
    :mod:`service.dp.multisite.transfer`): ridge λ + Δ + η and linear term −η vec C₀, the
    tail's own centred case."""
    C = np.asarray(C, dtype=np.float64)
    t, e_t = loss_gradient_sum(X, y, C)
    return certified._bound_from_loss_sum(
        t.ravel(),
        e_t,
        C.ravel(),
        n=int(np.shape(X)[0]),
        regularization=regularization,
        extra_regularization=extra_regularization,
        noise=noise,
        centre=None if centre is None else np.asarray(centre, dtype=np.float64).ravel(),
        centre_weight=centre_weight if centre is not None else 0.0,
    )


def certified_solve(
    X: FloatArray,
    y: FloatArray,
    n_classes: int,
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
    """A minimiser Ĉ of J̃_b̂ whose *proved* ‖∇J̃_b(Ĉ)‖_F (real b) is ≤ ``threshold``: the
    solver asked for ``tol``, then once for tol/64 from there; :class:`ConvergenceError`
    with ``failure`` (nothing released) when neither meets it. A ``centre`` C₀ with weight η
    adds (η/2)‖C − C₀‖_F² (:func:`gradient_bound`)."""
    n, d = np.shape(X)
    linear = (noise.value / n).reshape(n_classes, d)
    ridge = regularization + extra_regularization
    if centre is not None and centre_weight != 0.0:
        linear = linear - centre_weight * np.asarray(centre, dtype=np.float64).reshape(n_classes, d)
        ridge = ridge + centre_weight

    def attempt(tol: float, initial: FloatArray | None) -> FloatArray:
        return minimise(X, y, n_classes, ridge=ridge, linear=linear, tol=tol, initial=initial)

    def bound(C: FloatArray) -> float:
        return gradient_bound(
            X,
            y,
            C,
            regularization=regularization,
            extra_regularization=extra_regularization,
            noise=noise,
            centre=centre,
            centre_weight=centre_weight,
        )

    return certified.first_certified(attempt, bound, threshold=threshold, tol=tol, failure=failure)


def certified_erm(
    X: FloatArray,
    y: FloatArray,
    n_classes: int,
    *,
    regularization: float,
    tolerance: float,
    failure: str = certified.SENSITIVITY_FAILURE,
) -> FloatArray:
    """A double Ĉ with a *proved* ‖∇J(Ĉ)‖_F ≤ τ for the noise-free objective
    J(C) = (1/n)Σℓ + (λ/2)‖C‖² (λ the double given): by λ-strong convexity
    ‖Ĉ − C*‖_F ≤ τ/λ, which output perturbation charges. :class:`ConvergenceError` with
    ``failure`` otherwise."""
    return certified.noise_free(
        partial(certified_solve, X, y, n_classes),
        int(np.shape(X)[1]) * n_classes,
        regularization=regularization,
        tolerance=tolerance,
        failure=failure,
    )


def release_minimiser(
    X: FloatArray,
    y: FloatArray,
    n_classes: int,
    *,
    regularization: float,
    extra_regularization: float,
    noise: lattice.Enclosure,
    release: certified.CertifiedRelease,
    rng: np.random.Generator | None,
    centre: FloatArray | None = None,
    centre_weight: float = 0.0,
) -> FloatArray:
    """The certified release (:mod:`service.dp.optimize.certified`, steps 3–4) of the
    multinomial objective: Ĉ certified to ‖∇J̃_b(Ĉ)‖_F ≤ τ, then the exact lattice release
    γ·round((vec Ĉ + Z)/γ), Z ∝ exp(−β_r‖z‖) in ℝ^{dK}; returned as a K × d matrix. An
    optional public ``centre`` C₀ with weight η adds (η/2)‖C − C₀‖_F² (transfer)."""
    n, d = np.shape(X)
    # this solver's test is absolute (‖∇J̃‖_F ≤ tol), so it is asked τ/(4(1 + ‖b‖/n)); a
    # centre's η‖C₀‖ is not in the scale: τ already grows with it (the public bound L), and a
    # tolerance divided by it again would fall below the rounding of μC − ηC₀
    scale = 1.0 + float(np.linalg.norm(noise.value)) / n
    C = certified.perturbed(
        partial(certified_solve, X, y, n_classes, centre=centre, centre_weight=centre_weight),
        regularization=regularization,
        extra_regularization=extra_regularization,
        noise=noise,
        release=release,
        scale=scale,
    )
    released = lattice.norm_exponential_release(C.ravel(), beta=release.beta, rng=rng)
    return released.reshape(n_classes, d)


# ---- when the certificate can fail ----------------------------------------------------------


def certificate_floor(
    *,
    n: int,
    d: int,
    n_classes: int,
    strong_convexity: float,
    noise_norm: float,
    centre_norm: float = 0.0,
) -> float:
    """F(q): a public upper bound on :func:`gradient_bound` at the double Ĉ nearest
    θ = argmin J̃_b for ‖b̂‖/n = q (:func:`service.dp.optimize.certified_failure.certificate_floor`
    for the multinomial loss). With s = √2 + q(1 + ρ_b): μθ = −(1/n)Σ∇ℓ − B/n, so
    ‖θ‖_F ≤ s/μ and ‖Ĉ‖ ≤ W = s(1 + 2u)/μ; rounding θ moves the gradient by
    ≤ (½ + μ)(u·s/μ + √(dK)·2⁻¹⁰⁷⁴). The bound is ≤ ‖∇J̃_b(Ĉ)‖ + 2e with e the error terms of
    :func:`loss_gradient_sum` and the tail at their worst: ‖r̂_i‖ ≤ √2(1 + 2u) + small,
    ‖v̂_i‖ ≤ (1 + √K)‖ŝ_i‖ ≤ (1 + √K)W(1 + γ_d), ē ≤ K·(exp error), e_s = γ_dW. A public
    centre term (η/2)‖C − C₀‖² adds η‖C₀‖ = ``centre_norm`` to s (the linear term is
    B/n − ηC₀) and its roundings to the tail, as in the margin floor
    (:func:`service.dp.optimize.certified_failure.certificate_floor`)."""
    u = UNIT_ROUNDOFF
    K = int(n_classes)
    dim = d * K
    rho = certified_failure.NOISE_RADIUS_RATIO
    mu = strong_convexity * (1.0 - 4.0 * u)
    q = noise_norm
    s = LIPSCHITZ + q * (1.0 + rho) + centre_norm
    width = s * (1.0 + 2.0 * u) / mu
    mu_hat = strong_convexity * (1.0 + 4.0 * u)
    e_bar = K * _exp_error_max() * (1.0 + 2.0 * gamma(K))
    v_norm = (1.0 + math.sqrt(K)) * width * (1.0 + gamma(d)) * (1.0 + (K + 8) * u)
    row_err = (
        0.5 * gamma(d) * width
        + 0.5 * u * v_norm * (1.0 + 2.0 * u)
        + 2.0 * e_bar / (1.0 - e_bar) * (1.0 + 2.0 * u)
        + gamma(K + 2) * (1.0 + 2.0 * e_bar)
        + u
    )
    r_max = (LIPSCHITZ + row_err) * (1.0 + (K + 8) * u)
    rows = min(n, BLOCK_ROWS)
    blocks = -(-n // BLOCK_ROWS)
    up = 1.0 + 2.0 * gamma(n)
    combine = (2.0 * u + gamma(blocks) ** 2) * r_max * 1.01 if n > BLOCK_ROWS else 0.0
    loss_sum = (gamma(rows) * r_max * up + combine + row_err * up) * KAPPA
    partial = r_max * 1.01 + mu_hat * width
    tail = (
        u * r_max * 1.01
        + (2.0 * u + gamma(2)) * mu_hat * width
        + u * (2.0 * centre_norm + partial)
        + u * q
        + rho * q
        + u * (2.0 * partial + centre_norm + q)
    )
    error = (loss_sum + tail) * KAPPA
    rounding = (CURVATURE + mu_hat) * (u * s / mu + math.sqrt(dim) * _TINY)
    return (rounding + 2.0 * error) * _SAFE


def failure_plan(
    *,
    n: int,
    d: int,
    n_classes: int,
    beta: float,
    certificate: certified.CertifiedRelease,
    mechanism: str,
    check: bool = True,
    centre_norm: float = 0.0,
) -> certified_failure.CertificateFailure:
    """When the multinomial certified release can fail (norm-exponential noise of rate β in
    ℝ^{dK}): q* the largest ‖b̂‖/n with :func:`certificate_floor` ≤ τ (F is affine in q),
    T = n·q*(1 − 2ρ_b) and a bound on P[‖b‖ > T]; refused (422, before any charge) like the
    binary plans when that probability is above 10⁻³⁰ or no point is certifiable at b = 0.
    ``centre_norm`` = η‖C₀‖ for a centred (transfer) objective."""
    tau = certificate.tolerance

    def floor(q: float) -> float:
        return certificate_floor(
            n=n,
            d=d,
            n_classes=n_classes,
            strong_convexity=certificate.strong_convexity,
            noise_norm=q,
            centre_norm=centre_norm,
        )

    dim = d * n_classes
    failure = certified_failure.failure_at(
        n,
        certified_failure.largest_feasible(floor, tau),
        lambda t: (
            certified_failure.norm_exponential_tail_log10(dim, beta, t) if beta > 0.0 else -math.inf
        ),
    )
    if check:
        certified_failure.check_failure_probability(failure.details(), mechanism)
    return failure
