"""The exact ERM solver: agreement with scikit-learn, closed forms, optimality, failure."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from numpy.typing import NDArray

from service.dp.core.losses import HuberLoss, LogisticLoss
from service.dp.optimize import solvers
from service.dp.optimize.solvers import ConvergenceError, erm_gradient, erm_objective, solve_erm


def _data(n: int, d: int, seed: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True) * rng.uniform(1.0, 1.5, size=(n, 1))
    w = rng.normal(size=d) * 3.0
    y = np.where(rng.random(n) < 1.0 / (1.0 + np.exp(-X @ w)), 1.0, -1.0)
    return X, y


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # sklearn's lbfgs passes iprint
@pytest.mark.parametrize("lam", [1e-2, 1e-3, 1e-4])
@pytest.mark.parametrize("sk_solver", ["lbfgs", "newton-cholesky"])
def test_matches_sklearn_logistic_regression(lam: float, sk_solver: str) -> None:
    from sklearn.linear_model import LogisticRegression

    X, y = _data(500, 8, seed=3)
    n = X.shape[0]
    ours = solve_erm(X, y, LogisticLoss(), regularization=lam)
    # sklearn minimises C Σ log(1 + e^{−y wᵀx}) + ½‖w‖², i.e. our J times 1/(Cn·...) with C = 1/(nλ)
    ref = LogisticRegression(
        C=1.0 / (n * lam), fit_intercept=False, tol=1e-12, max_iter=100_000, solver=sk_solver
    ).fit(X, y)
    np.testing.assert_allclose(ours.coef, ref.coef_.ravel(), atol=1e-6, rtol=0)
    assert ours.gradient_norm <= ours.gradient_tolerance
    assert ours.gradient_tolerance == pytest.approx(1e-10)


def test_huber_closed_form_with_every_term() -> None:
    """All margins in Huber's linear piece (l = 1 − z): ∇J = −(1/n)Σ y x + μw + b/n − ηw₀ = 0
    gives w = ((1/n)Σ y_i x_i − b/n + ηw₀)/μ with μ = λ + Δ + η."""
    rng = np.random.default_rng(0)
    n, d = 40, 3
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    lam, extra, eta = 5.0, 1.0, 2.0
    b = np.array([0.3, -0.2, 0.1])
    w0 = np.array([0.01, 0.02, -0.03])
    mu = lam + extra + eta
    expected = (X.T @ y / n - b / n + eta * w0) / mu
    assert np.all(y * (X @ expected) < 1.0 - 0.5)  # really in the linear piece
    got = solve_erm(
        X,
        y,
        HuberLoss(h=0.5),
        regularization=lam,
        linear=b,
        extra_regularization=extra,
        centre=w0,
        centre_weight=eta,
    )
    np.testing.assert_allclose(got.coef, expected, atol=1e-13)


@pytest.mark.parametrize("loss", [LogisticLoss(), HuberLoss(h=0.1), HuberLoss(h=1.0)])
def test_first_order_condition_and_gradient(loss: LogisticLoss | HuberLoss) -> None:
    X, y = _data(300, 6, seed=1)
    kwargs = {
        "regularization": 1e-3,
        "linear": np.linspace(-3, 3, 6),
        "extra_regularization": 1e-3,
        "centre": np.full(6, 0.5),
        "centre_weight": 1e-2,
    }
    res = solve_erm(X, y, loss, **kwargs)  # type: ignore[arg-type]
    g = erm_gradient(X, y, loss, res.coef, **kwargs)  # type: ignore[arg-type]
    assert np.linalg.norm(g) <= res.gradient_tolerance
    assert res.distance_bound == pytest.approx(res.gradient_norm / (1e-3 + 1e-3 + 1e-2))
    # the analytic gradient agrees with finite differences of the objective
    w = res.coef + 0.1
    g = erm_gradient(X, y, loss, w, **kwargs)  # type: ignore[arg-type]
    h = 1e-6
    fd = np.array(
        [
            (
                erm_objective(X, y, loss, w + h * e, **kwargs)  # type: ignore[arg-type]
                - erm_objective(X, y, loss, w - h * e, **kwargs)  # type: ignore[arg-type]
            )
            / (2 * h)
            for e in np.eye(6)
        ]
    )
    np.testing.assert_allclose(g, fd, atol=1e-7)
    # and the minimiser beats perturbed points
    f0 = erm_objective(X, y, loss, res.coef, **kwargs)  # type: ignore[arg-type]
    rng = np.random.default_rng(2)
    for _ in range(5):
        v = res.coef + 1e-3 * rng.normal(size=6)
        assert erm_objective(X, y, loss, v, **kwargs) > f0  # type: ignore[arg-type]


def test_conjugate_gradient_path_agrees(monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = _data(400, 12, seed=4)
    dense = solve_erm(X, y, LogisticLoss(), regularization=1e-3, linear=np.ones(12))
    monkeypatch.setattr(solvers, "DENSE_NEWTON_MAX_DIM", 0)
    cg = solve_erm(X, y, LogisticLoss(), regularization=1e-3, linear=np.ones(12))
    assert dense.method == "newton-cholesky"
    assert cg.method == "newton-cg"
    np.testing.assert_allclose(cg.coef, dense.coef, atol=1e-9)


def test_float64_hessian_when_float32_misleads(monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = _data(300, 5, seed=9)
    exact = solve_erm(X, y, LogisticLoss(), regularization=1e-3)
    real = solvers._Objective.hessian
    precise_calls: list[bool] = []

    def hessian(
        self: object, d2: NDArray[np.float64], *, precise: bool = False, stride: int = 1
    ) -> object:
        precise_calls.append(precise)
        if not precise:  # an indefinite "float32" Hessian: its Newton step is uphill
            return -np.eye(5)
        return real(self, d2, precise=True, stride=stride)  # type: ignore[arg-type]

    monkeypatch.setattr(solvers._Objective, "hessian", hessian)
    res = solve_erm(X, y, LogisticLoss(), regularization=1e-3)
    assert True in precise_calls
    assert res.method == "newton-cholesky"
    np.testing.assert_allclose(res.coef, exact.coef, atol=1e-9)


def test_lbfgs_fallback_when_newton_stalls_once(monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = _data(300, 5, seed=5)
    exact = solve_erm(X, y, LogisticLoss(), regularization=1e-2)

    real_newton = solvers._newton
    calls: list[int] = []

    def stalled_once(
        obj: object,
        w: NDArray[np.float64],
        gtol: float,
        max_iter: int,
        trace: list[solvers.FinalPass | None] | None = None,
    ) -> tuple[NDArray[np.float64], float, int, bool]:
        calls.append(1)
        if len(calls) == 1:
            return w, np.inf, 0, False
        return real_newton(obj, w, gtol, max_iter, trace)  # type: ignore[arg-type]

    monkeypatch.setattr(solvers, "_newton", stalled_once)
    res = solve_erm(X, y, LogisticLoss(), regularization=1e-2)
    assert res.method.endswith("+l-bfgs-b")
    assert len(calls) == 2
    assert res.gradient_norm <= res.gradient_tolerance
    np.testing.assert_allclose(res.coef, exact.coef, atol=1e-8)


def test_newton_that_always_stalls_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = _data(300, 5, seed=5)

    def stalled(
        obj: object,
        w: NDArray[np.float64],
        gtol: float,
        max_iter: int,
        trace: list[solvers.FinalPass | None] | None = None,
    ) -> tuple[NDArray[np.float64], float, int, bool]:
        return w, np.inf, 0, False

    monkeypatch.setattr(solvers, "_newton", stalled)
    with pytest.raises(ConvergenceError):
        solve_erm(X, y, LogisticLoss(), regularization=1e-2)


def test_unreachable_tolerance_raises_convergence_error() -> None:
    X, y = _data(200, 4, seed=6)
    with pytest.raises(ConvergenceError, match="did not reach the exact minimiser") as info:
        solve_erm(X, y, LogisticLoss(), regularization=1e-3, tol=1e-300)
    assert isinstance(info.value, RuntimeError)


def test_warm_start_gives_the_same_minimiser() -> None:
    X, y = _data(200, 4, seed=7)
    cold = solve_erm(X, y, LogisticLoss(), regularization=1e-3)
    warm = solve_erm(X, y, LogisticLoss(), regularization=1e-3, initial=cold.coef + 0.5)
    np.testing.assert_allclose(warm.coef, cold.coef, atol=1e-10)


def test_tiny_regularisation_on_separable_data_still_converges() -> None:
    rng = np.random.default_rng(8)
    X = rng.normal(size=(200, 3))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.sign(X[:, 0])
    res = solve_erm(X, y, LogisticLoss(), regularization=1e-6)
    assert res.gradient_norm <= res.gradient_tolerance
    assert np.all(y * (X @ res.coef) > 0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"regularization": 0.0}, "regularization"),
        ({"regularization": np.nan}, "regularization"),
        ({"regularization": 1.0, "extra_regularization": -1.0}, "extra_regularization"),
        ({"regularization": 1.0, "linear": np.ones(3)}, "linear"),
        ({"regularization": 1.0, "linear": np.array([np.nan, 0.0])}, "linear"),
        ({"regularization": 1.0, "centre_weight": 1.0}, "centre"),
        ({"regularization": 1.0, "centre": np.ones(5), "centre_weight": 1.0}, "centre"),
        ({"regularization": 1.0, "tol": 0.0}, "tol"),
        ({"regularization": 1.0, "max_iter": 0}, "max_iter"),
    ],
)
def test_rejects_bad_arguments(kwargs: dict[str, object], match: str) -> None:
    X = np.array([[0.5, 0.1], [0.2, -0.3]])
    y = np.array([1.0, -1.0])
    with pytest.raises(ValueError, match=match):
        solve_erm(X, y, LogisticLoss(), **kwargs)  # type: ignore[arg-type]


def test_rejects_mismatched_labels() -> None:
    with pytest.raises(ValueError, match="y has 3 entries"):
        solve_erm(np.zeros((2, 2)), np.ones(3), LogisticLoss(), regularization=1.0)


# --- the float32 phase (n·d ≥ 2^15: a float32 copy of X, subsampled and reused Hessians) ------

_OP_KWARGS: dict[str, object] = {
    "regularization": 1e-3,
    "linear": np.linspace(-40.0, 40.0, 12),
    "extra_regularization": 1e-4,
    "centre": np.full(12, 0.3),
    "centre_weight": 1e-3,
}


def _float64_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(solvers, "_FLOAT32_MIN_ENTRIES", 1 << 62)


@pytest.mark.parametrize("loss", [LogisticLoss(), HuberLoss(h=0.1), HuberLoss(h=1.0)])
@pytest.mark.parametrize("kwargs", [{"regularization": 1e-3}, _OP_KWARGS])
def test_float32_phase_reaches_the_float64_tolerance(
    loss: LogisticLoss | HuberLoss, kwargs: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    X, y = _data(4000, 12, seed=11)
    fast = solve_erm(X, y, loss, **kwargs)  # type: ignore[arg-type]
    # the tolerance holds for ∇J recomputed in float64 from X, not just for the solver's own view
    g = erm_gradient(X, y, loss, fast.coef, **kwargs)  # type: ignore[arg-type]
    assert np.linalg.norm(g) <= fast.gradient_tolerance
    assert fast.gradient_norm == pytest.approx(float(np.linalg.norm(g)), rel=1e-6, abs=1e-15)
    _float64_only(monkeypatch)
    slow = solve_erm(X, y, loss, **kwargs)  # type: ignore[arg-type]
    # both are within ‖∇J‖/μ of the unique minimiser
    assert np.linalg.norm(fast.coef - slow.coef) <= fast.distance_bound + slow.distance_bound


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # sklearn's lbfgs passes iprint
def test_float32_phase_matches_sklearn() -> None:
    from sklearn.linear_model import LogisticRegression

    X, y = _data(5000, 10, seed=12)
    lam = 1e-3
    ours = solve_erm(X, y, LogisticLoss(), regularization=lam)
    ref = LogisticRegression(
        C=1.0 / (X.shape[0] * lam),
        fit_intercept=False,
        tol=1e-12,
        max_iter=100_000,
        solver="newton-cholesky",
    ).fit(X, y)
    np.testing.assert_allclose(ours.coef, ref.coef_.ravel(), atol=1e-6, rtol=0)


def test_float32_phase_uses_subsampled_and_reused_hessians(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    X, y = _data(6000, 12, seed=13)
    strides: list[int] = []
    products: list[int] = []
    real_hessian = solvers._Objective.hessian
    real_hessp = solvers._Objective.hessp

    def hessian(
        self: solvers._Objective, d2: NDArray[np.float64], *, precise: bool = False, stride: int = 1
    ) -> NDArray[np.float64]:
        strides.append(stride)
        return real_hessian(self, d2, precise=precise, stride=stride)

    def hessp(
        self: solvers._Objective, d2: NDArray[np.float64], v: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.floating]]:
        products.append(1)
        return real_hessp(self, d2, v)

    monkeypatch.setattr(solvers._Objective, "hessian", hessian)
    monkeypatch.setattr(solvers._Objective, "hessp", hessp)
    res = solve_erm(X, y, LogisticLoss(), regularization=1e-3, linear=np.ones(12))
    assert res.gradient_norm <= res.gradient_tolerance
    assert solvers._STRIDE in strides  # far from w*: Hessians from every 8th row
    assert strides.count(1) == 1  # one full Hessian, reused as a preconditioner
    assert products  # ... by conjugate gradients on Hessian–vector products


def test_no_float32_copy_above_the_memory_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = _data(4000, 12, seed=14)
    copied = solve_erm(X, y, LogisticLoss(), regularization=1e-3)
    monkeypatch.setattr(solvers, "FLOAT32_COPY_MAX_ENTRIES", X.size - 1)
    seen: list[bool] = []
    real_newton = solvers._newton

    def newton(
        obj: solvers._Objective,
        w: NDArray[np.float64],
        gtol: float,
        max_iter: int,
        trace: list[solvers.FinalPass | None] | None = None,
    ) -> tuple[NDArray[np.float64], float, int, bool]:
        seen.append(obj.X32 is None)
        return real_newton(obj, w, gtol, max_iter, trace)

    monkeypatch.setattr(solvers, "_newton", newton)
    uncopied = solve_erm(X, y, LogisticLoss(), regularization=1e-3)
    assert seen == [True]
    assert np.linalg.norm(copied.coef - uncopied.coef) <= (
        copied.distance_bound + uncopied.distance_bound
    )


@pytest.mark.parametrize("loss", [LogisticLoss(), HuberLoss(h=0.1)])
def test_float32_phase_on_separable_data_with_tiny_regularisation(
    loss: LogisticLoss | HuberLoss, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Weights in the hundreds (margins far beyond float32's resolution of l'): the float32
    phase gets close, or for the semismooth Huber loss gives up once it stops making progress
    (instead of burning its half of the iteration budget), and the float64 phase finishes."""
    rng = np.random.default_rng(15)
    X = rng.normal(size=(4000, 10))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.sign(X[:, 0])
    phase_iterations: list[int] = []
    real_phase = solvers._float32_phase

    def phase(
        obj: solvers._Objective, w: NDArray[np.float64], target: float, max_iter: int
    ) -> tuple[NDArray[np.float64], int, object]:
        out = real_phase(obj, w, target, max_iter)
        phase_iterations.append(out[1])
        return out

    monkeypatch.setattr(solvers, "_float32_phase", phase)
    res = solve_erm(X, y, loss, regularization=1e-6)
    g = erm_gradient(X, y, loss, res.coef, regularization=1e-6)
    assert np.linalg.norm(g) <= res.gradient_tolerance
    assert np.linalg.norm(res.coef) > 50.0
    assert len(phase_iterations) == 1
    assert phase_iterations[0] < 20  # of a budget of 100
    _float64_only(monkeypatch)
    ref = solve_erm(X, y, loss, regularization=1e-6)
    assert np.linalg.norm(res.coef - ref.coef) <= res.distance_bound + ref.distance_bound


