"""Dataset upload speed: ``POST /v1/datasets`` end to end against ``pyarrow.csv.read_csv``.

For each size (default ~50 MB and ~200 MB) an Adult-like synthetic CSV is generated once
(``benchmarks/out/upload/``: the 14 Adult attributes with random values, some outside the public
bounds and some undeclared categories, plus the label; the columns and categories of
``datasets/adult/spec.json``). Then, best of ``--repeats``:

* ``read_csv``: ``pyarrow.csv.read_csv(path)`` with default options (multi-threaded, types
  inferred): reading the file into memory and nothing else, the floor for any upload;
* ``testclient``: the upload through the in-process ASGI app (``fastapi.testclient``), from
  building the multipart body to the 201: multipart parsing, streaming to a temporary file,
  batch-wise parsing, validation and encoding, and storing every chunk in the database;
* ``uvicorn``: the same through a real server on 127.0.0.1 (``privfit``'s app under uvicorn,
  one worker), the client streaming the file with httpx.

``read_csv`` is timed again right before every upload, and each column is the best of its
runs, so a machine busy with other work slows both sides alike. Each upload is deleted after it
is timed (the deletion is not timed). The ratio upload/read_csv is printed, with the server's
peak resident memory in the uvicorn mode (``VmHWM``, Linux); the issue's target is ≤ 1.5. Run
from the repository root::

    .venv/bin/python -m benchmarks.bench_upload                 # 50 and 200 MB, SQLite
    .venv/bin/python -m benchmarks.bench_upload --sizes 20 --repeats 1
    .venv/bin/python -m benchmarks.bench_upload --database-url postgresql+psycopg://...
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
from pydantic import SecretStr

from benchmarks.adult import COLUMNS, load_spec

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "out" / "upload"
ADMIN_KEY = "bench-admin-key-0123456789abcdef"
ROWS_PER_BLOCK = 50_000


def synthetic_block(spec: dict[str, Any], rows: int, seed: int) -> pa.Table:
    """``rows`` Adult-like rows: numbers up to 10% beyond the declared bounds, 2% undeclared
    categories, about 24% positive labels."""
    rng = np.random.default_rng(seed)
    columns: dict[str, pa.Array] = {}
    for feature in spec["features"]:
        name = feature["column"]
        if feature["type"] == "numeric":
            lo, hi = float(feature["lower"]), float(feature["upper"])
            span = hi - lo
            columns[name] = pa.array(
                np.round(rng.uniform(lo - 0.1 * span, hi + 0.1 * span, rows)).astype(np.int64)
            )
        else:
            cats = np.array([*feature["categories"], "Unlisted"], dtype=object)
            weights = np.full(len(cats), 0.98 / (len(cats) - 1))
            weights[-1] = 0.02
            columns[name] = pa.array(cats[rng.choice(len(cats), size=rows, p=weights)])
    columns["income"] = pa.array(np.where(rng.random(rows) < 0.24, ">50K", "<=50K"))
    return pa.table({name: columns[name] for name in COLUMNS})


def synthetic_csv(megabytes: float, spec: dict[str, Any]) -> Path:
    """An Adult-like CSV of about ``megabytes`` MB (10^6 bytes), generated once and cached."""
    target = int(megabytes * 1e6)
    path = OUT / f"adult_like_{megabytes:g}mb.csv"
    if path.exists() and abs(path.stat().st_size - target) < 2e6:
        return path
    OUT.mkdir(parents=True, exist_ok=True)
    options = pacsv.WriteOptions(quoting_style="none", include_header=False)
    with path.open("wb") as fh:
        fh.write((",".join(COLUMNS) + "\n").encode())
        seed = 0
        while fh.tell() < target:
            block = synthetic_block(spec, ROWS_PER_BLOCK, seed)
            sink = pa.BufferOutputStream()
            pacsv.write_csv(block, sink, write_options=options)
            data = sink.getvalue().to_pybytes()
            room = target - fh.tell()
            if len(data) > room:
                data = data[: data.rfind(b"\n", 0, room) + 1]
                if not data:
                    break  # less than one row of room left: close enough to the target
            fh.write(data)
            seed += 1
    return path


def time_read_csv(path: Path) -> float:
    started = time.perf_counter()
    pacsv.read_csv(path)
    return time.perf_counter() - started


def _upload_spec() -> str:
    spec = load_spec()
    spec["missing"] = "error"
    return json.dumps(spec)


def migrated_sqlite(tmp: Path) -> str:
    from service.db.migrate import upgrade

    url = f"sqlite:///{tmp / 'bench.db'}"
    upgrade(url)
    return url


def bench_testclient(
    path: Path, database_url: str, repeats: int, baseline: list[float]
) -> tuple[float, int]:
    """Best upload time through the in-process app, and the stored row count; ``read_csv``
    is timed before each upload into ``baseline``."""
    from fastapi.testclient import TestClient

    from service.main import create_app
    from service.settings import Settings

    settings = Settings(
        database_url=database_url,
        admin_key=SecretStr(ADMIN_KEY),
        max_request_bytes=2**31,
    )
    spec = _upload_spec()
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    times: list[float] = []
    rows = 0
    with TestClient(create_app(settings)) as client:
        made = client.post("/v1/sites", json={"name": f"bench-{time.time_ns()}"}, headers=admin)
        made.raise_for_status()
        site = {"Authorization": f"Bearer {made.json()['key']['api_key']}"}
        for _ in range(repeats):
            baseline.append(time_read_csv(path))
            started = time.perf_counter()
            with path.open("rb") as fh:
                response = client.post(
                    "/v1/datasets",
                    files={"file": (path.name, fh, "text/csv")},
                    data={"spec": spec},
                    headers=site,
                )
            times.append(time.perf_counter() - started)
            if response.status_code != 201:
                raise RuntimeError(f"upload failed: {response.status_code} {response.text}")
            rows = int(response.json()["n_rows"])
            client.delete(f"/v1/datasets/{response.json()['id']}", headers=site)
    return min(times), rows


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def uvicorn_server(database_url: str, extra_env: dict[str, str] | None = None) -> Iterator[str]:
    """``uvicorn service.main:app`` on 127.0.0.1 in a child process; yields its base URL."""
    with uvicorn_process(database_url, extra_env) as (base, _):
        yield base


def peak_rss_mb(pid: int) -> float | None:
    """The peak resident memory of a process (``VmHWM``), in MB; None off Linux."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / 1e6
    return None


