"""The chunk codec: how encoded rows are stored (``dataset_chunk.payload``) and read back.

Payload: :data:`_ARROW_MAGIC` then one Arrow IPC record batch (buffers compressed with
:data:`CHUNK_COMPRESSION`) with the columns ``n0, n1, …`` (the numeric features in spec order,
clamped to their bounds), ``c0, c1, …`` (codes into each category list, −1 for an undeclared
value → all-zero one-hot block) and ``y``: int8 ±1 for a binary label, the class index (int8
or int16) for a multi-class one, the value clipped to its bounds (float64, exact) for a
numeric one (:mod:`.labels`). A numeric column is stored as
int8/16/32 when every value of the chunk converts back to the same float64 bit for bit, else
as float64: the design is rebuilt exactly. :func:`design_from_chunks` turns chunks into (X, y)
through :meth:`PreprocessingSpec.transform_codes`, the same transform ``predict`` applies.
This form is tens of times smaller than a dense float64 X (a one-hot design of Adult has 106
columns) and keeps storing the chunks cheap. Payloads of the earlier ``np.savez`` form are
still read.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, cast

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from service.domain.datasets.labels import LabelTask
from service.dp.data.preprocessing import (
    PreprocessingSpec,
)

Compression = Literal["none", "lz4", "zstd"]
#: How the Arrow buffers of chunk payloads are compressed. zstd at level 1 halves the
#: narrowed columns of a typical table at several hundred MB/s, and every byte not written
#: is a byte the database does not have to sync at commit.
CHUNK_COMPRESSION: Compression = "zstd"
ZSTD_LEVEL: Final[int] = 1
_ARROW_MAGIC: Final[bytes] = b"PFARROW1"
#: Earlier payloads: an LZ4 frame around an ``np.savez`` archive (read, no longer written).
_LZ4_MAGIC: Final[bytes] = b"PFLZ4\x00"

# ---- chunk payloads -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EncodedChunk:
    """One stored chunk: ``seq`` from 0, its row count and the payload (see the module doc)."""

    seq: int
    n_rows: int
    payload: bytes


def narrow_numeric(values: NDArray[np.float64]) -> NDArray[Any]:
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
    return codes.astype(code_type(high + 1), copy=False)


def code_type(size: int) -> type[np.signedinteger[Any]]:
    """The smallest signed integer type holding the codes −1 … ``size`` − 1."""
    for kind in (np.int8, np.int16, np.int32):
        if size - 1 <= np.iinfo(kind).max:
            return kind
    raise ValueError("category codes do not fit in 32 bits")


def chunk_payload(
    numeric: Sequence[NDArray[Any]],
    codes: Sequence[NDArray[Any]],
    y: NDArray[Any],
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
    return chunk_payload(
        [narrow_numeric(np.ascontiguousarray(num[:, i])) for i in range(num.shape[1])],
        [_narrow_codes(np.ascontiguousarray(cat[:, j])) for j in range(cat.shape[1])],
        labels,
        compression or CHUNK_COMPRESSION,
    )


_NUMERIC_TYPES: Final = (pa.int8(), pa.int16(), pa.int32(), pa.float64())
_CODE_TYPES: Final = (pa.int8(), pa.int16(), pa.int32())
#: Stored labels: ±1 or class indices (int8, int16), numeric labels (float64).
_LABEL_TYPES: Final = (pa.int8(), pa.int16(), pa.float64())


def _decode_arrow(
    body: memoryview,
) -> tuple[NDArray[np.float64], NDArray[np.integer[Any]], NDArray[Any]]:
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
        or types[-1] not in _LABEL_TYPES
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
    y = np.asarray(table.column(k + m).to_numpy())
    return num, cat, y


def decode_chunk(
    payload: bytes,
) -> tuple[NDArray[np.float64], NDArray[np.integer[Any]], NDArray[Any]]:
    """(num, cat, y) of a payload written by :func:`encode_chunk`: ``num`` float64 exactly
    as encoded, ``cat`` the codes (int8 or wider), ``y`` as stored (int8 ±1, class indices,
    or float64 numeric labels). Also reads the earlier
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
    preprocessing: PreprocessingSpec,
    payloads: Iterable[bytes],
    n_rows: int,
    labels: LabelTask | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(X, y) of a stored dataset: X = ``preprocessing.transform`` of the stored columns
    (float64, n × d, every row of norm ≤ 1), y in the DP core's encoding of ``labels``' task
    (:meth:`LabelTask.dp_labels`: ±1.0, the class index, or the numeric label mapped onto
    [−1, 1]; binary when None). ``n_rows`` preallocates X; a mismatch with the chunks raises
    ``ValueError``."""
    task = labels or LabelTask("binary")
    X = np.empty((n_rows, preprocessing.n_features), dtype=np.float64)
    y = np.empty(n_rows, dtype=np.float64)
    start = 0
    for payload in payloads:
        num, cat, stored = decode_chunk(payload)
        m = stored.shape[0]
        if start + m > n_rows:
            raise ValueError("the stored chunks hold more rows than the dataset records")
        X[start : start + m] = preprocessing.transform_codes(num, cat)
        y[start : start + m] = task.dp_labels(stored)
        start += m
    if start != n_rows:
        raise ValueError("the stored chunks hold fewer rows than the dataset records")
    return X, y
