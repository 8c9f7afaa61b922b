"""Dataset ingestion: a public spec plus a CSV or Parquet file → validated, encoded chunks.

What this module guarantees (DESIGN §2, issue 4):

* **Data-independent preprocessing.** The spec declares the label column and its two
  classes (positive and negative; any other label value is refused), every feature column
  with public bounds (numeric) or a public category list (categorical), the budget caps and
  the missing-value policy. Nothing is read from the data to build the preprocessing: a
  numeric feature without bounds is refused with an explanation.
  The resulting :class:`~service.dp.preprocessing.PreprocessingSpec` (clamp, one-hot,
  intercept, rows clipped to norm ≤ 1) is what every fit and ``predict`` applies.
* **Bounded width.** A file may have at most :data:`MAX_EXTRA_COLUMNS` columns beyond those
  its spec reads, a CSV header at most :data:`MAX_HEADER_BYTES`, a Parquet footer at most
  :data:`MAX_PARQUET_METADATA_BYTES`; all three are checked before the header or footer is
  parsed, and only the declared columns are parsed, so memory follows what is kept.
* **Streaming, on every core.** The file is read in blocks (CSV: :data:`CSV_BLOCK_BYTES` of
  text cut at a line break; Parquet: ``ParquetFile.iter_batches``). Blocks are parsed and
  encoded on :data:`INGEST_THREADS` worker threads, a few at a time, and handed to
  ``on_chunk`` in file order, so memory stays bounded by a few blocks whatever the file size.
  The source is read once, front to back, so parsing can start while the upload arrives.
  CSV text is cut at ``\\n`` only while it holds no quote character (a quoted value may hold
  a line break); from the first block that does, pyarrow's streaming reader reads the rest.
* **All or nothing.** Problems that need the whole file (missing values under
  ``"missing": "error"``, NaN/inf, label values of neither class, a label without positive
  rows) are counted to the end and
  then raised; the caller keeps the chunks aside and stores them (in one transaction) only
  when :func:`ingest` returns, so a rejected upload stores nothing.
* **No data values in errors.** Messages name columns and count rows; they never quote a
  cell. pyarrow's own messages (which do quote cells) are never passed on.

Chunk payload (``dataset_chunk.payload``): :data:`_ARROW_MAGIC` then one Arrow IPC record
batch (buffers compressed with :data:`CHUNK_COMPRESSION`) with the columns ``n0, n1, …``
(the numeric features in spec order, clamped to their bounds), ``c0, c1, …`` (codes into
each category list, −1 for an undeclared value → all-zero one-hot block) and ``y`` (int8,
±1). A numeric column is stored as int8/16/32 when every value of the chunk converts back
to the same float64 bit for bit, else as float64: the design is rebuilt exactly.
:func:`design_from_chunks` turns chunks into (X, y) through
:meth:`PreprocessingSpec.transform_codes`, the same transform ``predict`` applies. This form
is tens of times smaller than a dense float64 X (a one-hot design of Adult has 106 columns) and
keeps storing the chunks cheap. Payloads of the earlier ``np.savez`` form are still read.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import json
import math
import os
import re
import shutil
import tempfile
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import IO, Any, Final, Literal, TypeVar, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from numpy.typing import NDArray

from service.domain.errors import InvalidInputError
from service.domain.ledger.units import DELTA_UNIT, EPSILON_UNIT, to_units
from service.dp.preprocessing import (
    CategoricalFeature,
    Feature,
    NumericFeature,
    PreprocessingSpec,
)

__all__ = [
    "CHUNK_COMPRESSION",
    "DEFAULT_MISSING_VALUES",
    "MAX_EXTRA_COLUMNS",
    "MAX_HEADER_BYTES",
    "MAX_PARQUET_METADATA_BYTES",
    "BudgetLimits",
    "Compression",
    "DatasetFileError",
    "DatasetInputError",
    "DatasetSpec",
    "DatasetSpecError",
    "DatasetTooWideError",
    "EncodedChunk",
    "FeatureInput",
    "IngestReport",
    "LabelValuesError",
    "MissingPolicy",
    "MissingValuesError",
    "build_spec",
    "decode_chunk",
    "design_from_chunks",
    "encode_chunk",
    "ingest",
]

MissingPolicy = Literal["error", "drop"]
RowNorm = Literal["clip", "scale"]

#: Cells (CSV text) that count as missing unless the spec overrides the list. "NaN", "inf"
#: are deliberately not here: in a numeric column they are non-finite values, an error.
DEFAULT_MISSING_VALUES: Final[tuple[str, ...]] = ("", "?", "NA", "N/A", "NULL", "null")

#: Rows per record batch (and per stored chunk) for Parquet; CSV batches are cut by bytes.
PARQUET_BATCH_ROWS: Final[int] = 65_536
#: Bytes per CSV block; one block becomes one record batch and one chunk.
CSV_BLOCK_BYTES: Final[int] = 4 << 20
#: Worker threads that parse and encode blocks (pyarrow and the codecs release the GIL).
INGEST_THREADS: Final[int] = max(1, min(4, os.cpu_count() or 1))
#: The header row must fit in this many bytes (checked before it is parsed).
MAX_HEADER_BYTES: Final[int] = 1 << 20
#: A file may have at most this many columns beyond those its spec reads (checked before any
#: data row is parsed): the columns of a file cost memory even when they are not read.
MAX_EXTRA_COLUMNS: Final[int] = 1000
#: Largest Parquet footer (the file's metadata: schema, row groups, column chunks) accepted;
#: it is parsed whole, at several times its size in memory.
MAX_PARQUET_METADATA_BYTES: Final[int] = 4 << 20
_PARQUET_MAGIC: Final[bytes] = b"PAR1"
MAX_NAME_LENGTH: Final[int] = 200

Compression = Literal["none", "lz4", "zstd"]
#: How the Arrow buffers of chunk payloads are compressed. zstd at level 1 halves the
#: narrowed columns of a typical table at several hundred MB/s, and every byte not written
#: is a byte the database does not have to sync at commit.
CHUNK_COMPRESSION: Compression = "zstd"
ZSTD_LEVEL: Final[int] = 1
_ARROW_MAGIC: Final[bytes] = b"PFARROW1"
#: Earlier payloads: an LZ4 frame around an ``np.savez`` archive (read, no longer written).
_LZ4_MAGIC: Final[bytes] = b"PFLZ4\x00"


# ---- errors ---------------------------------------------------------------------------------


class DatasetInputError(InvalidInputError):
    """A rejected upload (422). ``detail`` is safe to show (column names and counts, no
    values); ``errors`` lists the individual problems as ``{"loc": [...], "msg": ...}``."""

    slug = "invalid-dataset"
    title = "Invalid dataset upload"


class DatasetSpecError(DatasetInputError):
    """The spec itself is unacceptable (before any data is read)."""

    slug = "invalid-dataset-spec"
    title = "Invalid dataset spec"


class DatasetFileError(DatasetInputError):
    """The file cannot be read as declared: empty, malformed, unknown columns, wrong types,
    NaN/inf, no rows left, a label without positive (or negative) rows."""

    slug = "invalid-dataset-file"
    title = "Invalid dataset file"


class DatasetTooWideError(DatasetFileError):
    """The file has far more columns than its spec reads (or a header or Parquet footer larger
    than the bounds): refused before its rows are parsed."""

    slug = "dataset-too-wide"
    title = "Dataset file too wide"


class LabelValuesError(DatasetFileError):
    """Label cells that are neither the positive nor the negative class (or, for a spec that
    names only the positive class, more than one other value). Counts rows, never shows a
    value; ``rows`` is how many label cells are not of a declared class."""

    slug = "invalid-label-values"
    title = "Label values outside the declared classes"

    def __init__(self, detail: str, *, column: str, rows: int) -> None:
        super().__init__(
            detail,
            errors=[
                {
                    "loc": ["file", column],
                    "msg": f"{rows} row(s) hold a label value of neither declared class",
                }
            ],
        )
        self.column = column
        self.rows = rows

    def extensions(self) -> dict[str, Any]:
        return {**super().extensions(), "label_column": self.column, "label_rows": self.rows}


class MissingValuesError(DatasetInputError):
    """Missing values under ``"missing": "error"``; ``columns`` maps column → rows missing."""

    slug = "missing-values"
    title = "Missing values in the dataset"

    def __init__(self, detail: str, *, columns: Mapping[str, int], rows: int) -> None:
        super().__init__(
            detail,
            errors=[
                {"loc": ["file", c], "msg": f"{k} row(s) have no value"} for c, k in columns.items()
            ],
        )
        self.columns = dict(columns)
        self.rows = rows

    def extensions(self) -> dict[str, Any]:
        return {**super().extensions(), "missing_columns": self.columns, "missing_rows": self.rows}


# ---- the spec -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BudgetLimits:
    """Server-side maxima for a dataset's (ε, δ) caps (settings)."""

    max_epsilon: float
    max_delta: float