@contextlib.contextmanager
def uvicorn_process(
    database_url: str, extra_env: dict[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """:func:`uvicorn_server`, yielding the child process too."""
    port = _free_port()
    env = {
        **os.environ,
        "PRIVFIT_DATABASE_URL": database_url,
        "PRIVFIT_ADMIN_KEY": ADMIN_KEY,
        "PRIVFIT_MAX_REQUEST_BYTES": str(2**31),
        "PRIVFIT_LOG_LEVEL": "WARNING",
        **(extra_env or {}),
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "service.main:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.2)
        yield base, process
    finally:
        process.terminate()
        process.wait(timeout=30)


def bench_uvicorn(
    path: Path, database_url: str, repeats: int, baseline: list[float]
) -> tuple[float, float | None]:
    """Best upload time through uvicorn, the client streaming the file, and the server's peak
    resident memory (MB); ``read_csv`` is timed before each upload into ``baseline``."""
    spec = _upload_spec()
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    times: list[float] = []
    with (
        uvicorn_process(database_url) as (base, process),
        httpx.Client(base_url=base, timeout=600) as client,
    ):
        made = client.post("/v1/sites", json={"name": f"bench-{time.time_ns()}"}, headers=admin)
        made.raise_for_status()
        site = {"Authorization": f"Bearer {made.json()['key']['api_key']}"}
        for _ in range(repeats):
            baseline.append(time_read_csv(path))
            started = time.perf_counter()
            with path.open("rb") as fh:
                response = client.post(
                    "/v1/datasets",
                    files={"file": (path.name, fh, "text/csv")},
                    data={"spec": spec},
                    headers=site,
                )
            times.append(time.perf_counter() - started)
            if response.status_code != 201:
                raise RuntimeError(f"upload failed: {response.status_code} {response.text}")
            client.delete(f"/v1/datasets/{response.json()['id']}", headers=site)
        peak = peak_rss_mb(process.pid)
    return min(times), peak


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50,200", help="CSV sizes in MB, comma separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--modes", default="testclient,uvicorn", help="testclient and/or uvicorn, comma separated"
    )
    parser.add_argument(
        "--database-url", default=None, help="a migrated database (default: a fresh SQLite file)"
    )
    args = parser.parse_args(argv)
    modes = {m.strip() for m in args.modes.split(",") if m.strip()}
    spec = load_spec()
    print(f"# Upload benchmark ({os.cpu_count()} cores, best of {args.repeats})")
    print()
    print(
        "| CSV | rows | read_csv (s) | mode | upload (s) | MB/s | upload / read_csv "
        "| server peak RSS |"
    )
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        database_url = args.database_url or migrated_sqlite(Path(tmp))
        for size in (float(s) for s in args.sizes.split(",")):
            path = synthetic_csv(size, spec)
            megabytes = path.stat().st_size / 1e6
            rows = pacsv.read_csv(path).num_rows
            results: list[tuple[str, float, list[float], float | None]] = []
            if "testclient" in modes:
                runs: list[float] = []
                seconds, stored = bench_testclient(path, database_url, args.repeats, runs)
                assert stored == rows, (stored, rows)
                results.append(("testclient", seconds, runs, None))
            if "uvicorn" in modes:
                runs = []
                seconds, peak = bench_uvicorn(path, database_url, args.repeats, runs)
                results.append(("uvicorn", seconds, runs, peak))
            for mode, seconds, runs, peak in results:
                baseline = min(runs)
                memory = "–" if peak is None else f"{peak:.0f} MB"
                print(
                    f"| {megabytes:.0f} MB | {rows:,} | {baseline:.2f} | {mode} | {seconds:.2f} "
                    f"| {megabytes / seconds:.0f} | {seconds / baseline:.2f}× | {memory} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