def test_float64_phase_recovers_from_a_bad_float32_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the float32 phase hands over (a poor point, a useless factor), the float64
    phase still reaches the tolerance: the float32 phase only shortens the path."""
    X, y = _data(4000, 12, seed=16)
    exact = solve_erm(X, y, LogisticLoss(), regularization=1e-3)

    def bad_phase(
        obj: solvers._Objective, w: NDArray[np.float64], target: float, max_iter: int
    ) -> tuple[NDArray[np.float64], int, object]:
        factor = solvers._cholesky(1e6 * np.eye(w.shape[0]))  # a wildly wrong "Hessian"
        return w + 1.0, 1, factor

    monkeypatch.setattr(solvers, "_float32_phase", bad_phase)
    res = solve_erm(X, y, LogisticLoss(), regularization=1e-3)
    assert res.gradient_norm <= res.gradient_tolerance
    assert np.linalg.norm(res.coef - exact.coef) <= res.distance_bound + exact.distance_bound


def test_float32_path_unreachable_tolerance_raises() -> None:
    X, y = _data(4000, 12, seed=17)
    with pytest.raises(ConvergenceError, match="did not reach the exact minimiser"):
        solve_erm(X, y, LogisticLoss(), regularization=1e-3, tol=1e-300, max_iter=20)


def test_conjugate_gradient_path_with_float32_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = _data(4000, 12, seed=18)
    dense = solve_erm(X, y, HuberLoss(h=0.5), regularization=1e-3, linear=np.ones(12))
    monkeypatch.setattr(solvers, "DENSE_NEWTON_MAX_DIM", 0)
    cg = solve_erm(X, y, HuberLoss(h=0.5), regularization=1e-3, linear=np.ones(12))
    assert cg.method == "newton-cg"
    assert cg.gradient_norm <= cg.gradient_tolerance
    assert np.linalg.norm(cg.coef - dense.coef) <= cg.distance_bound + dense.distance_bound


# --- the building blocks --------------------------------------------------------------------


def _objective(
    n: int, d: int, seed: int, loss: LogisticLoss | HuberLoss, *, float32: bool
) -> solvers._Objective:
    X, y = _data(n, d, seed)
    obj = solvers._build(X, y, loss, 1e-2, np.ones(d), 0.0, None, 0.0)
    if float32:
        obj = dataclasses.replace(obj, X32=obj.X.astype(np.float32), y32=obj.y.astype(np.float32))
    return obj


@pytest.mark.parametrize("loss", [LogisticLoss(), HuberLoss(h=0.3)])
def test_blocked_evaluate_matches_separate_passes(
    loss: LogisticLoss | HuberLoss, monkeypatch: pytest.MonkeyPatch
) -> None:
    obj = _objective(1003, 7, 19, loss, float32=False)
    monkeypatch.setattr(solvers, "_BLOCK_BYTES", 7 * 100 * 8)  # 11 blocks, the last one short
    rng = np.random.default_rng(20)
    w, v = rng.normal(size=7), rng.normal(size=7)
    z = obj.margins(w)
    dz, z2, d2, grad = obj.evaluate(w)
    np.testing.assert_allclose(z2, z, rtol=1e-14, atol=1e-14)
    np.testing.assert_array_equal(dz, z2)
    np.testing.assert_allclose(d2, obj.derivatives(z)[1], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(grad, obj.gradient(w, obj.derivatives(z)[0]), rtol=1e-12)
    # the trial point w + v from the margins at w
    dz, z_t, _, grad_t = obj.evaluate(w + v, z, v)
    np.testing.assert_allclose(dz, obj.y * (obj.X @ v), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(z_t, obj.margins(w + v), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        grad_t, obj.gradient(w + v, obj.derivatives(obj.margins(w + v))[0]), rtol=1e-11
    )


def test_float32_logistic_pieces_match_float64() -> None:
    obj = _objective(50, 3, 21, LogisticLoss(), float32=True)
    z = np.concatenate([np.linspace(-120.0, 120.0, 2001), [0.0, -1e-8, 1e-8]])
    z32 = z.astype(np.float32)
    d1, d2 = obj.derivatives(z)
    d1_32, d2_32 = obj.derivatives32(z32)
    assert d1_32.dtype == np.float32
    assert d2_32.dtype == np.float32
    np.testing.assert_allclose(d1_32, d1, rtol=0, atol=1e-6)
    np.testing.assert_allclose(d2_32, d2, rtol=0, atol=1e-6)
    # l'' = e^{−|z|}/(1 + e^{−|z|})² keeps its relative accuracy in the tails (where float64's
    # σ(z)(1 − σ(z)) has long since rounded to 0), down to float32's normal range
    e = np.exp(-np.abs(z))
    tails = e / (1.0 + e) ** 2
    normal = tails > 1e-36
    np.testing.assert_allclose(d2_32[normal], tails[normal], rtol=1e-5)
    big = dataclasses.replace(obj, X=np.zeros((z.size, 3)), y=np.ones(z.size))
    assert big.mean_loss32(z32) == pytest.approx(big.mean_loss(z), rel=1e-6)


def test_preconditioned_cg_solves_with_a_stale_factor() -> None:
    obj = _objective(800, 6, 22, LogisticLoss(), float32=False)  # float64 products: exact
    rng = np.random.default_rng(23)
    d2_old = obj.derivatives(obj.margins(np.zeros(6)))[1]
    d2_new = obj.derivatives(obj.margins(rng.normal(size=6)))[1]
    factor = solvers._cholesky(obj.hessian(d2_old, precise=True))
    assert factor is not None
    rhs = rng.normal(size=6)
    solved = solvers._pcg(obj, d2_new, rhs, factor, 1e-10, 50)
    assert solved is not None
    s, xs = solved
    h_new = obj.hessian(d2_new, precise=True)
    assert np.linalg.norm(h_new @ s - rhs) <= 1e-10 * np.linalg.norm(rhs) * 1.0001
    np.testing.assert_allclose(xs, obj.X @ s, rtol=1e-10, atol=1e-12)
    # a useless preconditioner and too few products: it says so instead of returning junk
    useless = solvers._cholesky(np.diag([1e6, 1.0, 1e-3, 1e3, 1e-2, 1e2]))
    assert useless is not None
    assert solvers._pcg(obj, d2_new, rhs, useless, 1e-10, 2) is None


def test_float32_copy_carries_x_transpose_y(monkeypatch: pytest.MonkeyPatch) -> None:
    """The copy is made block by block; Xᵀy (the gradient at w = 0 up to l'(0)/n and g) and
    a contiguous copy of every 8th row (for subsampled Hessians) are taken on the way."""
    obj = _objective(1003, 7, 24, LogisticLoss(), float32=False)
    monkeypatch.setattr(solvers, "_BLOCK_BYTES", 7 * 100 * 4)  # 11 blocks of float32 rows
    copied = solvers._with_float32_copy(obj)
    assert copied.X32 is not None
    assert copied.xty is not None
    np.testing.assert_array_equal(copied.X32, obj.X.astype(np.float32))
    np.testing.assert_allclose(copied.xty, obj.X.T @ obj.y, rtol=1e-5, atol=1e-4)
    # blocks of 100 rows, not a multiple of the stride: every 8th row all the same
    assert copied.X32_sub is not None
    np.testing.assert_array_equal(copied.X32_sub, copied.X32[:: solvers._STRIDE])
    d2 = np.linspace(0.01, 0.25, obj.n)
    np.testing.assert_allclose(
        copied.hessian(d2, stride=solvers._STRIDE),
        dataclasses.replace(copied, X32_sub=None).hessian(d2, stride=solvers._STRIDE),
        rtol=1e-6,
        atol=1e-9,
    )
    # the float32 phase's first gradient at w = 0 is then the float64 one to float32 accuracy
    d1_0 = obj.derivatives(np.zeros(1))[0][0]
    np.testing.assert_allclose(
        d1_0 * copied.xty / obj.n + obj.g,
        obj.gradient(np.zeros(7), np.full(obj.n, d1_0)),
        atol=1e-6,
    )


def test_float32_phase_hands_over_a_predicted_step_unmeasured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When Newton's local model puts the next gradient far below the float32 target, the
    float32 phase skips measuring it; the float64 phase measures it, and the answer is the
    same as with every step measured."""
    X, y = _data(6000, 12, seed=13)
    measured: list[int] = []
    real_gradient32 = solvers._Objective.gradient32

    def gradient32(
        self: solvers._Objective, w: NDArray[np.float64], d1: NDArray[np.float32]
    ) -> NDArray[np.float64]:
        measured.append(1)
        return real_gradient32(self, w, d1)

    monkeypatch.setattr(solvers._Objective, "gradient32", gradient32)
    skipped = solve_erm(X, y, LogisticLoss(), regularization=1e-3, linear=np.ones(12))
    skipped_count = len(measured)
    measured.clear()
    monkeypatch.setattr(solvers, "_PREDICTED_MARGIN", 0.0)
    every = solve_erm(X, y, LogisticLoss(), regularization=1e-3, linear=np.ones(12))
    assert skipped_count < len(measured)
    assert skipped.gradient_norm <= skipped.gradient_tolerance
    assert np.linalg.norm(skipped.coef - every.coef) <= (
        skipped.distance_bound + every.distance_bound
    )