@dataclass(frozen=True, slots=True)
class FeatureInput:
    """A feature as the uploader wrote it, before validation (bounds may be absent)."""

    column: str
    type: Literal["numeric", "categorical"]
    lower: float | None = None
    upper: float | None = None
    categories: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class DatasetSpec:
    """A validated upload spec. Build it with :func:`build_spec`.

    ``epsilon_cap_units``/``delta_cap_units`` are the caps in ledger units, rounded down.
    ``negative`` is the declared negative class; ``None`` only for a spec that names the
    positive class alone (the earlier form), whose label column must then hold exactly one
    other value (checked when the file is read).
    """

    name: str
    label_column: str
    positive: str
    preprocessing: PreprocessingSpec
    epsilon: float
    delta: float
    epsilon_cap_units: int
    delta_cap_units: int
    missing: MissingPolicy = "error"
    missing_values: tuple[str, ...] = DEFAULT_MISSING_VALUES
    allow_non_private: bool = False
    negative: str | None = None

    @property
    def features(self) -> tuple[Feature, ...]:
        return self.preprocessing.features

    @property
    def columns(self) -> tuple[str, ...]:
        """Every column read from the file: the features, then the label."""
        return (*self.preprocessing.columns, self.label_column)

    @property
    def label(self) -> dict[str, str]:
        """The label as normalised JSON: column, positive and (when declared) negative."""
        out = {"column": self.label_column, "positive": self.positive}
        if self.negative is not None:
            out["negative"] = self.negative
        return out

    def to_dict(self) -> dict[str, Any]:
        """The spec as normalised JSON (what ``GET /v1/datasets/{id}`` shows)."""
        return {
            "name": self.name,
            "label": self.label,
            "features": [f.to_dict() for f in self.features],
            "budget": {"epsilon": self.epsilon, "delta": self.delta},
            "missing": self.missing,
            "missing_values": list(self.missing_values),
            "allow_non_private": self.allow_non_private,
            "row_norm": self.preprocessing.row_norm,
        }


