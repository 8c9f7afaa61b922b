"""Multi-class fits (issue 29): the multinomial loss's constants, the hand-derived calibrations
of objective and output perturbation and DP-SGD for K classes, the certified gradient bound,
typed plans, the released model, accuracy, and the refusals.

Hand-derived numbers (module docstrings of :mod:`service.dp.mechanisms.multiclass` and
:mod:`service.dp.optimize.multinomial`): gradient-difference sensitivity 2√2, Jacobian part
ε_J = (K − 1)ln(1 + 1/(Kn(λ + Δ))), noise rate β = ε′/(2√2) in dimension dK for objective
perturbation; S = 2√2/(nλ) + 2τ/λ and β = ε/S for output perturbation."""

from __future__ import annotations

import json
import math
from decimal import Context, Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from service import dp
from service.dp.core.plan import plan_from_json, plan_to_json
from service.dp.core.released import MulticlassModel, model_from_dict
from service.dp.mechanisms import multiclass
from service.dp.noise import lattice
from service.dp.optimize import certified, multinomial
from tests.unit.dp._budget import objective_budget

FloatArray = NDArray[np.float64]
U = 2.0**-53


def _data(
    n: int, d: int, K: int, seed: int, *, noise: float = 0.3
) -> tuple[FloatArray, FloatArray]:
    """Rows in the unit ball; the label is the argmax of K random linear scores (+ noise)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0) * 1.01
    T = rng.normal(size=(K, d)) * 4.0
    y = np.argmax(X @ T.T + noise * rng.normal(size=(n, K)), axis=1).astype(np.float64)
    return X, y


def _calibrate(mechanism: str, n: int, d: int, K: int, lam: float, eps: float) -> dp.Calibration:
    """The multi-class calibration of ``mechanism`` (ε-DP, δ = 0) at public n, d, K, λ."""
    return dp.calibrate(
        mechanism, n=n, d=d, epsilon=eps, regularization=lam, task="multiclass", n_classes=K
    )


# ---- the loss's constants -------------------------------------------------------------------


def test_gradient_norm_and_hessian_spectrum_obey_the_derived_bounds() -> None:
    rng = np.random.default_rng(0)
    for K in (3, 7, 20):
        for _ in range(200):
            s = rng.normal(size=K) * rng.choice([0.1, 3.0, 30.0])
            p = np.exp(s - s.max())
            p /= p.sum()
            y = int(rng.integers(K))
            r = p - np.eye(K)[y]
            # ‖p − e_y‖² = (1 − p_y)² + Σ_{k≠y} p_k² ≤ 2(1 − p_y)² ≤ 2
            assert r @ r <= 2.0 * (1.0 - p[y]) ** 2 + 1e-15
            A = np.diag(p) - np.outer(p, p)
            eig = np.linalg.eigvalsh(A)
            assert eig.min() >= -1e-15
            assert eig.max() <= 0.5 + 1e-15
            assert np.trace(A) == pytest.approx(1.0 - p @ p)
            assert np.trace(A) <= 1.0 - 1.0 / K + 1e-15
            assert np.linalg.matrix_rank(A, tol=1e-12) <= K - 1
    # the doubles used as bounds are above the reals they stand for
    assert Fraction(multinomial.LIPSCHITZ) ** 2 >= 2
    assert Fraction(multiclass.GRADIENT_SENSITIVITY) ** 2 >= 8


def test_the_jacobian_ratio_is_within_the_am_gm_bound() -> None:
    """det(M + E₁)/det(M + E₂) ≤ (1 + 1/(Kn(λ+Δ)))^{K−1} on random replace-one pairs."""
    rng = np.random.default_rng(1)
    n, d, K, ridge = 5, 2, 3, 0.05
    bound = (K - 1) * math.log1p(1.0 / (K * n * ridge))
    worst = 0.0
    for _ in range(300):
        X = rng.normal(size=(n + 1, d))
        X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)
        C = rng.normal(size=(K, d)) * rng.choice([0.1, 1.0, 10.0])

        def hessian(x: FloatArray, C: FloatArray = C) -> FloatArray:
            s = C @ x
            p = np.exp(s - s.max())
            p /= p.sum()
            return np.kron(np.diag(p) - np.outer(p, p), np.outer(x, x))

        M = sum(hessian(x) for x in X[1:n]) + n * ridge * np.eye(d * K)
        ratio = np.linalg.slogdet(M + hessian(X[0]))[1] - np.linalg.slogdet(M + hessian(X[n]))[1]
        worst = max(worst, ratio)
    assert worst <= bound
    assert worst > 0.2 * bound  # the pairs come near it


# ---- hand-derived calibrations --------------------------------------------------------------


def test_objective_perturbation_calibration_is_the_hand_derived_one() -> None:
    n, d, K, lam, eps = 60, 3, 3, 0.05, 0.5
    cal = _calibrate("objective_perturbation", n, d, K, lam, eps)
    # ε₁ from the split in dimension dK = 9 (tests/unit/dp/_budget.py)
    eps1 = objective_budget(eps, n, d * K)
    # ε_J = 2 ln(1 + 1/(3·60·0.05)) = 2 ln(10/9) = 0.2107210313 ≤ ε₁/2: Δ = 0
    eps_j = 2.0 * math.log(10.0 / 9.0)
    beta = (eps1 - eps_j) / (2.0 * math.sqrt(2.0))  # ≈ (0.4999 − 0.2107)/2.8284 = 0.10225
    det = cal.details
    assert det["epsilon_objective"] == pytest.approx(eps1, rel=1e-15)
    assert det["jacobian_epsilon"] == pytest.approx(eps_j, rel=1e-12)
    assert det["Delta"] == 0.0
    assert det["beta"] == pytest.approx(beta, rel=1e-12)
    assert det["beta"] * multiclass.GRADIENT_SENSITIVITY <= det["epsilon_prime"]
    assert det["noise_dimension"] == 9
    assert cal.expected_noise_norm == pytest.approx(9 / beta, rel=1e-12)
    assert det["task"] == "multiclass"
    assert det["n_classes"] == 3
    assert det["c"] == 0.5
    assert det["lipschitz"] == math.sqrt(2.0)
    assert det["certified_release"]["d"] == 9
    assert (cal.epsilon, cal.delta) == (eps, 0.0)


def test_objective_perturbation_adds_the_ridge_that_halves_the_budget() -> None:
    n, d, K, lam, eps = 60, 3, 4, 1e-4, 0.5
    cal = _calibrate("objective_perturbation", n, d, K, lam, eps)
    eps1 = objective_budget(eps, n, d * K)
    # (K − 1)ln(1 + 1/(Knλ)) = 3 ln(1 + 1/0.024) ≫ ε₁/2, so λ + Δ = 1/(Kn(e^{ε₁/6} − 1))
    ridge = 1.0 / (K * n * math.expm1(eps1 / 6.0))
    assert cal.details["effective_regularization"] == pytest.approx(ridge, rel=1e-12)
    assert cal.details["jacobian_epsilon"] == pytest.approx(eps1 / 2.0, rel=1e-12)
    assert cal.details["beta"] == pytest.approx(eps1 / 2.0 / (2.0 * math.sqrt(2.0)), rel=1e-12)


@pytest.mark.parametrize(
    ("eps", "lam", "n", "K"),
    [(0.5, 0.01, 1000, 3), (0.5, 1e-3, 500, 5), (1.0, 1e-3, 1000, 3), (0.3, 1e-4, 30162, 7)],
)
def test_the_jacobian_split_never_exceeds_the_budget_in_real_arithmetic(
    eps: float, lam: float, n: int, K: int
) -> None:
    # ε′ + ε_J ≤ ε with ε_J = (K − 1)ln(1 + 1/(Kn(λ + Δ))) in 80-digit decimals for the double
    # λ + Δ used (Δ = 0 in the first case, > 0 in the others): with ε_J from log1p in doubles,
    # ε′ = ε − ε_J landed an ulp or two above the budget for each of these
    extra, eps_prime, eps_j = multiclass.jacobian_slack(eps, lam, n, K)
    ctx = Context(prec=80)
    ridge = Decimal(lam + extra)
    real = (K - 1) * ctx.ln(1 + ctx.divide(1, K * n * ridge))
    assert Decimal(eps_prime) + real <= Decimal(eps)
    assert Decimal(eps_j) >= real
    assert eps_j == pytest.approx(float(real), rel=1e-15)
    assert eps_prime == pytest.approx(eps - float(real), rel=1e-14)
    assert (extra > 0.0) == (lam < 0.01)


def test_output_perturbation_calibration_is_the_hand_derived_one() -> None:
    n, d, K, lam, eps = 200, 4, 5, 0.1, 1.0
    cal = _calibrate("output_perturbation", n, d, K, lam, eps)
    dim = d * K
    # τ = 10⁻¹⁰ + 8(n + dK)u + 4cγ_{dK}/λ with c = ½ (the floor is far below τ/2)
    gamma = dim * U / (1 - dim * U) * (1 + 2.0**-20)
    tau = 1e-10 + 8 * (n + dim) * U + 4 * 0.5 * gamma / lam
    sensitivity = 2.0 * math.sqrt(2.0) / (n * lam) + 2.0 * tau / lam  # 0.1414213562 + 2e-9
    det = cal.details
    assert det["certificate_tolerance"] == pytest.approx(tau, rel=1e-12)
    assert det["sensitivity"] == pytest.approx(sensitivity, rel=1e-14)
    assert det["beta"] == pytest.approx(eps / sensitivity, rel=1e-14)
    assert cal.expected_noise_norm == pytest.approx(dim * sensitivity / eps, rel=1e-14)
    assert det["noise_dimension"] == dim


def test_dp_sgd_noise_lives_in_dimension_dk_with_the_binary_sensitivity() -> None:
    common: dict[str, Any] = {"n": 100, "d": 3, "epsilon": 1.0, "regularization": 0.01}
    binary = dp.calibrate("dp_sgd", batch_size=10, **common)
    multi = dp.calibrate("dp_sgd", batch_size=10, task="multiclass", n_classes=4, **common)
    assert multi.details["noise_dimension"] == 12
    # clipped at C = 1 in Frobenius norm: the same 2/b_min (float margin differs with √(dK))
    assert multi.details["gradient_sensitivity"] == pytest.approx(0.2, rel=1e-12)
    assert multi.details["beta"] == pytest.approx(binary.details["beta"], rel=1e-10)
    assert multi.expected_noise_norm == pytest.approx(12 / multi.details["beta"])


def test_dp_sgd_clips_each_multinomial_residual_below_its_cap_exactly() -> None:
    """The K-class DP-SGD clip (multiclass.clipped_gradient_mean): every clipped residual â_i
    has exact ‖â_i‖ < cap_i (so ‖â_i x_iᵀ‖_F < C with the row's cap), checked in rational
    arithmetic on residuals whose norms straddle the clip target ulp by ulp; residuals below
    the target pass unchanged and non-finite ones give 0. A one-row batch with x = e₁ returns
    â_i itself (the product by 1 and the division by 1 are exact)."""
    rng = np.random.default_rng(7)
    x = np.array([[1.0, 0.0]])
    checked = 0
    for K in (3, 5, 7):
        for _ in range(40):
            direction = rng.normal(size=K)
            direction /= np.linalg.norm(direction)
            cap = float(rng.uniform(0.2, 1.5))
            for steps in range(-12, 13):
                r = direction * cap * (1.0 + steps * U)
                out = multiclass.clipped_gradient_mean(r[None, :], x, np.array([cap]))
                a = out[:, 0]
                assert sum(Fraction(float(v)) ** 2 for v in a) < Fraction(cap) ** 2
                checked += 1
            small = direction * cap * 0.5
            out = multiclass.clipped_gradient_mean(small[None, :], x, np.array([cap]))
            np.testing.assert_array_equal(out[:, 0], small)
        for bad in (np.inf, -np.inf, np.nan):
            r = np.zeros(K)
            r[1] = bad
            out = multiclass.clipped_gradient_mean(r[None, :], x, np.array([1.0]))
            np.testing.assert_array_equal(out, np.zeros((K, 2)))
    assert checked == 3 * 40 * 25


def test_binary_records_do_not_change() -> None:
    """A binary record holds no multi-class field (records stay byte-identical)."""
    for mech in ("objective_perturbation", "output_perturbation", "dp_sgd", "non_private"):
        cal = dp.calibrate(mech, n=60, d=3, epsilon=1.0, regularization=0.01)
        assert "task" not in cal.details
        assert "n_classes" not in cal.details
        assert cal.details["c"] == 0.25
        assert cal.details["lipschitz"] == 1.0
        assert type(cal.plan).kind == mech  # type: ignore[union-attr]


# ---- the certified gradient bound -----------------------------------------------------------


def test_the_proved_gradient_bound_encloses_an_exact_evaluation() -> None:
    X, y = _data(300, 4, 3, seed=2)
    rng = np.random.default_rng(3)
    for scale in (0.0, 1.0, 50.0):
        C = rng.normal(size=(3, 4)) * scale
        exact = _exact_gradient(X, y, C, ridge=0.01)
        t, e_t = multinomial.loss_gradient_sum(X, y, C)
        assert np.linalg.norm(t / 300 + 0.01 * C - exact) <= e_t / 300
        zero = lattice.Enclosure(value=np.zeros(12), radius=0.0)
        bound = multinomial.gradient_bound(
            X, y, C, regularization=0.01, extra_regularization=0.0, noise=zero
        )
        assert float(np.linalg.norm(exact)) <= bound <= float(np.linalg.norm(exact)) + 1e-12


def _exact_gradient(X: FloatArray, y: FloatArray, C: FloatArray, *, ridge: float) -> FloatArray:
    """∇J in extended precision (np.longdouble where the platform has it), as a reference."""
    Xl = X.astype(np.longdouble)
    S = Xl @ C.astype(np.longdouble).T
    P = np.exp(S - S.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    P[np.arange(X.shape[0]), y.astype(int)] -= 1
    g = P.T @ Xl / X.shape[0] + ridge * C.astype(np.longdouble)
    return np.asarray(g, dtype=np.float64)


def test_the_certified_minimiser_meets_its_tolerance() -> None:
    X, y = _data(400, 5, 4, seed=4)
    C = multinomial.certified_erm(X, y, 4, regularization=1e-3, tolerance=1e-10)
    zero = lattice.Enclosure(value=np.zeros(20), radius=0.0)
    assert (
        multinomial.gradient_bound(
            X, y, C, regularization=1e-3, extra_regularization=0.0, noise=zero
        )
        <= 1e-10
    )
    with pytest.raises(dp.ConvergenceError):
        multinomial.certified_erm(X, y, 4, regularization=1e-3, tolerance=1e-30)


def test_the_failure_plan_is_far_below_the_refusal_threshold_at_usual_sizes() -> None:
    cal = dp.calibrate(
        "objective_perturbation",
        n=30_000,
        d=100,
        epsilon=1.0,
        regularization=1e-3,
        task="multiclass",
        n_classes=7,
    )
    failure = cal.details["certificate_failure"]
    assert failure["noise_norm_threshold"] > 10 * cal.expected_noise_norm  # type: ignore[operator]
    assert failure["log10_probability_bound"] < -100


# ---- plans, runs and the released model -----------------------------------------------------

PLAN_CASES = [
    ("objective_perturbation", {}),
    ("output_perturbation", {}),
    ("dp_sgd", {"batch_size": 8, "epochs": 2}),
    ("non_private", {}),
]


@pytest.mark.parametrize(("mechanism", "params"), PLAN_CASES, ids=[c[0] for c in PLAN_CASES])
def test_a_stored_plan_reruns_bit_identically(mechanism: str, params: dict[str, Any]) -> None:
    X, y = _data(80, 3, 3, seed=5)
    kw: dict[str, Any] = {
        "epsilon": 1.0,
        "regularization": 0.01,
        "task": "multiclass",
        "n_classes": 3,
        **params,
    }
    plan = dp.calibrate(mechanism, n=80, d=3, **kw).plan
    assert plan is not None
    stored = plan_from_json(json.loads(json.dumps(plan_to_json(plan), allow_nan=False)))
    assert stored == plan
    assert stored.calibration().details == plan.calibration().details  # type: ignore[attr-defined]
    fresh = dp.fit(X, y, mechanism, rng=np.random.default_rng(9), **kw)
    rebuilt = dp.fit(X, y, mechanism, rng=np.random.default_rng(9), plan=stored, **kw)
    assert json.dumps(rebuilt.model.to_dict()) == json.dumps(fresh.model.to_dict())
    assert isinstance(rebuilt.model, MulticlassModel)
    assert rebuilt.model.coef.shape == (3, 3)
    assert rebuilt.coef is None  # not a single weight vector
    # a binary plan, or one for another K, cannot run this fit (other public inputs)
    binary = dp.calibrate(mechanism, n=80, d=3, epsilon=1.0, regularization=0.01, **params).plan
    four = dp.calibrate(mechanism, n=80, d=3, **{**kw, "n_classes": 4}).plan
    for other in (binary, four):
        assert other is not None
        with pytest.raises(dp.PlanMismatchError):
            dp.fit(X, y, mechanism, rng=np.random.default_rng(9), plan=other, **kw)


def test_the_released_model_scores_predicts_and_round_trips() -> None:
    coef = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])
    model = MulticlassModel(coef=coef)
    X = np.array([[0.9, 0.1], [0.1, 0.9], [-0.5, -0.5]])
    assert np.array_equal(model.decision_function(X), X @ coef.T)
    assert model.predict(X).tolist() == [0, 1, 2]
    proba = model.predict_proba(X)
    assert np.allclose(proba.sum(axis=1), 1.0)
    assert np.all(proba > 0)
    data = model.to_dict()
    assert data == {"kind": "multiclass", "coef": [[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]]}
    again = model_from_dict(json.loads(json.dumps(data)))
    assert isinstance(again, MulticlassModel)
    assert np.array_equal(again.coef, coef)
    with pytest.raises(ValueError):
        model.coef[0, 0] = 2.0  # read-only
    with pytest.raises(ValueError, match="columns"):
        model.decision_function(np.ones((1, 3)))


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"kind": "multiclass", "coef": [[1.0, 2.0], [3.0, 4.0]]}, "≥ 3"),
        ({"kind": "multiclass", "coef": [[1.0], [2.0, 3.0], [4.0]]}, "equal length"),
        ({"kind": "multiclass", "coef": [[1.0], [float("nan")], [4.0]]}, "finite"),
        ({"kind": "multiclass", "coef": "abc"}, "lists"),
        ({"kind": "multiclass", "coef": [[1.0], [2.0], [3.0]], "extra": 1}, "unknown"),
    ],
)
def test_model_from_dict_refuses_malformed_multiclass_models(
    data: dict[str, Any], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        model_from_dict(data)


def _one_hot_design(n: int, seed: int) -> tuple[FloatArray, FloatArray]:
    """A sparse design like Adult's (two one-hot blocks and an intercept, rows scaled into
    the unit ball): the solver multiplies with a CSR copy."""
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, 6, n), rng.integers(0, 5, n)
    X = np.zeros((n, 12))  # 3 nonzeros of 12 per row
    X[np.arange(n), a] = 1.0
    X[np.arange(n), 6 + b] = 1.0
    X[:, 11] = 1.0
    X /= np.sqrt(3.0)
    y = ((a + b + (rng.random(n) < 0.2)) % 3).astype(np.float64)
    return X, y


@pytest.mark.parametrize("design", ["dense", "one_hot"])
def test_the_exact_minimiser_matches_a_reference_solver(design: str) -> None:
    from scipy import optimize

    X, y = _data(150, 3, 3, seed=6) if design == "dense" else _one_hot_design(300, seed=6)
    d = X.shape[1]
    got = dp.fit(
        X, y, "non_private", epsilon=1.0, regularization=0.01, task="multiclass", n_classes=3
    ).model
    assert isinstance(got, MulticlassModel)

    def fun(v: FloatArray) -> tuple[float, FloatArray]:
        C = v.reshape(3, d)
        return (
            multinomial.objective(X, y, C, ridge=0.01),
            multinomial.gradient(X, y, C, ridge=0.01).ravel(),
        )

    ref = optimize.minimize(fun, np.zeros(3 * d), jac=True, method="L-BFGS-B", tol=1e-14).x
    assert np.allclose(got.coef.ravel(), ref, atol=1e-6)


def test_the_solvers_sparse_copy_is_scipys_csr_matrix() -> None:
    from scipy import sparse

    X, _ = _one_hot_design(300, seed=7)
    got, ref = multinomial._sparse_copy(X), sparse.csr_matrix(X)
    assert got is not None
    for part in ("indptr", "indices", "data"):
        assert np.array_equal(getattr(got, part), getattr(ref, part))
    assert multinomial._sparse_copy(_data(50, 4, 3, seed=7)[0]) is None


def test_the_kronecker_preconditioner_inverts_its_matrix() -> None:
    """_kron_solve(R) = M⁻¹R for M = Ā ⊗ XᵀX/n + ridge·I, built here entry by entry (row-major
    vec: vec(ĀVG) = (Ā ⊗ G)vec V for symmetric G)."""
    X, _ = _data(200, 5, 4, seed=8)
    C = np.random.default_rng(8).normal(size=(4, 5))
    P = np.exp(X @ C.T)
    P /= P.sum(axis=1, keepdims=True)
    n = X.shape[0]
    A = sum(np.diag(p) - np.outer(p, p) for p in P) / n
    M = np.kron(A, X.T @ X / n) + 0.01 * np.eye(20)
    R = np.random.default_rng(9).normal(size=(4, 5))
    got = multinomial._kron_solve(multinomial._gram_eigen(X), multinomial._class_eigen(P), 0.01, R)
    assert np.allclose(M @ got.ravel(), R.ravel(), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("mechanism", ["objective_perturbation", "output_perturbation", "dp_sgd"])
def test_a_private_fit_on_separable_three_class_data_beats_chance(mechanism: str) -> None:
    X, y = _data(3000, 4, 3, seed=7, noise=0.0)
    params: dict[str, Any] = {"epochs": 3} if mechanism == "dp_sgd" else {}
    result = dp.fit(
        X,
        y,
        mechanism,
        epsilon=5.0,
        regularization=1e-3,
        task="multiclass",
        n_classes=3,
        rng=np.random.default_rng(8),
        **params,
    )
    assert isinstance(result.model, MulticlassModel)
    accuracy = float(np.mean(result.model.predict(X) == y))
    majority = float(np.max(np.bincount(y.astype(int))) / y.size)
    assert accuracy > max(0.8, majority + 0.2)


def test_multinomial_beats_one_vs_rest_at_equal_epsilon() -> None:
    """Issue 29's choice, on synthetic data (Adult in benchmarks/bench_multiclass_ovr.py):
    one release at ε against K binary releases at ε/K each, 5 seeds, objective perturbation."""
    K = 6
    X, y = _data(4000, 6, K, seed=11, noise=0.5)
    multi, ovr = [], []
    for seed in range(5):
        rng = np.random.default_rng(100 + seed)
        kw: dict[str, Any] = {"epsilon": 0.5, "regularization": 1e-3, "rng": rng}
        m = dp.fit(X, y, "objective_perturbation", task="multiclass", n_classes=K, **kw)
        multi.append(np.mean(m.model.predict(X) == y))  # type: ignore[attr-defined]
        W = np.stack(
            [
                np.asarray(
                    dp.fit(
                        X,
                        np.where(y == k, 1.0, -1.0),
                        "objective_perturbation",
                        **{**kw, "epsilon": 0.5 / K},
                    ).coef
                )
                for k in range(K)
            ]
        )
        ovr.append(np.mean(np.argmax(X @ W.T, axis=1) == y))
    assert np.mean(multi) > np.mean(ovr) + 0.02


# ---- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "match"),
    [
        ([0, 1, 3, 0], "class indices 0 to 2"),  # a class beyond K − 1
        ([0, 1, 1.5, 2], "class indices 0 to 2"),
        ([0, -1, 1, 2], "class indices 0 to 2"),
        ([0, 1, float("nan"), 2], "class indices 0 to 2"),
    ],
)
def test_wrong_labels_are_refused_without_quoting_them(labels: list[float], match: str) -> None:
    X = np.full((4, 2), 0.5)
    with pytest.raises(ValueError, match=match) as info:
        dp.fit(
            X,
            np.array(labels),
            "objective_perturbation",
            epsilon=1.0,
            regularization=0.1,
            task="multiclass",
            n_classes=3,
        )
    assert "1.5" not in str(info.value)
    assert "nan" not in str(info.value).lower()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"task": "multiclass", "n_classes": 2}, "3 to"),
        ({"task": "binary", "n_classes": 3}, "exactly 2"),
        ({"task": "multiclass", "n_classes": 3, "loss": "huber"}, "unknown loss"),
        ({"task": "multiclass", "n_classes": 3, "projection_dim": 2}, "projection_dim"),
    ],
)
def test_inconsistent_requests_are_refused_before_any_data_is_read(
    kwargs: dict[str, Any], match: str
) -> None:
    mechanism = "dp_sgd" if "projection_dim" in kwargs else "objective_perturbation"
    with pytest.raises(dp.PrivacyParameterError, match=match):
        dp.calibrate(mechanism, n=50, d=3, epsilon=1.0, regularization=0.1, **kwargs)


def test_mechanisms_without_a_multinomial_loss_refuse_and_name_those_that_fit() -> None:
    with pytest.raises(dp.PrivacyParameterError) as info:
        dp.calibrate(
            "gaussian_objective_perturbation",
            n=50,
            d=3,
            epsilon=1.0,
            delta=1e-6,
            regularization=0.1,
            task="multiclass",
            n_classes=3,
        )
    message = str(info.value)
    for name in ("dp_sgd", "non_private", "objective_perturbation", "output_perturbation"):
        assert name in message


def test_binary_labels_in_a_multiclass_fit_with_more_declared_classes_are_fine() -> None:
    """K is public: a sample that lacks a class is not an error (its weights stay near 0)."""
    X, y = _data(60, 3, 3, seed=9)
    y = np.where(y == 2, 0.0, y)
    result = dp.fit(
        X, y, "non_private", epsilon=1.0, regularization=0.1, task="multiclass", n_classes=4
    )
    assert result.model.to_dict()["coef"].__len__() == 4


@pytest.mark.parametrize(("lam", "beta"), [(1e-2, None), (1e-3, 0.5), (1e-4, 5.0)])
def test_the_certificate_floor_bounds_the_proved_bound_at_the_minimiser(
    lam: float, beta: float | None
) -> None:
    """F(q) ≥ the proved ‖∇J̃_b‖ at (a double next to) the exact minimiser, for the noise
    norm q = ‖b̂‖/n actually drawn: the public failure plan is not optimistic."""
    n, d, K = 500, 4, 3
    X, y = _data(n, d, K, seed=12)
    rng = np.random.default_rng(13)
    if beta is None:
        b = lattice.Enclosure(value=np.zeros(d * K), radius=0.0)
    else:
        b = lattice.norm_exponential_enclosure(d * K, beta=beta, rng=rng)
    C = multinomial.minimise(
        X, y, K, ridge=lam, linear=(b.value / n).reshape(K, d), tol=1e-15 * (1 + 1 / lam)
    )
    proved = multinomial.gradient_bound(
        X, y, C, regularization=lam, extra_regularization=0.0, noise=b
    )
    floor = multinomial.certificate_floor(
        n=n,
        d=d,
        n_classes=K,
        strong_convexity=lam,
        noise_norm=float(np.linalg.norm(b.value)) / n,
    )
    assert proved <= floor
    # and below the tolerance τ the plan would set for this noise (3·10⁻¹³ … 1.2·10⁻¹¹
    # against τ ≈ 10⁻¹⁰), so a certifiable point exists
    q = float(np.linalg.norm(b.value)) / n
    assert floor < certified.tolerance(
        n=n, d=d * K, c=multinomial.CURVATURE, strong_convexity=lam, linear_bound=q
    )


def test_a_prepared_design_fits_the_same_model_as_the_arrays() -> None:
    X, y = _data(120, 3, 3, seed=14)
    kw: dict[str, Any] = {"epsilon": 1.0, "regularization": 0.01}
    design = dp.prepare_design(X, y, "multiclass", 3)
    for mechanism in ("objective_perturbation", "output_perturbation", "dp_sgd"):
        from_arrays = dp.fit(
            X, y, mechanism, task="multiclass", n_classes=3, rng=np.random.default_rng(1), **kw
        )
        prepared = dp.fit(
            design,
            None,
            mechanism,
            task="multiclass",
            n_classes=3,
            rng=np.random.default_rng(1),
            **kw,
        )
        assert prepared.model.to_dict() == from_arrays.model.to_dict()
