"""The distributed job queue (``PRIVFIT_JOB_RUNNER=queue``) on Adult, in real processes.

A fresh PostgreSQL database, ``privfit migrate``, one ``privfit serve`` and ``privfit worker``
processes (started as an operator would, with the default heartbeats); Adult's training split
is uploaded once and fitted with ``objective_perturbation`` (ε = 0.01, λ = 1e-3) through HTTP.

* **throughput** with 1 worker process and with 2 (``privfit worker --concurrency 2``): ``--jobs``
  fits queued while no worker runs, then drained by a freshly started worker; jobs/min from the
  first claim to the last finish, and the workers' CPU seconds per fit (from ``/proc``: what a
  fit costs a core whatever else the machine runs); the ratio 2 workers / 1 worker (the
  issue's target: ≥ 1.6 on 2 cores);
* **enqueue-to-start latency** with an idle worker: one fit at a time, ``started_at −
  created_at`` as the database recorded them (p50, p90; target p50 ≤ 30 ms);
* **API latency under load**: with 100 fits queued and both workers busy, ``GET /healthz`` and
  ``GET /v1/jobs/{id}`` one after the other (p50, p99; target p99 < 50 ms).

Run from the repository root (PostgreSQL at ``PRIVFIT_TEST_POSTGRES_URL``, default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``)::

    .venv/bin/python -m benchmarks.bench_queue              # ~5 minutes on 2 cores
    .venv/bin/python -m benchmarks.bench_queue --jobs 10 --latency-samples 10 --probes 100
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from benchmarks._common import load_average
from benchmarks.adult import csv_bytes, load_spec
from tests.support.queue_cluster import Cluster, Process, fresh_database, wait_until

ADMIN_KEY = "bench-admin-key-0123456789abcdef"
FIT = {
    "mechanism": "objective_perturbation",
    "epsilon": 0.01,
    "delta": 0.0,
    "loss": "logistic",
    "regularization": 1e-3,
}
DEFAULT_POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def _tree(pid: int) -> list[int]:
    """``pid`` and its live descendants (Linux ``/proc``)."""
    found = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            found.extend(_tree(int(child)))
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process tree (the worker supervisor and its processes):
    what the jobs cost whatever else the machine runs."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for member in _tree(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


class Api:
    def __init__(self, process: Process) -> None:
        assert process.base_url is not None
        self.http = httpx.Client(base_url=process.base_url, timeout=120)
        response = self.http.post(
            "/v1/sites", json={"name": "Adult"}, headers={"Authorization": f"Bearer {ADMIN_KEY}"}
        )
        response.raise_for_status()
        self.headers = {"Authorization": f"Bearer {response.json()['key']['api_key']}"}
        spec = {**load_spec(), "budget": {"epsilon": 10.0, "delta": 1e-6}}
        response = self.http.post(
            "/v1/datasets",
            files={
                "file": ("adult.csv", csv_bytes("train"), "text/csv"),
                "spec": (None, json.dumps(spec)),
            },
            headers=self.headers,
        )
        response.raise_for_status()
        self.dataset = response.json()["id"]

    def submit(self) -> str:
        response = self.http.post(
            f"/v1/datasets/{self.dataset}/fits", json=FIT, headers=self.headers
        )
        response.raise_for_status()
        job_id: str = response.json()["id"]
        return job_id

    def finished(self, job_id: str) -> dict[str, Any]:
        while True:
            response = self.http.get(f"/v1/jobs/{job_id}?wait=30", headers=self.headers)
            response.raise_for_status()
            job: dict[str, Any] = response.json()
            if job["status"] not in {"queued", "running"}:
                if job["status"] != "succeeded":
                    raise RuntimeError(f"job {job_id} ended {job['status']}: {job['error']}")
                return job


def drain(
    api: Api, cluster: Cluster, jobs: int, name: str, concurrency: int
) -> tuple[float, float, Process]:
    """Queue ``jobs`` fits with no worker running, then start ``privfit worker --concurrency
    N`` and let it drain the queue. Returns jobs/min from the first claim to the last finish
    (the database's timestamps: worker start-up excluded), the workers' CPU seconds per fit
    (counted from their registration, so their imports are excluded) and the worker."""
    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(lambda _: api.submit(), range(jobs)))
    worker = cluster.start_worker(name, concurrency=concurrency)
    workers_registered(cluster, concurrency)
    cpu = cpu_seconds(worker.pid)
    with ThreadPoolExecutor(8) as pool:
        ends = list(pool.map(api.finished, ids))
    used = cpu_seconds(worker.pid) - cpu
    first = min(datetime.fromisoformat(job["started_at"]) for job in ends)
    last = max(datetime.fromisoformat(job["finished_at"]) for job in ends)
    return jobs / (last - first).total_seconds() * 60.0, used / jobs, worker


def enqueue_to_start(api: Api, samples: int) -> list[float]:
    """Seconds from the job's creation to its claim by an idle worker, one job at a time."""
    delays = []
    for _ in range(samples):
        job = api.finished(api.submit())
        created = datetime.fromisoformat(job["created_at"])
        started = datetime.fromisoformat(job["started_at"])
        delays.append((started - created).total_seconds())
    return delays


def probe_latencies(api: Api, probes: int, queued: int) -> dict[str, list[float]]:
    """With ``queued`` fits waiting and the workers busy: GET /healthz and GET /v1/jobs/{id}."""
    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(lambda _: api.submit(), range(queued)))
    seconds: dict[str, list[float]] = {"GET /healthz": [], "GET /v1/jobs/{id}": []}
    for i in range(probes):
        for name, path, headers in (
            ("GET /healthz", "/healthz", {}),
            ("GET /v1/jobs/{id}", f"/v1/jobs/{ids[i % len(ids)]}", api.headers),
        ):
            start = time.perf_counter()
            api.http.get(path, headers=headers).raise_for_status()
            seconds[name].append(time.perf_counter() - start)
    remaining = [
        job_id
        for job_id in ids
        if api.http.get(f"/v1/jobs/{job_id}", headers=api.headers).json()["status"] == "queued"
    ]
    print(f"  still queued after the probes: {len(remaining)} of {queued}")
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(api.finished, ids))
    return seconds