def _label_text(value: str | int | bool) -> str:
    """The text a label value is compared by (the rule of ``service.dp.preprocessing``)."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    return value


def build_spec(
    *,
    name: str,
    label_column: str,
    positive: str | int | bool,
    features: Sequence[FeatureInput],
    epsilon: float,
    delta: float,
    limits: BudgetLimits,
    missing: MissingPolicy = "error",
    missing_values: Sequence[str] | None = None,
    allow_non_private: bool = False,
    row_norm: RowNorm = "clip",
    negative: str | int | bool | None = None,
) -> DatasetSpec:
    """Validate an upload spec; raise :class:`DatasetSpecError` listing every problem.

    Rules: a name of 1-200 characters; at least one feature; no column used twice (the label
    is not a feature); numeric features declare finite bounds with lower < upper (PrivFit never
    reads bounds from the data); categorical features declare a non-empty list of distinct
    categories; 0 < ε ≤ the server's maximum and 0 ≤ δ < 1, δ ≤ the server's maximum; no
    declared category and neither label class is also a missing-value marker; the negative
    class (when given) differs from the positive one.
    """
    errors: list[dict[str, Any]] = []

    def problem(loc: list[str | int], msg: str) -> None:
        errors.append({"loc": loc, "msg": msg})

    if not name.strip() or len(name) > MAX_NAME_LENGTH:
        problem(["name"], f"the name must have 1 to {MAX_NAME_LENGTH} characters")
    if not label_column:
        problem(["label", "column"], "the label column must be named")
    positive_text = _label_text(positive)
    markers = tuple(DEFAULT_MISSING_VALUES if missing_values is None else missing_values)
    if positive_text in markers:
        problem(
            ["label", "positive"],
            f"the positive class {positive_text!r} is also a missing-value marker; "
            "change missing_values",
        )
    negative_text = None if negative is None else _label_text(negative)
    if negative_text is not None:
        if negative_text == positive_text:
            problem(["label", "negative"], "the negative class must differ from the positive class")
        elif negative_text in markers:
            problem(
                ["label", "negative"],
                f"the negative class {negative_text!r} is also a missing-value marker; "
                "change missing_values",
            )
    if missing not in ("error", "drop"):
        problem(["missing"], "missing must be 'error' or 'drop'")
    if row_norm not in ("clip", "scale"):
        problem(["row_norm"], "row_norm must be 'clip' or 'scale'")

    if not features:
        problem(["features"], "declare at least one feature column")
    seen: dict[str, int] = {}
    built: list[Feature] = []
    unbounded: list[str] = []
    for i, f in enumerate(features):
        seen[f.column] = seen.get(f.column, 0) + 1
        loc: list[str | int] = ["features", i]
        if not f.column:
            problem([*loc, "column"], "the column must be named")
            continue
        if f.type == "numeric":
            if f.categories is not None:
                problem([*loc, "categories"], "a numeric feature takes bounds, not categories")
            if f.lower is None or f.upper is None:
                unbounded.append(f.column)
                problem(
                    loc,
                    f"numeric feature {f.column!r} needs public bounds 'lower' and 'upper'. "
                    "PrivFit will not read bounds from the data: the minimum and maximum of a "
                    "column are themselves private, and bounds computed from the rows would "
                    "void the privacy guarantee. Declare bounds known without looking at the "
                    "data (a valid range, a published top-code, a domain limit).",
                )
                continue
            if not (math.isfinite(f.lower) and math.isfinite(f.upper)):
                problem(loc, f"numeric feature {f.column!r}: the bounds must be finite")
                continue
            if not f.lower < f.upper:
                problem(loc, f"numeric feature {f.column!r}: lower must be smaller than upper")
                continue
            try:
                built.append(NumericFeature(column=f.column, lower=f.lower, upper=f.upper))
            except ValueError as exc:
                problem(loc, str(exc))
        elif f.type == "categorical":
            if f.lower is not None or f.upper is not None:
                problem(loc, f"categorical feature {f.column!r} takes categories, not bounds")
            cats = f.categories or ()
            if not cats:
                problem(
                    [*loc, "categories"],
                    f"categorical feature {f.column!r} needs its public list of categories",
                )
                continue
            dupes = sorted({c for c in cats if cats.count(c) > 1})
            if dupes:
                problem(
                    [*loc, "categories"],
                    f"categorical feature {f.column!r} lists a category more than once: "
                    + ", ".join(map(repr, dupes)),
                )
                continue
            clash = [c for c in cats if c in markers]
            if clash:
                problem(
                    [*loc, "categories"],
                    f"categorical feature {f.column!r}: categories "
                    + ", ".join(map(repr, clash))
                    + " are also missing-value markers; change missing_values",
                )
                continue
            built.append(CategoricalFeature(column=f.column, categories=tuple(cats)))
        else:
            problem([*loc, "type"], "type must be 'numeric' or 'categorical'")
    for column, count in seen.items():
        if count > 1:
            problem(["features"], f"column {column!r} is declared {count} times")
    if label_column and label_column in seen:
        problem(["label", "column"], f"the label column {label_column!r} is also a feature")

    eps_units = delta_units = 0
    if not (math.isfinite(epsilon) and epsilon > 0):
        problem(["budget", "epsilon"], "epsilon must be a finite number > 0")
    elif epsilon > limits.max_epsilon:
        problem(
            ["budget", "epsilon"],
            f"epsilon {epsilon!r} exceeds this server's maximum of {limits.max_epsilon!r}",
        )
    else:
        eps_units = to_units(epsilon, EPSILON_UNIT, "down")
        if eps_units == 0:
            problem(["budget", "epsilon"], f"epsilon must be at least {EPSILON_UNIT!r}")
    if not (math.isfinite(delta) and 0 <= delta < 1):
        problem(["budget", "delta"], "delta must satisfy 0 <= delta < 1")
    elif delta > limits.max_delta:
        problem(
            ["budget", "delta"],
            f"delta {delta!r} exceeds this server's maximum of {limits.max_delta!r}",
        )
    else:
        delta_units = to_units(delta, DELTA_UNIT, "down")

    prep: PreprocessingSpec | None = None
    if not errors:
        try:
            prep = PreprocessingSpec(features=tuple(built), intercept=True, row_norm=row_norm)
        except ValueError as exc:
            problem(["features"], str(exc))
    if errors or prep is None:
        if unbounded and len(errors) == len(unbounded):
            detail = (
                errors[0]["msg"]
                if len(unbounded) == 1
                else (
                    "numeric features "
                    + ", ".join(map(repr, unbounded))
                    + " need public bounds 'lower' and 'upper'. PrivFit will not read bounds from "
                    "the data: the minimum and maximum of a column are themselves private, and "
                    "bounds computed from the rows would void the privacy guarantee."
                )
            )
        elif len(errors) == 1:
            detail = f"invalid dataset spec: {errors[0]['msg']}"
        else:
            detail = f"invalid dataset spec: {len(errors)} problems (see errors)"
        raise DatasetSpecError(detail, errors=errors)
    return DatasetSpec(
        name=name,
        label_column=label_column,
        positive=positive_text,
        preprocessing=prep,
        epsilon=float(epsilon),
        delta=float(delta),
        epsilon_cap_units=eps_units,
        delta_cap_units=delta_units,
        missing=missing,
        missing_values=markers,
        allow_non_private=allow_non_private,
        negative=negative_text,
    )


def build_feature_spec(
    *,
    name: str,
    label_column: str,
    positive: str | int | bool,
    features: Sequence[FeatureInput],
    row_norm: RowNorm = "clip",
    negative: str | int | bool | None = None,
) -> DatasetSpec:
    """:func:`build_spec` for a label and features that carry no budget (a study's shared
    spec, an uploaded model's): the same rules, with a placeholder budget that always passes.
    Only ``label``, ``label_column``, ``positive``, ``negative`` and ``preprocessing`` of the
    result are meaningful."""
    return build_spec(
        name=name,
        label_column=label_column,
        positive=positive,
        negative=negative,
        features=features,
        epsilon=1.0,
        delta=0.0,
        limits=BudgetLimits(max_epsilon=1.0, max_delta=0.0),
        row_norm=row_norm,
    )


# ---- chunk payloads -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EncodedChunk:
    """One stored chunk: ``seq`` from 0, its row count and the payload (see the module doc)."""

    seq: int
    n_rows: int
    payload: bytes


def _narrow_numeric(values: NDArray[np.float64]) -> NDArray[Any]:
    """``values`` in the smallest integer type that gives every one back bit for bit
    (int8/16/32), else unchanged. Lossless: −0.0, fractions, NaN keep float64."""
    if values.size == 0:
        return values
    low, high = float(values.min()), float(values.max())
    for kind in (np.int8, np.int16, np.int32):
        info = np.iinfo(kind)
        if info.min <= low and high <= info.max:
            narrow = values.astype(kind)
            same = np.array_equal(narrow.astype(np.float64).view(np.uint64), values.view(np.uint64))
            return narrow if same else values
    return values


def _narrow_codes(codes: NDArray[np.integer[Any]]) -> NDArray[np.integer[Any]]:
    """Category codes (−1 … size−1) in the smallest signed integer type that holds them."""
    if codes.size and int(codes.min()) < -1:
        raise ValueError("category codes must be -1 or more")
    high = int(codes.max()) if codes.size else 0
    return codes.astype(_code_type(high + 1), copy=False)


def _code_type(size: int) -> type[np.signedinteger[Any]]:
    """The smallest signed integer type holding the codes −1 … ``size`` − 1."""
    for kind in (np.int8, np.int16, np.int32):
        if size - 1 <= np.iinfo(kind).max:
            return kind
    raise ValueError("category codes do not fit in 32 bits")


def _payload(
    numeric: Sequence[NDArray[Any]],
    codes: Sequence[NDArray[Any]],
    y: NDArray[np.int8],
    compression: Compression,
) -> bytes:
    """Columns ``n0…``, ``c0…``, ``y`` as one Arrow IPC record batch after :data:`_ARROW_MAGIC`."""
    arrays = [pa.array(a) for a in (*numeric, *codes, y)]
    names = [
        *(f"n{i}" for i in range(len(numeric))),
        *(f"c{j}" for j in range(len(codes))),
        "y",
    ]
    batch = pa.RecordBatch.from_arrays(arrays, names=names)
    codec = (
        None
        if compression == "none"
        else pa.Codec("zstd", compression_level=ZSTD_LEVEL)
        if compression == "zstd"
        else pa.Codec("lz4")
    )
    options = pa.ipc.IpcWriteOptions(compression=codec, use_threads=False)
    sink = pa.BufferOutputStream()
    sink.write(_ARROW_MAGIC)
    with pa.ipc.new_stream(sink, batch.schema, options=options) as writer:
        writer.write_batch(batch)
    return cast(bytes, sink.getvalue().to_pybytes())


def encode_chunk(
    num: NDArray[np.float64],
    cat: NDArray[np.integer[Any]],
    y: NDArray[np.int8],
    *,
    compression: Compression | None = None,
) -> bytes:
    """Serialise one chunk: ``num`` (rows × numeric features, float64), ``cat`` (rows ×
    categorical features, codes) and ``y`` (±1). Each column is stored in the smallest type
    that gives it back exactly (see the module doc); ``compression`` defaults to
    :data:`CHUNK_COMPRESSION`."""
    num = np.asarray(num, dtype=np.float64)
    cat = np.asarray(cat)
    labels = np.asarray(y, dtype=np.int8)
    if num.ndim != 2 or cat.ndim != 2 or not num.shape[0] == cat.shape[0] == labels.shape[0]:
        raise ValueError("num and cat must be 2-d with one row per label")
    return _payload(
        [_narrow_numeric(np.ascontiguousarray(num[:, i])) for i in range(num.shape[1])],
        [_narrow_codes(np.ascontiguousarray(cat[:, j])) for j in range(cat.shape[1])],
        labels,
        compression or CHUNK_COMPRESSION,
    )


_NUMERIC_TYPES: Final = (pa.int8(), pa.int16(), pa.int32(), pa.float64())
_CODE_TYPES: Final = (pa.int8(), pa.int16(), pa.int32())


def _decode_arrow(
    body: memoryview,
) -> tuple[NDArray[np.float64], NDArray[np.integer[Any]], NDArray[np.int8]]:
    try:
        table = pa.ipc.open_stream(pa.py_buffer(body)).read_all()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
        raise ValueError("a stored chunk is not a readable Arrow record batch") from exc
    names = table.column_names
    k = sum(1 for n in names if n.startswith("n"))
    m = len(names) - k - 1
    if m < 0 or names != [*(f"n{i}" for i in range(k)), *(f"c{j}" for j in range(m)), "y"]:
        raise ValueError("a stored chunk has unexpected columns")
    types = table.schema.types
    if (
        any(t not in _NUMERIC_TYPES for t in types[:k])
        or any(t not in _CODE_TYPES for t in types[k : k + m])
        or types[-1] != pa.int8()
        or any(column.null_count for column in table.columns)
    ):
        raise ValueError("a stored chunk has unexpected column types")
    n = table.num_rows
    num = np.empty((n, k), dtype=np.float64)
    for i in range(k):
        num[:, i] = table.column(i).to_numpy()
    code_type = np.result_type(np.int8, *(t.to_pandas_dtype() for t in types[k : k + m]))
    cat = np.empty((n, m), dtype=code_type)
    for j in range(m):
        cat[:, j] = table.column(k + j).to_numpy()
    y = np.asarray(table.column(k + m).to_numpy(), dtype=np.int8)
    return num, cat, y


def decode_chunk(
    payload: bytes,
) -> tuple[NDArray[np.float64], NDArray[np.integer[Any]], NDArray[np.int8]]:
    """(num, cat, y) of a payload written by :func:`encode_chunk`: ``num`` float64 exactly
    as encoded, ``cat`` the codes (int8 or wider), ``y`` int8. Also reads the earlier
    formats (an ``np.savez`` archive, bare or in an LZ4 frame, with ``allow_pickle=False``),
    so datasets stored before keep working."""
    if payload.startswith(_ARROW_MAGIC):
        return _decode_arrow(memoryview(payload)[len(_ARROW_MAGIC) :])
    if payload.startswith(_LZ4_MAGIC):
        size = int.from_bytes(payload[len(_LZ4_MAGIC) : len(_LZ4_MAGIC) + 8], "little")
        body = memoryview(payload)[len(_LZ4_MAGIC) + 8 :]
        payload = cast(
            bytes, pa.Codec("lz4").decompress(body, decompressed_size=size, asbytes=True)
        )
    with np.load(io.BytesIO(payload), allow_pickle=False) as archive:
        num = np.asarray(archive["num"], dtype=np.float64)
        cat = np.asarray(archive["cat"])
        y = np.asarray(archive["y"], dtype=np.int8)
    return num, cat, y


def design_from_chunks(
    preprocessing: PreprocessingSpec, payloads: Iterable[bytes], n_rows: int
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(X, y) of a stored dataset: X = ``preprocessing.transform`` of the stored columns
    (float64, n × d, every row of norm ≤ 1), y in {−1.0, +1.0}. ``n_rows`` preallocates X;
    a mismatch with the chunks raises ``ValueError``."""
    X = np.empty((n_rows, preprocessing.n_features), dtype=np.float64)
    y = np.empty(n_rows, dtype=np.float64)
    start = 0
    for payload in payloads:
        num, cat, labels = decode_chunk(payload)
        m = labels.shape[0]
        if start + m > n_rows:
            raise ValueError("the stored chunks hold more rows than the dataset records")
        X[start : start + m] = preprocessing.transform_codes(num, cat)
        y[start : start + m] = labels
        start += m
    if start != n_rows:
        raise ValueError("the stored chunks hold fewer rows than the dataset records")
    return X, y


# ---- reading --------------------------------------------------------------------------------


@dataclass(slots=True)
class IngestReport:
    """What an ingest produced. Counts concern the uploader's own data only."""

    format: Literal["csv", "parquet"]
    n_rows: int = 0
    n_chunks: int = 0
    rows_read: int = 0
    rows_dropped: int = 0
    n_positive: int = 0
    unknown_category_rows: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "rows_read": self.rows_read,
            "rows_dropped": self.rows_dropped,
            "unknown_category_rows": dict(self.unknown_category_rows),
        }


