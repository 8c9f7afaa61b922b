"""Data-independent preprocessing: encoding, clamping, unknown categories, unit-ball rows,
JSON round trip, and error messages that never quote data values."""

from __future__ import annotations

import json
import math
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.dp.data.preprocessing import (
    CategoricalFeature,
    NumericFeature,
    PreprocessingSpec,
    labels_from_column,
)
from service.dp.data.projection import RandomProjection


def _spec(**kwargs: object) -> PreprocessingSpec:
    features = (
        NumericFeature("age", 20.0, 60.0),
        CategoricalFeature("workclass", ("Private", "Gov", "Self")),
        NumericFeature("hours", 0.0, 100.0),
    )
    return PreprocessingSpec(features=features, **kwargs)  # type: ignore[arg-type]


COLUMNS: dict[str, Any] = {
    "age": [30.0, 10.0, 75.0, 60.0],
    "workclass": ["Gov", "Private", "Unknown", "Self"],
    "hours": [50, 0, 100, 25],
}


def test_feature_names_and_dimension() -> None:
    spec = _spec()
    assert spec.feature_names() == (
        "age",
        "workclass=Private",
        "workclass=Gov",
        "workclass=Self",
        "hours",
        "intercept",
    )
    assert spec.n_features == 6
    assert spec.columns == ("age", "workclass", "hours")
    assert _spec(intercept=False).n_features == 5
    assert spec.max_raw_norm == pytest.approx(2.0)  # √(2 numeric + 1 categorical + intercept)


def test_scale_mode_encodes_literally() -> None:
    X = _spec(row_norm="scale").transform(COLUMNS)
    # age: clamp to [20, 60] then (v − 20)/40; hours: v/100; everything divided by M = 2
    expected = (
        np.array(
            [
                [0.25, 0, 1, 0, 0.5, 1],
                [0.0, 1, 0, 0, 0.0, 1],  # age 10 clamped to 20
                [1.0, 0, 0, 0, 1.0, 1],  # age 75 clamped to 60; unknown category → zero block
                [1.0, 0, 0, 1, 0.25, 1],
            ]
        )
        / 2.0
    )
    np.testing.assert_allclose(X, expected, rtol=0, atol=1e-15)
    assert X.dtype == np.float64


def test_clip_mode_keeps_short_rows_and_normalises_long_ones() -> None:
    spec = PreprocessingSpec(features=(NumericFeature("a", 0.0, 10.0),), intercept=False)
    X = spec.transform({"a": [0.0, 5.0, 10.0, 20.0]})
    np.testing.assert_array_equal(X[:, 0], [0.0, 0.5, 1.0, 1.0])
    X2 = _spec().transform(COLUMNS)
    raw = _spec(row_norm="scale").transform(COLUMNS) * 2.0  # undo the public factor
    expected = raw / np.maximum(np.linalg.norm(raw, axis=1), 1.0)[:, None]
    np.testing.assert_allclose(X2, expected, rtol=1e-14)
    assert np.all(np.linalg.norm(X2, axis=1) <= 1.0)


def test_unknown_categories_give_an_all_zero_block() -> None:
    spec = PreprocessingSpec(
        features=(CategoricalFeature("c", ("a", "b")),), intercept=False, row_norm="scale"
    )
    X = spec.transform({"c": np.array(["b", "zzz", "a", "", "B"])})
    np.testing.assert_array_equal(X, [[0, 1], [0, 0], [1, 0], [0, 0], [0, 0]])


def test_categorical_values_are_compared_as_text() -> None:
    spec = PreprocessingSpec(
        features=(CategoricalFeature("c", ("1", "2", "True", "2.5")),),
        intercept=False,
        row_norm="scale",
    )
    expected = np.eye(4)
    for values in (
        np.array([1, 2, True, 2.5], dtype=object),
        ["1", "2", "True", "2.5"],
    ):
        np.testing.assert_array_equal(spec.transform({"c": values}), expected)
    np.testing.assert_array_equal(spec.transform({"c": np.array([1, 2])}), expected[:2])
    np.testing.assert_array_equal(
        spec.transform({"c": np.array([1.0, 2.0, 2.5])}), expected[[0, 1, 3]]
    )
    np.testing.assert_array_equal(spec.transform({"c": np.array([True])}), expected[[2]])


