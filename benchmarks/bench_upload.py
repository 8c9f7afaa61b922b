"""Dataset upload speed: ``POST /v1/datasets`` end to end against ``pyarrow.csv.read_csv``.

For each size (default ~50 MB and ~200 MB) an Adult-like synthetic CSV is generated once
(``benchmarks/out/upload/``: the 14 Adult attributes with random values, some outside the public
bounds and some undeclared categories, plus the label; the columns and categories of
``datasets/adult/spec.json``). Then, ``--repeats`` times:

* ``read_csv``: ``pyarrow.csv.read_csv(path)`` with default options (multi-threaded, types
  inferred): reading the file into memory and nothing else, the floor for any upload;
* ``testclient``: the upload through the in-process ASGI app (``fastapi.testclient``), from
  building the multipart body to the 201: multipart parsing, parsing while receiving,
  validation and encoding, and storing every chunk in the database;
* ``uvicorn``: the same through a real server on 127.0.0.1 (``privfit``'s app under uvicorn,
  one worker), the client streaming the file with httpx (whose own CPU time competes with the
  server for the cores);
* ``curl``: the same server, the client ``curl -F spec=<… -F file=@…`` (what operators use; it
  streams the file from disk at a fraction of httpx's CPU cost);
* ``ingest``: no HTTP and no database: ``service.domain.datasets.ingest.ingest`` reading the file
from
  disk (parsing, validation, clamping, category codes, compressing the chunks, which are then
  dropped). The service's own work on the data, the floor for any upload through it.

``read_csv`` is timed right before every upload and each upload is divided by the
``read_csv`` time just before it, so a machine busy with other work slows both sides of a
ratio alike; the table gives the median of these ratios (and their range), the best upload
time, and the CPU seconds per upload: of the server process (uvicorn and curl modes, all its
threads, from ``/proc``), of the client, and of ``read_csv`` itself. Each upload is deleted
after it is timed (the deletion is not timed). The server's HTTP parser is uvicorn's choice
(``--http auto``: httptools when installed, else h11) unless ``--http`` names one. Peak
resident memory is the server's ``VmHWM`` (Linux). The issue's target is ≤ 1.5. Run from the
repository root::

    .venv/bin/python -m benchmarks.bench_upload                 # 50 and 200 MB, SQLite
    .venv/bin/python -m benchmarks.bench_upload --sizes 20 --repeats 1
    .venv/bin/python -m benchmarks.bench_upload --modes uvicorn,curl --http h11
    .venv/bin/python -m benchmarks.bench_upload --modes ingest,curl
    .venv/bin/python -m benchmarks.bench_upload --database-url postgresql+psycopg://...
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
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
MODES = ("ingest", "testclient", "uvicorn", "curl")


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


def _own_cpu() -> float:
    """CPU seconds (user + system) of this process, all threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _children_cpu() -> float:
    """CPU seconds of this process's finished children (curl)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system, all threads) of a running process; None off Linux."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # after the command: state is field 3, utime and stime are fields 14 and 15
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(slots=True)
class Runs:
    """The measurements of one mode on one file, one entry per upload."""

    read_csv: list[float] = field(default_factory=list)
    read_csv_cpu: list[float] = field(default_factory=list)
    upload: list[float] = field(default_factory=list)
    server_cpu: list[float] = field(default_factory=list)
    client_cpu: list[float] = field(default_factory=list)
    rows: int = 0
    peak_mb: float | None = None
    http: str = "–"

    def baseline(self, path: Path) -> None:
        """Time ``read_csv`` once (wall and CPU seconds) right before an upload."""
        cpu, started = _own_cpu(), time.perf_counter()
        pacsv.read_csv(path)
        self.read_csv.append(time.perf_counter() - started)
        self.read_csv_cpu.append(_own_cpu() - cpu)

    def ratios(self) -> list[float]:
        return [u / r for u, r in zip(self.upload, self.read_csv, strict=True)]


def _upload_spec() -> str:
    spec = load_spec()
    spec["missing"] = "error"
    return json.dumps(spec)


def migrated_sqlite(tmp: Path) -> str:
    from service.db.migrate import upgrade

    url = f"sqlite:///{tmp / 'bench.db'}"
    upgrade(url)
    return url


def _check(status: int, body: str) -> dict[str, Any]:
    if status != 201:
        raise RuntimeError(f"upload failed: {status} {body[:500]}")
    return dict(json.loads(body))


def bench_ingest(path: Path, repeats: int) -> Runs:
    """The file read, validated and encoded in this process (chunks dropped): no HTTP, no
    database. The CPU seconds are this process's."""
    from service.api.schemas.datasets import DatasetCreate
    from service.domain.datasets.ingest import ingest
    from service.domain.datasets.spec import BudgetLimits

    spec = DatasetCreate.model_validate_json(_upload_spec()).to_domain(
        BudgetLimits(max_epsilon=1e6, max_delta=0.5), max_classes=100
    )
    runs = Runs(http="none")
    for _ in range(repeats):
        runs.baseline(path)
        cpu, started = _own_cpu(), time.perf_counter()
        with path.open("rb") as source:
            report = ingest(source, spec, on_chunk=lambda _chunk: None)
        runs.upload.append(time.perf_counter() - started)
        runs.server_cpu.append(_own_cpu() - cpu)
        runs.rows = report.n_rows
    return runs