def _read_full(source: IO[bytes], n: int) -> bytes:
    """Up to ``n`` bytes: fewer only at the end of ``source`` (a pipe may return short reads)."""
    data = source.read(n) or b""
    if not data or len(data) >= n:
        return data
    parts, got = [data], len(data)
    while got < n:
        more = source.read(n - got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


class _Prefixed(io.RawIOBase):
    """``prefix`` (bytes already read) followed by the rest of ``source``, read once. Every
    read is filled completely unless the end is reached: pyarrow's streaming CSV reader
    takes a short read for a short block."""

    def __init__(self, prefix: bytes, source: IO[bytes]) -> None:
        super().__init__()
        self._prefix = memoryview(prefix)
        self._source = source

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), len(self._prefix))
        buffer[:n] = self._prefix[:n]
        self._prefix = self._prefix[n:]
        if n < len(buffer):
            data = _read_full(self._source, len(buffer) - n)
            buffer[n : n + len(data)] = data
            n += len(data)
        return n


def _plural(k: int, word: str) -> str:
    return f"{k} {word}" if k == 1 else f"{k} {word}s"


def _check_header(names: Sequence[str], spec: DatasetSpec) -> None:
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    absent = [c for c in spec.columns if c not in counts]
    if absent:
        # The file's own header is not echoed: in a file without a header row it is the first
        # record, and no data value may appear in an error.
        raise DatasetFileError(
            f"the file has no column {', '.join(map(repr, absent))}"
            f" (the spec names {'it' if len(absent) == 1 else 'them'}; the file's header has "
            f"{_plural(len(names), 'column')}). The first line must be a header row with the "
            "column names",
            errors=[{"loc": ["spec", c], "msg": "not a column of the file"} for c in absent],
        )
    twice = [c for c in spec.columns if counts[c] > 1]
    if twice:
        raise DatasetFileError(
            "the file's header names "
            + ", ".join(f"{c!r} {counts[c]} times" for c in twice)
            + "; column names must be unique"
        )