def test_numeric_columns_accept_numeric_strings_and_ints() -> None:
    spec = PreprocessingSpec(features=(NumericFeature("a", 0, 4),), intercept=False)
    np.testing.assert_array_equal(spec.transform({"a": ["1", " 2 ", "4"]})[:, 0], [0.25, 0.5, 1.0])
    np.testing.assert_array_equal(spec.transform({"a": np.array([0, 2])})[:, 0], [0.0, 0.5])


SECRET_NUMBER = 987654.321
SECRET_TEXT = "patient-4711-secret"


@pytest.mark.parametrize(
    ("column", "values", "count", "what"),
    [
        ("age", [SECRET_NUMBER, math.nan, math.inf, 30.0], 2, "missing or not finite"),
        ("age", np.array([SECRET_NUMBER, None, 3.0], dtype=object), 1, "missing or not finite"),
        ("age", [SECRET_TEXT, "12", "x", SECRET_NUMBER], 2, "not numbers"),
        ("workclass", np.array([SECRET_TEXT, None, None, "Gov"], dtype=object), 2, "missing"),
        ("workclass", np.array([1.5, np.nan, SECRET_NUMBER]), 1, "missing"),
    ],
)
def test_bad_values_name_the_column_and_count_but_never_a_value(
    column: str, values: object, count: int, what: str
) -> None:
    spec = _spec()
    n = len(values)  # type: ignore[arg-type]
    cols: dict[str, object] = {
        "age": [30.0] * n,
        "workclass": ["Gov"] * n,
        "hours": [1.0] * n,
    }
    cols[column] = values
    with pytest.raises(ValueError) as info:
        spec.transform(cols)  # type: ignore[arg-type]
    msg = str(info.value)
    assert repr(column) in msg
    assert f"{count} row(s)" in msg
    assert what in msg
    for secret in (SECRET_TEXT, "987654", "4711", "nan", "inf"):
        assert secret not in msg


def test_structural_errors() -> None:
    spec = _spec()
    with pytest.raises(ValueError, match="missing input columns: 'hours'"):
        spec.transform({"age": [1.0], "workclass": ["Gov"]})
    with pytest.raises(ValueError, match="different number of rows"):
        spec.transform({"age": [1.0, 2.0], "workclass": ["Gov"], "hours": [1.0, 2.0]})
    with pytest.raises(ValueError, match="one-dimensional"):
        spec.transform({"age": [[1.0]], "workclass": ["Gov"], "hours": [1.0]})


def test_empty_input_gives_an_empty_matrix() -> None:
    X = _spec().transform({"age": [], "workclass": [], "hours": []})
    assert X.shape == (0, 6)


@pytest.mark.parametrize(
    "make",
    [
        lambda: NumericFeature("a", 1.0, 1.0),
        lambda: NumericFeature("a", 2.0, 1.0),
        lambda: NumericFeature("a", -math.inf, 1.0),
        lambda: NumericFeature("a", 0.0, math.nan),
        lambda: NumericFeature("a", False, 1.0),
        lambda: NumericFeature("a", "0", 1.0),  # type: ignore[arg-type]
        lambda: NumericFeature("a", -1e308, 1e308),
        lambda: NumericFeature("", 0.0, 1.0),
        lambda: CategoricalFeature("c", ()),
        lambda: CategoricalFeature("c", ("a", "a")),
        lambda: CategoricalFeature("c", ("a", 1)),  # type: ignore[arg-type]
        lambda: CategoricalFeature("c", "ab"),  # type: ignore[arg-type]
        lambda: PreprocessingSpec(features=()),
        lambda: PreprocessingSpec(
            features=(NumericFeature("a", 0, 1), CategoricalFeature("a", ("x",)))
        ),
        lambda: PreprocessingSpec(
            features=(NumericFeature("c=x", 0, 1), CategoricalFeature("c", ("x",)))
        ),
        lambda: PreprocessingSpec(features=(NumericFeature("intercept", 0, 1),)),
        lambda: PreprocessingSpec(features=(NumericFeature("a", 0, 1),), row_norm="l1"),  # type: ignore[arg-type]
        lambda: PreprocessingSpec(features=(NumericFeature("a", 0, 1),), intercept=1),  # type: ignore[arg-type]
        lambda: PreprocessingSpec(
            features=(NumericFeature("a", 0, 1),), projection=RandomProjection(3, 2, 0)
        ),
    ],
)
def test_invalid_specs_are_rejected(make: object) -> None:
    with pytest.raises(ValueError):
        make()  # type: ignore[operator]


