"""The band of a multi-class or regression fit against its trivial model (issue 29)."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray

from service.dp.analysis.expected_tasks import TaskExpectation, expected_task_band


def _rows(task: str, m: int = 600, d: int = 3) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    rng = np.random.default_rng(7)
    X = rng.normal(size=(m, d))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    if task == "multiclass":  # three classes by the first feature
        return X, np.digitize(X[:, 0], [-0.2, 0.2]).astype(np.float64)
    return X, np.clip(0.9 * X[:, 0] + 0.02 * rng.normal(size=m), -1.0, 1.0)


def _band(task: str, epsilon: float, **kw: object) -> TaskExpectation:
    X, y = _rows(task)
    mechanism = "output_perturbation"
    loss = "logistic" if task == "multiclass" else "huber"
    return expected_task_band(
        mechanism,
        regularization=0.01,
        params={},
        X=X,
        y=y,
        task=task,
        n_classes=3 if task == "multiclass" else 1,
        n=5000,
        epsilon=epsilon,
        delta=0.0,
        loss=loss,
        **kw,  # type: ignore[arg-type]
    )


def test_the_multiclass_baseline_is_the_test_rows_majority_frequency() -> None:
    _, y = _rows("multiclass")
    test = y[:300].astype(int)  # min(TEST_ROWS, 600 // 2) first rows
    band = _band("multiclass", 10.0)
    assert band.baseline == np.bincount(test).max() / 300
    assert band.metric == "accuracy"
    assert band.baseline is not None
    assert band.mean > band.baseline  # well powered: n = 5000 at ε = 10
    assert not band.worse_than_baseline
    assert _band("multiclass", 1e-4).worse_than_baseline  # noise swamps the model


def test_the_regression_baseline_is_the_rmse_of_the_pool_mean_in_label_units() -> None:
    _, y = _rows("regression")
    centre = y[300:].mean()
    expected = np.sqrt(np.mean((y[:300] - centre) ** 2)) * 20.0
    band = _band("regression", 10.0, half_range=20.0)
    assert band.baseline == pytest.approx(expected, rel=1e-12)
    assert band.to_dict()["mean_baseline_rmse"] == band.baseline
    assert band.p10 <= band.p90
    assert band.baseline is not None
    assert band.mean < band.baseline
    small = _band("regression", 1e-4, half_range=20.0)
    assert small.baseline is not None
    assert small.mean > small.baseline
    assert small.worse_than_baseline


def test_the_band_is_a_deterministic_function_of_public_inputs() -> None:
    assert _band("regression", 0.5) == _band("regression", 0.5)


def test_too_few_reference_rows_is_a_value_error() -> None:
    X, y = _rows("regression", m=6)
    with pytest.raises(ValueError, match="at least 8 rows"):
        expected_task_band(
            "output_perturbation",
            regularization=0.01,
            params={},
            X=X,
            y=y,
            task="regression",
            n_classes=1,
            n=100,
            epsilon=1.0,
            delta=0.0,
            loss="huber",
        )