_CSV_CONVERSION = re.compile(r"In CSV column #(\d+): (?:Row #\d+: )?CSV conversion error to (\w+)")
_CSV_FIELDS = re.compile(r"Expected (\d+) columns, got (\d+)")


def _csv_error(exc: Exception, names: Sequence[str], spec: DatasetSpec) -> DatasetFileError:
    """A value-free message for a pyarrow CSV error (whose own text may quote a cell)."""
    text = str(exc)
    if m := _CSV_CONVERSION.search(text):
        index, target = int(m.group(1)), m.group(2)
        column = names[index] if index < len(names) else f"#{index}"
        if "UTF8" in text or target in ("string", "utf8"):
            return DatasetFileError(f"column {column!r} holds text that is not valid UTF-8")
        return DatasetFileError(
            f"numeric column {column!r} holds a value that is not a number "
            "(the value is not shown); numbers use '.' as the decimal point, and missing cells "
            f"must be empty or one of the missing-value markers ({len(spec.missing_values)} "
            "declared)"
        )
    if m := _CSV_FIELDS.search(text):
        return DatasetFileError(
            f"malformed CSV: a row has {m.group(2)} fields but the header has {m.group(1)}"
        )
    if "UTF8" in text or "UTF-8" in text:
        return DatasetFileError("the CSV file is not valid UTF-8 text")
    return DatasetFileError("malformed CSV: the file could not be parsed (no details shown)")


def max_columns(spec: DatasetSpec) -> int:
    """The most columns a file under ``spec`` may have: the spec's own plus
    :data:`MAX_EXTRA_COLUMNS`."""
    return len(spec.columns) + MAX_EXTRA_COLUMNS


def _too_wide(columns: int, spec: DatasetSpec) -> DatasetTooWideError:
    return DatasetTooWideError(
        f"the file has {_plural(columns, 'column')}; the spec "
        f"reads {len(spec.columns)} and at most {MAX_EXTRA_COLUMNS} more are accepted. Remove "
        "the columns the spec does not read before uploading",
        errors=[{"loc": ["file"], "msg": f"at most {max_columns(spec)} columns are accepted"}],
    )


def _line_end(buf: bytes) -> int:
    """Where the first line of ``buf`` ends (after its ``\\n``, ``\\r\\n`` or ``\\r``), or −1
    when no line break is within the first :data:`MAX_HEADER_BYTES` + 1 bytes."""
    limit = MAX_HEADER_BYTES + 1
    breaks = [i for i in (buf.find(b"\n", 0, limit), buf.find(b"\r", 0, limit)) if i >= 0]
    if not breaks:
        return -1
    i = min(breaks)
    return i + 2 if buf[i : i + 2] == b"\r\n" else i + 1


def _csv_header(
    head: bytes, source: IO[bytes], spec: DatasetSpec
) -> tuple[list[str], bytes, bytes]:
    """The header's column names, its raw line (up to and including its line break, at
    most :data:`MAX_HEADER_BYTES` + 1 bytes) and everything read after it.

    The line's length and its number of separators are checked before it is parsed, and it
    is parsed as one line of text (pyarrow would build a column object for every name), so a
    header of very many columns costs no more memory than its own bytes."""
    buf = head
    while _line_end(buf) < 0 and len(buf) <= MAX_HEADER_BYTES:
        more = source.read(CSV_BLOCK_BYTES)
        if not more:
            break
        buf += more
    if buf.endswith(b"\r"):  # a "\r\n" may be cut in two
        buf += source.read(CSV_BLOCK_BYTES) or b""
    end = _line_end(buf)
    line = buf[:end] if end >= 0 else buf[: MAX_HEADER_BYTES + 1]
    if len(line) > MAX_HEADER_BYTES:
        raise DatasetTooWideError(
            f"the header row is longer than {MAX_HEADER_BYTES} bytes; remove the columns the "
            "spec does not read before uploading",
            errors=[
                {"loc": ["file"], "msg": f"the header may have at most {MAX_HEADER_BYTES} bytes"}
            ],
        )
    if not line.strip():
        raise DatasetFileError("malformed CSV: the first line must be a header naming the columns")
    fields = line.count(b",") + 1  # exact without quotes, else an upper bound
    if fields > max_columns(spec) and b'"' not in line:
        raise _too_wide(fields, spec)
    try:
        names = next(csv.reader([line.decode("utf-8-sig")], strict=True))
    except (UnicodeDecodeError, csv.Error, StopIteration) as exc:
        raise DatasetFileError("malformed CSV: the header row could not be parsed") from exc
    if len(names) > max_columns(spec):
        raise _too_wide(len(names), spec)
    return names, line, buf[len(line) :]


#: A unit of reading handed to the worker threads: returns the next record batch (parsing a
#: block of CSV text, or converting a batch already read).
_Task = Callable[[], pa.RecordBatch]
_T = TypeVar("_T")
_R = TypeVar("_R")
_ARROW_CSV_ERRORS: Final = (pa.ArrowInvalid, pa.ArrowKeyError, pa.ArrowNotImplementedError)


@dataclass(frozen=True, slots=True)
class _CsvLayout:
    """What every block of one CSV file is parsed with."""

    names: list[str]
    convert: pacsv.ConvertOptions
    spec: DatasetSpec


def _csv_convert(spec: DatasetSpec) -> pacsv.ConvertOptions:
    numeric = {f.column for f in spec.features if isinstance(f, NumericFeature)}
    return pacsv.ConvertOptions(
        include_columns=list(spec.columns),
        column_types={c: (pa.float64() if c in numeric else pa.string()) for c in spec.columns},
        null_values=list(spec.missing_values),
        strings_can_be_null=True,
        quoted_strings_can_be_null=True,
    )


def _as_batch(table: pa.Table) -> pa.RecordBatch:
    """The table as one record batch: its own batch (no copy) when it has one."""
    batches = table.to_batches()
    if len(batches) == 1:
        return batches[0]
    return pa.RecordBatch.from_arrays(
        [column.combine_chunks() for column in table.columns], names=table.column_names
    )