def test_json_round_trip_preserves_the_transform() -> None:
    proj = RandomProjection(d_in=6, k=3, seed=99)
    for spec in (_spec(), _spec(row_norm="scale", intercept=False), _spec(projection=proj)):
        text = json.dumps(spec.to_dict())
        again = PreprocessingSpec.from_dict(json.loads(text))
        assert again == spec
        np.testing.assert_array_equal(again.transform(COLUMNS), spec.transform(COLUMNS))


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.update(extra=1),
        lambda d: d.update(version=2),
        lambda d: d.update(features="age"),
        lambda d: d["features"][0].update(type="text"),
        lambda d: d["features"][0].update(unit="years"),
        lambda d: d["features"][1].update(categories="Gov"),
        lambda d: d["features"][0].update(lower="20"),
        lambda d: d.update(row_norm="max"),
        lambda d: d.update(projection={"d_in": 6, "k": 2}),
    ],
)
def test_from_dict_rejects_malformed_specs(mutate: object) -> None:
    data = _spec().to_dict()
    mutate(data)  # type: ignore[operator]
    with pytest.raises(ValueError):
        PreprocessingSpec.from_dict(data)


def test_projection_follows_the_row_norm_and_is_reclipped() -> None:
    proj = RandomProjection(d_in=6, k=2, seed=5)
    spec = _spec(projection=proj)
    assert spec.feature_names() == ("proj_0", "proj_1")
    assert spec.n_features == 2
    assert spec.raw_feature_names()[-1] == "intercept"
    X = spec.transform(COLUMNS)
    np.testing.assert_array_equal(X, proj.apply(_spec().transform(COLUMNS)))
    assert np.all(np.einsum("ij,ij->i", X, X) <= 1.0)


def test_labels_from_column() -> None:
    np.testing.assert_array_equal(
        labels_from_column(np.array([">50K", "<=50K", ">50K"], dtype=object), ">50K"), [1, -1, 1]
    )
    np.testing.assert_array_equal(labels_from_column([1, 0, 1], 1), [1, -1, 1])
    np.testing.assert_array_equal(labels_from_column(np.array([1.0, 0.0]), 1), [1, -1])
    np.testing.assert_array_equal(labels_from_column([True, False], True), [1, -1])
    with pytest.raises(ValueError, match="'income': 1 row") as info:
        labels_from_column(np.array([SECRET_TEXT, None], dtype=object), "x", column="income")
    assert SECRET_TEXT not in str(info.value)
    with pytest.raises(ValueError, match="positive label"):
        labels_from_column(["a"], None)


def test_million_rows_are_fast() -> None:
    n = 1_000_000
    rng = np.random.default_rng(0)
    cats = np.array(["Private", "Gov", "Self", "Other"], dtype=object)
    cols = {
        "age": rng.uniform(0, 100, n),
        "workclass": cats[rng.integers(0, 4, n)],
        "hours": rng.integers(0, 120, n),
    }
    t0 = time.perf_counter()
    X = _spec().transform(cols)
    elapsed = time.perf_counter() - t0
    assert X.shape == (n, 6)
    assert elapsed < 10.0
    assert np.all(np.einsum("ij,ij->i", X, X) <= 1.0)
    # "Other" is not declared: its rows have an empty workclass block
    other = cols["workclass"] == "Other"
    assert not X[other][:, 1:4].any()
    assert np.all(X[~other][:, 1:4].sum(axis=1) > 0)


