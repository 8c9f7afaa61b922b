"""Exact minimiser of the strongly convex ERM objectives PrivFit's mechanisms solve.

The objective, for rows x_i with ‖x_i‖ ≤ 1, labels y_i ∈ {−1, +1} and a margin loss l:

    J(w) = (1/n) Σ_i l(y_i wᵀx_i) + (λ/2)‖w‖² + bᵀw/n + (Δ/2)‖w‖² + (η/2)‖w − w₀‖²

(λ the regularisation, b an optional linear "noise" term, Δ an optional extra ridge, and an
optional centre w₀ with weight η for transfer learning). Collecting terms,
J(w) = (1/n) Σ l(y_i wᵀx_i) + (μ/2)‖w‖² + gᵀw + const with μ = λ + Δ + η and
g = b/n − η w₀; J is μ-strongly convex, so its minimiser is unique.

The privacy proofs of output and objective perturbation are about this *exact* minimiser, so
the solver iterates until ‖∇J(w)‖ ≤ tol·(1 + ‖g‖) (tol = 1e-10 by default), with ∇J evaluated
in float64 on the given X; then ‖w − w*‖ ≤ ‖∇J(w)‖/μ by strong convexity. The scale 1 + ‖g‖
bounds every term of the gradient at the optimum (|l'| ≤ 1 and ‖x‖ ≤ 1 give
‖(1/n)Σ l' y x‖ ≤ 1, and μw* equals minus the rest). If the tolerance is not met,
:class:`ConvergenceError` is raised: a released model must never come from an unconverged
solve.

Method: damped Newton with the Hessian H = (1/n) Xᵀ diag(l''(z)) X + μI, in two phases.

1. *float32 phase* (when 2^15 ≤ n·d ≤ ``FLOAT32_COPY_MAX_ENTRIES``). The solver makes one
   float32 copy of X and iterates on it: margins, gradients and Hessians move half the bytes,
   and the exponentials run in SIMD float32. While ‖∇J‖ > 3·10⁻³·(1 + ‖g‖) each step solves
   with the Hessian of every 8th row (an eighth of the n·d² cost; far from w* a rough Hessian
   only costs a little step quality). Closer in, one full Hessian is factorised and then
   serves as the preconditioner of conjugate gradients on float32 Hessian–vector products
   (one blocked pass over the copy each), so later Newton steps cost a few such passes
   instead of an n·d² product; a new Hessian is formed only when the preconditioned iteration
   would need more than four products, or after a damped step. The phase stops when its
   gradient norm is 10⁻⁶·(1 + ‖g‖), about what float32 can resolve (or hands over a last step
   unmeasured when Newton's local model puts its gradient a hundred times lower), and gives
   up early when five steps in a row have not halved the gradient norm.
2. *float64 phase.* From there, margins and gradients are exact float64 computations on X,
   one blocked pass over X for both (each block is read once for Xw and again, from cache,
   for Xᵀ(y ⊙ l')). The step is the same preconditioned CG on float32 products, asked for a
   residual 10⁻¹·tol/‖∇J‖, so one step normally meets the tolerance; a fresh Hessian is formed
   when that fails, and a float64 one when the float32 Hessian is numerically indefinite.
   Convergence is only ever decided here. Without a float32 copy (tiny or huge problems) only
   this phase runs, with a fresh Hessian every step.

Lower precision and subsamples only ever enter Newton *directions*: they change the path, never
the test a returned point must pass. Steps are damped by an Armijo backtracking line search
on the cached margins z = y ⊙ Xw and dz = y ⊙ Xp, so every trial step costs O(n), not a
matrix product; in the float64 phase the full step's gradient comes with its margins, and a
step that meets the tolerance is taken at once. Near the optimum, where objective differences
drown in rounding, a step is accepted when it lowers the gradient norm instead. For
d > ``DENSE_NEWTON_MAX_DIM`` the Newton system is solved by conjugate gradients on
Hessian–vector products (truncated Newton). For the Huber loss l'' is piecewise constant and
this is a semismooth Newton method; should Newton stall, L-BFGS-B is run from the last
iterate and Newton restarted from its result before giving up.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray
from scipy import linalg, special

from service.dp.core.losses import LogisticLoss, Loss
from service.dp.data.prepared import active_design
from service.dp.noise.rounding import UNIT_ROUNDOFF, gamma, norm_up

__all__ = [
    "DEFAULT_TOLERANCE",
    "DENSE_NEWTON_MAX_DIM",
    "FLOAT32_COPY_MAX_ENTRIES",
    "ConvergenceError",
    "FinalPass",
    "SolverResult",
    "erm_gradient",
    "erm_objective",
    "minimize_erm",
    "solve_erm",
]

FloatArray = NDArray[np.float64]
Float32Array = NDArray[np.float32]
_Factor = tuple[FloatArray, bool]
_Z = TypeVar("_Z", FloatArray, Float32Array)

#: Relative gradient-norm tolerance (see the module docstring).
DEFAULT_TOLERANCE = 1e-10
#: Above this dimension the Newton system is solved by conjugate gradients.
DENSE_NEWTON_MAX_DIM = 1000
#: Largest n·d for which the solver keeps a float32 copy of X (2^27 entries: 512 MiB, plus an
#: eighth of that for a copy of every 8th row).
FLOAT32_COPY_MAX_ENTRIES = 1 << 27

#: Below this n·d, every step is cheap and the solver works in float64 only.
_FLOAT32_MIN_ENTRIES = 1 << 15
#: Entries per block when forming the Hessian (4 MiB of float32).
_HESSIAN_BLOCK = 1 << 20
#: Bytes per block of rows in the blocked passes (:meth:`_Objective.evaluate`, Hessian–vector
#: products, the float32 copy): small enough to be read again from cache.
_BLOCK_BYTES = 1 << 20
_ARMIJO = 1e-4
_MAX_BACKTRACKS = 60
_ROUNDING = 64.0 * np.finfo(np.float64).eps
_ROUNDING32 = 64.0 * float(np.finfo(np.float32).eps)
#: In the float32 phase a full step that multiplies ‖∇J‖ by at most this is taken without a
#: line search.
_GRADIENT_DECREASE = 0.5
#: The float32 phase stops at ‖∇J‖ ≤ _SWITCH·(1 + ‖g‖), or when _MAX_STALLED steps have not
#: halved ‖∇J‖.
_SWITCH = 1e-6
_MAX_STALLED = 5
#: Above ‖∇J‖ = _FAR·(1 + ‖g‖), Hessians are formed from every _STRIDE-th row ...
_FAR = 3e-3
_STRIDE = 8
#: ... when that leaves at least _MIN_ROWS_PER_DIM rows per dimension.
_MIN_ROWS_PER_DIM = 4
#: Preconditioned CG products per Newton direction before a fresh Hessian is formed, in the
#: float32 and the float64 phase (where a step is worth more: each costs a pass over X).
_MAX_PCG = 4
_MAX_PCG_FLOAT64 = 6
#: The float32 phase asks CG for a residual min(0.1, max(_A_RTOL_FLOOR, ‖∇J‖/(1 + ‖g‖))), and
#: hands its step to the float64 phase unmeasured when Newton's local model predicts a
#: gradient below _PREDICTED_MARGIN times its target.
_A_RTOL_FLOOR = 1e-4
_PREDICTED_MARGIN = 0.01
#: The float64 phase asks CG for a residual _B_MARGIN·gtol/‖∇J‖ (the step should land below
#: the tolerance with room to spare).
_B_MARGIN = 0.1


class ConvergenceError(RuntimeError):
    """The solver did not reach the exact minimiser to the required tolerance.

    Messages never contain data values; a fit that raises this is a failed job (its budget is
    still spent, docs/design.md §2).
    """


@dataclass(frozen=True, slots=True)
class FinalPass:
    """What the float64 pass at the returned point computed, with proved error bounds, so
    that :func:`service.dp.optimize.certified.gradient_bound_from_pass` can bound the true gradient
    there without another pass over X.

    * ``margins`` ẑ with |ẑ_i − y_i x_iᵀw| ≤ ``margin_error`` for the returned double w: a
      pass from scratch gives γ_d‖w‖ (the product by y_i = ±1 is exact); a Newton step's
      pass computes ẑ_t = fl(ẑ + y ⊙ fl(X·p)) for the returned w_t = fl(w + p), which adds
      γ_d‖p‖ (the product), u·max|ẑ_t| (the addition) and u‖w_t‖ (w_t is w + p rounded);
    * ``derivatives`` l̂′ at ẑ as the solver computed them (no proved bound of their own);
    * ``loss_sum`` t̂ = Σ_blocks fl(X_kᵀ(y_k ⊙ l̂′_k)), accumulated in order: componentwise
      within γ_{rows + blocks}·Σ_i|x_ij||l̂′_i| of Σ_i y_i l̂′_i x_i (each block's product
      γ_rows, the sequential sum of the blocks γ_{blocks−1} more).
    """

    margins: FloatArray
    margin_error: float
    derivatives: FloatArray
    loss_sum: FloatArray
    block_rows: int
    blocks: int


@dataclass(frozen=True, slots=True)
class SolverResult:
    """The minimiser and how it was reached.

    ``gradient_norm`` and ``iterations`` depend on the data: keep them out of anything
    released to other parties. ``final_pass`` is the last float64 pass when the returned point
    came from one (not after a line search), for a certificate without another pass.
    """

    coef: FloatArray
    iterations: int
    gradient_norm: float
    gradient_tolerance: float
    strong_convexity: float
    method: str
    final_pass: FinalPass | None = None

    @property
    def distance_bound(self) -> float:
        """Upper bound on ‖coef − w*‖ (strong convexity: ‖w − w*‖ ≤ ‖∇J(w)‖/μ)."""
        return self.gradient_norm / self.strong_convexity


@dataclass(frozen=True, slots=True)
class _Objective:
    """J in the collected form (1/n) Σ l(y_i wᵀx_i) + (μ/2)‖w‖² + gᵀw.

    ``X32``/``y32`` are an optional float32 copy of the data for the float32 phase (the
    ``*32`` methods); every method without the suffix works in float64 on X, and only those
    decide convergence. Hessians are accumulated from float32 blocks (:meth:`hessian`): only
    the Newton *direction* depends on them, and a Hessian with relative error ~1e-7 still gives
    (locally) linear convergence with rate ~1e-7·cond(H), as fast as exact Newton in practice.
    """

    X: FloatArray
    y: FloatArray
    loss: Loss
    mu: float
    g: FloatArray
    X32: Float32Array | None = None
    y32: Float32Array | None = None
    #: Xᵀy from the float32 copy: the gradient at w = 0, where every margin is 0
    xty: FloatArray | None = None
    #: every _STRIDE-th row of X32, contiguous (for the subsampled Hessians)
    X32_sub: Float32Array | None = None

    @property
    def n(self) -> int:
        return int(self.X.shape[0])

    # float64: the exact objective -------------------------------------------------------

    def margins(self, w: FloatArray) -> FloatArray:
        return self.y * (self.X @ w)

    def loss_values(self, z: FloatArray) -> FloatArray:
        if isinstance(self.loss, LogisticLoss):
            return np.logaddexp(0.0, -z)
        return self.loss.value(z)

    def derivatives(self, z: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(l'(z), l''(z)); for the logistic loss one expit serves both."""
        if isinstance(self.loss, LogisticLoss):
            e = special.expit(-z)
            return -e, e * (1.0 - e)
        return self.loss.derivative(z), self.loss.second_derivative(z)

    def mean_loss(self, z: FloatArray) -> float:
        return float(self.loss_values(z).sum()) / self.n

    def value(self, w: FloatArray, z: FloatArray) -> float:
        return self.mean_loss(z) + 0.5 * self.mu * float(w @ w) + float(self.g @ w)

    def gradient(self, w: FloatArray, d1: FloatArray) -> FloatArray:
        grad: FloatArray = self.X.T @ (self.y * d1)
        grad /= self.n
        grad += self.mu * w
        grad += self.g
        return grad

    def hessian(
        self, d2: NDArray[np.floating], *, precise: bool = False, stride: int = 1
    ) -> FloatArray:
        """(1/m) Σ d2_i x_i x_iᵀ + μI over the rows i ≡ 0 (mod ``stride``) (m of them).

        Blocks of diag(√d2)·X of about ``_HESSIAN_BLOCK`` entries (cache-sized; no n×d
        temporary) are written into a float32 buffer (float64 when ``precise``) and their Gram
        matrices added to the float64 total. The rows come from ``X32`` when there is one and
        float32 is asked for, else from X.
        """
        source: NDArray[np.floating]
        if stride == _STRIDE and self.X32_sub is not None and not precise:
            source = self.X32_sub
        else:
            source = (self.X32 if self.X32 is not None and not precise else self.X)[::stride]
        root = np.sqrt(d2[::stride])
        m, d = source.shape
        rows = max(1, min(m, _HESSIAN_BLOCK // d))
        buf = np.empty((rows, d), dtype=np.float64 if precise else np.float32)
        h: FloatArray = np.zeros((d, d))
        for start in range(0, m, rows):
            stop = min(m, start + rows)
            block = buf[: stop - start]
            np.multiply(source[start:stop], root[start:stop, None], out=block, casting="same_kind")
            h += block.T @ block
        h /= m
        h.flat[:: d + 1] += self.mu
        return h

    def hessp(
        self, d2: NDArray[np.floating], v: FloatArray
    ) -> tuple[FloatArray, NDArray[np.floating]]:
        """(H v, X v), in one blocked pass over ``X32`` in float32 when there is one (a
        direction only), else over X in float64. X v comes for free and lets conjugate
        gradients accumulate X·step."""
        X: NDArray[np.floating] = self.X if self.X32 is None else self.X32
        n, d = X.shape
        rows = _block_rows(X)
        vx = v.astype(X.dtype, copy=False)
        xv = np.empty(n, dtype=X.dtype)
        out = np.zeros(d)
        for start in range(0, n, rows):
            stop = min(n, start + rows)
            block = X[start:stop]
            np.matmul(block, vx, out=xv[start:stop])
            out += block.T @ np.multiply(xv[start:stop], d2[start:stop], dtype=X.dtype)
        out /= n
        out += self.mu * v
        return out, xv

    def evaluate(
        self,
        w: FloatArray,
        base: FloatArray | None = None,
        v: FloatArray | None = None,
        keep: dict[str, Any] | None = None,
    ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        """Margins, l'' and ∇J at w in one blocked pass over X (float64); returns
        (dz, z, l''(z), ∇J(w)).

        With ``base`` and ``v`` (w = w_old + v, base = y ⊙ X w_old), dz = y ⊙ Xv and
        z = base + dz: a Newton step's trial point, one matrix product cheaper than margins
        from scratch. Otherwise dz = z = y ⊙ Xw. Each block of rows (``_BLOCK_BYTES``) is read
        for X·v and again, from cache, for Xᵀ(y ⊙ l'). With ``keep``, the raw sum, l' and the
        blocking are stored in it (:class:`FinalPass`).
        """
        return _evaluate(self.X, self.y, self.derivatives, self.mu, self.g, w, base, v, keep)

    def evaluate32(
        self, w: FloatArray, base: Float32Array, v: FloatArray
    ) -> tuple[Float32Array, Float32Array, Float32Array, FloatArray]:
        """:meth:`evaluate` on the float32 copy (∇J returned in float64)."""
        X32, y32 = self._data32()
        return _evaluate(X32, y32, self.derivatives32, self.mu, self.g, w, base, v)

    # float32: the copy, for the float32 phase ------------------------------------------------

    def _data32(self) -> tuple[Float32Array, Float32Array]:
        if self.X32 is None or self.y32 is None:  # pragma: no cover - callers check
            raise RuntimeError("no float32 copy of the data")
        return self.X32, self.y32

    def margins32(self, w: FloatArray) -> Float32Array:
        X32, y32 = self._data32()
        z: Float32Array = X32 @ w.astype(np.float32)
        z *= y32
        return z

    def derivatives32(self, z: Float32Array) -> tuple[Float32Array, Float32Array]:
        """(l'(z), l''(z)) in float32; logistic: with e = e^{−|z|} and q = 1/(1 + e),
        σ(−z) = e·q for z ≥ 0 and q otherwise, and l'' = σ(z)σ(−z) = e·q²."""
        if isinstance(self.loss, LogisticLoss):
            e = np.exp(-np.abs(z))
            q = np.float32(1.0) / (np.float32(1.0) + e)
            eq = e * q
            return np.where(z >= 0, -eq, -q), eq * q
        z64 = z.astype(np.float64)
        return (
            self.loss.derivative(z64).astype(np.float32),
            self.loss.second_derivative(z64).astype(np.float32),
        )

    def mean_loss32(self, z: Float32Array) -> float:
        """(1/n) Σ l(z_i) from float32 margins; logistic: l(z) = ln(1 + e^{−|z|}) + max(−z, 0)."""
        if isinstance(self.loss, LogisticLoss):
            values = np.log(np.float32(1.0) + np.exp(-np.abs(z)))
            values += np.maximum(-z, np.float32(0.0))
            return float(values.sum(dtype=np.float64)) / self.n
        return float(self.loss.value(z.astype(np.float64)).sum()) / self.n

    def gradient32(self, w: FloatArray, d1: Float32Array) -> FloatArray:
        X32, y32 = self._data32()
        grad: FloatArray = (X32.T @ (y32 * d1)).astype(np.float64)
        grad /= self.n
        grad += self.mu * w
        grad += self.g
        return grad


_A = TypeVar("_A", FloatArray, Float32Array)


def _evaluate(
    X: _A,
    y: _A,
    derivatives: Callable[[_A], tuple[_A, _A]],
    mu: float,
    g: FloatArray,
    w: FloatArray,
    base: _A | None,
    v: FloatArray | None,
    keep: dict[str, Any] | None = None,
) -> tuple[_A, _A, _A, FloatArray]:
    """The blocked pass behind :meth:`_Objective.evaluate`, in the precision of X."""
    n, d = X.shape
    direction = (w if v is None else v).astype(X.dtype, copy=False)
    rows = _block_rows(X)
    dz = np.empty(n, dtype=X.dtype)
    z = dz if base is None else np.empty(n, dtype=X.dtype)
    d2 = np.empty(n, dtype=X.dtype)
    d1 = np.empty(n, dtype=X.dtype) if keep is not None else None
    grad = np.zeros(d)
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        block = X[start:stop]
        yb = y[start:stop]
        np.multiply(yb, block @ direction, out=dz[start:stop])
        if base is not None:
            np.add(base[start:stop], dz[start:stop], out=z[start:stop])
        d1b, d2[start:stop] = derivatives(z[start:stop])
        if d1 is not None:
            d1[start:stop] = d1b
        grad += block.T @ (yb * d1b)
    if keep is not None:
        keep.update(loss_sum=grad.copy(), derivatives=d1, rows=rows, blocks=-(-n // rows))
    grad /= n
    grad += mu * w
    grad += g
    return dz, z, d2, grad


def erm_objective(
    X: FloatArray,
    y: FloatArray,
    loss: Loss,
    w: FloatArray,
    *,
    regularization: float,
    linear: FloatArray | None = None,
    extra_regularization: float = 0.0,
    centre: FloatArray | None = None,
    centre_weight: float = 0.0,
) -> float:
    """J(w) as in the module docstring, up to the constant (η/2)‖w₀‖² (which is included)."""
    obj = _build(X, y, loss, regularization, linear, extra_regularization, centre, centre_weight)
    w = np.asarray(w, dtype=np.float64)
    const = 0.0
    if centre is not None:
        w0 = np.asarray(centre, dtype=np.float64)
        const = 0.5 * centre_weight * float(w0 @ w0)
    return obj.value(w, obj.margins(w)) + const


def erm_gradient(
    X: FloatArray,
    y: FloatArray,
    loss: Loss,
    w: FloatArray,
    *,
    regularization: float,
    linear: FloatArray | None = None,
    extra_regularization: float = 0.0,
    centre: FloatArray | None = None,
    centre_weight: float = 0.0,
) -> FloatArray:
    """∇J(w), in float64."""
    obj = _build(X, y, loss, regularization, linear, extra_regularization, centre, centre_weight)
    w = np.asarray(w, dtype=np.float64)
    d1, _ = obj.derivatives(obj.margins(w))
    return obj.gradient(w, d1)


def solve_erm(
    X: FloatArray,
    y: FloatArray,
    loss: Loss,
    *,
    regularization: float,
    linear: FloatArray | None = None,
    extra_regularization: float = 0.0,
    centre: FloatArray | None = None,
    centre_weight: float = 0.0,
    tol: float = DEFAULT_TOLERANCE,
    max_iter: int = 200,
    initial: FloatArray | None = None,
) -> SolverResult:
    """Minimise J (module docstring) to ‖∇J‖ ≤ tol·(1 + ‖b/n − η w₀‖), ∇J in float64.

    ``linear`` is b (the objective gets bᵀw/n), ``extra_regularization`` Δ, ``centre`` w₀ and
    ``centre_weight`` η. Raises :class:`ConvergenceError` when the tolerance is not reached.
    """
    if not np.isfinite(tol) or tol <= 0.0:
        raise ValueError(f"tol must be a finite positive number, got {tol!r}")
    if max_iter < 1:
        raise ValueError(f"max_iter must be at least 1, got {max_iter}")
    obj = _build(X, y, loss, regularization, linear, extra_regularization, centre, centre_weight)
    n, d = obj.X.shape
    if _FLOAT32_MIN_ENTRIES <= n * d <= FLOAT32_COPY_MAX_ENTRIES:
        obj = _with_float32_copy(obj)
    gtol = tol * (1.0 + float(np.linalg.norm(obj.g)))
    w = np.zeros(d) if initial is None else np.array(initial, dtype=np.float64).reshape(d)

    trace: list[FinalPass | None] = [None]
    w, gnorm, iterations, ok = _newton(obj, w, gtol, max_iter, trace)
    method = "newton-cholesky" if d <= DENSE_NEWTON_MAX_DIM else "newton-cg"
    if not ok:
        # L-BFGS-B from the last iterate, then Newton again to polish: L-BFGS-B alone stalls
        # once objective differences reach rounding level, which can be above the gradient
        # tolerance, while Newton's line search then judges steps by the gradient norm.
        w, _, extra, _ = _lbfgs(obj, w, gtol)
        iterations += extra
        trace[0] = None
        w, gnorm, extra, ok = _newton(obj, w, gtol, max_iter, trace)
        iterations += extra
        method += "+l-bfgs-b"
    if not ok or not np.all(np.isfinite(w)):
        raise ConvergenceError(
            f"the ERM solver did not reach the exact minimiser (gradient tolerance {gtol:.1e}) "
            f"within {iterations} iterations; no model was released"
        )
    return SolverResult(
        coef=w,
        iterations=iterations,
        gradient_norm=gnorm,
        gradient_tolerance=gtol,
        strong_convexity=obj.mu,
        method=method,
        final_pass=trace[0],
    )


def minimize_erm(
    X: FloatArray,
    y: FloatArray,
    loss: Loss,
    *,
    regularization: float,
    linear: FloatArray | None = None,
    extra_regularization: float = 0.0,
    centre: FloatArray | None = None,
    centre_weight: float = 0.0,
    tol: float = DEFAULT_TOLERANCE,
    max_iter: int = 200,
) -> FloatArray:
    """The exact minimiser of J (see :func:`solve_erm`), as a float64 vector."""
    return solve_erm(
        X,
        y,
        loss,
        regularization=regularization,
        linear=linear,
        extra_regularization=extra_regularization,
        centre=centre,
        centre_weight=centre_weight,
        tol=tol,
        max_iter=max_iter,
    ).coef


# ----------------------------------------------------------------------------------------------


def _build(
    X: FloatArray,
    y: FloatArray,
    loss: Loss,
    regularization: float,
    linear: FloatArray | None,
    extra_regularization: float,
    centre: FloatArray | None,
    centre_weight: float,
) -> _Objective:
    X = np.ascontiguousarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError("X must be a non-empty 2-D array")
    n, d = X.shape
    y = np.ascontiguousarray(y, dtype=np.float64).reshape(-1)
    if y.shape[0] != n:
        raise ValueError(f"y has {y.shape[0]} entries but X has {n} rows")
    for name, value, positive in (
        ("regularization", regularization, True),
        ("extra_regularization", extra_regularization, False),
        ("centre_weight", centre_weight, False),
    ):
        if not np.isfinite(value) or value < 0.0 or (positive and value == 0.0):
            bound = "> 0" if positive else "≥ 0"
            raise ValueError(f"{name} must be finite and {bound}, got {value!r}")
    mu = float(regularization) + float(extra_regularization) + float(centre_weight)
    g = np.zeros(d)
    if linear is not None:
        b = np.asarray(linear, dtype=np.float64).reshape(-1)
        if b.shape[0] != d or not np.all(np.isfinite(b)):
            raise ValueError(f"linear must be a finite vector of length {d}")
        g += b / n
    if centre is not None:
        w0 = np.asarray(centre, dtype=np.float64).reshape(-1)
        if w0.shape[0] != d or not np.all(np.isfinite(w0)):
            raise ValueError(f"centre must be a finite vector of length {d}")
        g -= centre_weight * w0
    elif centre_weight != 0.0:
        raise ValueError("centre_weight needs a centre")
    return _Objective(X=X, y=y, loss=loss, mu=mu, g=g)


def _with_float32_copy(obj: _Objective) -> _Objective:
    """``obj`` with the float32 copy of X and y, plus what is taken from each block of the
    copy while it is in cache: Xᵀy and a contiguous copy of every ``_STRIDE``-th row. When
    (X, y) are the arrays of the :class:`~service.dp.data.prepared.PreparedDesign` being fitted,
    the copy made by its first fit is reused (it depends on X and y only)."""
    design = active_design(obj.X, obj.y)
    if design is None:
        X32, y32, xty, sub = _float32_work(obj.X, obj.y)
    else:
        X32, y32, xty, sub = design.derived("solver.float32", lambda: _float32_work(obj.X, obj.y))
    return dataclasses.replace(obj, X32=X32, y32=y32, xty=xty, X32_sub=sub)


def _float32_work(
    X: FloatArray, y: FloatArray
) -> tuple[Float32Array, Float32Array, FloatArray, Float32Array]:
    """(X32, y32, Xᵀy, every ``_STRIDE``-th row of X32) in one blocked pass over X."""
    n, d = X.shape
    X32 = np.empty((n, d), dtype=np.float32)
    sub = np.empty((-(-n // _STRIDE), d), dtype=np.float32)
    y32 = y.astype(np.float32)
    xty = np.zeros(d)
    rows = _block_rows(X32)
    for start in range(0, n, rows):
        block = X32[start : start + rows]
        np.copyto(block, X[start : start + rows], casting="same_kind")
        xty += block.T @ y32[start : start + rows]
        first = -start % _STRIDE  # the block's first row with index ≡ 0 (mod _STRIDE)
        picked = block[first::_STRIDE]
        lo = (start + first) // _STRIDE
        sub[lo : lo + picked.shape[0]] = picked
    for array in (X32, y32, xty, sub):  # read-only: a prepared design shares them
        array.flags.writeable = False
    return X32, y32, xty, sub


def _newton(
    obj: _Objective,
    w: FloatArray,
    gtol: float,
    max_iter: int,
    trace: list[FinalPass | None] | None = None,
) -> tuple[FloatArray, float, int, bool]:
    """Damped Newton (module docstring); returns (w, ‖∇J(w)‖ in float64, iterations,
    converged). With ``trace``, its single entry is set to the :class:`FinalPass` of the
    returned point (None when that point came from a line search)."""
    d = w.shape[0]
    dense = d <= DENSE_NEWTON_MAX_DIM
    iterations = 0
    factor: _Factor | None = None
    if obj.X32 is not None:
        target = max(gtol, _SWITCH * (1.0 + _norm(obj.g)))
        # at most half the budget: the float64 phase must have room to finish
        w, iterations, factor = _float32_phase(obj, w, target, max(1, max_iter // 2))
    keep: dict[str, Any] | None = {} if trace is not None else None
    _, z, d2, grad = obj.evaluate(w, keep=keep)
    margin_error = gamma(d) * norm_up(w)
    gnorm = _norm(grad)
    f: float | None = None  # J(w), computed only when a step has to be judged by it
    for it in range(iterations, max_iter):
        if gnorm <= gtol:
            if trace is not None:
                trace[0] = _final_pass(z, margin_error, keep)
            return w, gnorm, it, True
        step: FloatArray | None = None
        if dense:
            if factor is not None and obj.X32 is not None:
                # the float32 phase left a Hessian factor: precondition CG on float32 products,
                # asking for a residual that should put the next gradient well below gtol
                rtol = min(0.1, max(1e-6, _B_MARGIN * gtol / gnorm))
                solved = _pcg(obj, d2, -grad, factor, rtol, _MAX_PCG_FLOAT64)
                step = None if solved is None else solved[0]
            if step is None:
                factor = _cholesky(obj.hessian(d2))
                step = None if factor is None else _solve(factor, -grad)
            if step is None or not float(grad @ step) < 0.0:
                # float32 rounding can matter when μ is tiny next to ‖H‖: redo in float64
                factor = None
                step = _dense_step(obj, d2, grad, precise=True)
                if step is None:
                    return w, gnorm, it, False
        else:
            step = _cg_step(obj, d2, grad, gnorm)
        slope = float(grad @ step)
        if not slope < 0.0:
            return w, gnorm, it, False
        # the full step first, with its gradient in the same pass over X (near the optimum
        # it is the step taken); the line search proper only if it is rejected
        # (a point that meets the tolerance is the answer whatever J does there)
        w_t = w + step
        keep_t: dict[str, Any] | None = {} if trace is not None else None
        dz, z_t, d2_t, grad_t = obj.evaluate(w_t, z, step, keep=keep_t)
        # FinalPass: the margins' error after this step's incremental update
        error_t = (
            margin_error
            + gamma(d) * norm_up(step)
            + UNIT_ROUNDOFF * float(np.max(np.abs(z_t)))
            + UNIT_ROUNDOFF * norm_up(w_t)
        ) * (1.0 + 2.0**-20)
        gnorm_t = _norm(grad_t)
        if gnorm_t <= gtol:
            w, z, d2, grad, gnorm, f = w_t, z_t, d2_t, grad_t, gnorm_t, None
            keep, margin_error = keep_t, error_t
            continue
        if f is None:
            f = obj.value(w, z)
        f_t = obj.value(w_t, z_t)
        if f_t <= f + _ARMIJO * slope or (
            abs(f_t - f) <= _ROUNDING * max(1.0, abs(f)) and gnorm_t < gnorm
        ):
            w, z, f, d2, grad, gnorm = w_t, z_t, f_t, d2_t, grad_t, gnorm_t
            keep, margin_error = keep_t, error_t
            continue
        searched = _line_search(
            obj,
            w,
            step,
            slope,
            z,
            dz,
            f,
            gnorm,
            obj.mean_loss,
            lambda v, zv: obj.gradient(v, obj.derivatives(zv)[0]),
            _ROUNDING,
            first=0.5,
        )
        if searched is None:
            return w, gnorm, it, False
        t, z, f = searched
        keep = None  # margins from the line search: no FinalPass for this point
        factor = None  # a damped step: the last Hessian is no guide to the next one
        w = w + t * step
        d1, d2 = obj.derivatives(z)
        grad = obj.gradient(w, d1)
        gnorm = _norm(grad)
    if trace is not None and gnorm <= gtol:
        trace[0] = _final_pass(z, margin_error, keep)
    return w, gnorm, max_iter, gnorm <= gtol


def _final_pass(
    z: FloatArray, margin_error: float, keep: dict[str, Any] | None
) -> FinalPass | None:
    if keep is None or "loss_sum" not in keep:
        return None
    return FinalPass(
        margins=z,
        margin_error=margin_error,
        derivatives=keep["derivatives"],
        loss_sum=keep["loss_sum"],
        block_rows=int(keep["rows"]),
        blocks=int(keep["blocks"]),
    )


def _float32_phase(
    obj: _Objective, w: FloatArray, target: float, max_iter: int
) -> tuple[FloatArray, int, _Factor | None]:
    """Newton on the float32 copy until its gradient norm is ≤ ``target``.

    While ‖∇J‖ > ``_FAR``·(1 + ‖g‖) the Hessian comes from every ``_STRIDE``-th row. Then one
    full Hessian is factorised and each step is preconditioned CG with it, a fresh one being
    formed only when CG would need more than ``_MAX_PCG`` products.

    Returns (w, iterations, Cholesky factor of the last Hessian or None). It never declares
    convergence; when a step fails (float32 Hessian indefinite, line search stuck) it just
    stops and the float64 phase carries on from w.
    """
    n, d = obj.X.shape
    dense = d <= DENSE_NEWTON_MAX_DIM
    scale = 1.0 + _norm(obj.g)
    far = _FAR * scale
    stride = _STRIDE if n >= _STRIDE * _MIN_ROWS_PER_DIM * d else 1
    _, y32 = obj._data32()
    if w.any() or obj.xty is None:
        z = obj.margins32(w)
        d1, d2 = obj.derivatives32(z)
        grad = obj.gradient32(w, d1)
    else:  # w = 0: every margin is 0, and ∇J = l'(0)·Xᵀy/n + g
        z = np.zeros(n, dtype=np.float32)
        d1_0, d2_0 = obj.derivatives32(z[:1])
        d2 = np.full(n, d2_0[0], dtype=np.float32)
        grad = (float(d1_0[0]) / n) * obj.xty + obj.g
    gnorm = _norm(grad)
    f: float | None = None  # J(w), computed only when a step has to be judged by it
    factor: _Factor | None = None
    factor_full = False
    full_step = True  # was the last step undamped (the quadratic model fits, reuse H)?
    progress, progress_it = gnorm, 0  # when ‖∇J‖ last halved
    it = 0
    # C in ‖∇J(w + s)‖ ≈ C‖∇J(w)‖², from the last full step along an exact (float32) Newton
    # direction
    quadratic: float | None = None
    while it < max_iter and gnorm > target:
        it += 1
        step: FloatArray | None = None
        dz: Float32Array | None = None
        newton = False
        if not dense:
            step = _cg_step(obj, d2, grad, gnorm)
        elif gnorm > far and stride > 1:
            factor, factor_full = _cholesky(obj.hessian(d2, stride=stride)), False
            step = None if factor is None else _solve(factor, -grad)
        else:
            if factor is not None and factor_full and full_step:
                rtol = min(0.1, max(_A_RTOL_FLOOR, gnorm / scale))
                solved = _pcg(obj, d2, -grad, factor, rtol, _MAX_PCG)
                if solved is not None:
                    step = solved[0]
                    dz = np.multiply(y32, solved[1], dtype=np.float32)
                    if (
                        quadratic is not None
                        and rtol * gnorm + quadratic * gnorm**2 <= _PREDICTED_MARGIN * target
                    ):
                        # Newton's local model puts the next gradient far below the target:
                        # take the step and let the float64 phase measure the gradient
                        return w + step, it, factor
            if step is None:
                factor, factor_full = _cholesky(obj.hessian(d2)), True
                step = None if factor is None else _solve(factor, -grad)
                newton = factor is not None
        if step is None:
            break
        slope = float(grad @ step)
        if not slope < 0.0:
            break
        # the full step is taken at once if it halves the gradient norm (Newton's regime; the
        # gradient is needed next anyway); otherwise an Armijo search on J decides
        w_t = w + step
        if dz is None:
            dz, z_t, d2_t, grad_t = obj.evaluate32(w_t, z, step)
        else:
            z_t = z + dz
            d1, d2_t = obj.derivatives32(z_t)
            grad_t = obj.gradient32(w_t, d1)
        if _norm(grad_t) <= _GRADIENT_DECREASE * gnorm:
            if newton:
                quadratic = _norm(grad_t) / gnorm**2
            w, z, d2, grad, gnorm, f = w_t, z_t, d2_t, grad_t, _norm(grad_t), None
            full_step = True
            progress, progress_it = gnorm, it
            continue
        if f is None:
            f = obj.mean_loss32(z) + 0.5 * obj.mu * float(w @ w) + float(obj.g @ w)
        searched = _line_search(
            obj,
            w,
            step,
            slope,
            z,
            dz,
            f,
            gnorm,
            obj.mean_loss32,
            lambda v, zv: obj.gradient32(v, obj.derivatives32(zv)[0]),
            _ROUNDING32,
        )
        if searched is None:
            break
        t, z, f = searched
        full_step = t == 1.0
        if full_step:  # the trial point after all: its gradient is at hand
            w, z, d2, grad = w_t, z_t, d2_t, grad_t
        else:
            w = w + t * step
            d1, d2 = obj.derivatives32(z)
            grad = obj.gradient32(w, d1)
        gnorm = _norm(grad)
        # no halving of ‖∇J‖ in several steps: a hard problem (a semismooth loss with a tiny
        # ridge, say) where float32 values of J are too coarse to guide the search, so the
        # float64 phase takes over
        if gnorm <= 0.5 * progress:
            progress, progress_it = gnorm, it
        elif it - progress_it >= _MAX_STALLED:
            break
    return w, it, factor if full_step else None


def _line_search(
    obj: _Objective,
    w: FloatArray,
    step: FloatArray,
    slope: float,
    z: _Z,
    dz: _Z,
    f: float,
    gnorm: float,
    mean_loss: Callable[[_Z], float],
    gradient_at: Callable[[FloatArray, _Z], FloatArray],
    rounding: float,
    *,
    first: float = 1.0,
) -> tuple[float, _Z, float] | None:
    """Armijo backtracking on the cached margins; returns (t, z + t·dz, J there) or None.

    In the rounding regime (|ΔJ| ≤ ``rounding``·max(1, |J|)) a step that lowers the gradient
    norm is accepted instead.
    """
    ww, wp, pp = float(w @ w), float(w @ step), float(step @ step)
    gw, gp = float(obj.g @ w), float(obj.g @ step)
    noise = rounding * max(1.0, abs(f))
    t = first
    for _ in range(_MAX_BACKTRACKS):
        z_t = z + z.dtype.type(t) * dz
        f_t = mean_loss(z_t) + 0.5 * obj.mu * (ww + 2.0 * t * wp + t * t * pp) + gw + t * gp
        if f_t <= f + _ARMIJO * t * slope:
            return t, z_t, f_t
        # rounding regime: objective differences are meaningless; trust the gradient
        if abs(f_t - f) <= noise and _norm(gradient_at(w + t * step, z_t)) < gnorm:
            return t, z_t, f_t
        t *= 0.5
    return None


def _cholesky(h: FloatArray) -> _Factor | None:
    """Cholesky factor of h, or None when h is not numerically positive definite."""
    if not bool(np.all(np.isfinite(h))):
        return None
    try:
        c, lower = linalg.cho_factor(h, lower=True, check_finite=False)
    except linalg.LinAlgError:
        return None
    return np.asarray(c, dtype=np.float64), bool(lower)


def _solve(factor: _Factor, rhs: FloatArray) -> FloatArray | None:
    out = np.asarray(linalg.cho_solve(factor, rhs, check_finite=False), dtype=np.float64)
    return out if bool(np.all(np.isfinite(out))) else None


def _pcg(
    obj: _Objective,
    d2: NDArray[np.floating],
    rhs: FloatArray,
    factor: _Factor,
    rtol: float,
    max_iter: int,
) -> tuple[FloatArray, NDArray[np.floating]] | None:
    """Solve H(d2) s = rhs by conjugate gradients preconditioned with a factorised (older)
    Hessian, on Hessian–vector products (:meth:`_Objective.hessp`).

    Returns (s, X s) once ‖H s − rhs‖ ≤ rtol·‖rhs‖ (X s accumulated from the products, in
    their precision), or None when that would take more than ``max_iter`` products at the
    contraction seen so far (the factor is then too stale).
    """
    target = rtol * _norm(rhs)
    x = np.zeros_like(rhs)
    xs: NDArray[np.floating] | None = None
    r = rhs.copy()
    zr = _solve(factor, r)
    if zr is None:
        return None
    p = zr.copy()
    rz = float(r @ zr)
    rnorm0 = _norm(r)
    for k in range(1, max_iter + 1):
        hp, xp = obj.hessp(d2, p)
        curvature = float(p @ hp)
        if not curvature > 0.0:
            return None
        alpha = rz / curvature
        x += alpha * p
        if xs is None:
            xs = xp * xp.dtype.type(alpha)
        else:
            xs += xp.dtype.type(alpha) * xp
        r -= alpha * hp
        rnorm = _norm(r)
        if rnorm <= target:
            return x, xs
        # residuals shrink about geometrically: give up early if max_iter will not do
        rate = (rnorm / rnorm0) ** (1.0 / k)
        if k == max_iter or (k >= 2 and rnorm * rate ** (max_iter - k) > target):
            return None
        zr = _solve(factor, r)
        if zr is None:
            return None
        rz_next = float(r @ zr)
        p = zr + (rz_next / rz) * p
        rz = rz_next
    return None


def _cg_step(
    obj: _Objective, d2: NDArray[np.floating], grad: FloatArray, gnorm: float
) -> FloatArray:
    """Truncated-Newton direction: CG on H p = −∇J to relative residual min(0.5, √‖∇J‖)."""
    d = grad.shape[0]

    def matvec(v: FloatArray) -> FloatArray:
        return obj.hessp(d2, np.asarray(v, dtype=np.float64).reshape(d))[0]

    from scipy.sparse.linalg import LinearOperator, cg  # here: see _lbfgs

    op = LinearOperator((d, d), matvec=matvec, dtype=np.float64)
    step, _ = cg(op, -grad, rtol=min(0.5, math.sqrt(gnorm)), maxiter=10 * d)
    return np.asarray(step, dtype=np.float64)


def _dense_step(
    obj: _Objective, d2: FloatArray, grad: FloatArray, *, precise: bool
) -> FloatArray | None:
    """The Newton step −H⁻¹∇J by LU, or None when H is numerically singular."""
    try:
        step = np.asarray(np.linalg.solve(obj.hessian(d2, precise=precise), -grad), np.float64)
    except np.linalg.LinAlgError:
        return None
    return step if bool(np.all(np.isfinite(step))) else None


def _block_rows(X: NDArray[np.floating]) -> int:
    n, d = X.shape
    return max(1, min(int(n), _BLOCK_BYTES // (int(d) * int(X.itemsize))))


def _norm(v: FloatArray) -> float:
    return math.sqrt(float(v @ v))


def _lbfgs(obj: _Objective, w: FloatArray, gtol: float) -> tuple[FloatArray, float, int, bool]:
    """Fallback: L-BFGS-B (float64) with the gradient test in the ∞-norm tightened by √d."""

    def fun(v: FloatArray) -> tuple[float, FloatArray]:
        z = obj.margins(v)
        d1, _ = obj.derivatives(z)
        return obj.value(v, z), obj.gradient(v, d1)

    from scipy import optimize  # here, not at the top: processes that never solve skip it

    res = optimize.minimize(
        fun,
        w,
        jac=True,
        method="L-BFGS-B",
        options={
            "gtol": gtol / np.sqrt(w.shape[0]),
            "ftol": 0.0,
            "maxiter": 20_000,
            "maxcor": 30,
        },
    )
    v = np.asarray(res.x, dtype=np.float64)
    _, grad = fun(v)
    gnorm = float(np.linalg.norm(grad))
    return v, gnorm, int(res.nit), gnorm <= gtol
