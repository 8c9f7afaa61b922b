"""Dataset ingestion: spec validation, streaming CSV/Parquet encoding, value-free errors."""

from __future__ import annotations

import asyncio
import io
import json
import math
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from service.api.uploads import UploadAbortedError, UploadRejectedError, _Pipe, process_upload
from service.domain.datasets import ingest as ingest_module
from service.domain.datasets import readers as readers_module
from service.domain.datasets.codec import (
    EncodedChunk,
    decode_chunk,
    design_from_chunks,
    encode_chunk,
)
from service.domain.datasets.ingest import ingest
from service.domain.datasets.readers import IngestReport
from service.domain.datasets.spec import (
    BudgetLimits,
    DatasetFileError,
    DatasetInputError,
    DatasetSpec,
    DatasetSpecError,
    FeatureInput,
    LabelValuesError,
    MissingValuesError,
    build_spec,
)
from service.domain.ledger.units import DELTA_UNIT, EPSILON_UNIT, to_units

LIMITS = BudgetLimits(max_epsilon=10.0, max_delta=1e-3)
#: Cell values that must never appear in an error message.
SECRETS = ("SECRET-TEXT-7731", "987654321", "4242.5")

HEADER = "age,colour,score,label\n"
ROWS = [
    "30,red,1.5,yes",
    "150,blue,-3,no",  # age above its bound, score below
    "-5,green,2,yes",  # age below, undeclared category -> all-zero block
    "45,red,0.25,no",
]


def _features() -> list[FeatureInput]:
    return [
        FeatureInput(column="age", type="numeric", lower=0, upper=100),
        FeatureInput(column="colour", type="categorical", categories=("red", "blue")),
        FeatureInput(column="score", type="numeric", lower=-1, upper=2),
    ]


def _spec(**overrides: Any) -> DatasetSpec:
    args: dict[str, Any] = {
        "name": "toy",
        "label_column": "label",
        "positive": "yes",
        "negative": "no",
        "features": _features(),
        "epsilon": 1.0,
        "delta": 1e-6,
        "limits": LIMITS,
    }
    args.update(overrides)
    return build_spec(**args)


def _run(data: bytes, spec: DatasetSpec | None = None) -> tuple[IngestReport, list[EncodedChunk]]:
    chunks: list[EncodedChunk] = []
    report = ingest(io.BytesIO(data), spec or _spec(), on_chunk=chunks.append)
    return report, chunks


def _csv(rows: Sequence[str], header: str = HEADER) -> bytes:
    return (header + "\n".join(rows) + "\n").encode()


def _assert_value_free(exc: DatasetInputError) -> None:
    text = exc.detail + json.dumps(exc.errors)
    for secret in SECRETS:
        assert secret not in text


# ---- spec ---------------------------------------------------------------------------------


def test_build_spec_normalises_and_converts_caps_to_units() -> None:
    spec = _spec(epsilon=4.0, delta=1e-6, positive=1, negative=0)
    assert (spec.positive, spec.negative) == ("1", "0")
    assert spec.epsilon_cap_units == to_units(4.0, EPSILON_UNIT, "down") == 4 * 10**9
    assert spec.delta_cap_units == to_units(1e-6, DELTA_UNIT, "down") == 10**9
    assert spec.columns == ("age", "colour", "score", "label")
    assert spec.preprocessing.n_features == 1 + 2 + 1 + 1  # with the intercept
    assert spec.preprocessing.row_norm == "clip"
    as_json = spec.to_dict()
    assert as_json["label"] == {"column": "label", "positive": "1", "negative": "0"}
    assert as_json["features"][1] == {
        "type": "categorical",
        "column": "colour",
        "categories": ["red", "blue"],
    }
    assert as_json["budget"] == {"epsilon": 4.0, "delta": 1e-6}


def test_numeric_feature_without_bounds_is_refused_with_the_reason() -> None:
    features = _features()
    features[0] = FeatureInput(column="age", type="numeric", upper=100)
    with pytest.raises(DatasetSpecError) as info:
        _spec(features=features)
    assert "'age'" in info.value.detail
    assert "will not read bounds from the data" in info.value.detail
    assert info.value.errors[0]["loc"] == ["features", 0]


def test_several_unbounded_features_are_named_together() -> None:
    features = [
        FeatureInput(column="a", type="numeric"),
        FeatureInput(column="b", type="numeric", lower=0),
    ]
    with pytest.raises(DatasetSpecError) as info:
        _spec(features=features)
    assert "'a', 'b'" in info.value.detail
    assert "will not read bounds from the data" in info.value.detail
    assert len(info.value.errors) == 2


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"features": [FeatureInput(column="a", type="numeric", lower=1, upper=1)]}, "smaller"),
        (
            {"features": [FeatureInput(column="a", type="numeric", lower=0, upper=math.inf)]},
            "finite",
        ),
        ({"features": [FeatureInput(column="c", type="categorical", categories=())]}, "list of"),
        (
            {"features": [FeatureInput(column="c", type="categorical", categories=("x", "x"))]},
            "more than once",
        ),
        (
            {"features": [FeatureInput(column="c", type="categorical", categories=("x", "?"))]},
            "missing-value markers",
        ),
        (
            {
                "features": [
                    FeatureInput(column="c", type="numeric", lower=0, upper=1, categories=("x",))
                ]
            },
            "not categories",
        ),
        (
            {
                "features": [
                    FeatureInput(column="c", type="categorical", lower=0, categories=("x",))
                ]
            },
            "not bounds",
        ),
        ({"features": []}, "at least one feature"),
        (
            {
                "features": [
                    *_features(),
                    FeatureInput(column="age", type="numeric", lower=0, upper=1),
                ]
            },
            "declared 2 times",
        ),
        ({"label_column": "age"}, "also a feature"),
        ({"label_column": ""}, "label column must be named"),
        ({"positive": "NA"}, "missing-value marker"),
        ({"name": " "}, "name must have"),
        ({"name": "x" * 201}, "name must have"),
        ({"epsilon": 0.0}, "epsilon must be a finite number > 0"),
        ({"epsilon": math.nan}, "epsilon must be a finite number > 0"),
        ({"epsilon": 10.5}, "exceeds this server's maximum of 10.0"),
        ({"epsilon": 1e-10}, "at least"),
        ({"delta": 1.0}, "0 <= delta < 1"),
        ({"delta": -1e-9}, "0 <= delta < 1"),
        ({"delta": 0.01}, "exceeds this server's maximum of 0.001"),
        ({"missing": "impute"}, "'error' or 'drop'"),
        ({"row_norm": "unit"}, "'clip' or 'scale'"),
    ],
)
def test_invalid_specs_are_refused_precisely(overrides: dict[str, Any], fragment: str) -> None:
    with pytest.raises(DatasetSpecError) as info:
        _spec(**overrides)
    assert fragment in info.value.detail + json.dumps(info.value.errors)
    assert info.value.errors


