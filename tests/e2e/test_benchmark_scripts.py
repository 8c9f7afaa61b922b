"""The HTTP benchmarks of issue 4 still run: ``benchmarks.bench_upload`` and
``benchmarks.bench_fit_job``, at their smallest settings, through the same code paths a full
run takes (the app in process and under uvicorn, the process-pool runner).

These tests check that each script completes and reports one well-formed row per case (every
row of the file counted, positive finite ratios); they do not judge the times (the figures are
recorded in ``benchmarks/RESULTS.md``). Their output files go to a temporary folder.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from benchmarks import bench_fit_job, bench_upload

# Heavy tier (issue 27 §5): this runs a benchmark script end to end, which checks the script,
# not the service (every code path it drives has its own tests); CI runs it in `make test-heavy`.
pytestmark = [pytest.mark.slow, pytest.mark.heavy]

#: ``1.23×`` or ``1.23`` in a markdown cell.
_NUMBER = re.compile(r"^(\d+\.\d+)×?")


def _table_rows(text: str, first_cell: str) -> list[list[str]]:
    """The cells of the markdown table rows of ``text`` whose first cell starts so."""
    rows = []
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            if cells[0].startswith(first_cell):
                rows.append(cells)
    return rows


def _positive(cell: str) -> float:
    match = _NUMBER.match(cell)
    assert match is not None, cell
    value = float(match.group(1))
    assert math.isfinite(value), cell
    assert value > 0, cell
    return value


def test_the_upload_benchmark_times_each_mode_against_read_csv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench_upload, "OUT", tmp_path)
    bench_upload.main(["--sizes", "1", "--modes", "ingest,testclient,uvicorn", "--repeats", "1"])
    rows = _table_rows(capsys.readouterr().out, "1 MB")
    assert [row[2] for row in rows] == [
        "ingest alone (no HTTP, no database)",
        "testclient (client + server)",
        "uvicorn",
    ]
    generated = next(tmp_path.glob("adult_like_1mb.csv"))
    data_rows = generated.read_bytes().count(b"\n") - 1  # the header
    for row in rows:
        assert int(row[1].replace(",", "")) == data_rows  # every row stored (or encoded)
        _positive(row[6])  # upload / read_csv
        for cell in (row[4], row[5], row[7]):  # read_csv s, upload s, server CPU-s
            assert _NUMBER.match(cell), cell  # a 1 MB file may take under 0.005 s


def test_the_fit_job_benchmark_times_both_flows_against_the_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench_fit_job, "OUT", tmp_path)
    # uvicorn and the process-pool runner, the defaults; native threads left alone (the
    # script would otherwise pin them for this whole test process)
    bench_fit_job.main(["--repeats", "1", "--threads", "0"])
    out = capsys.readouterr().out
    cases = [label for label, *_ in bench_fit_job.CASES]
    rows = [row for case in cases for row in _table_rows(out, case)]
    assert [row[0] for row in rows] == cases
    for row in rows:
        for cell in row[1:]:
            _positive(cell)
    written = json.loads((tmp_path / "fit_job_process_uvicorn.json").read_text())
    assert [result["case"] for result in written["rows"]] == cases