def _parse_csv_block(block: pa.Buffer, layout: _CsvLayout) -> pa.RecordBatch:
    """Whole lines of CSV text without the header (and without any quote character) → one
    record batch; pyarrow's own message (which quotes cells) is replaced."""
    read = pacsv.ReadOptions(
        column_names=layout.names, use_threads=False, block_size=block.size + 1
    )
    try:
        table = pacsv.read_csv(block, read_options=read, convert_options=layout.convert)
    except _ARROW_CSV_ERRORS as exc:
        raise _csv_error(exc, layout.names, layout.spec) from None
    return _as_batch(table)


def _splittable_header(line: bytes) -> bool:
    """Whether the data after this header line may be cut into blocks at ``\\n``: the line
    ends with ``\\n``, has no quote and no other line break (``\\r`` alone)."""
    body = line[:-2] if line.endswith(b"\r\n") else line[:-1]
    return line.endswith(b"\n") and b'"' not in line and b"\r" not in body


def _csv_tasks(head: bytes, source: IO[bytes], spec: DatasetSpec) -> Iterator[_Task]:
    """The CSV file (``head``, its first bytes, already read) as tasks, in order. ``source``
    is read once, front to back: it may be a pipe still being filled by the upload.

    Fast path: the text after the header is read in blocks of :data:`CSV_BLOCK_BYTES` cut
    after their last ``\\n``, and each block is parsed on its own by a worker, so blocks are
    parsed on every core at once. A cut at ``\\n`` is a row boundary unless the ``\\n`` is
    inside a quoted value, which needs a quote character: from the first block holding a
    quote (or no line break at all) to the end, the file is read by pyarrow's streaming
    reader instead, which parses quoting in full, one block after the other.
    """
    names, header, rest = _csv_header(head, source, spec)
    _check_header(names, spec)
    layout = _CsvLayout(names=names, convert=_csv_convert(spec), spec=spec)
    if not _splittable_header(header):
        yield from _csv_stream(_Prefixed(header + rest, source), layout, with_header=True)
        return
    carry = rest
    while True:
        data = _read_full(source, max(CSV_BLOCK_BYTES - len(carry), 1))
        text = carry + data if carry else data
        if not text:
            return
        if b'"' in text:
            yield from _csv_stream(_Prefixed(text, source), layout, with_header=False)
            return
        if data:  # more may follow: cut after the last line break
            cut = text.rfind(b"\n") + 1
            if cut == 0:
                yield from _csv_stream(_Prefixed(text, source), layout, with_header=False)
                return
        else:  # the end of the file: the last line needs no line break
            cut = len(text)
        yield functools.partial(_parse_csv_block, pa.py_buffer(text).slice(0, cut), layout)
        if not data:
            return
        carry = text[cut:]


def _ready(batch: pa.RecordBatch) -> _Task:
    return lambda: batch


def _csv_stream(source: io.RawIOBase, layout: _CsvLayout, *, with_header: bool) -> Iterator[_Task]:
    """pyarrow's streaming CSV reader over the rest of the file, one block at a time. Its
    blocks are cut where quoting allows (``newlines_in_values``), so a quoted line break on
    a block boundary is read as part of its value."""
    read = pacsv.ReadOptions(
        block_size=CSV_BLOCK_BYTES,
        use_threads=True,
        column_names=None if with_header else layout.names,
    )
    parse = pacsv.ParseOptions(newlines_in_values=True)
    try:
        reader = pacsv.open_csv(
            source, read_options=read, parse_options=parse, convert_options=layout.convert
        )
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
            yield _ready(batch)
    except _ARROW_CSV_ERRORS as exc:
        raise _csv_error(exc, layout.names, layout.spec) from None


def _parquet_column(array: pa.Array, column: str, numeric: bool) -> pa.Array:
    """A Parquet column as float64 (numeric) or text (categorical/label), or a clear error."""
    t = array.type
    if pa.types.is_dictionary(t):
        array = array.dictionary_decode()
        t = array.type
    if numeric:
        if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
            return pc.cast(array, pa.float64())
        if pa.types.is_boolean(t):
            return pc.cast(pc.cast(array, pa.int8()), pa.float64())
        raise DatasetFileError(
            f"numeric column {column!r} has Parquet type {t}; it must hold numbers"
        )
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pc.cast(array, pa.string())
    if pa.types.is_integer(t):
        return pc.cast(array, pa.string())
    if pa.types.is_boolean(t):
        return pc.if_else(array, pa.scalar("True"), pa.scalar("False"))
    raise DatasetFileError(
        f"column {column!r} has Parquet type {t}; categorical and label columns must hold "
        "text, integers or booleans"
    )


def _parquet_convert(batch: pa.RecordBatch, spec: DatasetSpec) -> pa.RecordBatch:
    numeric = {f.column for f in spec.features if isinstance(f, NumericFeature)}
    arrays = [_parquet_column(batch.column(c), c, c in numeric) for c in spec.columns]
    return pa.RecordBatch.from_arrays(arrays, names=list(spec.columns))


def _thrift_limit(spec: DatasetSpec) -> int:
    """The most elements of any one list in a Parquet footer (schema nodes, row groups,
    column chunks): enough for every file :func:`_check_parquet_footer` accepts, and a bound
    on the objects a crafted footer of tiny elements makes pyarrow allocate."""
    return max(4 * max_columns(spec), 65_536)


def _check_parquet_footer(file: IO[bytes]) -> None:
    """Refuse a Parquet footer larger than :data:`MAX_PARQUET_METADATA_BYTES` before it is
    parsed (its length is in the file's last 8 bytes); ``file`` is left where it was."""
    start = file.tell()
    end = file.seek(0, os.SEEK_END)
    if end - start < 12:
        raise DatasetFileError("the Parquet file could not be read (no details shown)")
    file.seek(end - 8)
    tail = file.read(8)
    file.seek(start)
    size = int.from_bytes(tail[:4], "little")
    if tail[4:] != _PARQUET_MAGIC:
        raise DatasetFileError("the Parquet file could not be read (no details shown)")
    if size > MAX_PARQUET_METADATA_BYTES:
        raise DatasetTooWideError(
            f"the Parquet file's metadata has {size} bytes, more than the "
            f"{MAX_PARQUET_METADATA_BYTES} accepted: it has too many columns or row groups. "
            f"Write only the columns the spec reads (at most {MAX_EXTRA_COLUMNS} more are "
            "accepted), in larger row groups",
            errors=[
                {
                    "loc": ["file"],
                    "msg": "the Parquet metadata may have at most "
                    f"{MAX_PARQUET_METADATA_BYTES} bytes",
                }
            ],
        )


