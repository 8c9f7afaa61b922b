"""objective_perturbation with a public random projection (``projection_dim`` k): the plan in
k dimensions against hand-derived numbers, the noise law of a projected fit, the fold
coef = Rᵀv, the options' refusals and the paths that refuse a projected objective.

The calibration of a projected request is the unprojected calibration with k in place of d
(module docstring of service.dp.mechanisms.objective_perturbation): for n = 60, d = 6, k = 3,
logistic c = 1/4, ε = 0.5 every number below is the one worked out for d = 3 in
tests/unit/dp/test_distribution.py, and none is the d = 6 one."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from service.dp import calibrate, fit, prepare_design
from service.dp.analysis.planning import plan_point
from service.dp.core.base import Calibration, Problem
from service.dp.core.losses import get_loss
from service.dp.core.plan import plan_from_json, plan_to_json
from service.dp.core.validation import PrivacyParameterError
from service.dp.data.projection import MAX_SEED, RandomProjection
from service.dp.mechanisms._common import certified_minimiser, release
from service.dp.mechanisms.objective_perturbation import (
    MECHANISM,
    ObjectivePerturbationPlan,
    centred_plan,
    projected_rows,
)
from service.dp.multisite.transfer import transfer_calibration
from tests.unit.dp._budget import objective_budget
from tests.unit.dp._laws import norm_exponential_fits_only_at_the_right_scale

FloatArray = NDArray[np.float64]
N, D, K, EPS = 60, 6, 3, 0.5
SEED = 11


def _data(n: int = N, d: int = D, seed: int = 2) -> tuple[FloatArray, FloatArray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)
    y = np.where(X[:, 0] + 0.5 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


def _problem(lam: float = 0.05, **params: Any) -> Problem:
    return MECHANISM.validate_params(
        Problem(
            mechanism="objective_perturbation",
            n=N,
            d=D,
            epsilon=EPS,
            delta=0.0,
            loss="logistic",
            regularization=lam,
            params=params,
        )
    )


# ---- the plan in k dimensions ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("lam", "branch", "beta", "extra"),
    [
        # The release's share uses d = k = 3: τ₀ = 1e-10 + 8·(60 + 3)u = 1.0005595524e-10,
        # √(nτ₀) = 7.7481335265e-5, κ = 7.7475332373e-5, ε₁ = 0.4999612623338 (with d = 6,
        # 8·66u, ε₁ would be 0.4999612618181). λ = 0.05: ε_J = ln(1 + 0.25/(60·0.05)) =
        # ln(13/12) = 0.0800427077 ≤ ε₁/2, Δ = 0, ε′ = ε₁ − ε_J = 0.4199185546,
        # β = ε′/2 = 0.2099592773; ‖b‖ ~ Gamma(3, 1/β), E‖b‖ = 3/β = 14.2884850727.
        (0.05, "no_extra_regularization", 0.2099592773, 0.0),
        # λ = 0.0005: ln(1 + 0.25/0.03) = 2.23 > ε₁/2, so Δ = c/(n(e^{ε₁/2} − 1)) − λ
        #   = 0.25/(60·0.2840005469) − 0.0005 = 0.0141713333, ε′ = ε₁/2, β = ε₁/4 = 0.1249903156
        (0.0005, "extra_regularization", 0.1249903156, 0.0141713333),
    ],
)
def test_a_projected_plan_is_the_hand_derived_calibration_with_k_for_d(
    lam: float, branch: str, beta: float, extra: float
) -> None:
    cal = MECHANISM.calibrate(_problem(lam, projection_dim=K, projection_seed=SEED))
    details = cal.details
    assert objective_budget(EPS, N, K) == pytest.approx(0.4999612623338, rel=1e-12)
    assert objective_budget(EPS, N, D) == pytest.approx(0.4999612618181, rel=1e-12)
    assert details["epsilon_objective"] == pytest.approx(0.4999612623338, rel=1e-12)
    assert details["branch"] == branch
    assert details["beta"] == pytest.approx(beta, rel=1e-9)
    assert details["epsilon_prime"] == pytest.approx(2.0 * beta, rel=1e-9)
    assert details["Delta"] == pytest.approx(extra, rel=1e-8, abs=0.0)
    assert details["gradient_sensitivity"] == 2.0
    if extra == 0.0:
        assert details["jacobian_epsilon"] == pytest.approx(math.log(13 / 12), rel=1e-12)
    # the noise, its record and the certified release all live in ℝ^k
    assert details["d"] == D
    assert details["noise_dimension"] == K
    assert details["noise_norm_distribution"] == f"Gamma(shape=3, scale={1.0 / details['beta']!r})"
    assert details["expected_noise_norm"] == pytest.approx(3.0 / beta, rel=1e-9)
    assert cal.expected_noise_norm == pytest.approx(3.0 / beta, rel=1e-9)
    assert details["certified_release"]["d"] == K
    # the certificate and its failure bound are exactly those of an unprojected d = k request
    plain = calibrate("objective_perturbation", n=N, d=K, epsilon=EPS, regularization=lam)
    assert details["certified_release"] == plain.details["certified_release"]
    assert details["certificate_failure"] == plain.details["certificate_failure"]
    assert (details["projection_dim"], details["projection_kind"]) == (K, "gaussian")
    assert details["projection_seed"] == SEED


def test_the_projected_plan_survives_its_json_and_records_its_options() -> None:
    for params in (
        {"projection_dim": K},
        {"projection_dim": K, "projection_kind": "achlioptas", "projection_seed": MAX_SEED},
    ):
        plan = MECHANISM.plan(_problem(**params))
        assert isinstance(plan, ObjectivePerturbationPlan)
        assert plan_from_json(plan_to_json(plan)) == plan
        assert plan.dimension == K
        stored = plan_to_json(plan)
        assert stored["projection_dim"] == K
        assert stored["projection_kind"] == params.get("projection_kind", "gaussian")
        assert stored["projection_seed"] == params.get("projection_seed")
    unprojected = MECHANISM.plan(_problem())
    assert (unprojected.projection_dim, unprojected.dimension) == (None, D)
    assert "noise_dimension" not in unprojected.details()
    assert "projection_dim" not in unprojected.details()


# ---- the noise of a projected fit ------------------------------------------------------------


def _runs(cal: Calibration, problem: Problem, X: FloatArray, y: FloatArray, runs: int) -> Any:
    rng = np.random.default_rng(3)
    return np.array(
        [MECHANISM.run(X, y, problem, cal, rng=rng, progress=None).coef for _ in range(runs)]  # type: ignore[attr-defined]
    )


@pytest.mark.statistical
def test_a_projected_fit_injects_the_hand_derived_noise_in_k_dimensions() -> None:
    """b recovered from the released v (coef = Rᵀv, R of full row rank k): by the first-order
    condition on the projected rows z = clip(Rx), b = −Σ l′(y vᵀz) y z − n(λ + Δ)v ∈ ℝ³ with
    ‖b‖ ~ Gamma(3, 1/β), β = 0.2099592773 (derived above), its direction uniform."""
    X, y = _data()
    problem = _problem(0.05, projection_dim=K, projection_seed=SEED)
    cal = MECHANISM.calibrate(problem)
    coefs = _runs(cal, problem, X, y, runs=300)
    R = RandomProjection(D, K, SEED).matrix
    v = np.linalg.lstsq(R.T, coefs.T, rcond=None)[0].T  # runs × k
    Z, yz = projected_rows(RandomProjection(D, K, SEED), X, y)
    loss = get_loss("logistic")
    margins = yz[None, :] * (v @ Z.T)
    b = -(loss.derivative(margins) * yz[None, :]) @ Z - N * 0.05 * v
    assert b.shape == (300, K)
    norm_exponential_fits_only_at_the_right_scale(b, 0.2099592773)


# ---- the fold and the seed -------------------------------------------------------------------


def test_the_release_is_the_fold_of_the_certified_v_and_scores_original_rows() -> None:
    X, y = _data()
    problem = _problem(0.05, projection_dim=K, projection_seed=SEED)
    cal = MECHANISM.calibrate(problem)
    plan = cal.plan
    assert isinstance(plan, ObjectivePerturbationPlan)
    model = MECHANISM.run(X, y, problem, cal, rng=np.random.default_rng(5), progress=None)
    projection = RandomProjection(D, K, SEED)
    Z, yz = projected_rows(projection, X, y)
    v = certified_minimiser(Z, yz, plan, regularization=0.05, rng=np.random.default_rng(5))
    coef = model.coef  # type: ignore[attr-defined]
    assert np.array_equal(coef, release(projection.fold(v)).coef)
    # coefᵀx = vᵀ(Rx) up to the 2⁻³² release grid
    np.testing.assert_allclose(X @ coef, projection.project(X) @ v, rtol=0, atol=1e-8)
    # clipping the training rows rescales them: the predicted labels are unchanged
    assert np.array_equal(np.sign(X @ coef), np.sign(Z @ v))
    assert np.all(np.linalg.norm(Z, axis=1) <= 1.0)


def test_the_same_seed_gives_the_same_projection_and_the_same_fit() -> None:
    assert np.array_equal(RandomProjection(D, K, SEED).matrix, RandomProjection(D, K, SEED).matrix)
    assert not np.array_equal(
        RandomProjection(D, K, SEED).matrix, RandomProjection(D, K, SEED + 1).matrix
    )
    X, y = _data()

    def coef(**params: Any) -> FloatArray:
        result = fit(
            X,
            y,
            "objective_perturbation",
            epsilon=EPS,
            regularization=0.05,
            rng=np.random.default_rng(9),
            **params,
        )
        return np.asarray(result.model.coef)  # type: ignore[attr-defined]

    same = coef(projection_dim=K, projection_seed=SEED)
    assert np.array_equal(same, coef(projection_dim=K, projection_seed=SEED))
    assert not np.array_equal(same, coef(projection_dim=K, projection_seed=SEED + 1))
    assert same.shape == (D,)
    # without a seed, R comes from the test rng: reproducible with it, and recorded as drawn
    drawn = fit(
        X,
        y,
        "objective_perturbation",
        epsilon=EPS,
        regularization=0.05,
        rng=np.random.default_rng(9),
        projection_dim=K,
    )
    assert drawn.details["projection_seed"] is None
    assert drawn.details["noise_dimension"] == K
    assert np.array_equal(drawn.model.coef, coef(projection_dim=K))  # type: ignore[attr-defined]


def test_a_prepared_design_fits_the_projected_rows_bit_for_bit() -> None:
    X, y = _data()
    design = prepare_design(X, y)
    kwargs: dict[str, Any] = {"epsilon": EPS, "regularization": 0.05, "projection_dim": K}
    for _ in range(2):  # the second fit reuses what the design keeps for X
        on_design = fit(
            design, None, "objective_perturbation", rng=np.random.default_rng(4), **kwargs
        )
        on_arrays = fit(X, y, "objective_perturbation", rng=np.random.default_rng(4), **kwargs)
        assert np.array_equal(on_design.model.coef, on_arrays.model.coef)  # type: ignore[attr-defined]
    plain = fit(design, None, "objective_perturbation", epsilon=EPS, regularization=0.05)
    assert "noise_dimension" not in plain.details


# ---- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"projection_kind": "gaussian"}, "projection_kind needs projection_dim"),
        ({"projection_seed": 3}, "projection_seed needs projection_dim"),
        ({"projection_dim": 0}, "projection_dim must lie between 1 and 1000000"),
        ({"projection_dim": 2.0}, "projection_dim must be an integer"),
        ({"projection_dim": D + 1}, "must not exceed the number of features d = 6, got 7"),
        ({"projection_dim": 2, "projection_kind": "fjlt"}, "projection_kind must be one of"),
        ({"projection_dim": 2, "projection_seed": -1}, "projection_seed must lie between"),
        ({"projection_dim": 2, "projection_seed": MAX_SEED + 1}, "projection_seed must lie"),
        (
            {"projection_dim": 2, "task": "multiclass", "n_classes": 3},
            "projection_dim is not offered for multiclass fits: objective_perturbation "
            "projects the rows of binary",
        ),
        (
            {"projection_dim": 2, "task": "regression", "loss": "huber"},
            "projection_dim is not offered for regression fits: objective_perturbation "
            "projects the rows of binary",
        ),
    ],
)
def test_bad_projection_options_are_refused_before_any_data(
    kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(PrivacyParameterError, match=match):
        calibrate("objective_perturbation", n=N, d=D, epsilon=EPS, regularization=0.05, **kwargs)


def test_k_equal_to_d_is_allowed() -> None:
    cal = calibrate(
        "objective_perturbation", n=N, d=D, epsilon=EPS, regularization=0.05, projection_dim=D
    )
    assert cal.details["noise_dimension"] == D


def test_paths_with_a_public_centre_refuse_a_projection() -> None:
    with pytest.raises(PrivacyParameterError, match="not offered for transfer fits"):
        transfer_calibration(
            N, D, epsilon=EPS, transfer_strength=1.0, regularization=0.05, projection_dim=K
        )
    plan = MECHANISM.plan(_problem(projection_dim=K))
    with pytest.raises(PrivacyParameterError, match="public centre"):
        centred_plan(plan, np.zeros(D), 1.0)


def test_the_planner_gives_no_excess_risk_bound_for_a_projected_fit() -> None:
    kwargs: dict[str, Any] = {
        "n": N,
        "d": D,
        "epsilon": EPS,
        "delta": 0.0,
        "loss": "logistic",
        "regularization": 0.05,
    }
    assert plan_point("objective_perturbation", params={}, **kwargs).excess_risk_bound is not None
    projected = plan_point("objective_perturbation", params={"projection_dim": K}, **kwargs)
    assert projected.excess_risk_bound is None
    assert projected.expected_noise_norm == pytest.approx(3.0 / 0.2099592773, rel=1e-9)


@pytest.mark.parametrize("mechanism", ["objective_perturbation", "dp_sgd"])
def test_explicit_nulls_are_the_schemas_defaults(mechanism: str) -> None:
    # a client that sends every field sends the documented defaults: null kind and seed
    cal = calibrate(
        mechanism,
        n=N,
        d=D,
        epsilon=EPS,
        regularization=0.01,
        projection_dim=K,
        projection_kind=None,
        projection_seed=None,
    )
    assert cal.details["projection_kind"] == "gaussian"
    assert cal.details.get("projection_seed") is None
    with pytest.raises(PrivacyParameterError, match="projection_kind must be one of"):
        calibrate(
            mechanism,
            n=N,
            d=D,
            epsilon=EPS,
            regularization=0.01,
            projection_dim=K,
            projection_kind="",
        )
