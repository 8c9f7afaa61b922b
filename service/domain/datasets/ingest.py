"""Dataset ingestion: a public spec plus a CSV or Parquet file → validated, encoded chunks.

The readers (:mod:`.readers`) cut the file into record batches; this module encodes them
(:mod:`.codec`) and checks what needs the whole file (docs/design.md §2):

* **Streaming, on every core.** Blocks are parsed and encoded on :data:`INGEST_THREADS`
  worker threads, a few at a time, and handed to ``on_chunk`` in file order, so memory stays
  bounded by a few blocks whatever the file size.
* **All or nothing.** Problems that need the whole file (missing values under
  ``"missing": "error"``, NaN/inf, label values of no declared class, a binary label
  without positive rows) are counted to the end and then raised; the caller keeps the chunks
  aside and stores them (in one transaction) only when :func:`ingest` returns, so a rejected
  upload stores nothing.
* **Labels** (:mod:`.labels`): a binary label is stored as ±1, a multi-class label as the
  index of its class in the declared order, a numeric label as its value clipped to the
  public bounds (the rows clipped are counted in the report, ``label_clipped_rows``).
* **No data values in errors.** Messages name columns and count rows; they never quote a
  cell.
"""

from __future__ import annotations

import json
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import IO, Any, Final, Literal, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from service.domain.datasets.codec import (
    CHUNK_COMPRESSION,
    EncodedChunk,
    chunk_payload,
    code_type,
    narrow_numeric,
)
from service.domain.datasets.readers import (
    PARQUET_MAGIC,
    IngestReport,
    ParseTask,
    csv_tasks,
    parquet_tasks,
    plural,
    read_full,
)
from service.domain.datasets.spec import (
    DatasetFileError,
    DatasetSpec,
    LabelValuesError,
    MissingValuesError,
)
from service.dp.data.preprocessing import (
    CategoricalFeature,
    NumericFeature,
)

#: Worker threads that parse and encode blocks (pyarrow and the codecs release the GIL).
INGEST_THREADS: Final[int] = max(1, min(4, os.cpu_count() or 1))
_T = TypeVar("_T")
_R = TypeVar("_R")

# ---- encoding -------------------------------------------------------------------------------


@dataclass(slots=True)
class _Tally:
    missing: dict[str, int]
    nonfinite: dict[str, int]
    missing_rows: int = 0
    failed: bool = False
    #: Label cells of no declared class (a spec with a negative class, or with classes).
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
    #: Numeric labels clipped to their bounds.
    clipped: int = 0


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
            f.column: code_type(len(f.categories))
            for f in spec.features
            if isinstance(f, CategoricalFeature)
        }
        self.positive = None if spec.positive is None else pa.scalar(spec.positive, pa.string())
        self.negative = None if spec.negative is None else pa.scalar(spec.negative, pa.string())
        self.classes = None if spec.classes is None else pa.array(list(spec.classes), pa.string())
        self.class_type = code_type(len(spec.classes or ()) or 1)
        #: Set once the upload is known to be rejected: later batches are only counted.
        self.failed = threading.Event()

    def run(self, task: ParseTask) -> _Encoded:
        return self.encode(task())

    def encode(self, batch: pa.RecordBatch) -> _Encoded:
        """Count missing and non-finite cells; unless the batch (or an earlier one) fails,
        clamp numbers to their bounds, look categories up in their lists (−1: undeclared),
        encode the label (±1, class index, or the number clipped to its bounds), drop rows
        with missing cells under ``"missing": "drop"``, and serialise the result."""
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
        values = [
            _finite_values(batch, f.column, nonfinite)
            for f in spec.features
            if isinstance(f, NumericFeature)
        ]
        dropped = 0 if missing_row is None else int(np.count_nonzero(missing_row))
        out = _Encoded(rows_read=n, missing=missing, nonfinite=nonfinite, missing_rows=dropped)
        label = batch.column(spec.label_column)
        y_all: NDArray[Any]
        if spec.task == "regression":
            y_all = _finite_values(batch, spec.label_column, nonfinite)
        elif self.classes is not None:
            found = pc.index_in(label, value_set=self.classes)
            out.label_rows = _count(pc.and_(label.is_valid(), found.is_null()))
            y_all = np.asarray(found.fill_null(0).to_numpy(zero_copy_only=False))
        else:
            positive = pc.equal(label, self.positive).fill_null(False)
            self._check_labels(label, positive, out)
            y_all = np.asarray(positive.to_numpy(zero_copy_only=False), dtype=np.int8) * 2 - 1
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
                numeric.append(narrow_numeric(v if keep is None else v[keep]))
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
        y = _stored_labels(spec, y_all if keep is None else y_all[keep], self.class_type, out)
        out.n_rows = int(y.shape[0])
        out.n_positive = int(np.count_nonzero(y > 0)) if spec.task == "binary" else 0
        if out.n_rows:
            out.payload = chunk_payload(numeric, codes, y, CHUNK_COMPRESSION)
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