def workers_registered(cluster: Cluster, count: int) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(cluster.database_url)
    try:

        def ready() -> bool:
            with engine.connect() as connection:
                seen = connection.execute(
                    text("SELECT count(*) FROM procrastinate_workers")
                ).scalar_one()
            return int(seen) == count  # a stopped worker unregisters itself

        wait_until(ready, timeout=240, what=f"{count} worker(s) to register")
    finally:
        engine.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=40, help="fits per throughput run")
    parser.add_argument("--latency-samples", type=int, default=30)
    parser.add_argument("--probes", type=int, default=300, help="GETs of each kind under load")
    parser.add_argument("--queued", type=int, default=100)
    args = parser.parse_args(argv)

    base = os.environ.get("PRIVFIT_TEST_POSTGRES_URL", DEFAULT_POSTGRES)
    print(f"cores: {os.cpu_count()}, load average before: {load_average()}")
    with fresh_database(base) as url:
        cluster = Cluster(
            url,
            ADMIN_KEY,
            extra={
                "PRIVFIT_ENVIRONMENT": "dev",
                "PRIVFIT_QUEUE_HEARTBEAT_SECONDS": "5",
                "PRIVFIT_QUEUE_STALLED_SECONDS": "30",
                "PRIVFIT_JOB_PROGRESS_INTERVAL": "0.2",
                "PRIVFIT_MAX_REQUEST_BYTES": str(64 * 1024 * 1024),
                "PRIVFIT_LOG_LEVEL": "WARNING",
                # one site measures the throughput of every worker (no slot kept for others)
                "PRIVFIT_MAX_SITE_WORKER_SHARE": "1",
            },
        )
        try:
            api = Api(cluster.start_api("api"))
            one = cluster.start_worker("worker-latency", concurrency=1)
            workers_registered(cluster, 1)
            api.finished(api.submit())  # warm: the worker's first fit loads the dataset
            delays = enqueue_to_start(api, args.latency_samples)
            one.stop()
            workers_registered(cluster, 0)
            rate_1, cpu_1, one = drain(api, cluster, args.jobs, "worker-1", 1)
            one.stop()
            workers_registered(cluster, 0)
            rate_2, cpu_2, two = drain(api, cluster, args.jobs, "worker-2x", 2)
            probes = probe_latencies(api, args.probes, args.queued)
            two.stop()
        finally:
            cluster.close()

    ms = [d * 1000 for d in delays]
    print()
    print("| measure | value |")
    print("|---|---|")
    print(f"| throughput, 1 worker process | {rate_1:.1f} jobs/min |")
    print(f"| throughput, 2 worker processes | {rate_2:.1f} jobs/min |")
    print(f"| ratio 2 / 1 | {rate_2 / rate_1:.2f} |")
    print(f"| worker CPU per fit, 1 / 2 worker processes | {cpu_1:.3f} s / {cpu_2:.3f} s |")
    print(f"| fits per worker core-hour (3600 / CPU per fit) | {3600 / cpu_1:.0f} |")
    print(
        f"| enqueue-to-start, idle worker ({len(ms)} fits) | p50 {statistics.median(ms):.1f} ms, "
        f"p90 {quantile(ms, 0.9):.1f} ms |"
    )
    for name, values in probes.items():
        v = [x * 1000 for x in values]
        print(
            f"| {name}, {args.queued} queued, 2 workers busy ({len(v)}) | "
            f"p50 {statistics.median(v):.1f} ms, p99 {quantile(v, 0.99):.1f} ms |"
        )
    print(f"\nload average after: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
