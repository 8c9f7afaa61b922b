"""Multi-class and numeric labels below the API: the spec's forms, the stored label column,
the DP core's encoding read back, and predictions mapped back (issue 29)."""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from numpy.typing import NDArray
from scipy.special import softmax

from service.domain.datasets.codec import EncodedChunk, decode_chunk, design_from_chunks
from service.domain.datasets.ingest import ingest
from service.domain.datasets.labels import LabelTask, UnsupportedTaskError, require_binary
from service.domain.datasets.readers import IngestReport
from service.domain.datasets.spec import (
    BudgetLimits,
    DatasetFileError,
    DatasetSpec,
    DatasetSpecError,
    FeatureInput,
    LabelValuesError,
    build_spec,
)
from service.domain.models.predict import MAX_ABS_SCORE, predict_rows
from service.dp import LinearModel, prepare_design

LIMITS = BudgetLimits(max_epsilon=10.0, max_delta=1e-3)
HEADER = "age,target\n"


def _spec(**label: Any) -> DatasetSpec:
    return build_spec(
        name="toy",
        label_column="target",
        positive=label.pop("positive", None),
        features=[FeatureInput(column="age", type="numeric", lower=0, upper=100)],
        epsilon=1.0,
        delta=0.0,
        limits=LIMITS,
        **label,
    )


def _run(rows: list[str], spec: DatasetSpec) -> tuple[IngestReport, list[EncodedChunk]]:
    chunks: list[EncodedChunk] = []
    report = ingest(
        io.BytesIO((HEADER + "\n".join(rows) + "\n").encode()), spec, on_chunk=chunks.append
    )
    return report, chunks


def _design(spec: DatasetSpec, report: IngestReport, chunks: list[EncodedChunk]) -> Any:
    return design_from_chunks(
        spec.preprocessing, [c.payload for c in chunks], report.n_rows, spec.label_task
    )


def test_classes_are_stored_as_their_index_in_the_smallest_type() -> None:
    spec = _spec(classes=["a", "b", 3])
    assert (spec.task, spec.classes, spec.positive) == ("multiclass", ("a", "b", "3"), None)
    assert spec.label == {"column": "target", "classes": ["a", "b", "3"]}
    report, chunks = _run(["1,b", "2,3", "3,a", "4,3"], spec)
    _, _, stored = decode_chunk(chunks[0].payload)
    assert stored.dtype == np.int8
    assert stored.tolist() == [1, 2, 0, 2]
    X, y = _design(spec, report, chunks)
    assert y.dtype == np.float64
    assert y.tolist() == [1.0, 2.0, 0.0, 2.0]
    prepared = prepare_design(X, y, "multiclass", 3)  # the DP core accepts the encoding
    assert prepared.n_classes == 3


def test_more_than_127_classes_are_stored_as_int16() -> None:
    classes = [f"c{i}" for i in range(200)]
    spec = build_spec(
        name="wide",
        label_column="target",
        positive=None,
        classes=classes,
        max_classes=200,
        features=[FeatureInput(column="age", type="numeric", lower=0, upper=100)],
        epsilon=1.0,
        delta=0.0,
        limits=LIMITS,
    )
    report, chunks = _run(["1,c199", "2,c0", "3,c128"], spec)
    _, _, stored = decode_chunk(chunks[0].payload)
    assert stored.dtype == np.int16
    assert _design(spec, report, chunks)[1].tolist() == [199.0, 0.0, 128.0]


def test_a_row_of_no_declared_class_is_counted_never_shown() -> None:
    spec = _spec(classes=["a", "b", "c"])
    with pytest.raises(LabelValuesError) as caught:
        _run(["1,a", "2,SECRET-1", "3,A", "4,c"], spec)
    exc = caught.value
    assert exc.rows == 2
    assert exc.errors == [
        {"loc": ["file", "target"], "msg": "2 row(s) hold a label value of none of the 3 classes"}
    ]
    assert "SECRET-1" not in exc.detail
    assert "'A'" not in exc.detail


