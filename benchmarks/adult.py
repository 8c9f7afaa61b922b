"""The vendored UCI Adult data set (``datasets/adult``) as raw columns and as a design matrix.

``load_adult(split)`` parses the published file exactly as shipped: no header, a space after
every comma, ``?`` for missing, and in the test file a leading comment line and labels ending
with ``.``. ``design(split)`` applies the public spec in ``datasets/adult/spec.json`` through
``service.dp.data.preprocessing``: rows with a missing value are dropped, numeric columns are
clamped to their declared bounds, categorical columns are one-hot encoded against the declared
lists, an intercept is added and each row is brought into the unit ball.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from numpy.typing import NDArray

from service.dp.data.preprocessing import (
    CategoricalFeature,
    NumericFeature,
    PreprocessingSpec,
    labels_from_column,
)

__all__ = [
    "ADULT_DIR",
    "COLUMNS",
    "NUMERIC_COLUMNS",
    "Split",
    "csv_bytes",
    "design",
    "load_adult",
    "load_spec",
    "preprocessing_spec",
]

Split = Literal["train", "test"]

ADULT_DIR = Path(__file__).resolve().parent.parent / "datasets" / "adult"

#: Attribute names of ``adult.names``, in file order, plus the label.
COLUMNS: tuple[str, ...] = (
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education-num",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
    "native-country",
    "income",
)
NUMERIC_COLUMNS: frozenset[str] = frozenset(
    {"age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week"}
)

_FILES: dict[str, tuple[str, int]] = {
    # split -> (file, leading lines to skip)
    "train": ("adult.data.gz", 0),
    "test": ("adult.test.gz", 1),  # "|1x3 Cross validator"
}


def load_adult(split: Split = "train") -> dict[str, np.ndarray]:
    """Raw columns of one published split, keyed by the attribute names of ``adult.names``.

    Numeric attributes come back as float64 arrays (NaN where missing), the others as object
    arrays of ``str`` with ``None`` where the file has ``?``. Whitespace is stripped and the
    trailing ``.`` of the test file's labels removed, so both splits use ``>50K``/``<=50K``.
    """
    if split not in _FILES:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    name, skip = _FILES[split]
    table = pacsv.read_csv(
        ADULT_DIR / name,  # pyarrow decompresses by the .gz suffix
        read_options=pacsv.ReadOptions(column_names=list(COLUMNS), skip_rows=skip),
        parse_options=pacsv.ParseOptions(delimiter=","),
        convert_options=pacsv.ConvertOptions(
            column_types={c: pa.string() for c in COLUMNS},
            strings_can_be_null=False,
            null_values=[],
        ),
    )
    out: dict[str, np.ndarray] = {}
    for col in COLUMNS:
        arr = pc.utf8_trim_whitespace(table.column(col))
        if col == "income":
            arr = pc.replace_substring_regex(arr, pattern=r"\.$", replacement="")
        missing = pc.equal(arr, "?")
        arr = pc.if_else(missing, pa.scalar(None, pa.string()), arr)
        if col in NUMERIC_COLUMNS:
            out[col] = np.asarray(
                pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64
            )
        else:
            out[col] = np.asarray(arr.to_pylist(), dtype=object)
    return out


def csv_bytes(split: Split = "train") -> bytes:
    """One split as a clean CSV with a header row, as a site would upload it: whitespace
    stripped, missing cells empty, labels ``>50K``/``<=50K``."""
    columns = load_adult(split)
    table = pa.table(
        {
            c: pa.array(v, type=pa.float64() if c in NUMERIC_COLUMNS else pa.string())
            for c, v in columns.items()
        }
    )
    sink = pa.BufferOutputStream()
    pacsv.write_csv(table, sink)
    return bytes(sink.getvalue().to_pybytes())


def load_spec(*, non_private: bool = False) -> dict[str, Any]:
    """The public PrivFit dataset spec for Adult: ``datasets/adult/spec.json`` (DP fits only),
    or with ``non_private`` its variant ``spec-non-private.json``, identical but for its name
    and ``allow_non_private: true`` (for a non-private baseline fitted through the API)."""
    name = "spec-non-private.json" if non_private else "spec.json"
    with (ADULT_DIR / name).open(encoding="utf-8") as fh:
        spec: dict[str, Any] = json.load(fh)
    return spec


def preprocessing_spec(
    spec: Mapping[str, Any] | None = None, *, row_norm: Literal["clip", "scale"] = "clip"
) -> PreprocessingSpec:
    """Build the preprocessing of the uploaded-spec shape (``spec.json``)."""
    spec = load_spec() if spec is None else spec
    features: list[NumericFeature | CategoricalFeature] = []
    for f in spec["features"]:
        if f["type"] == "numeric":
            features.append(
                NumericFeature(column=f["column"], lower=float(f["lower"]), upper=float(f["upper"]))
            )
        elif f["type"] == "categorical":
            features.append(
                CategoricalFeature(column=f["column"], categories=tuple(f["categories"]))
            )
        else:
            raise ValueError(f"unknown feature type {f['type']!r} for column {f['column']!r}")
    return PreprocessingSpec(features=tuple(features), intercept=True, row_norm=row_norm)


def _complete_rows(columns: Mapping[str, np.ndarray], names: list[str]) -> NDArray[np.bool_]:
    keep = np.ones(len(columns[names[0]]), dtype=bool)
    for name in names:
        values = columns[name]
        if values.dtype == object:
            keep &= np.array([v is not None for v in values], dtype=bool)
        else:
            keep &= ~np.isnan(values)
    return keep


def design(
    split: Split = "train", *, row_norm: Literal["clip", "scale"] = "clip"
) -> tuple[NDArray[np.float64], NDArray[np.float64], list[str]]:
    """(X, y, feature_names) of one split under the public spec.

    Rows with any missing feature or label are dropped (``"missing": "drop"``), giving 30,162
    train and 15,060 test rows; y is ±1 with +1 for ``>50K``; every row of X has L2 norm ≤ 1.
    """
    spec = load_spec()
    if spec.get("missing", "drop") != "drop":
        raise ValueError("only the 'drop' missing-value policy is implemented here")
    raw = load_adult(split)
    label = spec["label"]
    used = [f["column"] for f in spec["features"]] + [label["column"]]
    keep = _complete_rows(raw, used)
    columns = {name: raw[name][keep] for name in used}
    prep = preprocessing_spec(spec, row_norm=row_norm)
    X = np.ascontiguousarray(prep.transform(columns), dtype=np.float64)
    y = np.asarray(
        labels_from_column(columns[label["column"]], label["positive"], column=label["column"]),
        dtype=np.float64,
    )
    return X, y, list(prep.feature_names())