def _parquet_tasks(head: bytes, source: IO[bytes], spec: DatasetSpec) -> Iterator[_Task]:
    """The Parquet file (``head``, its first bytes, already read) in record batches. Parquet
    keeps its schema at the end of the file, so a source that cannot seek (a pipe) is first
    copied to a temporary file."""
    with contextlib.ExitStack() as stack:
        if source.seekable():
            source.seek(source.tell() - len(head))
            file = source
        else:
            file = stack.enter_context(tempfile.TemporaryFile())
            file.write(head)
            shutil.copyfileobj(source, file, 1 << 20)
            file.seek(0)
        _check_parquet_footer(file)
        try:
            pf = pq.ParquetFile(file, thrift_container_size_limit=_thrift_limit(spec))
            if pf.metadata.num_columns > max_columns(spec):
                raise _too_wide(pf.metadata.num_columns, spec)
            names = [str(n) for n in pf.schema_arrow.names]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
            raise DatasetFileError("the Parquet file could not be read (no details shown)") from exc
        _check_header(names, spec)
        try:
            for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=list(spec.columns)):
                yield functools.partial(_parquet_convert, batch, spec)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
            raise DatasetFileError("the Parquet file could not be read (no details shown)") from exc


# ---- encoding -------------------------------------------------------------------------------


@dataclass(slots=True)
class _Tally:
    missing: dict[str, int]
    nonfinite: dict[str, int]
    missing_rows: int = 0
    failed: bool = False
    #: Label cells of neither declared class (a spec with a negative class).
    label_rows: int = 0
    #: A spec naming only the positive class: label cells that are not positive, and up to
    #: two distinct values among them (kept in memory only, never shown).
    other_rows: int = 0
    others: set[str] = field(default_factory=set)

    def add_others(self, values: Iterable[str]) -> None:
        for value in values:
            if len(self.others) >= 2:
                return
            self.others.add(value)


@dataclass(slots=True)
class _Encoded:
    """One batch, encoded: its counts and (unless nothing is to be stored) its payload."""

    rows_read: int
    missing: dict[str, int]
    nonfinite: dict[str, int]
    missing_rows: int
    n_rows: int = 0
    n_positive: int = 0
    unknown: dict[str, int] = field(default_factory=dict)
    payload: bytes | None = None
    label_rows: int = 0
    other_rows: int = 0
    others: tuple[str, ...] = ()


class _Encoder:
    """Encodes record batches under one spec; safe to call from several threads at once."""

    def __init__(self, spec: DatasetSpec) -> None:
        self.spec = spec
        self.value_sets = {
            f.column: pa.array(f.categories, pa.string())
            for f in spec.features
            if isinstance(f, CategoricalFeature)
        }
        #: Codes (−1 … size−1) in the smallest signed type that holds them.
        self.code_types = {
            f.column: _code_type(len(f.categories))
            for f in spec.features
            if isinstance(f, CategoricalFeature)
        }
        self.positive = pa.scalar(spec.positive, pa.string())
        self.negative = None if spec.negative is None else pa.scalar(spec.negative, pa.string())
        #: Set once the upload is known to be rejected: later batches are only counted.
        self.failed = threading.Event()

    def run(self, task: _Task) -> _Encoded:
        return self.encode(task())

    def encode(self, batch: pa.RecordBatch) -> _Encoded:
        """Count missing and non-finite cells; unless the batch (or an earlier one) fails,
        clamp numbers to their bounds, look categories up in their lists (−1: undeclared),
        compare the label with the positive class, drop rows with missing cells under
        ``"missing": "drop"``, and serialise the result."""
        spec = self.spec
        n = batch.num_rows
        missing: dict[str, int] = {}
        missing_row: NDArray[np.bool_] | None = None
        for c in spec.columns:
            col = batch.column(c)
            if col.null_count:
                missing[c] = col.null_count
                nulls = np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
                missing_row = nulls if missing_row is None else missing_row | nulls
        nonfinite: dict[str, int] = {}
        values: list[NDArray[np.float64]] = []
        for f in spec.features:
            if isinstance(f, NumericFeature):
                col = batch.column(f.column)
                v = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)
                bad = ~np.isfinite(v)
                if col.null_count:
                    bad &= np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
                k = int(np.count_nonzero(bad))
                if k:
                    nonfinite[f.column] = k
                values.append(v)
        dropped = 0 if missing_row is None else int(np.count_nonzero(missing_row))
        out = _Encoded(rows_read=n, missing=missing, nonfinite=nonfinite, missing_rows=dropped)
        label = batch.column(spec.label_column)
        positive = pc.equal(label, self.positive).fill_null(False)
        self._check_labels(label, positive, out)
        if (
            nonfinite
            or (dropped and spec.missing == "error")
            or out.label_rows
            or self.failed.is_set()
        ):
            return out
        keep = None if missing_row is None or not dropped else ~missing_row
        numeric: list[NDArray[Any]] = []
        codes: list[NDArray[Any]] = []
        it = iter(values)
        for f in spec.features:
            if isinstance(f, NumericFeature):
                v = np.clip(next(it), f.lower, f.upper)
                numeric.append(_narrow_numeric(v if keep is None else v[keep]))
            else:
                found = pc.index_in(batch.column(f.column), value_set=self.value_sets[f.column])
                # null: an undeclared value (or a missing one, dropped below); most batches
                # have none, and their codes are read without a copy
                unlisted = found.null_count
                code = np.asarray(
                    (found.fill_null(-1) if unlisted else found).to_numpy(zero_copy_only=False)
                )
                if keep is not None:
                    code = code[keep]
                code = code.astype(self.code_types[f.column], copy=False)
                out.unknown[f.column] = int(np.count_nonzero(code < 0)) if unlisted else 0
                codes.append(code)
        y = np.asarray(positive.to_numpy(zero_copy_only=False), dtype=np.int8) * 2 - 1
        y = y.astype(np.int8) if keep is None else y[keep].astype(np.int8)
        out.n_rows = int(y.shape[0])
        out.n_positive = int(np.count_nonzero(y > 0))
        if out.n_rows:
            out.payload = _payload(numeric, codes, y, CHUNK_COMPRESSION)
        return out

    def _check_labels(self, label: pa.Array, positive: pa.Array, out: _Encoded) -> None:
        """Count the label cells (present) of neither declared class; for a spec that names
        only the positive class, count the other cells and keep up to two distinct values."""
        present = label.is_valid()
        if self.negative is not None:
            declared = pc.or_(positive, pc.equal(label, self.negative).fill_null(False))
            out.label_rows = _count(pc.and_(present, pc.invert(declared)))
            return
        rest = pc.and_(present, pc.invert(positive))
        out.other_rows = _count(rest)
        if out.other_rows:
            values = pc.unique(pc.filter(label, rest)).slice(0, 2)
            out.others = tuple(str(v) for v in values.to_pylist())


def _count(mask: pa.Array) -> int:
    return int(np.count_nonzero(np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)))


def _same_text(a: str, b: str) -> bool:
    """Whether two label values differ only in case or surrounding white space."""
    return a.strip().casefold() == b.strip().casefold()


def _ambiguous_labels(spec: DatasetSpec, tally: _Tally) -> bool:
    """A spec naming only the positive class is read only when every other label cell holds
    one and the same value, which is not the positive class in another case or spacing."""
    if spec.negative is not None:
        return False
    return len(tally.others) > 1 or any(_same_text(v, spec.positive) for v in tally.others)