def test_several_problems_are_all_listed() -> None:
    with pytest.raises(DatasetSpecError) as info:
        _spec(epsilon=-1.0, delta=2.0, name="")
    assert "3 problems" in info.value.detail
    assert {tuple(e["loc"]) for e in info.value.errors} == {
        ("budget", "epsilon"),
        ("budget", "delta"),
        ("name",),
    }


def test_custom_missing_markers_allow_a_category_named_na() -> None:
    features = [FeatureInput(column="c", type="categorical", categories=("NA", "EU"))]
    spec = _spec(features=features, missing_values=[""])
    report, chunks = _run(
        _csv(["NA,yes", "EU,no", ",no"], header="c,label\n"),
        _spec(features=features, missing_values=[""], missing="drop"),
    )
    assert spec.missing_values == ("",)
    assert report.n_rows == 2
    X, _ = design_from_chunks(spec.preprocessing, [c.payload for c in chunks], report.n_rows)
    assert X[0, 0] > 0
    assert X[1, 1] > 0


# ---- happy paths ----------------------------------------------------------------------------


def _expected(spec: DatasetSpec, rows: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    cells = [r.split(",") for r in rows]
    columns = {
        "age": np.array([float(c[0]) for c in cells]),
        "colour": np.array([c[1] for c in cells]),
        "score": np.array([float(c[2]) for c in cells]),
    }
    X = spec.preprocessing.transform(columns)
    y = np.array([1.0 if c[3] == "yes" else -1.0 for c in cells])
    return X, y


def test_csv_is_encoded_exactly_like_the_public_transform() -> None:
    spec = _spec()
    report, chunks = _run(_csv(ROWS), spec)
    assert (report.format, report.n_rows, report.rows_read, report.rows_dropped) == (
        "csv",
        4,
        4,
        0,
    )
    assert report.n_positive == 2
    assert report.unknown_category_rows == {"colour": 1}
    assert [c.seq for c in chunks] == [0]
    X, y = design_from_chunks(spec.preprocessing, [c.payload for c in chunks], report.n_rows)
    X_expected, y_expected = _expected(spec, ROWS)
    np.testing.assert_array_equal(X, X_expected)
    np.testing.assert_array_equal(y, y_expected)
    assert np.all(np.linalg.norm(X, axis=1) <= 1.0)
    # clamping: age 150 -> 100 (1.0 before the row clip), -5 -> 0; unknown "green" -> zeros
    num, cat, labels = decode_chunk(chunks[0].payload)
    np.testing.assert_array_equal(num[:, 0], [30, 100, 0, 45])
    np.testing.assert_array_equal(num[:, 1], [1.5, -1, 2, 0.25])
    np.testing.assert_array_equal(cat[:, 0], [0, 1, -1, 0])
    np.testing.assert_array_equal(labels, [1, -1, 1, -1])
    assert X[2, 1] == X[2, 2] == 0.0  # the colour block of the undeclared category


def test_label_values_of_neither_class_are_refused_with_counts() -> None:
    rows = ["1,red,0,yes", "2,red,0,maybe", "3,red,0,YES", "4,red,0,no", "5,red,0,SECRET-TEXT-7731"]
    exc = _bad(_csv(rows))
    assert isinstance(exc, LabelValuesError)
    assert exc.slug == "invalid-label-values"
    assert exc.detail.startswith("3 rows of 5 have a value in the label column 'label'")
    assert "neither the positive class 'yes' nor the negative class 'no'" in exc.detail
    for value in ("maybe", "YES"):
        assert value not in exc.detail + json.dumps(exc.errors)
    assert exc.errors == [
        {"loc": ["file", "label"], "msg": "3 row(s) hold a label value of neither declared class"}
    ]
    assert exc.extensions()["label_column"] == "label"
    assert exc.extensions()["label_rows"] == 3


def test_label_values_are_counted_over_every_block(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readers_module, "CSV_BLOCK_BYTES", 64)
    rows = [f"{i},red,0,{['yes', 'no', 'Yes '][i % 3]}" for i in range(90)]
    exc = _bad(_csv(rows))
    assert isinstance(exc, LabelValuesError)
    assert exc.rows == 30


def test_missing_labels_follow_the_missing_policy_not_the_label_rule() -> None:
    rows = ["1,red,0,yes", "2,red,0,", "3,red,0,no"]
    assert isinstance(_bad(_csv(rows)), MissingValuesError)
    report, _ = _run(_csv(rows), _spec(missing="drop"))
    assert (report.n_rows, report.n_positive, report.rows_dropped) == (2, 1, 1)


def test_a_spec_naming_only_the_positive_class_reads_a_two_valued_label() -> None:
    spec = _spec(negative=None)
    assert spec.negative is None
    assert spec.to_dict()["label"] == {"column": "label", "positive": "yes"}
    _, chunks = _run(_csv(["1,red,0,yes", "2,red,0,no", "3,red,0,no"]), spec)
    _, _, y = decode_chunk(chunks[0].payload)
    np.testing.assert_array_equal(y, [1, -1, -1])


@pytest.mark.parametrize(
    ("others", "how"),
    [
        (["no", "maybe", "SECRET-TEXT-7731"], "more than one value"),
        (["YES", "YES"], "only in case or spaces"),
        ([" yes", "no"], "more than one value"),
    ],
    ids=["several-values", "case-variant", "space-variant-and-another"],
)
def test_a_spec_naming_only_the_positive_class_refuses_an_ambiguous_label(
    others: list[str], how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(readers_module, "CSV_BLOCK_BYTES", 32)  # values in different blocks
    rows = ["1,red,0,yes", *(f"{i},red,0,{v}" for i, v in enumerate(others, 2))]
    exc = _bad(_csv(rows), _spec(negative=None))
    assert isinstance(exc, LabelValuesError)
    assert how in exc.detail
    assert f"({len(others)} rows of {len(rows)}; values not shown)" in exc.detail
    assert '"negative": "..."' in exc.detail
    for value in ("maybe", "YES"):
        assert value not in exc.detail


@pytest.mark.parametrize(
    ("negative", "fragment"),
    [("yes", "must differ from the positive class"), ("NA", "missing-value marker")],
)
def test_the_negative_class_is_checked(negative: str, fragment: str) -> None:
    with pytest.raises(DatasetSpecError) as info:
        _spec(negative=negative)
    assert fragment in info.value.detail
    assert info.value.errors[0]["loc"] == ["label", "negative"]


def test_parquet_gives_the_same_design_as_csv(tmp_path: Path) -> None:
    spec = _spec()
    cells = [r.split(",") for r in ROWS]
    table = pa.table(
        {
            "id": pa.array(range(4)),  # an extra column is ignored
            "age": pa.array([int(c[0]) for c in cells], pa.int32()),
            "colour": pa.array([c[1] for c in cells]).dictionary_encode(),
            "score": pa.array([float(c[2]) for c in cells]),
            "label": pa.array([c[3] for c in cells]),
        }
    )
    path = tmp_path / "toy.parquet"
    pq.write_table(table, path)
    with path.open("rb") as fh:
        chunks: list[EncodedChunk] = []
        report = ingest(fh, spec, on_chunk=chunks.append)
    assert report.format == "parquet"
    X, y = design_from_chunks(spec.preprocessing, [c.payload for c in chunks], report.n_rows)
    _, csv_chunks = _run(_csv(ROWS), spec)
    X_csv, y_csv = design_from_chunks(spec.preprocessing, [c.payload for c in csv_chunks], 4)
    np.testing.assert_array_equal(X, X_csv)
    np.testing.assert_array_equal(y, y_csv)


def test_parquet_integer_categories_and_boolean_labels(tmp_path: Path) -> None:
    features = [
        FeatureInput(column="zone", type="categorical", categories=("1", "2")),
        FeatureInput(column="flag", type="numeric", lower=0, upper=1),
    ]
    spec = _spec(features=features, positive=True, negative=False)
    path = tmp_path / "ints.parquet"
    pq.write_table(
        pa.table(
            {
                "zone": pa.array([1, 2, 3], pa.int64()),
                "flag": pa.array([True, False, True]),
                "label": pa.array([True, False, False]),
            }
        ),
        path,
    )
    with path.open("rb") as fh:
        chunks: list[EncodedChunk] = []
        report = ingest(fh, spec, on_chunk=chunks.append)
    num, cat, y = decode_chunk(chunks[0].payload)
    assert report.unknown_category_rows == {"zone": 1}
    np.testing.assert_array_equal(cat[:, 0], [0, 1, -1])
    np.testing.assert_array_equal(num[:, 0], [1, 0, 1])
    np.testing.assert_array_equal(y, [1, -1, -1])


def test_large_csv_is_read_in_several_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readers_module, "CSV_BLOCK_BYTES", 4096)
    rng = np.random.default_rng(7)
    rows = [
        f"{rng.integers(-10, 120)},{rng.choice(['red', 'blue', 'teal'])},"
        f"{rng.normal():.6f},{rng.choice(['yes', 'no'])}"
        for _ in range(3000)
    ]
    spec = _spec()
    report, chunks = _run(_csv(rows), spec)
    assert report.n_chunks == len(chunks) > 5
    assert [c.seq for c in chunks] == list(range(len(chunks)))
    assert sum(c.n_rows for c in chunks) == report.n_rows == 3000
    X, y = design_from_chunks(spec.preprocessing, [c.payload for c in chunks], report.n_rows)
    X_expected, y_expected = _expected(spec, rows)
    np.testing.assert_array_equal(X, X_expected)
    np.testing.assert_array_equal(y, y_expected)


def test_parquet_is_read_in_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readers_module, "PARQUET_BATCH_ROWS", 100)
    n = 1050
    path = tmp_path / "big.parquet"
    pq.write_table(
        pa.table(
            {
                "age": np.arange(n, dtype=np.float64) % 100,
                "colour": pa.array(["red", "blue"] * (n // 2)),
                "score": np.zeros(n),
                "label": pa.array(["yes", "no", "no"] * (n // 3)),
            }
        ),
        path,
        row_group_size=300,
    )
    with path.open("rb") as fh:
        chunks: list[EncodedChunk] = []
        report = ingest(fh, _spec(), on_chunk=chunks.append)
    assert report.n_rows == n
    assert len(chunks) == 11
    assert [c.n_rows for c in chunks] == [100] * 10 + [50]


# ---- missing values -------------------------------------------------------------------------

MISSING_ROWS = [
    "30,red,1,yes",
    ",blue,1,no",  # age missing
    "40,?,NA,yes",  # colour and score missing (default markers)
    "50,blue,1,",  # label missing
    "60,red,1,no",
]


def test_missing_values_are_an_error_by_default_with_counts() -> None:
    with pytest.raises(MissingValuesError) as info:
        _run(_csv(MISSING_ROWS))
    exc = info.value
    assert exc.columns == {"age": 1, "colour": 1, "score": 1, "label": 1}
    assert exc.rows == 3
    assert "3 rows of 5 have missing values" in exc.detail
    for column in ("'age' (1 row)", "'colour' (1 row)", "'score' (1 row)", "'label' (1 row)"):
        assert column in exc.detail
    assert '"missing": "drop"' in exc.detail


def test_missing_values_are_counted_over_the_whole_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readers_module, "CSV_BLOCK_BYTES", 1024)
    rows = [f"{i % 90},red,1,yes" if i % 250 else f",red,,{'no'}" for i in range(2000)]
    with pytest.raises(MissingValuesError) as info:
        _run(_csv(rows))
    assert info.value.columns == {"age": 8, "score": 8}
    assert info.value.rows == 8


def test_missing_drop_drops_the_rows_and_reports_them() -> None:
    spec = _spec(missing="drop")
    report, chunks = _run(_csv(MISSING_ROWS), spec)
    assert (report.rows_read, report.rows_dropped, report.n_rows) == (5, 3, 2)
    X, y = design_from_chunks(spec.preprocessing, [c.payload for c in chunks], report.n_rows)
    X_expected, y_expected = _expected(spec, [MISSING_ROWS[0], MISSING_ROWS[4]])
    np.testing.assert_array_equal(X, X_expected)
    np.testing.assert_array_equal(y, y_expected)


def test_undeclared_categories_are_counted_after_dropping_rows() -> None:
    # a dropped row's undeclared category is not counted; the missing colour is not either
    rows = ["1,green,1,yes", ",green,1,no", "2,,1,no", "3,blue,1,no", "4,pink,0,yes"]
    spec = _spec(missing="drop")
    report, chunks = _run(_csv(rows), spec)
    assert (report.rows_read, report.rows_dropped, report.n_rows) == (5, 2, 3)
    assert report.unknown_category_rows == {"colour": 2}
    _, cat, _ = decode_chunk(chunks[0].payload)
    np.testing.assert_array_equal(cat[:, 0], [-1, 1, -1])


def test_long_category_lists_keep_every_code() -> None:
    names = tuple(f"c{i}" for i in range(300))
    features = [
        FeatureInput(column="age", type="numeric", lower=0, upper=100),
        FeatureInput(column="colour", type="categorical", categories=names),
    ]
    spec = _spec(features=features)
    rows = [f"{i % 90},{names[i]},{'yes' if i % 2 else 'no'}" for i in range(300)]
    rows.append("5,other,yes")
    report, chunks = _run(_csv(rows, header="age,colour,label\n"), spec)
    assert report.unknown_category_rows == {"colour": 1}
    _, cat, _ = decode_chunk(chunks[0].payload)
    np.testing.assert_array_equal(cat[:, 0], [*range(300), -1])


def test_dropping_every_row_is_an_error() -> None:
    with pytest.raises(DatasetFileError, match="no rows are left after dropping the 2 rows"):
        _run(_csv([",red,1,yes", "1,red,1,"]), _spec(missing="drop"))


def test_parquet_nulls_are_missing_values(tmp_path: Path) -> None:
    path = tmp_path / "nulls.parquet"
    pq.write_table(
        pa.table(
            {
                "age": pa.array([1.0, None, 3.0]),
                "colour": pa.array(["red", "blue", None]),
                "score": pa.array([0.0, 0.0, 0.0]),
                "label": pa.array(["yes", "no", "no"]),
            }
        ),
        path,
    )
    with path.open("rb") as fh, pytest.raises(MissingValuesError) as info:
        ingest(fh, _spec(), on_chunk=lambda _: None)
    assert info.value.columns == {"age": 1, "colour": 1}


# ---- bad files (value-free errors) ----------------------------------------------------------


def _bad(data: bytes, spec: DatasetSpec | None = None) -> DatasetInputError:
    with pytest.raises(DatasetInputError) as info:
        _run(data, spec)
    _assert_value_free(info.value)
    return info.value


def test_empty_file() -> None:
    exc = _bad(b"")
    assert isinstance(exc, DatasetFileError)
    assert exc.detail == "the uploaded file is empty"


def test_header_without_rows() -> None:
    assert _bad(HEADER.encode()).detail == "the file has a header but no data rows"


def test_blank_first_line() -> None:
    assert "first line must be a header" in _bad(b"\n\n1,2\n").detail


def test_unknown_columns_are_named() -> None:
    exc = _bad(_csv(["1,SECRET-TEXT-7731,yes"], header="age,colour,label\n"))
    assert "no column 'score'" in exc.detail
    assert "the file's header has 3 columns" in exc.detail
    assert "SECRET" not in exc.detail
    assert exc.errors == [{"loc": ["spec", "score"], "msg": "not a column of the file"}]


def test_duplicate_header_names_are_refused() -> None:
    exc = _bad(_csv(["1,red,1,1,yes"], header="age,colour,score,score,label\n"))
    assert "'score' 2 times" in exc.detail


def test_row_with_wrong_number_of_fields() -> None:
    exc = _bad(_csv(["1,red,1,yes", "987654321,SECRET-TEXT-7731,1,yes,4242.5"]))
    assert exc.detail == "malformed CSV: a row has 5 fields but the header has 4"


def test_text_in_a_numeric_column() -> None:
    exc = _bad(_csv(["1,red,1,yes", "SECRET-TEXT-7731,red,1,no"]))
    assert "numeric column 'age' holds a value that is not a number" in exc.detail


def test_invalid_utf8() -> None:
    exc = _bad(HEADER.encode() + b"1,r\xff\xfed,1,yes\n")
    assert "not valid UTF-8" in exc.detail


def test_nan_and_infinity_are_counted_per_column() -> None:
    rows = ["1,red,NaN,yes", "inf,red,1,no", "-inf,red,nan,no", "987654321,red,1,yes"]
    exc = _bad(_csv(rows))
    assert isinstance(exc, DatasetFileError)
    assert "NaN or infinity found in 'age' (2 rows), 'score' (2 rows)" in exc.detail


def test_nan_is_an_error_even_when_missing_rows_are_dropped() -> None:
    exc = _bad(_csv(["1,red,nan,yes", ",red,1,no"]), _spec(missing="drop"))
    assert "'score' (1 row)" in exc.detail


def test_label_without_positive_rows() -> None:
    exc = _bad(_csv(["1,red,1,no", "2,blue,1,no"]))
    assert exc.detail.startswith("the label column 'label' has no row equal to the positive")


def test_label_without_negative_rows() -> None:
    exc = _bad(_csv(["1,red,1,yes", "2,blue,1,yes"]))
    assert "no negative rows" in exc.detail


def test_corrupt_parquet() -> None:
    exc = _bad(b"PAR1" + b"SECRET-TEXT-7731" * 10)
    assert exc.detail == "the Parquet file could not be read (no details shown)"


def test_parquet_text_in_a_numeric_column(tmp_path: Path) -> None:
    buf = io.BytesIO()
    pq.write_table(
        pa.table(
            {
                "age": pa.array(["SECRET-TEXT-7731"]),
                "colour": pa.array(["red"]),
                "score": pa.array([1.0]),
                "label": pa.array(["yes"]),
            }
        ),
        buf,
    )
    exc = _bad(buf.getvalue())
    assert "numeric column 'age' has Parquet type string" in exc.detail


def test_parquet_float_category_column_is_refused() -> None:
    buf = io.BytesIO()
    pq.write_table(
        pa.table(
            {
                "age": pa.array([1.0]),
                "colour": pa.array([4242.5]),
                "score": pa.array([1.0]),
                "label": pa.array(["yes"]),
            }
        ),
        buf,
    )
    exc = _bad(buf.getvalue())
    assert "column 'colour' has Parquet type double" in exc.detail


# ---- block-parallel CSV reading -------------------------------------------------------------


def _random_rows(n: int, seed: int = 11) -> list[str]:
    rng = np.random.default_rng(seed)
    return [
        f"{rng.integers(-10, 120)},{rng.choice(['red', 'blue', 'teal'])},"
        f"{rng.normal():.6f},{rng.choice(['yes', 'no'])}"
        for _ in range(n)
    ]


def _design(data: bytes, spec: DatasetSpec | None = None) -> tuple[np.ndarray, np.ndarray]:
    spec = spec or _spec()
    report, chunks = _run(data, spec)
    return design_from_chunks(spec.preprocessing, [c.payload for c in chunks], report.n_rows)


def _assert_design(data: bytes, rows: Sequence[str]) -> None:
    X, y = _design(data)
    X_expected, y_expected = _expected(_spec(), rows)
    np.testing.assert_array_equal(X, X_expected)
    np.testing.assert_array_equal(y, y_expected)


@pytest.mark.parametrize("block", [64, 1000, 1 << 20])
def test_blocks_and_the_streaming_reader_give_the_same_design(
    block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(readers_module, "CSV_BLOCK_BYTES", block)
    rows = _random_rows(2000 if block > 100 else 400)
    plain = _csv(rows)  # cut into blocks at line breaks
    quoted = _csv(rows, header='"age","colour","score","label"\n')  # streaming reader
    _assert_design(plain, rows)
    _assert_design(quoted, rows)
    plain_report, _ = _run(plain)
    quoted_report, _ = _run(quoted)
    assert plain_report.to_dict() == quoted_report.to_dict()
    assert plain_report.n_positive == quoted_report.n_positive


@pytest.mark.parametrize("threads", [1, 3])
def test_the_chunks_do_not_depend_on_the_number_of_threads(
    threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(readers_module, "CSV_BLOCK_BYTES", 2048)
    data = _csv(_random_rows(3000))
    reference = _run(data)[1]
    monkeypatch.setattr(ingest_module, "INGEST_THREADS", threads)
    chunks = _run(data)[1]
    assert len(chunks) > 10
    assert chunks == reference


def test_quoted_line_breaks_after_the_first_blocks_are_read_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(readers_module, "CSV_BLOCK_BYTES", 512)
    plain = [r.split(",") for r in _random_rows(300)]
    # After 300 plain rows, quoted cells: many with a line break (and a comma) inside, which
    # a cut at the block's last line break would split; declared categories in quotes.
    odd = [
        [str(i % 90), "blue,\nsky" if i % 2 else "red", "0.5", "no" if i % 3 else "yes"]
        for i in range(300)
    ]
    more = [r.split(",") for r in _random_rows(300, seed=12)]
    cells = [*plain, *odd, *more]
    lines = [",".join(f'"{c}"' if "\n" in c or c == "red" else c for c in row) for row in cells]
    X, y = _design(_csv(lines))
    columns = {
        "age": np.array([float(c[0]) for c in cells]),
        "colour": np.array([c[1] for c in cells]),
        "score": np.array([float(c[2]) for c in cells]),
    }
    np.testing.assert_array_equal(X, _spec().preprocessing.transform(columns))
    np.testing.assert_array_equal(y, [1.0 if c[3] == "yes" else -1.0 for c in cells])


@pytest.mark.parametrize(
    "shape",
    ["crlf", "cr-data", "cr-everywhere", "blank-lines", "no-final-break", "bom", "empty-lines-end"],
)
def test_line_endings_and_blank_lines(shape: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readers_module, "CSV_BLOCK_BYTES", 256)
    rows = _random_rows(400)
    text = {
        "crlf": HEADER.replace("\n", "\r\n") + "\r\n".join(rows) + "\r\n",
        "cr-data": HEADER + "\r".join(rows) + "\r",
        "cr-everywhere": HEADER.replace("\n", "\r") + "\r".join(rows) + "\r",
        "blank-lines": HEADER + "\n\n".join(rows) + "\n\n\n",
        "no-final-break": HEADER + "\n".join(rows),
        "bom": "\ufeff" + HEADER + "\n".join(rows) + "\n",
        "empty-lines-end": HEADER + "\n".join(rows) + "\n" + "\n" * 600,
    }[shape]
    _assert_design(text.encode(), rows)


@pytest.mark.parametrize("bad_first", ["fields", "number"])
def test_the_first_bad_row_of_the_file_is_the_one_reported(
    bad_first: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(readers_module, "CSV_BLOCK_BYTES", 256)
    rows = _random_rows(3000)
    fields, number = "987654321,SECRET-TEXT-7731,1,yes,4242.5", "SECRET-TEXT-7731,red,1,no"
    rows[100], rows[2500] = (fields, number) if bad_first == "fields" else (number, fields)
    before = threading.active_count()
    exc = _bad(_csv(rows))
    assert threading.active_count() == before
    if bad_first == "fields":
        assert exc.detail == "malformed CSV: a row has 5 fields but the header has 4"
    else:
        assert "numeric column 'age' holds a value that is not a number" in exc.detail


def test_missing_and_non_finite_counts_span_every_block(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readers_module, "CSV_BLOCK_BYTES", 256)
    rows = _random_rows(3000)
    for i in range(0, 3000, 300):
        rows[i] = "nan,red,1,yes"
    for i in range(7, 3000, 500):
        rows[i] = ",red,inf,no"
    exc = _bad(_csv(rows), _spec(missing="drop"))
    assert "NaN or infinity found in 'age' (10 rows), 'score' (6 rows)" in exc.detail


class _Trickle(io.RawIOBase):
    """A source like a pipe filled by an upload: it cannot seek, and reads come back short."""

    def __init__(self, data: bytes, seed: int = 5) -> None:
        super().__init__()
        self._data = memoryview(data)
        self._rng = np.random.default_rng(seed)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), len(self._data), int(self._rng.integers(1, 3000)))
        buffer[:n] = self._data[:n]
        self._data = self._data[n:]
        return n


@pytest.mark.parametrize("kind", ["plain", "quoted-header", "quotes-later", "parquet"])
def test_a_source_that_cannot_seek_and_reads_short(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(readers_module, "CSV_BLOCK_BYTES", 4096)
    rows = _random_rows(3000)
    if kind == "plain":
        data = _csv(rows)
    elif kind == "quoted-header":
        data = _csv(rows, header='"age","colour","score","label"\n')
    elif kind == "quotes-later":
        data = _csv([*rows[:2000], *(r.replace(",red,", ',"red",') for r in rows[2000:])])
    else:
        cells = [r.split(",") for r in rows]
        buf = io.BytesIO()
        pq.write_table(
            pa.table(
                {
                    "age": [float(c[0]) for c in cells],
                    "colour": [c[1] for c in cells],
                    "score": [float(c[2]) for c in cells],
                    "label": [c[3] for c in cells],
                }
            ),
            buf,
        )
        data = buf.getvalue()
    spec = _spec()
    chunks: list[EncodedChunk] = []
    report = ingest(cast(IO[bytes], _Trickle(data)), spec, on_chunk=chunks.append)
    X, y = design_from_chunks(spec.preprocessing, [c.payload for c in chunks], report.n_rows)
    X_expected, y_expected = _expected(spec, rows)
    np.testing.assert_array_equal(X, X_expected)
    np.testing.assert_array_equal(y, y_expected)


def test_blocks_in_flight_are_bounded() -> None:
    threads = 2
    pulled = 0

    def tasks() -> Any:
        nonlocal pulled
        for i in range(50):
            pulled += 1
            yield lambda i=i: i

    def work(task: Any) -> Any:
        return task()

    seen = []
    for consumed, value in enumerate(ingest_module._in_order(tasks(), work, threads=threads)):
        assert pulled - consumed <= threads + 1
        seen.append(value)
    assert seen == list(range(50))


# ---- streaming mechanics --------------------------------------------------------------------


def test_a_failing_consumer_stops_the_reader_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readers_module, "CSV_BLOCK_BYTES", 1024)
    rows = [f"{i % 90},red,1,{'yes' if i % 2 else 'no'}" for i in range(5000)]
    seen: list[int] = []

    def explode(chunk: EncodedChunk) -> None:
        seen.append(chunk.seq)
        if chunk.seq == 2:
            raise RuntimeError("disk full")

    before = threading.active_count()
    with pytest.raises(RuntimeError, match="disk full"):
        ingest(io.BytesIO(_csv(rows)), _spec(), on_chunk=explode)
    assert seen == [0, 1, 2]
    assert threading.active_count() == before


def test_payloads_never_unpickle() -> None:
    buf = io.BytesIO()
    np.savez(buf, num=np.zeros((1, 1)), cat=np.array([[object()]], dtype=object), y=np.ones(1))
    with pytest.raises(ValueError, match="allow_pickle"):
        decode_chunk(buf.getvalue())


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_chunk_payload_round_trips_bit_for_bit(compression: Any) -> None:
    rng = np.random.default_rng(3)
    num = np.column_stack(
        [
            rng.normal(size=500),  # fractions: stay float64
            rng.integers(17, 91, size=500).astype(np.float64),  # int8
            rng.integers(-40_000, 40_000, size=500).astype(np.float64),  # int32
            np.full(500, 2.0**40),  # integral but beyond int32: float64
            np.where(np.arange(500) == 7, -0.0, 1.0),  # −0.0 must survive as −0.0
        ]
    )
    cat = rng.integers(-1, 5, size=(500, 2)).astype(np.int16)
    y = np.where(rng.random(500) < 0.5, 1, -1).astype(np.int8)
    payload = encode_chunk(num, cat, y, compression=compression)
    assert payload.startswith(b"PFARROW1")
    num2, cat2, y2 = decode_chunk(payload)
    assert num2.dtype == np.float64
    np.testing.assert_array_equal(num2.view(np.uint64), num.view(np.uint64))
    np.testing.assert_array_equal(cat2, cat)
    np.testing.assert_array_equal(y2, y)
    assert y2.dtype == np.int8


def test_integral_columns_are_stored_narrow() -> None:
    rng = np.random.default_rng(4)
    n = 10_000
    integral = rng.integers(0, 100, size=(n, 1)).astype(np.float64)
    fractional = integral + 0.5
    codes = rng.integers(0, 3, size=(n, 1))
    y = np.ones(n, dtype=np.int8)
    narrow = encode_chunk(integral, codes, y, compression="none")
    wide = encode_chunk(fractional, codes, y, compression="none")
    assert len(narrow) < len(wide) - 6 * n  # 1 byte per value instead of 8


def _legacy_payload(num: np.ndarray, cat: np.ndarray, y: np.ndarray, *, lz4: bool) -> bytes:
    """A payload as uploads stored it before the Arrow form: ``np.savez``, maybe in LZ4."""
    buf = io.BytesIO()
    np.savez(buf, num=num, cat=cat, y=y)
    raw = buf.getvalue()
    if not lz4:
        return raw
    packed = pa.Codec("lz4").compress(raw, asbytes=True)
    return b"PFLZ4\x00" + len(raw).to_bytes(8, "little") + bytes(packed)


@pytest.mark.parametrize("lz4", [False, True])
def test_payloads_of_the_earlier_form_are_still_read(lz4: bool) -> None:
    spec = _spec()
    num = np.array([[30.0, 1.5], [100.0, -1.0]])
    cat = np.array([[0], [-1]], dtype=np.int16)
    y = np.array([1, -1], dtype=np.int8)
    old = _legacy_payload(num, cat, y, lz4=lz4)
    num2, cat2, y2 = decode_chunk(old)
    np.testing.assert_array_equal(num2, num)
    np.testing.assert_array_equal(cat2, cat)
    np.testing.assert_array_equal(y2, y)
    X_old, y_old = design_from_chunks(spec.preprocessing, [old], 2)
    X_new, y_new = design_from_chunks(spec.preprocessing, [encode_chunk(num, cat, y)], 2)
    np.testing.assert_array_equal(X_old, X_new)
    np.testing.assert_array_equal(y_old, y_new)


def test_corrupt_or_foreign_arrow_payloads_are_refused() -> None:
    good = encode_chunk(np.zeros((2, 1)), np.zeros((2, 1), dtype=np.int8), np.ones(2, np.int8))
    with pytest.raises(ValueError, match="not a readable Arrow"):
        decode_chunk(good[:-40])
    sink = pa.BufferOutputStream()
    sink.write(b"PFARROW1")
    batch = pa.record_batch({"n0": pa.array(["x"]), "y": pa.array([1], pa.int8())})
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    with pytest.raises(ValueError, match="unexpected column types"):
        decode_chunk(sink.getvalue().to_pybytes())


def test_chunk_round_trip_and_row_count_checks() -> None:
    spec = _spec()
    payload = encode_chunk(
        np.array([[10.0, 0.5]]), np.array([[1]], dtype=np.int16), np.array([1], dtype=np.int8)
    )
    X, y = design_from_chunks(spec.preprocessing, [payload], 1)
    assert X.shape == (1, spec.preprocessing.n_features)
    np.testing.assert_array_equal(y, [1.0])
    with pytest.raises(ValueError, match="more rows"):
        design_from_chunks(spec.preprocessing, [payload, payload], 1)
    with pytest.raises(ValueError, match="fewer rows"):
        design_from_chunks(spec.preprocessing, [payload], 2)


def test_a_file_without_header_row_does_not_echo_its_first_record() -> None:
    # Without a header row the "header" is the first record: none of it may be shown.
    exc = _bad(b"41,SECRET-TEXT-7731,yes\n39,other,no\n")
    assert "SECRET" not in exc.detail
    assert "41" not in exc.detail
    assert "header row" in exc.detail


# ---- uploads parsed while they arrive (service.api.uploads) ---------------------------------

BOUNDARY = "privfit-test-boundary"


def _part(name: str, data: bytes, filename: str | None = None) -> bytes:
    extra = f'; filename="{filename}"' if filename else ""
    return (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"{extra}\r\n\r\n'.encode()
        + data
        + b"\r\n"
    )


def _body(*parts: bytes) -> bytes:
    return b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()


SPEC_JSON = b'{"name": "toy"}'


@dataclass
class _Run:
    """What ``process`` saw: its source, whether ingest returned (= the upload would be
    stored), and the error it ended with."""

    source: Any = None
    seekable: bool | None = None
    stored: bool = False
    error: BaseException | None = None


def _upload(
    body: bytes | list[bytes],
    *,
    piece: int = 1000,
    max_bytes: int = 1 << 30,
    spec: DatasetSpec | None = None,
    before_last: Callable[[], Any] | None = None,
    fail_at: int | None = None,
) -> tuple[_Run, Any]:
    """``process_upload`` over ``body`` sent in pieces (of ``piece`` bytes, or as listed);
    ``process`` ingests the file."""
    run = _Run()

    def prepare(text: str) -> DatasetSpec:
        if text != SPEC_JSON.decode():
            raise DatasetSpecError("invalid dataset spec: not the test spec")
        return spec or _spec()

    def process(prepared: DatasetSpec, source: IO[bytes]) -> IngestReport:
        run.source = source
        run.seekable = source.seekable()
        try:
            report = ingest(source, prepared, on_chunk=lambda _: None)
        except BaseException as exc:
            run.error = exc
            raise
        run.stored = True
        return report

    async def chunks() -> AsyncIterator[bytes]:
        pieces = (
            body
            if isinstance(body, list)
            else [body[i : i + piece] for i in range(0, len(body), piece)]
        )
        for k, data in enumerate(pieces):
            if fail_at is not None and k == fail_at:
                raise ConnectionResetError("the client went away")
            if k == len(pieces) - 1 and before_last is not None:
                await before_last()
            yield data

    async def main() -> Any:
        return await process_upload(
            content_type=f"multipart/form-data; boundary={BOUNDARY}",
            content_length=None,
            chunks=chunks(),
            max_bytes=max_bytes,
            prepare=prepare,
            process=process,
        )

    try:
        return run, asyncio.run(main())
    except Exception as exc:
        return run, exc


def test_the_file_is_parsed_while_the_body_arrives() -> None:
    rows = _random_rows(3000)
    started = threading.Event()
    original = ingest_module._Encoder.run

    def run_and_signal(self: Any, task: Any) -> Any:
        started.set()
        return original(self, task)

    async def wait_for_the_first_block() -> None:
        # The last piece is held back until a worker has started on the file: the file was
        # being parsed before the body was complete.
        if not await asyncio.to_thread(started.wait, 10.0):
            raise AssertionError("nothing was parsed before the body was complete")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(readers_module, "CSV_BLOCK_BYTES", 4096)
        mp.setattr(ingest_module._Encoder, "run", run_and_signal)
        body = _body(_part("spec", SPEC_JSON), _part("file", _csv(rows), "a.csv"))
        run, report = _upload(body, before_last=wait_for_the_first_block)
    assert isinstance(report, IngestReport), report
    assert report.n_rows == 3000
    assert run.stored
    assert run.seekable is False  # the pipe, not a spooled file


def test_a_file_sent_before_its_spec_is_spooled_then_read() -> None:
    rows = _random_rows(500)
    run, report = _upload(_body(_part("file", _csv(rows), "a.csv"), _part("spec", SPEC_JSON)))
    assert isinstance(report, IngestReport), report
    assert report.n_rows == 500
    assert run.seekable is True


class _WatchedCondition(threading.Condition):
    """A pipe's condition that wakes its ``watchers`` (same lock) whenever the pipe's reader
    starts to wait on it: a test waits for the reader's state instead of polling it."""

    def __init__(self) -> None:
        super().__init__()
        self.watchers = threading.Condition(self._lock)  # type: ignore[attr-defined]

    def wait(self, timeout: float | None = None) -> bool:
        self.watchers.notify_all()
        return super().wait(timeout)


def _watched(pipe: _Pipe) -> _WatchedCondition:
    """Give ``pipe`` (before anyone uses it) a condition that can be watched."""
    pipe._cond = condition = _WatchedCondition()
    return condition


async def _until(condition: _WatchedCondition, state: Callable[[], bool]) -> bool:
    """Wait (off the event loop) until ``state()`` holds, checked each time the pipe's reader
    starts to wait; False after 10 s."""

    def wait() -> bool:
        with condition:
            return condition.watchers.wait_for(state, timeout=10)

    return await asyncio.to_thread(wait)


@pytest.fixture
def until_the_reader_waits(monkeypatch: pytest.MonkeyPatch) -> Callable[[], Any]:
    """Holds the last piece back until the reader has taken everything sent and waits in the
    pipe for more: a reader that (wrongly) took the file's end for the body's stores instead
    of waiting, and the wait ends in an AssertionError after 10 s."""
    pipes: list[tuple[_Pipe, _WatchedCondition]] = []
    original = _Pipe.__init__

    def record(self: _Pipe, capacity: int) -> None:
        original(self, capacity)
        pipes.append((self, _watched(self)))

    monkeypatch.setattr(_Pipe, "__init__", record)

    async def pause() -> None:
        assert len(pipes) == 1
        pipe, condition = pipes[0]
        if not await _until(condition, lambda: pipe._want > pipe._buffered and not pipe._ended):
            raise AssertionError("the reader never asked for the rest of the body")

    return pause


def _split_after_the_file(body: bytes) -> list[bytes]:
    """The body in two pieces, the first ending with the boundary line after the file part,
    so that the parser has seen the whole file before the second piece arrives."""
    marker = b'name="file"'
    cut = body.index(b"--" + BOUNDARY.encode() + b"\r\n", body.index(marker)) + len(BOUNDARY) + 4
    return [body[:cut], body[cut:]]


@pytest.mark.parametrize(
    ("trailer", "status"),
    [
        (_part("extra", b"SECRET-TEXT-7731"), 422),  # an unexpected part after the file
        (_part("file", b"x\n"), 422),  # a second file part
        (b"--" + BOUNDARY.encode() + b"\r\nbroken", 400),  # cut short: no closing boundary
    ],
    ids=["extra-part", "second-file", "cut-short"],
)
def test_a_bad_body_after_a_complete_file_stores_nothing(
    trailer: bytes, status: int, until_the_reader_waits: Callable[[], Any]
) -> None:
    head = _part("spec", SPEC_JSON) + _part("file", _csv(_random_rows(2000)), "a.csv")
    # The file is complete, then a pause, then the rest of the body, which is bad.
    body = head + trailer if status == 400 else _body(head, trailer)
    run, outcome = _upload(_split_after_the_file(body), before_last=until_the_reader_waits)
    assert isinstance(outcome, UploadRejectedError)
    assert outcome.status == status
    assert "SECRET" not in outcome.detail
    assert not run.stored
    assert isinstance(run.error, UploadAbortedError)


def test_the_size_limit_reached_after_the_file_stores_nothing(
    until_the_reader_waits: Callable[[], Any],
) -> None:
    head = _part("spec", SPEC_JSON) + _part("file", _csv(_random_rows(5000)), "a.csv")
    pieces = _split_after_the_file(_body(head, _part("extra", b"x" * 100)))
    run, outcome = _upload(
        pieces, max_bytes=len(pieces[0]) + 10, before_last=until_the_reader_waits
    )
    assert isinstance(outcome, UploadRejectedError)
    assert outcome.status == 413
    assert not run.stored
    assert isinstance(run.error, UploadAbortedError)


def test_a_client_that_goes_away_stops_the_reader() -> None:
    body = _body(_part("spec", SPEC_JSON), _part("file", _csv(_random_rows(5000)), "a.csv"))
    run, outcome = _upload(body, fail_at=50)
    assert isinstance(outcome, ConnectionResetError)
    assert not run.stored
    assert isinstance(run.error, UploadAbortedError)  # process has ended
    assert not [t for t in threading.enumerate() if t.name.startswith("privfit-ingest")]


def test_problems_keep_their_order_body_then_spec_then_file() -> None:
    bad_csv = _csv(["SECRET-TEXT-7731,red,1,yes", *_random_rows(3000)])
    trailer = _part("extra", b"x")
    # A malformed file is found early, but the body's own problem is the one reported.
    _, outcome = _upload(_body(_part("spec", SPEC_JSON), _part("file", bad_csv, "a"), trailer))
    assert isinstance(outcome, UploadRejectedError)
    assert outcome.status == 422
    _, outcome = _upload(_body(_part("spec", SPEC_JSON), _part("file", bad_csv, "a")))
    assert isinstance(outcome, DatasetFileError)
    assert "numeric column 'age'" in outcome.detail
    # An unusable spec: the body's problem first, then the spec's.
    bad_spec = _part("spec", b"{}")
    body = _body(bad_spec, _part("file", _csv(_random_rows(3000)), "a"))
    _, outcome = _upload(body, max_bytes=len(body) - 1)
    assert isinstance(outcome, UploadRejectedError)
    assert outcome.status == 413
    run, outcome = _upload(body)
    assert isinstance(outcome, DatasetSpecError)
    assert run.source is None  # the file went nowhere
    _, outcome = _upload(_body(_part("spec", b"\xff\xfe"), _part("file", _csv(["1,red,1,yes"]))))
    assert isinstance(outcome, UploadRejectedError)
    assert outcome.detail == "the 'spec' part must be UTF-8 JSON"


def test_the_pipe_holds_a_bounded_amount_and_waits_for_its_reader() -> None:
    async def main() -> None:
        pipe = _Pipe(capacity=10)
        await pipe.put(memoryview(b"0123456789"))
        blocked = asyncio.ensure_future(pipe.put(memoryview(b"abc")))
        await asyncio.sleep(0)  # one turn of the loop: put runs until it returns or waits
        await asyncio.sleep(0)
        assert not blocked.done()  # full: the sender waits
        got = await asyncio.to_thread(pipe.read, 4)
        assert got == b"0123"
        await asyncio.wait_for(blocked, timeout=5)
        pipe.finish()
        assert await asyncio.to_thread(pipe.read, 100) == b"456789abc"
        assert await asyncio.to_thread(pipe.read, 100) == b""
        failed = _Pipe(capacity=10)
        condition = _watched(failed)
        reader = asyncio.ensure_future(asyncio.to_thread(failed.read, 5))
        # until the reader waits in the pipe for its 5 bytes
        assert await _until(condition, lambda: failed._want == 5)
        assert not reader.done()  # waits for 5 bytes (or the end)
        failed.fail()
        with pytest.raises(UploadAbortedError):
            await asyncio.wait_for(reader, timeout=5)

    asyncio.run(main())
