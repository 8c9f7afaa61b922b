"""Turning what a caller holds (a path, bytes, a file, a pandas DataFrame) into request bodies."""

from __future__ import annotations

import io
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

__all__ = [
    "PARQUET_MAGIC",
    "DataSource",
    "SpecSource",
    "is_dataframe",
    "load_spec",
    "open_data",
    "records",
]

PARQUET_MAGIC = b"PAR1"
#: A DataFrame's Parquet copy stays in memory up to this size, then spills to disk.
_SPOOL_BYTES = 64 * 1024 * 1024

#: What :meth:`Client.upload` accepts as data: a path, raw bytes, a binary file or a DataFrame.
DataSource = str | os.PathLike[str] | bytes | IO[bytes] | Any
#: A spec: a mapping, a JSON text or the path of a JSON file.
SpecSource = Mapping[str, Any] | str | os.PathLike[str]


def is_dataframe(value: object) -> bool:
    """Whether ``value`` is a pandas DataFrame (without importing pandas)."""
    return any(
        cls.__name__ == "DataFrame" and cls.__module__.split(".")[0] == "pandas"
        for cls in type(value).__mro__
    )


def load_spec(spec: SpecSource) -> dict[str, Any]:
    """The spec as a dict, from a mapping, a JSON text or a JSON file."""
    if isinstance(spec, Mapping):
        return dict(spec)
    text = str(spec)
    if not text.lstrip().startswith("{"):
        text = Path(text).read_text(encoding="utf-8")
    loaded = json.loads(text)
    if not isinstance(loaded, dict):
        raise ValueError("a spec must be a JSON object")
    return loaded


@contextmanager
def open_data(data: DataSource) -> Iterator[tuple[str, IO[bytes], str]]:
    """``(filename, seekable binary file, media type)`` for the upload's ``file`` part.

    A DataFrame is written as Parquet (pyarrow) to a spooled temporary file; a path is opened
    and streamed from disk, never read whole.
    """
    if is_dataframe(data):
        frame: Any = data
        with tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) as spool:
            frame.to_parquet(spool, index=False, engine="pyarrow")
            spool.seek(0)
            yield "data.parquet", spool, "application/vnd.apache.parquet"
        return
    if isinstance(data, bytes):
        yield "data", io.BytesIO(data), _media_type(data[:4])
        return
    if isinstance(data, str | os.PathLike):
        path = Path(data)
        with path.open("rb") as handle:
            yield path.name, handle, _media_type(handle.read(4))
        return
    if hasattr(data, "read"):
        name = Path(str(getattr(data, "name", "data"))).name
        yield name, data, "application/octet-stream"
        return
    raise TypeError(
        f"cannot upload {type(data).__name__}: pass a path, bytes, a file or a DataFrame"
    )


def _media_type(head: bytes) -> str:
    return "application/vnd.apache.parquet" if head == PARQUET_MAGIC else "text/csv"


def records(rows: Any) -> list[dict[str, Any]]:
    """Rows as JSON-ready dicts: from a DataFrame (NaN becomes null) or an iterable of mappings."""
    if is_dataframe(rows):
        frame = rows.astype(object).where(rows.notna(), None)
        return [dict(row) for row in frame.to_dict(orient="records")]
    if isinstance(rows, Mapping):
        raise TypeError("pass a list of rows (dicts), not a single row")
    return [dict(row) for row in _iter_rows(rows)]


def _iter_rows(rows: Iterable[Any]) -> Iterator[Mapping[str, Any]]:
    for row in rows:
        if not isinstance(row, Mapping):
            raise TypeError(f"a row must be a mapping of column to value, not {type(row).__name__}")
        yield row