def _finite_values(
    batch: pa.RecordBatch, column: str, nonfinite: dict[str, int]
) -> NDArray[np.float64]:
    """A numeric column as float64, counting its present non-finite cells in ``nonfinite``."""
    col = batch.column(column)
    v = np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.float64)
    bad = ~np.isfinite(v)
    if col.null_count:
        bad &= np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    k = int(np.count_nonzero(bad))
    if k:
        nonfinite[column] = k
    return v


def _stored_labels(
    spec: DatasetSpec, y: NDArray[Any], class_type: type[np.signedinteger[Any]], out: _Encoded
) -> NDArray[Any]:
    """The kept rows' labels as stored: int8 ±1 (binary), the class index in the smallest
    signed type holding K − 1 (multiclass), or the number clipped to [lower, upper] as
    float64 (regression; the rows clipped are counted in ``out.clipped``)."""
    if spec.task == "regression":
        low, high = spec.label_task.lower, spec.label_task.upper
        v = np.asarray(y, dtype=np.float64)
        clipped = np.clip(v, low, high)
        out.clipped = int(np.count_nonzero(clipped != v))
        return np.ascontiguousarray(clipped)
    if spec.task == "multiclass":
        return np.ascontiguousarray(y.astype(class_type))
    return np.ascontiguousarray(y.astype(np.int8))


def _count(mask: pa.Array) -> int:
    return int(np.count_nonzero(np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)))


def _same_text(a: str, b: str) -> bool:
    """Whether two label values differ only in case or surrounding white space."""
    return a.strip().casefold() == b.strip().casefold()


def _ambiguous_labels(spec: DatasetSpec, tally: _Tally) -> bool:
    """A spec naming only the positive class is read only when every other label cell holds
    one and the same value, which is not the positive class in another case or spacing."""
    if spec.negative is not None or spec.positive is None:
        return False
    return len(tally.others) > 1 or any(_same_text(v, spec.positive) for v in tally.others)


def _check_label_values(spec: DatasetSpec, tally: _Tally, report: IngestReport) -> None:
    column = spec.label_column
    if tally.label_rows and spec.classes is not None:
        raise LabelValuesError(
            f"{plural(tally.label_rows, 'row')} of {report.rows_read} "
            f"{'has' if tally.label_rows == 1 else 'have'} a value in the label column "
            f"{column!r} that is none of its {len(spec.classes)} declared classes (values not "
            "shown). Labels are compared exactly, case and spaces included: fix or remove "
            "these rows before uploading",
            column=column,
            rows=tally.label_rows,
            classes=len(spec.classes),
        )
    if tally.label_rows:
        raise LabelValuesError(
            f"{plural(tally.label_rows, 'row')} of {report.rows_read} "
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
            f"({plural(tally.other_rows, 'row')} of {report.rows_read}; values not shown). "
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
        parts = [f"{c!r} ({plural(k, 'row')})" for c, k in tally.nonfinite.items()]
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
        parts = [f"{c!r} ({plural(k, 'row')})" for c, k in tally.missing.items()]
        raise MissingValuesError(
            f"{plural(tally.missing_rows, 'row')} of {report.rows_read} "
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
            f"no rows are left after dropping the {plural(report.rows_dropped, 'row')} "
            "with missing values"
        )
    if spec.task != "binary":
        return
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
    ``"missing": "error"``, has label values of no declared class (or, for a spec naming
    only the positive class, more than one other value), a numeric label that is not a
    finite number, or (binary) leaves no positive or no negative rows.
    """
    head = read_full(source, len(PARQUET_MAGIC))
    if not head:
        raise DatasetFileError("the uploaded file is empty")
    kind: Literal["csv", "parquet"] = "parquet" if head == PARQUET_MAGIC else "csv"
    report = IngestReport(format=kind, label_clipped_rows=0 if spec.task == "regression" else None)
    tally = _Tally(missing={}, nonfinite={})
    encoder = _Encoder(spec)
    tasks = csv_tasks(head, source, spec) if kind == "csv" else parquet_tasks(head, source, spec)
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
        if report.label_clipped_rows is not None:
            report.label_clipped_rows += part.clipped
        for c, k in part.unknown.items():
            report.unknown_category_rows[c] = report.unknown_category_rows.get(c, 0) + k
        if part.payload is None:
            continue
        on_chunk(EncodedChunk(seq=report.n_chunks, n_rows=part.n_rows, payload=part.payload))
        report.n_chunks += 1
        report.n_rows += part.n_rows
    _final_checks(spec, tally, report)
    return report
