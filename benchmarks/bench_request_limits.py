"""What a large or unauthenticated request costs a real server (issue 26 §2, §3).

Starts ``privfit serve`` (default settings, one process, SQLite) from ``--source`` (default:
this checkout; point it at an older checkout for the "before" figures), then:

* sends 50 MB JSON bodies to ``POST /v1/datasets/{id}/fits`` over a raw socket, with a
  declared ``Content-Length`` and chunked, without a key, with a wrong key and with a valid
  key: the time from the end of the request head to the first byte of the answer (client),
  the server's own time for the request (its access log's ``duration_ms``), the status, and
  ``/healthz`` latency (p50, p99, max) polled on a keep-alive connection meanwhile;
* sends 80 guessed keys (a new prefix each) from the loopback, each with a new
  ``X-Forwarded-For``, and counts the 429s; then 40 wrong keys from the loopback (a broken
  script), and whether a valid key from the same address still gets in. (The body cases
  before count 3 failures from the loopback.)

Run from the repository root::

    .venv/bin/python -m benchmarks.bench_request_limits
    .venv/bin/python -m benchmarks.bench_request_limits --source /path/to/old/checkout
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2

from tests.support.large_bodies import HealthProbe, access_log_durations, post_large_body
from tests.support.live_server import free_port

ROOT = Path(__file__).resolve().parent.parent
ADMIN_KEY = "bench-admin-key-0123456789abcdef"
FITS_ROUTE = "/v1/datasets/{dataset_id}/fits"
FITS = f"/v1/datasets/{'0' * 32}/fits"
WRONG = "Bearer pf_nosuchpr_" + "x" * 43


@contextmanager
def server(source: Path, workdir: Path) -> Iterator[tuple[str, list[str]]]:
    """``privfit serve`` from ``source``; yields its URL and its stderr lines (live)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVFIT_")}
    env.update(
        PRIVFIT_DATABASE_URL=f"sqlite:///{workdir / 'privfit.db'}",
        PRIVFIT_ADMIN_KEY=ADMIN_KEY,
        PRIVFIT_HOST="127.0.0.1",
        PRIVFIT_PORT=str(port),
        PYTHONPATH=str(source),
    )
    command = [sys.executable, "-m", "service.cli"]
    subprocess.run([*command, "migrate"], cwd=source, env=env, check=True, capture_output=True)
    process = subprocess.Popen(
        [*command, "serve"], cwd=workdir, env=env, stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    stderr = process.stderr
    assert stderr is not None
    reader = threading.Thread(target=lambda: lines.extend(iter(stderr.readline, "")))
    reader.start()
    base = f"http://127.0.0.1:{port}"
    try:
        # polled until ready (a 503 while it migrates counts as not yet), for at most 120 s
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx2.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("server did not start")
            time.sleep(0.1)
        yield base, lines
    finally:
        process.terminate()
        process.wait(timeout=30)
        reader.join(timeout=10)


def wait_for_log_lines(
    lines: list[str], count: int, timeout: float = 30.0
) -> list[tuple[int, float]]:
    """The access log's entries of the fit route once there are ``count`` (or what is there
    after ``timeout`` seconds: a missing line shows as a shorter table row, not a hang)."""
    deadline = time.monotonic() + timeout
    while len(found := access_log_durations(lines, FITS_ROUTE)) < count:
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
    return found


def bodies(base: str, lines: list[str], repeats: int, size: int) -> None:
    print(
        "| case | status | answer after (client, s) | server time (ms) "
        "| /healthz p50 / p99 / max (ms) |"
    )
    print("|---|---|---|---|---|")
    cases = [
        ("no key", {}),
        ("wrong key", {"Authorization": WRONG}),
        ("valid key", {"Authorization": f"Bearer {ADMIN_KEY}"}),
    ]
    for chunked in (False, True):
        for name, headers in cases:
            before = len(access_log_durations(lines, FITS_ROUTE))
            with HealthProbe(base) as health:
                answers = [
                    post_large_body(
                        base, FITS, size=size, chunked=chunked, headers=headers, timeout=900
                    )
                    for _ in range(repeats)
                ]
            # the access log line follows the answer: wait for the lines, not a fixed time
            logged = wait_for_log_lines(lines, before + len(answers))[before:]
            latencies = sorted(health.latencies) or [0.0]
            statuses = sorted({answer.status for answer in answers})
            print(
                f"| {size // 1_000_000} MB, {'chunked' if chunked else 'Content-Length'}, "
                f"{name} | {', '.join(map(str, statuses))} "
                f"| {statistics.median(a.seconds for a in answers):.3f} "
                f"(max {max(a.seconds for a in answers):.3f}) "
                f"| {statistics.median(ms for _, ms in logged) if logged else float('nan'):.1f} "
                f"| {1000 * statistics.median(latencies):.1f} / "
                f"{1000 * health.quantile(0.99):.1f} / {1000 * latencies[-1]:.1f} |",
                flush=True,
            )


def guess(i: int) -> str:
    """The ``i``-th of a guesser's keys, each with its own prefix (no prefix limit applies)."""
    return f"Bearer pf_{i:08d}_{'x' * 43}"


def failed_keys(base: str) -> None:
    """§3: guessed keys with a new X-Forwarded-For each, then a broken script's wrong keys
    from one address and its neighbour's valid key from that address."""
    valid = {"Authorization": f"Bearer {ADMIN_KEY}"}
    with httpx2.Client(base_url=base, timeout=60) as client:
        statuses = [
            client.get(
                "/v1/datasets",
                headers={"Authorization": guess(1000 + i), "X-Forwarded-For": f"203.0.113.{i}"},
            ).status_code
            for i in range(80)
        ]
        print(
            f"\n80 guessed keys (new prefix each), rotating X-Forwarded-For: "
            f"{statuses.count(401)} x 401, {statuses.count(429)} x 429"
        )
        script = [
            client.get("/v1/datasets", headers={"Authorization": guess(i)}).status_code
            for i in range(40)
        ]
        neighbour = [client.get("/v1/sites", headers=valid).status_code for _ in range(5)]
        print(
            f"40 wrong keys from one address: {script.count(401)} x 401, {script.count(429)} x "
            f"429; then 5 requests with a valid key from that address: {neighbour}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=ROOT, help="checkout to serve")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--size-mb", type=int, default=50)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as workdir,
        server(args.source, Path(workdir)) as (
            base,
            lines,
        ),
    ):
        print(f"source: {args.source}; load average: {os.getloadavg()[0]:.1f}\n")
        bodies(base, lines, args.repeats, args.size_mb * 1_000_000)
        failed_keys(base)


if __name__ == "__main__":
    main()