_values = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.integers(-(10**12), 10**12),
)


@settings(max_examples=80, deadline=None)
@given(
    n_numeric=st.integers(0, 4),
    n_categorical=st.integers(0, 3),
    intercept=st.booleans(),
    row_norm=st.sampled_from(["clip", "scale"]),
    rows=st.integers(1, 12),
    data=st.data(),
)
def test_every_row_lies_in_the_unit_ball(
    n_numeric: int,
    n_categorical: int,
    intercept: bool,
    row_norm: str,
    rows: int,
    data: st.DataObject,
) -> None:
    if n_numeric + n_categorical == 0:
        n_numeric = 1
    features: list[NumericFeature | CategoricalFeature] = []
    columns: dict[str, list[object]] = {}
    for i in range(n_numeric):
        lo = data.draw(st.floats(-1e9, 1e9))
        width = data.draw(st.floats(1e-6, 1e9))
        features.append(NumericFeature(f"n{i}", lo, lo + width))
        columns[f"n{i}"] = data.draw(st.lists(_values, min_size=rows, max_size=rows))
    for i in range(n_categorical):
        cats = data.draw(st.lists(st.text(max_size=3), min_size=1, max_size=4, unique=True))
        features.append(CategoricalFeature(f"c{i}", tuple(cats)))
        columns[f"c{i}"] = data.draw(
            st.lists(
                st.one_of(st.sampled_from(cats), st.text(max_size=3)), min_size=rows, max_size=rows
            )
        )
    spec = PreprocessingSpec(features=tuple(features), intercept=intercept, row_norm=row_norm)  # type: ignore[arg-type]
    X = spec.transform(columns)  # type: ignore[arg-type]
    assert X.shape == (rows, spec.n_features)
    assert np.all(np.isfinite(X))
    assert np.all(X >= 0.0)
    assert np.all(np.einsum("ij,ij->i", X, X) <= 1.0)
    if row_norm == "scale":
        # the public factor: entries are the [0, 1] encodings divided by M
        bound = 1.0 / spec.max_raw_norm + 1e-15
        assert np.all(bound >= X)


def test_transform_codes_equals_transform_on_the_same_rows() -> None:
    spec = PreprocessingSpec(
        features=(
            NumericFeature(column="age", lower=17.0, upper=90.0),
            CategoricalFeature(column="colour", categories=("red", "green", "blue")),
            NumericFeature(column="hours", lower=0.0, upper=99.0),
            CategoricalFeature(column="size", categories=("S", "M")),
        ),
        intercept=True,
        row_norm="clip",
    )
    rng = np.random.default_rng(7)
    n = 500
    age = rng.uniform(0.0, 120.0, n)  # some below and above the public bounds
    hours = rng.uniform(-10.0, 120.0, n)
    colours = np.array(["red", "green", "blue", "purple"])  # purple is not declared
    sizes = np.array(["S", "M", "XL"])
    c_idx = rng.integers(0, 4, n)
    s_idx = rng.integers(0, 3, n)
    expected = spec.transform(
        {"age": age, "colour": colours[c_idx], "hours": hours, "size": sizes[s_idx]}
    )
    codes = np.stack([np.where(c_idx == 3, -1, c_idx), np.where(s_idx == 2, -1, s_idx)], axis=1)
    got = spec.transform_codes(np.stack([age, hours], axis=1), codes)
    np.testing.assert_array_equal(got, expected)
    assert np.all(np.linalg.norm(got, axis=1) <= 1.0 + 1e-12)


def test_transform_codes_refuses_codes_outside_the_declared_lists() -> None:
    spec = PreprocessingSpec(
        features=(CategoricalFeature(column="c", categories=("a", "b")),), intercept=True
    )
    with pytest.raises(ValueError, match="out of range"):
        spec.transform_codes(np.zeros((1, 0)), np.array([[2]]))