def test_a_numeric_label_is_clipped_exactly_and_mapped_onto_minus_one_to_one() -> None:
    spec = _spec(label_lower=-2.0, label_upper=6.0)
    assert spec.task == "regression"
    assert spec.label == {"column": "target", "lower": -2.0, "upper": 6.0}
    rows = ["1,0.1", "2,-7", "3,6.000001", "4,2", "5,5.999999999999999"]
    report, chunks = _run(rows, spec)
    assert report.label_clipped_rows == 2
    assert report.to_dict()["label_clipped_rows"] == 2
    _, _, stored = decode_chunk(chunks[0].payload)
    assert stored.dtype == np.float64
    # stored exactly: the clipped values bit for bit
    assert stored.tolist() == [0.1, -2.0, 6.0, 2.0, 5.999999999999999]
    _, y = _design(spec, report, chunks)
    # y = 2(v − L)/(U − L) − 1 by hand
    assert y.tolist() == [2 * ((v + 2.0) / 8.0) - 1 for v in stored.tolist()]
    assert (y[1], y[2], y[3]) == (-1.0, 1.0, 0.0)


def test_a_numeric_label_from_parquet_is_read_as_a_number() -> None:
    spec = _spec(label_lower=0.0, label_upper=10.0)
    sink = io.BytesIO()
    pq.write_table(pa.table({"age": [1, 2], "target": pa.array([3, 12], pa.int64())}), sink)
    chunks: list[EncodedChunk] = []
    report = ingest(io.BytesIO(sink.getvalue()), spec, on_chunk=chunks.append)
    assert report.label_clipped_rows == 1
    assert _design(spec, report, chunks)[1].tolist() == [-0.4, 1.0]


@pytest.mark.parametrize("cell", ["SECRET-2", "nan", "-inf"])
def test_a_numeric_label_that_is_no_finite_number_is_refused(cell: str) -> None:
    with pytest.raises(DatasetFileError) as caught:
        _run(["1,2", f"2,{cell}"], _spec(label_lower=0.0, label_upper=10.0))
    assert "'target'" in caught.value.detail
    assert "SECRET-2" not in caught.value.detail


def test_class_labels_need_no_positive_rows() -> None:
    report, _ = _run(["1,a", "2,a"], _spec(classes=["a", "b", "c"]))
    assert report.n_rows == 2


@pytest.mark.parametrize(
    ("label", "loc"),
    [
        ({"classes": ["a", "b", "c"], "positive": "a"}, ["label", "positive"]),
        ({"classes": ["a", "b", "c"], "label_upper": 1.0}, ["label", "upper"]),
        ({"label_lower": 0.0, "label_upper": 1.0, "negative": "x"}, ["label", "negative"]),
        ({"label_lower": math.inf, "label_upper": 1.0}, ["label", "lower"]),
        ({"label_lower": 2.0, "label_upper": 1.0}, ["label", "upper"]),
        ({"label_lower": -1e308, "label_upper": 1e308}, ["label", "upper"]),
        ({"classes": ["a"]}, ["label", "classes"]),
        ({"classes": [1, "1", 2]}, ["label", "classes"]),
        ({"classes": [str(i) for i in range(101)]}, ["label", "classes"]),
        ({}, ["label"]),
    ],
)
def test_label_forms_are_checked_naming_the_field(label: dict[str, Any], loc: list[str]) -> None:
    with pytest.raises(DatasetSpecError) as caught:
        _spec(**label)
    assert loc in [e["loc"] for e in caught.value.errors]


def test_two_classes_are_the_binary_form() -> None:
    spec = _spec(classes=["no", "yes"])
    assert (spec.task, spec.positive, spec.negative, spec.classes) == ("binary", "yes", "no", None)
    assert spec.label == {"column": "target", "positive": "yes", "negative": "no"}


def test_a_label_json_of_every_earlier_form_reads_as_binary() -> None:
    for label in (
        None,
        {},
        {"column": "y", "positive": "1"},
        {"column": "y", "positive": "1", "negative": "0"},
    ):
        assert LabelTask.from_label(label) == LabelTask("binary")
        require_binary(label, "x", loc=["body"])
    with pytest.raises(UnsupportedTaskError) as caught:
        require_binary({"column": "y", "lower": 0, "upper": 1}, "exporting", loc=["body"])
    assert caught.value.slug == "unsupported-label-task"
    assert "exporting is available for binary labels only" in caught.value.detail
    assert "labels y = ±1" in caught.value.detail  # the reason, not a promise
    assert "not yet" not in caught.value.detail


