"""The average (seed 000, Alg. 4) and feature (Alg. 5) methods' maths on known cases."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from service.dp import fit
from service.dp.multisite.aggregation import (
    average_coefficients,
    feature_fit,
    linear_meta_design,
    linear_meta_scale,
    normalised_weights,
)
from service.dp.noise.draws import RELEASE_GRID, round_to_grid


def test_unweighted_average_of_known_vectors() -> None:
    f1 = [1.0, -2.0, 0.5]
    f2 = [3.0, 0.0, -0.5]
    f3 = [2.0, 5.0, 3.0]
    got = average_coefficients([f1, f2, f3])
    np.testing.assert_allclose(got, [2.0, 1.0, 1.0], atol=RELEASE_GRID)


def test_weights_are_normalised_to_sum_one() -> None:
    got = average_coefficients([[4.0, 0.0], [0.0, 8.0]], weights=[1.0, 3.0])
    np.testing.assert_allclose(got, [1.0, 6.0], atol=RELEASE_GRID)
    np.testing.assert_allclose(normalised_weights(2, [1.0, 3.0]), [0.25, 0.75])
    np.testing.assert_allclose(normalised_weights(4), [0.25] * 4)


@pytest.mark.parametrize(
    ("weights", "expected"),
    [
        ([1.7976931348623157e308, 1.7976931348623157e308], [0.5, 0.5]),  # Σw overflows
        ([4e307, 1.2e308], [0.25, 0.75]),
        ([5e-324, 5e-324, 0.0], [0.5, 0.5, 0.0]),  # the smallest subnormal
        ([1e-320, 3e-320], [0.25, 0.75]),
    ],
)
def test_weights_at_the_ends_of_the_doubles_are_normalised_like_moderate_ones(
    weights: list[float], expected: list[float]
) -> None:
    got = normalised_weights(len(weights), weights)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, expected, rtol=1e-3)
    assert got.sum() == pytest.approx(1.0)


def test_a_zero_weight_drops_a_model() -> None:
    got = average_coefficients([[1.0, 1.0], [100.0, -100.0]], weights=[2.0, 0.0])
    np.testing.assert_allclose(got, [1.0, 1.0], atol=RELEASE_GRID)


def test_one_model_is_returned_unchanged_up_to_the_release_grid() -> None:
    rng = np.random.default_rng(3)
    w = rng.normal(size=7)
    got = average_coefficients([w])
    assert np.max(np.abs(got - w)) <= RELEASE_GRID / 2
    assert np.all(np.round(got / RELEASE_GRID) * RELEASE_GRID == got)


def test_average_matches_the_mean_of_random_vectors() -> None:
    rng = np.random.default_rng(11)
    M = rng.normal(size=(5, 9))
    np.testing.assert_allclose(average_coefficients(list(M)), M.mean(axis=0), atol=RELEASE_GRID)


def test_multiclass_matrices_average_entry_by_entry_in_their_shape() -> None:
    # W̄ = (1·W₁ + 3·W₂)/4, by hand: row k of W̄ is the weighted average of the rows k
    W1 = np.array([[1.0, 0.0], [0.0, 2.0], [4.0, -4.0]])
    W2 = np.array([[-1.0, 4.0], [8.0, 2.0], [0.0, 0.0]])
    got = average_coefficients([W1, W2], [1.0, 3.0])
    assert got.shape == (3, 2)
    np.testing.assert_array_equal(got, [[-0.5, 3.0], [6.0, 2.0], [1.0, -1.0]])


@pytest.mark.parametrize(
    ("coefficients", "weights", "message"),
    [
        ([], None, "at least one model"),
        ([np.zeros((3, 2)), np.zeros((4, 2))], None, "same, non-zero number"),
        ([np.zeros((3, 2)), np.zeros(6)], None, "same, non-zero number"),
        ([[1.0, 2.0], [1.0]], None, "same, non-zero number"),
        ([[1.0, float("nan")]], None, "finite"),
        ([[1.0], [2.0]], [1.0], "expected 2 weights"),
        ([[1.0], [2.0]], [1.0, -1.0], "non-negative"),
        ([[1.0], [2.0]], [0.0, 0.0], "not all be zero"),
        ([[1.0], [2.0]], [1.0, float("inf")], "finite"),
    ],
)
def test_bad_input_is_a_value_error(
    coefficients: list[list[float]], weights: list[float] | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        average_coefficients(coefficients, weights)


# --- feature method (seed 000, Alg. 5) ------------------------------------------------------


def _holdout(n: int = 300, seed: int = 0) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    y = np.where(X @ np.array([2.0, -1.0, 0.5]) > 0, 1.0, -1.0)
    return X, y


def test_linear_meta_design_on_a_tiny_case() -> None:
    M = np.array([[3.0, 0.0, 0.0], [0.0, 4.0, 0.0]])  # ‖M‖₂ = 4
    assert linear_meta_scale(M) == 0.25
    X = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.6, 0.8, 0.0]])
    Z = linear_meta_design(X, M)
    np.testing.assert_allclose(Z, [[0.75, 0.0], [0.0, 1.0], [0.45, 0.8]])
    assert np.all(np.linalg.norm(Z, axis=1) <= 1.0 + 1e-12)
    assert linear_meta_scale(np.zeros((2, 3))) == 1.0


def test_linear_feature_fit_releases_the_composed_linear_model() -> None:
    X, y = _holdout()
    sites = [np.array([1.0, 0.0, 0.0]), np.array([0.0, -1.0, 0.5]), np.array([1.0, 1.0, 1.0])]
    M = np.vstack(sites)
    result = feature_fit(
        X,
        y,
        sites,
        meta="linear",
        mechanism="objective_perturbation",
        epsilon=1.0,
        regularization=0.05,
        rng=np.random.default_rng(5),
    )
    # ω is the meta-level fit on s·M_f x with the same noise; f_Σ = s·M_fᵀω (shape d).
    meta = fit(
        linear_meta_design(X, M),
        y,
        "objective_perturbation",
        epsilon=1.0,
        regularization=0.05,
        rng=np.random.default_rng(5),
    )
    assert meta.coef is not None
    assert result.coef is not None
    assert result.coef.shape == (3,)
    expected = linear_meta_scale(M) * (M.T @ meta.coef)
    np.testing.assert_allclose(result.coef, expected, atol=RELEASE_GRID)
    # Same scores as ω on the meta-features.
    np.testing.assert_allclose(X @ result.coef, linear_meta_design(X, M) @ meta.coef, atol=1e-8)
    assert result.mechanism == "feature"
    assert result.epsilon == 1.0
    assert result.details["n_site_models"] == 3


def test_sigmoid_feature_fit_releases_a_stacked_model() -> None:
    X, y = _holdout()
    sites = [np.array([1.0, 0.0, 0.0]), np.array([0.0, -1.0, 0.5])]
    result = feature_fit(
        X,
        y,
        sites,
        meta="sigmoid",
        mechanism="output_perturbation",
        epsilon=2.0,
        regularization=0.05,
        rng=np.random.default_rng(1),
    )
    body = result.model.to_dict()
    assert body["kind"] == "stacked"
    assert len(body["low_level"]) == 2
    assert len(body["high_level"]["coef"]) == 3  # two site models + intercept
    assert body["meta_scale"] == pytest.approx(1 / np.sqrt(3))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"meta": "cubic"}, "meta_features"),
        ({"mechanism": "dp_sgd"}, "meta-level mechanism"),
        ({"sites": []}, "at least one site model"),
        ({"sites": [[1.0, 2.0]]}, "3 weights"),
    ],
)
def test_feature_fit_refuses_bad_input(kwargs: dict[str, Any], message: str) -> None:
    X, y = _holdout(50)
    sites = kwargs.pop("sites", [[1.0, 0.0, 0.0]])
    options: dict[str, Any] = {"meta": "linear", "mechanism": "objective_perturbation", **kwargs}
    with pytest.raises(ValueError, match=message):
        feature_fit(X, y, sites, epsilon=1.0, regularization=0.05, **options)


# --- feature method on multi-class and numeric labels (issue 29) ----------------------------


def _rows(n: int, d: int, seed: int) -> NDArray[np.float64]:
    X = np.random.default_rng(seed).normal(size=(n, d))
    out: NDArray[np.float64] = X / np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    return out


@pytest.mark.parametrize(
    ("task", "n_classes", "mechanism", "loss"),
    [
        ("multiclass", 3, "objective_perturbation", "logistic"),
        ("regression", 1, "output_perturbation", "huber"),
    ],
)
def test_linear_stacking_of_other_tasks_is_the_meta_level_fit_mapped_back_by_hand(
    task: str, n_classes: int, mechanism: str, loss: str
) -> None:
    """M stacks the site models' rows (N·K × d, or N × d), z = s·Mx with s = 1/‖M‖₂ (so
    ‖z‖ ≤ 1), the meta level is the mechanism's own fit of the task on z in dimension N·K
    (or N), and the release is s·ΩM (K × d) or s·Mᵀω: checked against the same fit run by
    hand with the same seed."""
    rng = np.random.default_rng(3)
    X = _rows(120, 4, seed=1)
    if task == "multiclass":
        y = rng.integers(0, 3, size=120).astype(np.float64)
        sites = [rng.normal(size=(3, 4)) for _ in range(2)]
        M = np.vstack(sites)
    else:
        y = np.clip(X @ np.array([1.0, -0.5, 0.3, 0.0]), -1.0, 1.0)
        sites = [rng.normal(size=4) for _ in range(2)]
        M = np.vstack(sites)
    kwargs: dict[str, Any] = {
        "epsilon": 1.0,
        "delta": 1e-6,
        "loss": loss,
        "regularization": 0.05,
        "task": task,
        "n_classes": n_classes,
    }
    result = feature_fit(
        X,
        y,
        sites,
        meta="linear",
        mechanism=mechanism,
        rng=np.random.default_rng(9),
        **kwargs,
    )
    s = 1.0 / np.linalg.norm(M, ord=2)
    Z = linear_meta_design(X, M)
    np.testing.assert_allclose(Z, (X @ M.T) * s, rtol=0, atol=1e-15)
    assert np.linalg.norm(Z, axis=1).max() <= 1.0
    meta = fit(Z, y, mechanism, rng=np.random.default_rng(9), **kwargs)
    assert result.details["d"] == M.shape[0] == (6 if task == "multiclass" else 2)
    assert result.epsilon == meta.epsilon
    released = np.asarray(result.model.to_dict()["coef"])
    if task == "multiclass":
        expected = round_to_grid(s * (np.asarray(meta.model.to_dict()["coef"]) @ M))
        assert released.shape == (3, 4)
    else:
        expected = round_to_grid(s * (M.T @ np.asarray(meta.coef)))
    np.testing.assert_allclose(released, expected, rtol=0, atol=1e-12)


def test_sigmoid_stacking_refuses_other_tasks() -> None:
    X = _rows(30, 3, seed=2)
    y = np.zeros(30)
    with pytest.raises(ValueError, match="linear meta-features only"):
        feature_fit(
            X,
            y,
            [np.ones((3, 3))],
            meta="sigmoid",
            mechanism="objective_perturbation",
            epsilon=1.0,
            regularization=0.05,
            task="multiclass",
            n_classes=3,
        )