def bench_testclient(path: Path, database_url: str, repeats: int) -> Runs:
    """Uploads through the in-process app. Client and server share this process: the CPU
    seconds are the two together."""
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
    runs = Runs()
    with TestClient(create_app(settings)) as client:
        made = client.post("/v1/sites", json={"name": f"bench-{time.time_ns()}"}, headers=admin)
        made.raise_for_status()
        site = {"Authorization": f"Bearer {made.json()['key']['api_key']}"}
        for _ in range(repeats):
            runs.baseline(path)
            cpu, started = _own_cpu(), time.perf_counter()
            response = _post_file(client, path, spec, site)
            runs.upload.append(time.perf_counter() - started)
            runs.server_cpu.append(_own_cpu() - cpu)
            body = _check(response.status_code, response.text)
            runs.rows = int(body["n_rows"])
            client.delete(f"/v1/datasets/{body['id']}", headers=site)
    return runs


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def uvicorn_server(
    database_url: str,
    extra_env: dict[str, str] | None = None,
    *,
    http: str = "auto",
    loop: str = "auto",
) -> Iterator[str]:
    """``uvicorn service.main:app`` on 127.0.0.1 in a child process; yields its base URL."""
    with uvicorn_process(database_url, extra_env, http=http, loop=loop) as (base, _):
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


def _installed(choice: str, fast: str, fallback: str) -> str:
    """What uvicorn runs for ``--http``/``--loop`` ``choice``: ``auto`` is ``fast`` (httptools,
    uvloop) when that package is installed, else ``fallback``."""
    if choice != "auto":
        return choice
    try:
        __import__(fast)
    except ImportError:
        return fallback
    return fast


