"""Wide uploads in parallel keep a live server's memory bounded (issue 18 item 2).

A real ``privfit serve`` process receives four uploads at once, several times; its peak
resident memory (``VmHWM`` of ``/proc/<pid>/status``, reset through ``clear_refs`` before each
round) may exceed its resident memory before the round (``VmRSS``) by at most a stated bound:

* four CSVs of the issue (4 rows × 100,003 columns, 1.5 MB, the spec reads 3) together with
  four Parquet files of 5,003 columns: refused with ``dataset-too-wide`` before a row or the
  footer's columns are parsed. Bound: :data:`REJECTED_BOUND` (64 MiB) for the eight. Each
  holds at most its own body in the upload pipe (≤ 1.5 MB), a header buffer (≤ 1 MiB) and a
  Parquet footer (≈ 1 MB here, parsed at a few MiB); before the bounds one such CSV alone took
  the server from ≈ 210 MB to ≈ 1.1 GB (pyarrow built a column for every header name), four
  to ≈ 3.5 GB.
* four CSVs at the column bound (3 read + 1,000 unread columns, 3,000 rows, 6 MB): stored.
  Bound: :func:`accepted_bound`, four times what one upload may hold: the pipe
  (``PIPE_BYTES``) plus ``INGEST_THREADS + 1`` blocks in flight, each at most
  ``4 × CSV_BLOCK_BYTES`` (its text, pyarrow's parsed values and per-field offsets of every
  column, even those not read). That is a constant: memory no longer grows with the width of
  the file, only with the block size and the columns kept.

Only memory counts are compared, never times.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2 as httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from service.api.uploads import PIPE_BYTES
from service.domain.datasets.ingest import INGEST_THREADS
from service.domain.datasets.readers import CSV_BLOCK_BYTES, MAX_EXTRA_COLUMNS
from tests.support.live_server import LiveServer

pytestmark = pytest.mark.slow

MIB = 1 << 20
REJECTED_BOUND = 64 * MIB
SPEC = json.dumps(
    {
        "name": "wide",
        "label": {"column": "y", "positive": "yes", "negative": "no"},
        "features": [
            {"column": "a", "type": "numeric", "lower": 0, "upper": 10},
            {"column": "b", "type": "categorical", "categories": ["u", "v"]},
        ],
        "budget": {"epsilon": 1.0},
    }
)


def accepted_bound(uploads: int = 4) -> int:
    """What ``uploads`` accepted uploads may hold at once (see the module docstring)."""
    return uploads * (PIPE_BYTES + (INGEST_THREADS + 1) * 4 * CSV_BLOCK_BYTES)


def wide_csv(unread: int, rows: int) -> bytes:
    names = [f"c{i}" for i in range(unread)] + ["a", "b", "y"]
    lines = [",".join(names)]
    lines.extend(
        ",".join(["1"] * unread + [str(r % 10), "uv"[r % 2], "yes" if r % 2 else "no"])
        for r in range(rows)
    )
    return ("\n".join(lines) + "\n").encode()


def wide_parquet(unread: int) -> bytes:
    columns = {f"c{i}": pa.array([1, 2, 3, 4]) for i in range(unread)}
    columns.update(
        a=pa.array([1.0, 2, 3, 4]), b=pa.array(["u", "v"] * 2), y=pa.array(["yes", "no"] * 2)
    )
    sink = io.BytesIO()
    pq.write_table(pa.table(columns), sink)
    return sink.getvalue()


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of process ``pid``, in bytes."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


def reset_peak(pid: int) -> None:
    """Make VmHWM start again from the current VmRSS (Linux ``clear_refs`` value 5)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


class Uploader:
    def __init__(self, server: LiveServer) -> None:
        self.url = f"{server.base_url}/v1/datasets"
        created = httpx.post(
            f"{server.base_url}/v1/sites", json={"name": "wide"}, headers=server.admin_headers
        )
        assert created.status_code == 201, created.text
        self.headers = {"Authorization": f"Bearer {created.json()['key']['api_key']}"}

    def __call__(self, data: bytes) -> tuple[int, str]:
        response = httpx.post(
            self.url,
            files={"spec": (None, SPEC), "file": ("data", data)},
            headers=self.headers,
            timeout=300,
        )
        return response.status_code, str(response.json().get("type", "")).rsplit("/", 1)[-1]

    def at_once(self, files: Sequence[bytes]) -> list[tuple[int, str]]:
        with ThreadPoolExecutor(len(files)) as pool:
            return list(pool.map(self, files))


def growth(
    server: LiveServer, uploader: Uploader, files: Sequence[bytes]
) -> tuple[int, list[tuple[int, str]]]:
    """Peak RSS growth of the server while ``files`` are uploaded at once, and the answers."""
    pid = server.process.pid
    reset_peak(pid)
    before = memory(pid)["VmRSS"]
    answers = uploader.at_once(files)
    return memory(pid)["VmHWM"] - before, answers


def test_parallel_wide_uploads_stay_within_the_stated_bounds(
    jobless_live_server: LiveServer,
) -> None:
    """The server runs no job here: the thread runner, without the process pool's warm worker
    (an interpreter importing the service that no upload uses; the memory measured is the API
    process's either way)."""
    live_server = jobless_live_server
    issue_csv = wide_csv(100_000, rows=4)
    assert 1_400_000 < len(issue_csv) < 1_600_000
    parquet = wide_parquet(5_000)
    at_bound = wide_csv(MAX_EXTRA_COLUMNS, rows=3_000)
    uploader = Uploader(live_server)
    # warm up: the code paths and libraries are loaded once, as in a server that has run
    assert uploader(wide_csv(3, rows=10))[0] == 201
    assert uploader(issue_csv) == (422, "dataset-too-wide")
    assert uploader(parquet) == (422, "dataset-too-wide")
    assert uploader(at_bound)[0] == 201

    grown, answers = growth(live_server, uploader, [issue_csv] * 4 + [parquet] * 4)
    assert answers == [(422, "dataset-too-wide")] * 8
    assert grown <= REJECTED_BOUND, f"{grown / MIB:.0f} MiB > {REJECTED_BOUND / MIB:.0f} MiB"

    grown, answers = growth(live_server, uploader, [at_bound] * 4)
    assert [status for status, _ in answers] == [201] * 4
    bound = accepted_bound()
    assert grown <= bound, f"{grown / MIB:.0f} MiB > {bound / MIB:.0f} MiB"
