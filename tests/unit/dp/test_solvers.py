"""The exact ERM solver: agreement with scikit-learn, closed forms, optimality, failure."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray

from service.dp import solvers
from service.dp.losses import HuberLoss, LogisticLoss
from service.dp.solvers import ConvergenceError, erm_gradient, erm_objective, solve_erm


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

    def hessian(self: object, d2: NDArray[np.float64], *, precise: bool = False) -> object:
        precise_calls.append(precise)
        if not precise:  # an indefinite "float32" Hessian: its Newton step is uphill
            return -np.eye(5)
        return real(self, d2, precise=True)  # type: ignore[arg-type]

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
        obj: object, w: NDArray[np.float64], gtol: float, max_iter: int
    ) -> tuple[NDArray[np.float64], float, int, bool]:
        calls.append(1)
        if len(calls) == 1:
            return w, np.inf, 0, False
        return real_newton(obj, w, gtol, max_iter)  # type: ignore[arg-type]

    monkeypatch.setattr(solvers, "_newton", stalled_once)
    res = solve_erm(X, y, LogisticLoss(), regularization=1e-2)
    assert res.method.endswith("+l-bfgs-b")
    assert len(calls) == 2
    assert res.gradient_norm <= res.gradient_tolerance
    np.testing.assert_allclose(res.coef, exact.coef, atol=1e-8)


def test_newton_that_always_stalls_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    X, y = _data(300, 5, seed=5)

    def stalled(
        obj: object, w: NDArray[np.float64], gtol: float, max_iter: int
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
