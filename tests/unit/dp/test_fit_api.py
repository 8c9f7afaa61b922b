"""``service.dp.fit`` / ``calibrate``: validation, determinism, cost, limits, registry."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

import service.dp as dp
from service.dp.core.base import Calibration, FitResult, LinearModel, Problem
from service.dp.core.losses import LogisticLoss, Loss
from service.dp.core.validation import PrivacyParameterError
from service.dp.mechanisms import _common
from service.dp.optimize.solvers import minimize_erm

OWN = (
    "non_private",
    "output_perturbation",
    "objective_perturbation",
    "generalized_objective_perturbation",
    "gaussian_objective_perturbation",
)
PRIVATE = OWN[1:]
#: δ each private mechanism is called with in these tests, and what it then spends.
DELTA = {"gaussian_objective_perturbation": 1e-6}


def _data(
    n: int = 300, d: int = 4, seed: int = 0
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)
    w = np.linspace(-2, 2, d)
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-3 * X @ w)), 1.0, -1.0)
    return X, y


def _fit(mechanism: str, X: Any, y: Any, **kw: Any) -> FitResult:
    kw.setdefault("epsilon", 1.0)
    kw.setdefault("regularization", 0.01)
    kw.setdefault("delta", DELTA.get(mechanism, 0.0))
    return dp.fit(X, y, mechanism, **kw)


# ---------------------------------------------------------------- registry


def test_registry_holds_the_design_names() -> None:
    for name in OWN:
        assert name in dp.MECHANISMS
        mech = dp.MECHANISMS[name]
        assert mech.name == name
        assert callable(mech.validate_params)
        assert callable(mech.calibrate)
        assert callable(mech.run)


# ---------------------------------------------------------------- data validation


def test_rows_outside_the_unit_ball_are_refused_without_values() -> None:
    X, y = _data()
    X[[3, 10, 20]] = np.array([0.9, 0.8, 0.7, 0.6]) * 1.2345678
    with pytest.raises(ValueError) as info:
        _fit("output_perturbation", X, y)
    msg = str(info.value)
    assert msg == "every row of X must have L2 norm ≤ 1; 3 rows exceed it"
    assert "1.23" not in msg


def test_row_norm_tolerance() -> None:
    X, y = _data()
    X[0] = 0.0
    X[0, 0] = 1.0 + 5e-10  # within the 1e-9 tolerance
    _fit("output_perturbation", X, y)
    X[0, 0] = 1.0 + 1e-8
    with pytest.raises(ValueError, match="1 row exceeds it"):
        _fit("output_perturbation", X, y)


def test_rows_within_the_tolerance_are_scaled_into_the_unit_ball_exactly() -> None:
    from fractions import Fraction

    from service.dp.core.validation import validate_design

    rng = np.random.default_rng(4)
    X = rng.normal(size=(400, 37))
    X /= np.linalg.norm(X, axis=1, keepdims=True)  # norms 1 ± a few ulps
    X[:50] *= 1.0 + 5e-10  # inside the tolerance, outside the ball
    before = X.copy()
    Xf, _ = validate_design(X, np.ones(400))
    np.testing.assert_array_equal(X, before)  # the caller's array is not modified
    # exact rational arithmetic: every released row has ‖x‖² ≤ 1, not just up to rounding
    worst = max(sum((Fraction(float(v)) ** 2 for v in row), Fraction(0)) for row in Xf)
    assert worst <= 1
    np.testing.assert_allclose(Xf, X / np.linalg.norm(X, axis=1, keepdims=True), atol=1e-13)
    # rows well inside the ball are untouched
    inner = np.full((3, 4), 0.25)
    out, _ = validate_design(inner, np.ones(3))
    np.testing.assert_array_equal(out, inner)


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda X, y: (np.where(np.arange(X.size).reshape(X.shape) == 5, np.nan, X), y), "finite"),
        (lambda X, y: (np.where(np.arange(X.size).reshape(X.shape) == 5, np.inf, X), y), "finite"),
        # finite, but its squared norm overflows: a row too long, not a non-finite entry
        (lambda X, y: (np.where(np.arange(X.size).reshape(X.shape) == 5, 1e200, X), y), "norm"),
        (lambda X, y: (X[:, 0], y), "2-D"),
        (lambda X, y: (X.astype(str), y), "numeric"),
        (lambda X, y: (X.astype(complex), y), "real"),
        (lambda X, y: (X[:0], y[:0]), "at least one row"),
        (lambda X, y: (X, (y + 1) / 2), "labels -1 and \\+1"),
        (lambda X, y: (X, y[:-1]), "one label per row"),
        (lambda X, y: (X, y.reshape(-1, 1)), "1-D"),
        (lambda X, y: (X, np.where(y > 0, "yes", "no")), "labels"),
    ],
)
def test_bad_data_is_refused(mutate: Any, match: str) -> None:
    X, y = _data()
    X2, y2 = mutate(X, y)
    with pytest.raises(ValueError, match=match):
        _fit("output_perturbation", X2, y2)


# ---------------------------------------------------------------- parameter validation


@pytest.mark.parametrize("mechanism", PRIVATE)
@pytest.mark.parametrize("epsilon", [0.0, -1.0, math.inf, math.nan])
def test_bad_epsilon(mechanism: str, epsilon: float) -> None:
    X, y = _data()
    with pytest.raises(ValueError, match="epsilon"):
        _fit(mechanism, X, y, epsilon=epsilon)
    with pytest.raises(ValueError, match="epsilon"):
        dp.calibrate(mechanism, n=10, d=2, epsilon=epsilon, regularization=0.1)


@pytest.mark.parametrize("mechanism", PRIVATE)
@pytest.mark.parametrize("delta", [-1e-9, 1.0, 2.0, math.nan])
def test_bad_delta(mechanism: str, delta: float) -> None:
    X, y = _data()
    with pytest.raises(ValueError, match="delta"):
        _fit(mechanism, X, y, delta=delta)


@pytest.mark.parametrize("mechanism", OWN)
@pytest.mark.parametrize("lam", [0.0, -0.1, math.inf, math.nan, "0.1"])
def test_bad_regularization(mechanism: str, lam: object) -> None:
    X, y = _data()
    with pytest.raises(ValueError, match="regularization"):
        _fit(mechanism, X, y, regularization=lam)


def test_unknown_mechanism_lists_the_choices() -> None:
    X, y = _data()
    with pytest.raises(ValueError, match="unknown mechanism 'laplace'") as info:
        _fit("laplace", X, y)
    for name in OWN:
        assert name in str(info.value)
    with pytest.raises(ValueError, match="unknown mechanism"):
        dp.calibrate("laplace", n=10, d=2, epsilon=1.0, regularization=0.1)


def test_unknown_loss_lists_the_choices() -> None:
    X, y = _data()
    with pytest.raises(ValueError, match=r"unknown loss 'hinge'.*logistic, huber"):
        _fit("objective_perturbation", X, y, loss="hinge")


@pytest.mark.parametrize("mechanism", OWN)
def test_unknown_parameter_lists_the_allowed_ones(mechanism: str) -> None:
    X, y = _data()
    with pytest.raises(ValueError, match=r"unknown parameter.*frobnicate") as info:
        _fit(mechanism, X, y, frobnicate=3)
    if mechanism == "generalized_objective_perturbation":
        assert "kifer_Delta" in str(info.value)
    elif mechanism == "objective_perturbation":
        assert "allowed: projection_dim, projection_kind, projection_seed" in str(info.value)
    else:
        assert "allowed: none" in str(info.value)


@pytest.mark.parametrize("h", [0.0, -0.5, math.nan, "wide"])
def test_bad_huber_width(h: object) -> None:
    X, y = _data()
    with pytest.raises(ValueError, match="h must be"):
        _fit("objective_perturbation", X, y, loss="huber", h=h)


def test_gop_needs_a_positive_delta() -> None:
    X, y = _data()
    with pytest.raises(ValueError, match="needs 0 < delta < 1"):
        _fit("gaussian_objective_perturbation", X, y, delta=0.0)


def test_kifer_delta_that_leaves_no_noise_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="leaves no budget"):
        # c/(nλ + Δ_K) = 0.25/(1e-4) ⇒ ε_J = ln 2501 ≫ ε
        dp.calibrate(
            "generalized_objective_perturbation",
            n=10,
            d=2,
            epsilon=1.0,
            regularization=1e-5,
            kifer_Delta=0.0,
        )
    with pytest.raises(ValueError, match="kifer_Delta"):
        dp.calibrate(
            "generalized_objective_perturbation",
            n=10,
            d=2,
            epsilon=1.0,
            regularization=0.1,
            kifer_Delta=-1.0,
        )


class _KinkedLoss(Loss):
    """A convex loss without a second derivative (hinge-like), to exercise the check."""

    name = "kinked"
    c = math.inf
    smooth = False


@pytest.mark.parametrize(
    "mechanism",
    [
        "objective_perturbation",
        "generalized_objective_perturbation",
        "gaussian_objective_perturbation",
    ],
)
def test_objective_mechanisms_refuse_non_smooth_losses(
    mechanism: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_common, "get_loss", lambda name, h=0.5: _KinkedLoss())
    X, y = _data()
    with pytest.raises(ValueError, match="bounded second derivative"):
        _fit(mechanism, X, y)


def test_rng_must_be_a_generator() -> None:
    X, y = _data()
    with pytest.raises(ValueError, match=r"numpy\.random\.Generator"):
        _fit("output_perturbation", X, y, rng=42)


def test_dimensions_of_a_dry_run() -> None:
    for n, d in [(0, 3), (3, 0), (2.5, 3), (True, 3)]:
        with pytest.raises(ValueError, match="positive integer"):
            dp.calibrate("output_perturbation", n=n, d=d, epsilon=1.0, regularization=0.1)  # type: ignore[arg-type]


def test_errors_are_privacy_parameter_errors() -> None:
    with pytest.raises(PrivacyParameterError):
        dp.calibrate("output_perturbation", n=10, d=2, epsilon=-1.0, regularization=0.1)
    assert issubclass(PrivacyParameterError, ValueError)


# ---------------------------------------------------------------- results, cost, determinism


@pytest.mark.parametrize("mechanism", PRIVATE)
def test_cost_matches_parameters_and_coef_is_on_the_grid(mechanism: str) -> None:
    X, y = _data()
    res = _fit(mechanism, X, y, epsilon=0.7, rng=np.random.default_rng(1))
    assert res.mechanism == mechanism
    assert res.epsilon == 0.7
    assert res.delta == DELTA.get(mechanism, 0.0)
    assert res.details["epsilon"] == 0.7
    assert res.seeded
    assert isinstance(res.model, LinearModel)
    coef = res.coef
    assert coef is not None
    assert coef.shape == (4,)
    units = coef * 2.0**32
    np.testing.assert_array_equal(units, np.round(units))
    np.testing.assert_allclose(res.decision_function(X), X @ coef)
    assert res.model.to_dict() == {"kind": "linear", "coef": [float(v) for v in coef]}
    cal = dp.calibrate(
        mechanism, n=300, d=4, epsilon=0.7, delta=DELTA.get(mechanism, 0.0), regularization=0.01
    )
    assert dict(cal.details) == dict(res.details)
    assert cal.composition == res.composition
    assert cal.expected_noise_norm == res.expected_noise_norm


@pytest.mark.parametrize(
    "mechanism",
    ["output_perturbation", "objective_perturbation", "generalized_objective_perturbation"],
)
def test_pure_mechanisms_spend_no_delta_even_if_offered(mechanism: str) -> None:
    X, y = _data()
    res = _fit(mechanism, X, y, delta=0.0 if mechanism.startswith("generalized") else 1e-5)
    assert res.delta == 0.0


def test_generalized_with_delta_spends_it() -> None:
    X, y = _data()
    res = _fit("generalized_objective_perturbation", X, y, delta=1e-5)
    assert res.delta == 1e-5
    assert res.details["variant"] == "gaussian"


@pytest.mark.parametrize("mechanism", PRIVATE)
def test_seeded_runs_are_deterministic(mechanism: str) -> None:
    X, y = _data()
    a = _fit(mechanism, X, y, rng=np.random.default_rng(7)).coef
    b = _fit(mechanism, X, y, rng=np.random.default_rng(7)).coef
    c = _fit(mechanism, X, y, rng=np.random.default_rng(8)).coef
    assert a is not None
    assert b is not None
    assert c is not None
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("mechanism", PRIVATE)
def test_unseeded_runs_use_fresh_csprng_noise(mechanism: str) -> None:
    X, y = _data()
    a = _fit(mechanism, X, y)
    b = _fit(mechanism, X, y)
    assert not a.seeded
    assert a.coef is not None
    assert b.coef is not None
    assert not np.array_equal(a.coef, b.coef)


def test_non_private_is_exact_and_ignores_epsilon() -> None:
    X, y = _data()
    res = _fit("non_private", X, y, epsilon=0.0)
    assert res.epsilon == math.inf
    assert res.delta == 0.0
    exact = minimize_erm(X, y, LogisticLoss(), regularization=0.01)
    assert res.coef is not None
    np.testing.assert_allclose(res.coef, exact, atol=2.0**-33)
    again = _fit("non_private", X, y)
    assert again.coef is not None
    np.testing.assert_array_equal(res.coef, again.coef)


@pytest.mark.parametrize("mechanism", PRIVATE)
@pytest.mark.parametrize("loss", ["logistic", "huber"])
def test_huge_epsilon_reproduces_the_non_private_fit(mechanism: str, loss: str) -> None:
    X, y = _data()
    exact = _fit("non_private", X, y, loss=loss).coef
    res = _fit(mechanism, X, y, epsilon=1e14, loss=loss, rng=np.random.default_rng(3))
    assert exact is not None
    assert res.coef is not None
    np.testing.assert_allclose(res.coef, exact, atol=1e-6)


@pytest.mark.parametrize("mechanism", PRIVATE)
def test_noise_shrinks_with_epsilon(mechanism: str) -> None:
    X, y = _data()
    exact = _fit("non_private", X, y).coef
    assert exact is not None
    errors = []
    for eps in (0.5, 50.0):
        rng = np.random.default_rng(4)
        errs = []
        for _ in range(20):
            coef = _fit(mechanism, X, y, epsilon=eps, rng=rng).coef
            assert coef is not None
            errs.append(np.linalg.norm(coef - exact))
        errors.append(np.mean(errs))
    assert errors[1] < errors[0] / 10


def test_progress_is_reported_and_can_abort() -> None:
    X, y = _data()
    seen: list[float] = []
    _fit("objective_perturbation", X, y, progress=seen.append)
    assert seen[0] == 0.0
    assert seen[-1] == 1.0
    assert all(0.0 <= f <= 1.0 for f in seen)

    class Cancelled(Exception):
        pass

    def cancel(_: float) -> None:
        raise Cancelled

    with pytest.raises(Cancelled):
        _fit("output_perturbation", X, y, progress=cancel)


def test_huber_width_reaches_the_mechanism() -> None:
    X, y = _data()
    res = _fit("objective_perturbation", X, y, loss="huber", h=0.25)
    assert res.details["loss"] == "huber"
    assert res.details["huber_h"] == 0.25
    assert res.details["c"] == 2.0


def test_integer_and_list_inputs_are_accepted() -> None:
    X = [[0, 1], [1, 0], [0, 0]]
    y = [1, -1, 1]
    res = dp.fit(X, y, "output_perturbation", epsilon=1.0, regularization=0.1)
    assert res.coef is not None
    assert res.coef.shape == (2,)


def test_mechanism_protocol_can_be_driven_directly() -> None:
    X, y = _data()
    mech = dp.get_mechanism("objective_perturbation")
    problem = Problem(
        mechanism=mech.name,
        n=300,
        d=4,
        epsilon=1.0,
        delta=0.0,
        loss="logistic",
        regularization=0.01,
    )
    problem = mech.validate_params(problem)
    cal = mech.calibrate(problem)
    assert isinstance(cal, Calibration)
    model = mech.run(X, y, problem, cal, rng=np.random.default_rng(0), progress=None)
    assert isinstance(model, LinearModel)
