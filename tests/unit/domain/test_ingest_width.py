"""Wide files: the columns a file may have are bounded by its spec (issue 18 item 2).

A CSV header or a Parquet footer is checked before it is parsed: a file with more than
``MAX_EXTRA_COLUMNS`` columns beyond those the spec reads, a header line over
``MAX_HEADER_BYTES`` or a Parquet footer over ``MAX_PARQUET_METADATA_BYTES`` is a
``DatasetTooWideError`` (422, ``dataset-too-wide``). Files within the bounds read exactly as
before, quoted headers included. ``tests/api/test_upload_memory.py`` measures the server.
"""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from service.domain.datasets import readers as readers_module
from service.domain.datasets.codec import EncodedChunk
from service.domain.datasets.ingest import ingest
from service.domain.datasets.readers import MAX_EXTRA_COLUMNS, MAX_HEADER_BYTES, IngestReport
from service.domain.datasets.spec import (
    BudgetLimits,
    DatasetFileError,
    DatasetSpec,
    DatasetTooWideError,
    FeatureInput,
    build_spec,
)

SECRET = "SECRET-7731"


def _spec() -> DatasetSpec:
    return build_spec(
        name="wide",
        label_column="y",
        positive="yes",
        negative="no",
        features=[
            FeatureInput(column="a", type="numeric", lower=0, upper=10),
            FeatureInput(column="b", type="categorical", categories=("u", "v")),
        ],
        epsilon=1.0,
        delta=0.0,
        limits=BudgetLimits(max_epsilon=10.0, max_delta=1e-3),
    )


def _run(data: bytes) -> IngestReport:
    chunks: list[EncodedChunk] = []
    return ingest(io.BytesIO(data), _spec(), on_chunk=chunks.append)


def _wide_csv(extra: int, *, quoted: bool = False, rows: int = 4) -> bytes:
    names = [f"x{i}" for i in range(extra)] + ["a", "b", "y"]
    if quoted:
        names = [f'"{n}"' for n in names]
    lines = [",".join(names)]
    lines.extend(
        ",".join([SECRET] * extra + [str(r % 10), "u", "yes" if r % 2 else "no"])
        for r in range(rows)
    )
    return ("\n".join(lines) + "\n").encode()


def _wide_parquet(extra: int) -> bytes:
    columns: dict[str, pa.Array] = {f"x{i}": pa.array([SECRET] * 4) for i in range(extra)}
    columns.update(
        a=pa.array([1.0, 2, 3, 4]), b=pa.array(["u", "v"] * 2), y=pa.array(["yes", "no"] * 2)
    )
    sink = io.BytesIO()
    pq.write_table(pa.table(columns), sink)
    return sink.getvalue()


def _assert_too_wide(exc: DatasetTooWideError) -> None:
    assert exc.slug == "dataset-too-wide"
    assert SECRET not in exc.detail + json.dumps(exc.errors)
    assert exc.errors
    assert exc.errors[0]["loc"] == ["file"]


@pytest.mark.parametrize("quoted", [False, True], ids=["plain", "quoted"])
def test_a_file_at_the_column_bound_is_read(quoted: bool) -> None:
    report = _run(_wide_csv(MAX_EXTRA_COLUMNS, quoted=quoted))
    assert (report.n_rows, report.n_positive) == (4, 2)


@pytest.mark.parametrize("quoted", [False, True], ids=["plain", "quoted"])
def test_one_column_over_the_bound_is_refused_before_any_row(quoted: bool) -> None:
    with pytest.raises(DatasetTooWideError) as info:
        _run(_wide_csv(MAX_EXTRA_COLUMNS + 1, quoted=quoted))
    _assert_too_wide(info.value)
    assert f"{MAX_EXTRA_COLUMNS + 4} columns" in info.value.detail
    assert "the spec reads 3" in info.value.detail


def test_the_issue_s_file_of_100003_columns_is_refused() -> None:
    with pytest.raises(DatasetTooWideError) as info:
        _run(_wide_csv(100_000))
    _assert_too_wide(info.value)
    assert "100003 columns" in info.value.detail


def test_a_header_longer_than_the_bound_is_refused_unparsed() -> None:
    long_name = "n" * (MAX_HEADER_BYTES + 10)
    with pytest.raises(DatasetTooWideError) as info:
        _run(f"a,b,y,{long_name}\n1,u,yes,z\n".encode())
    _assert_too_wide(info.value)
    assert str(MAX_HEADER_BYTES) in info.value.detail


def test_a_header_with_an_open_quote_is_malformed() -> None:
    with pytest.raises(DatasetFileError, match="header row could not be parsed"):
        _run(b'a,b,"y\n1,u,yes\n')


def test_a_byte_order_mark_is_not_part_of_the_first_name() -> None:
    report = _run(b"\xef\xbb\xbfa,b,y\n1,u,yes\n2,v,no\n")
    assert report.n_rows == 2


def test_a_wide_parquet_file_is_refused_and_one_at_the_bound_read() -> None:
    assert _run(_wide_parquet(MAX_EXTRA_COLUMNS)).n_rows == 4
    with pytest.raises(DatasetTooWideError) as info:
        _run(_wide_parquet(MAX_EXTRA_COLUMNS + 1))
    _assert_too_wide(info.value)


def test_a_parquet_footer_over_the_bound_is_refused_before_it_is_parsed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = _wide_parquet(10)
    footer = int.from_bytes(data[-8:-4], "little")
    monkeypatch.setattr(readers_module, "MAX_PARQUET_METADATA_BYTES", footer - 1)

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the footer was parsed")

    monkeypatch.setattr("service.domain.datasets.readers.pq.ParquetFile", never)
    with pytest.raises(DatasetTooWideError) as info:
        _run(data)
    _assert_too_wide(info.value)
    assert f"{footer} bytes" in info.value.detail


def test_a_parquet_file_cut_short_is_unreadable() -> None:
    with pytest.raises(DatasetFileError, match="Parquet"):
        _run(_wide_parquet(1)[:-3])