def _check_label_values(spec: DatasetSpec, tally: _Tally, report: IngestReport) -> None:
    column = spec.label_column
    if tally.label_rows:
        raise LabelValuesError(
            f"{_plural(tally.label_rows, 'row')} of {report.rows_read} "
            f"{'has' if tally.label_rows == 1 else 'have'} a value in the label column "
            f"{column!r} that is neither the positive class {spec.positive!r} nor the negative "
            f"class {spec.negative!r} (values not shown). Labels are compared exactly, case "
            "and spaces included: fix or remove these rows before uploading",
            column=column,
            rows=tally.label_rows,
        )
    if _ambiguous_labels(spec, tally):
        how = (
            "more than one value"
            if len(tally.others) > 1
            else "a value that differs from it only in case or spaces"
        )
        example = json.dumps({"column": column, "positive": spec.positive, "negative": "..."})
        raise LabelValuesError(
            f"the spec names only the positive class {spec.positive!r} of the label column "
            f"{column!r}, and the column holds {how} besides it "
            f"({_plural(tally.other_rows, 'row')} of {report.rows_read}; values not shown). "
            f'Declare both classes, "label": {example}: rows of any other value are then '
            "refused instead of silently becoming negatives",
            column=column,
            rows=tally.other_rows,
        )


def _in_spec_order(spec: DatasetSpec, counts: Mapping[str, int]) -> dict[str, int]:
    return {c: counts[c] for c in spec.columns if counts.get(c)}


def _final_checks(spec: DatasetSpec, tally: _Tally, report: IngestReport) -> None:
    tally.nonfinite = _in_spec_order(spec, tally.nonfinite)
    tally.missing = _in_spec_order(spec, tally.missing)
    if tally.nonfinite:
        parts = [f"{c!r} ({_plural(k, 'row')})" for c, k in tally.nonfinite.items()]
        raise DatasetFileError(
            "numeric values must be finite; NaN or infinity found in "
            + ", ".join(parts)
            + ". PrivFit does not impute: fix or remove these rows before uploading",
            errors=[
                {"loc": ["file", c], "msg": f"{k} row(s) hold NaN or infinity"}
                for c, k in tally.nonfinite.items()
            ],
        )
    if spec.missing == "error" and tally.missing_rows:
        parts = [f"{c!r} ({_plural(k, 'row')})" for c, k in tally.missing.items()]
        raise MissingValuesError(
            f"{_plural(tally.missing_rows, 'row')} of {report.rows_read} "
            f"{'has' if tally.missing_rows == 1 else 'have'} missing values, in "
            + ", ".join(parts)
            + '. Upload with "missing": "drop" to drop these rows, or fill them with a '
            "public rule before uploading",
            columns=tally.missing,
            rows=tally.missing_rows,
        )
    _check_label_values(spec, tally, report)
    if report.rows_read == 0:
        raise DatasetFileError("the file has a header but no data rows")
    if report.n_rows == 0:
        raise DatasetFileError(
            f"no rows are left after dropping the {_plural(report.rows_dropped, 'row')} "
            "with missing values"
        )
    if report.n_positive == 0:
        raise DatasetFileError(
            f"the label column {spec.label_column!r} has no row equal to the positive class "
            f"{spec.positive!r}; every row would be negative"
        )
    if report.n_positive == report.n_rows:
        raise DatasetFileError(
            f"the label column {spec.label_column!r} has no negative rows: every row equals "
            f"the positive class {spec.positive!r}"
        )


def _in_order(tasks: Iterator[_T], work: Callable[[_T], _R], *, threads: int) -> Iterator[_R]:
    """``work(task)`` for every task on ``threads`` worker threads, results in task order.

    At most ``threads + 1`` tasks are in flight, so memory stays bounded by a few blocks. An
    error (of a task, or of ``tasks`` itself) is raised in order: results of earlier tasks
    come first. When the consumer stops early, queued tasks are cancelled and the workers
    are joined before this generator returns.
    """
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="privfit-ingest")
    pending: deque[Future[_R]] = deque()
    try:
        error: BaseException | None = None
        while True:
            try:
                task = next(tasks)
            except StopIteration:
                break
            except BaseException as exc:  # raised after the results of earlier tasks
                error = exc
                break
            pending.append(pool.submit(work, task))
            if len(pending) > threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
        if error is not None:
            raise error
    finally:
        for future in pending:
            future.cancel()
        pool.shutdown(wait=True)
        close = getattr(tasks, "close", None)
        if close is not None:
            close()


def ingest(
    source: IO[bytes], spec: DatasetSpec, *, on_chunk: Callable[[EncodedChunk], None]
) -> IngestReport:
    """Read, validate and encode ``source`` (CSV with a header row, or Parquet, detected by
    its magic bytes) batch by batch, calling ``on_chunk`` for each encoded chunk in order.

    ``source`` is read once, front to back, and need not be seekable: it may be a pipe that
    the upload is still filling (a Parquet file, whose schema is at its end, is then copied
    to a temporary file first).

    Batches are parsed and encoded on :data:`INGEST_THREADS` worker threads (pyarrow and
    the codecs release the GIL), a few at a time; counts are merged and chunks handed on in
    file order, so the result does not depend on the number of threads.

    Raises :class:`DatasetInputError` (after ``on_chunk`` may already have been called: the
    caller must discard what it received) when the file is empty or malformed, lacks a
    declared column, holds NaN/inf in a numeric column, has missing values under
    ``"missing": "error"``, has label values of neither declared class (or, for a spec naming
    only the positive class, more than one other value), or leaves no positive or no negative
    rows.
    """
    head = _read_full(source, len(_PARQUET_MAGIC))
    if not head:
        raise DatasetFileError("the uploaded file is empty")
    kind: Literal["csv", "parquet"] = "parquet" if head == _PARQUET_MAGIC else "csv"
    report = IngestReport(format=kind)
    tally = _Tally(missing={}, nonfinite={})
    encoder = _Encoder(spec)
    tasks = _csv_tasks(head, source, spec) if kind == "csv" else _parquet_tasks(head, source, spec)
    for part in _in_order(tasks, encoder.run, threads=INGEST_THREADS):
        report.rows_read += part.rows_read
        for c, k in part.missing.items():
            tally.missing[c] = tally.missing.get(c, 0) + k
        for c, k in part.nonfinite.items():
            tally.nonfinite[c] = tally.nonfinite.get(c, 0) + k
        tally.missing_rows += part.missing_rows
        tally.label_rows += part.label_rows
        tally.other_rows += part.other_rows
        tally.add_others(part.others)
        if (
            part.nonfinite
            or (part.missing_rows and spec.missing == "error")
            or part.label_rows
            or _ambiguous_labels(spec, tally)
        ):
            tally.failed = True
            encoder.failed.set()
        if tally.failed:
            continue
        report.rows_dropped += part.missing_rows
        report.n_positive += part.n_positive
        for c, k in part.unknown.items():
            report.unknown_category_rows[c] = report.unknown_category_rows.get(c, 0) + k
        if part.payload is None:
            continue
        on_chunk(EncodedChunk(seq=report.n_chunks, n_rows=part.n_rows, payload=part.payload))
        report.n_chunks += 1
        report.n_rows += part.n_rows
    _final_checks(spec, tally, report)
    return report