@contextlib.contextmanager
def uvicorn_process(
    database_url: str,
    extra_env: dict[str, str] | None = None,
    *,
    http: str = "auto",
    loop: str = "auto",
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
            "--http",
            http,
            "--loop",
            loop,
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


def _post_file(client: Any, path: Path, spec: str, headers: dict[str, str]) -> Any:
    """``POST /v1/datasets`` with the file streamed from disk (httpx or the test client)."""
    with path.open("rb") as fh:
        return client.post(
            "/v1/datasets",
            files={"file": (path.name, fh, "text/csv")},
            data={"spec": spec},
            headers=headers,
        )


def _server_cpu(pid: int) -> float:
    cpu = process_cpu(pid)
    return float("nan") if cpu is None else cpu


def bench_uvicorn(
    path: Path,
    database_url: str,
    repeats: int,
    *,
    client: str = "httpx",
    http: str = "auto",
    loop: str = "auto",
) -> Runs:
    """Uploads through uvicorn, the file streamed by ``client`` (``httpx`` in this process,
    or ``curl``), with the server's CPU seconds per upload and its peak resident memory."""
    spec = _upload_spec()
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    runs = Runs(
        http=f"{_installed(http, 'httptools', 'h11')}, {_installed(loop, 'uvloop', 'asyncio')}"
    )
    with (
        uvicorn_process(database_url, http=http, loop=loop) as (base, process),
        httpx.Client(base_url=base, timeout=600) as session,
        tempfile.TemporaryDirectory() as tmp,
    ):
        made = session.post("/v1/sites", json={"name": f"bench-{time.time_ns()}"}, headers=admin)
        made.raise_for_status()
        key = made.json()["key"]["api_key"]
        site = {"Authorization": f"Bearer {key}"}
        spec_file = Path(tmp) / "spec.json"
        spec_file.write_text(spec)
        answer = Path(tmp) / "answer.json"
        for _ in range(repeats):
            runs.baseline(path)
            server = _server_cpu(process.pid)
            if client == "curl":
                own = _children_cpu()
                started = time.perf_counter()
                done = subprocess.run(
                    [
                        "curl",
                        "--silent",
                        "--show-error",
                        "--output",
                        str(answer),
                        "--write-out",
                        "%{http_code}",
                        "--header",
                        f"Authorization: Bearer {key}",
                        "--form",
                        f"spec=<{spec_file}",
                        "--form",
                        f"file=@{path};type=text/csv",
                        f"{base}/v1/datasets",
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                )
                runs.upload.append(time.perf_counter() - started)
                runs.client_cpu.append(_children_cpu() - own)
                status, text = int(done.stdout), answer.read_text()
            else:
                own = _own_cpu()
                started = time.perf_counter()
                response = _post_file(session, path, spec, site)
                runs.upload.append(time.perf_counter() - started)
                runs.client_cpu.append(_own_cpu() - own)
                status, text = response.status_code, response.text
            runs.server_cpu.append(_server_cpu(process.pid) - server)
            body = _check(status, text)
            runs.rows = int(body["n_rows"])
            session.delete(f"/v1/datasets/{body['id']}", headers=site)
        runs.peak_mb = peak_rss_mb(process.pid)
    return runs


def _median(values: list[float]) -> str:
    return "–" if not values else f"{statistics.median(values):.2f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="50,200", help="CSV sizes in MB, comma separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--modes",
        default="testclient,uvicorn",
        help=f"some of {', '.join(MODES)}, comma separated",
    )
    parser.add_argument(
        "--http",
        default="auto",
        choices=("auto", "h11", "httptools"),
        help="uvicorn's HTTP parser (default: auto, httptools when installed)",
    )
    parser.add_argument(
        "--loop",
        default="auto",
        choices=("auto", "asyncio", "uvloop"),
        help="uvicorn's event loop (default: auto, uvloop when installed)",
    )
    parser.add_argument(
        "--database-url", default=None, help="a migrated database (default: a fresh SQLite file)"
    )
    args = parser.parse_args(argv)
    modes = [m for m in MODES if m in {s.strip() for s in args.modes.split(",")}]
    if "curl" in modes and shutil.which("curl") is None:
        parser.error("the curl mode needs curl on the PATH")
    spec = load_spec()
    print(f"# Upload benchmark ({os.cpu_count()} cores, {args.repeats} runs, medians)")
    print()
    print(
        "| CSV | rows | mode | HTTP parser, loop | read_csv (s) | upload (s) | upload / read_csv "
        "| server CPU-s | client CPU-s | read_csv CPU-s | server peak RSS |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        database_url = args.database_url or migrated_sqlite(Path(tmp))
        for size in (float(s) for s in args.sizes.split(",")):
            path = synthetic_csv(size, spec)
            megabytes = path.stat().st_size / 1e6
            rows = pacsv.read_csv(path).num_rows
            for mode in modes:
                if mode == "ingest":
                    runs = bench_ingest(path, args.repeats)
                elif mode == "testclient":
                    runs = bench_testclient(path, database_url, args.repeats)
                else:
                    client = "curl" if mode == "curl" else "httpx"
                    runs = bench_uvicorn(
                        path,
                        database_url,
                        args.repeats,
                        client=client,
                        http=args.http,
                        loop=args.loop,
                    )
                assert runs.rows == rows, (runs.rows, rows)
                ratios = runs.ratios()
                memory = "–" if runs.peak_mb is None else f"{runs.peak_mb:.0f} MB"
                cpu = {"testclient": "in client", "ingest": "–"}.get(mode, _median(runs.client_cpu))
                label = {
                    "testclient": "testclient (client + server)",
                    "ingest": "ingest alone (no HTTP, no database)",
                }.get(mode, mode)
                print(
                    f"| {megabytes:.0f} MB | {rows:,} | {label} | {runs.http} "
                    f"| {_median(runs.read_csv)} | {_median(runs.upload)} "
                    f"| {statistics.median(ratios):.2f}× ({min(ratios):.2f}–{max(ratios):.2f}) "
                    f"| {_median(runs.server_cpu)} | {cpu} | {_median(runs.read_csv_cpu)} "
                    f"| {memory} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