# ---- predictions ---------------------------------------------------------------------------


class _Scores:
    """A released multi-class model as the contract describes it: (n, K) scores."""

    def __init__(self, coef: NDArray[np.float64]) -> None:
        self.coef = coef

    def decision_function(self, X: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.asarray(X @ self.coef.T, dtype=np.float64)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "multiclass", "coef": self.coef.tolist()}


def test_a_multiclass_prediction_is_the_class_of_the_largest_score_with_its_softmax() -> None:
    spec = _spec(classes=["a", "b", "c"])
    coef = np.array([[2.0, 0.0], [0.0, 1.0], [-1.0, 0.5]])  # (K, d): age, intercept
    rows = [{"age": 0}, {"age": 100}, {"age": 80}]
    X = spec.preprocessing.transform({"age": np.array([0.0, 100.0, 80.0])})
    got = predict_rows(
        _Scores(coef), spec.preprocessing, rows, loss="logistic", labels=spec.label_task
    )
    scores = X @ coef.T
    for p, s in zip(got, scores, strict=True):
        assert p.scores == pytest.approx(list(s), abs=1e-15)
        assert p.probabilities == pytest.approx(list(softmax(s)), rel=1e-12)
        assert p.predicted_class == "abc"[int(np.argmax(s))]
        assert (p.positive, p.score, p.probability, p.value) == (None, None, None, None)
    assert got[0].predicted_class == "b"  # age 0: scores (0, 1, 0.5)


def test_multiclass_scores_stay_finite() -> None:
    spec = _spec(classes=["a", "b", "c"])
    coef = np.array([[1e308, 1e308], [-1e308, -1e308], [0.0, 0.0]])
    (p,) = predict_rows(
        _Scores(coef), spec.preprocessing, [{"age": 100}], loss="logistic", labels=spec.label_task
    )
    assert p.scores is not None
    assert p.probabilities is not None
    assert all(math.isfinite(s) and abs(s) <= MAX_ABS_SCORE for s in p.scores)
    assert p.probabilities == pytest.approx([1.0, 0.0, 0.0])
    assert p.predicted_class == "a"


def test_a_regression_prediction_maps_the_score_back_within_the_bounds() -> None:
    spec = _spec(label_lower=10.0, label_upper=30.0)
    model = LinearModel(coef=np.array([3.0, -1.0]))
    ages = [0.0, 50.0, 100.0]
    got = predict_rows(
        model,
        spec.preprocessing,
        [{"age": a} for a in ages],
        loss="squared",
        labels=spec.label_task,
    )
    X = spec.preprocessing.transform({"age": np.array(ages)})
    for p, s in zip(got, X @ model.coef, strict=True):
        assert p.score == pytest.approx(s, abs=1e-15)
        # v = L + (clip(s, −1, 1) + 1)/2 · (U − L)
        assert p.value == pytest.approx(10.0 + (min(max(s, -1.0), 1.0) + 1.0) / 2.0 * 20.0)
        assert p.value is not None
        assert 10.0 <= p.value <= 30.0
        assert (p.positive, p.probability, p.predicted_class) == (None, None, None)
    assert got[0].value == 10.0  # score −1: the lower bound


def test_the_unit_mapping_and_its_inverse() -> None:
    task = LabelTask("regression", lower=-3.0, upper=5.0)
    v = np.array([-3.0, 1.0, 5.0, 0.5])
    y = task.to_unit(v)
    assert y.tolist() == [-1.0, 0.0, 1.0, -0.125]
    np.testing.assert_allclose(task.from_unit(y), v, rtol=0, atol=1e-15)
    assert task.from_unit(np.array([-7.0, 9.0, np.nan])).tolist() == [-3.0, 5.0, 1.0]
    assert (task.n_classes, LabelTask("multiclass", classes=("a", "b", "c")).n_classes) == (1, 3)
