"""CSV and Parquet readers: a file → record batches of the spec's declared columns.

* **Bounded width.** A file may have at most :data:`MAX_EXTRA_COLUMNS` columns beyond those
  its spec reads, a CSV header at most :data:`MAX_HEADER_BYTES`, a Parquet footer at most
  :data:`MAX_PARQUET_METADATA_BYTES`; all three are checked before the header or footer is
  parsed, and only the declared columns are parsed, so memory follows what is kept.
* **Streaming.** The file is read in blocks (CSV: :data:`CSV_BLOCK_BYTES` of text cut at a
  line break; Parquet: ``ParquetFile.iter_batches``), once, front to back, so parsing can
  start while the upload arrives. CSV text is cut at ``\\n`` only while it holds no quote
  character (a quoted value may hold a line break); from the first block that does,
  pyarrow's streaming reader reads the rest.
* **No data values in errors.** pyarrow's own messages (which do quote cells) are never
  passed on; ours name columns and count rows.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Final, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from service.domain.datasets.spec import DatasetFileError, DatasetSpec, DatasetTooWideError

#: Rows per record batch (and per stored chunk) for Parquet; CSV batches are cut by bytes.
PARQUET_BATCH_ROWS: Final[int] = 65_536
#: Bytes per CSV block; one block becomes one record batch and one chunk.
CSV_BLOCK_BYTES: Final[int] = 4 << 20
#: The header row must fit in this many bytes (checked before it is parsed).
MAX_HEADER_BYTES: Final[int] = 1 << 20
#: A file may have at most this many columns beyond those its spec reads (checked before any
#: data row is parsed): the columns of a file cost memory even when they are not read.
MAX_EXTRA_COLUMNS: Final[int] = 1000
#: Largest Parquet footer (the file's metadata: schema, row groups, column chunks) accepted;
#: it is parsed whole, at several times its size in memory.
MAX_PARQUET_METADATA_BYTES: Final[int] = 4 << 20
PARQUET_MAGIC: Final[bytes] = b"PAR1"

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
    #: Rows whose numeric label was clipped to its public bounds (None: not a numeric label).
    label_clipped_rows: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": self.format,
            "rows_read": self.rows_read,
            "rows_dropped": self.rows_dropped,
            "unknown_category_rows": dict(self.unknown_category_rows),
        }
        if self.label_clipped_rows is not None:
            out["label_clipped_rows"] = self.label_clipped_rows
        return out


def read_full(source: IO[bytes], n: int) -> bytes:
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
            data = read_full(self._source, len(buffer) - n)
            buffer[n : n + len(data)] = data
            n += len(data)
        return n


def plural(k: int, word: str) -> str:
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
            f"{plural(len(names), 'column')}). The first line must be a header row with the "
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
        f"the file has {plural(columns, 'column')}; the spec "
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
ParseTask = Callable[[], pa.RecordBatch]
_ARROW_CSV_ERRORS: Final = (pa.ArrowInvalid, pa.ArrowKeyError, pa.ArrowNotImplementedError)


@dataclass(frozen=True, slots=True)
class _CsvLayout:
    """What every block of one CSV file is parsed with."""

    names: list[str]
    convert: pacsv.ConvertOptions
    spec: DatasetSpec


def _csv_convert(spec: DatasetSpec) -> pacsv.ConvertOptions:
    numeric = spec.numeric_columns
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


def csv_tasks(head: bytes, source: IO[bytes], spec: DatasetSpec) -> Iterator[ParseTask]:
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
        data = read_full(source, max(CSV_BLOCK_BYTES - len(carry), 1))
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


def _ready(batch: pa.RecordBatch) -> ParseTask:
    return lambda: batch


def _csv_stream(
    source: io.RawIOBase, layout: _CsvLayout, *, with_header: bool
) -> Iterator[ParseTask]:
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
    numeric = spec.numeric_columns
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
    if tail[4:] != PARQUET_MAGIC:
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


def parquet_tasks(head: bytes, source: IO[bytes], spec: DatasetSpec) -> Iterator[ParseTask]:
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
