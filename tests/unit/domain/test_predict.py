"""Scoring raw rows: same transform as training, checked cells, σ(score) for logistic only."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from service.domain.models.predict import (
    MAX_ABS_SCORE,
    MAX_REPORTED_ROW_ERRORS,
    InvalidRowsError,
    predict_rows,
    rows_to_columns,
)
from service.dp import LinearModel
from tests.unit.domain import _data


def model() -> LinearModel:
    return LinearModel(coef=np.array([1.5, 0.7, -0.2, -0.4, 2.0, -1.0]))


def test_scores_follow_the_training_transform() -> None:
    spec = _data.spec()
    data, _ = _data.rows(50)
    got = predict_rows(model(), spec, data, loss="logistic")
    expected = spec.transform(_data.columns(data)) @ model().coef
    assert [p.score for p in got] == pytest.approx(list(expected), abs=1e-12)
    for p in got:
        assert p.score is not None
        assert p.positive == (p.score > 0)
        assert p.probability == pytest.approx(1.0 / (1.0 + math.exp(-p.score)))


@pytest.mark.parametrize("loss", ["huber", None])
def test_no_probability_without_the_logistic_loss(loss: str | None) -> None:
    data, _ = _data.rows(3)
    assert all(p.probability is None for p in predict_rows(model(), _data.spec(), data, loss=loss))


def test_numbers_as_text_and_integral_floats_as_categories_are_accepted() -> None:
    spec = _data.spec()
    text_row = {"age": " 39 ", "color": "blue", "income": "120.5"}
    plain_row = {"age": 39, "color": "blue", "income": 120.5}
    a, b = predict_rows(model(), spec, [text_row, plain_row], loss="logistic")
    assert a.score == b.score


@pytest.mark.parametrize(
    ("cell", "value", "reason"),
    [
        ("age", None, "missing value"),
        ("age", "", "missing value"),
        ("age", "old", "expected a number"),
        ("age", True, "boolean"),
        ("age", float("nan"), "finite"),
        ("age", [1], "expected a number"),
        ("color", None, "missing value"),
        ("color", 2.5, "expected a category"),
        ("color", False, "boolean"),
    ],
)
def test_a_bad_cell_is_named_by_row_and_column(cell: str, value: Any, reason: str) -> None:
    data, _ = _data.rows(4)
    data[2][cell] = value
    with pytest.raises(InvalidRowsError) as info:
        predict_rows(model(), _data.spec(), data, loss="logistic")
    (err,) = info.value.errors
    assert (err.row, err.column) == (2, cell)
    assert reason in err.reason
    assert "row 2" in str(info.value)
    assert repr(cell) in str(info.value)


def test_an_absent_column_is_missing_and_extra_columns_are_ignored() -> None:
    data, _ = _data.rows(2)
    del data[1]["income"]
    data[0]["unrelated"] = object()
    with pytest.raises(InvalidRowsError) as info:
        rows_to_columns(_data.spec(), data)
    assert [(e.row, e.column) for e in info.value.errors] == [(1, "income")]


def test_errors_are_listed_in_row_order_and_capped() -> None:
    data, _ = _data.rows(100)
    for row in data:
        row["age"] = None
        row["color"] = None
    with pytest.raises(InvalidRowsError) as info:
        rows_to_columns(_data.spec(), data)
    errors = info.value.errors
    assert len(errors) == MAX_REPORTED_ROW_ERRORS
    assert info.value.total == 200
    assert [(e.row, e.column) for e in errors[:3]] == [(0, "age"), (0, "color"), (1, "age")]
    assert "and 180 more" in str(info.value)


def test_error_messages_never_quote_values() -> None:
    data, _ = _data.rows(1)
    data[0]["age"] = "secret-value-123"
    with pytest.raises(InvalidRowsError) as info:
        rows_to_columns(_data.spec(), data)
    assert "secret-value-123" not in str(info.value)


def test_no_rows_no_predictions() -> None:
    assert predict_rows(model(), _data.spec(), [], loss="logistic") == []


def test_an_undeclared_category_scores_as_an_all_zero_block_as_in_training() -> None:
    data, _ = _data.rows(2)
    spec = _data.spec()
    data[1]["color"] = "purple"
    (_, got) = predict_rows(model(), spec, data, loss="logistic")
    columns = {c: np.asarray([data[1][c]]) for c in spec.columns}
    expected = float(model().decision_function(spec.transform(columns))[0])
    assert got.score == pytest.approx(expected, abs=1e-12)


# ---- extreme weights and inputs: finite, documented values (issue 18 item 5) ----------------

HUGE = 1.7976931348623157e308


@pytest.mark.parametrize(
    "coef",
    [
        [HUGE, HUGE, -HUGE, HUGE, -HUGE, HUGE],  # inf − inf in a plain dot product
        [HUGE] * 6,
        [-HUGE] * 6,
        [1e-300, -1e-300, 0.0, 0.0, 5e-324, -5e-324],
        [0.0] * 6,
    ],
    ids=["cancelling", "all-huge", "all-minus-huge", "tiny", "zero"],
)
def test_scores_are_finite_and_clipped_whatever_the_weights(coef: list[float]) -> None:
    data, _ = _data.rows(30)
    extreme = [
        {"age": 1e308, "color": "red", "income": -1e308},
        {"age": -1e308, "color": "purple", "income": 1e308},
    ]
    got = predict_rows(
        LinearModel(coef=np.array(coef)), _data.spec(), [*data, *extreme], loss="logistic"
    )
    for p in got:
        assert p.score is not None
        assert math.isfinite(p.score)
        assert abs(p.score) <= MAX_ABS_SCORE
        assert p.positive == (p.score > 0)
        assert p.probability is not None
        assert 0.0 <= p.probability <= 1.0


def test_huge_weights_keep_the_sign_of_the_exact_score() -> None:
    spec = _data.spec()
    data, _ = _data.rows(40)
    coef = np.array([1.5, 0.7, -0.2, -0.4, 2.0, -1.0])
    small = predict_rows(LinearModel(coef=coef), spec, data, loss="logistic")
    huge = predict_rows(LinearModel(coef=coef * 1e307), spec, data, loss="logistic")
    for a, b in zip(small, huge, strict=True):
        assert a.score is not None
        assert b.positive == a.positive
        assert b.score == (MAX_ABS_SCORE if a.score > 0 else -MAX_ABS_SCORE if a.score < 0 else 0)
        assert b.probability == (1.0 if a.score > 0 else 0.0 if a.score < 0 else 0.5)


def test_a_model_giving_nan_scores_predicts_zero() -> None:
    class Broken:
        def decision_function(self, X: np.ndarray) -> np.ndarray:
            return np.full(X.shape[0], np.nan)

        def to_dict(self) -> dict[str, Any]:
            return {}

    (p,) = predict_rows(Broken(), _data.spec(), _data.rows(1)[0], loss="logistic")
    assert (p.score, p.positive, p.probability) == (0.0, False, 0.5)


def test_moderate_scores_are_not_changed() -> None:
    spec = _data.spec()
    data, _ = _data.rows(20)
    coef = np.array([1.5, 0.7, -0.2, -0.4, 2.0, -1.0]) * 1e5
    got = predict_rows(LinearModel(coef=coef), spec, data, loss=None)
    expected = spec.transform(_data.columns(data)) @ coef
    assert [p.score for p in got] == pytest.approx(list(expected), rel=1e-12)
