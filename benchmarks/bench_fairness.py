"""Site B's wait behind site A's long jobs (issue 26 §4): fair use of the job workers.

A PrivFit app (``fastapi.testclient``, its lifespan and job runner included) on a temporary
SQLite file, ``--workers`` job slots of the ``--runner`` kind. Site A uploads a toy dataset of
``--rows`` rows and queues ``--long-jobs`` DP-SGD fits of ``--epochs`` one-row passes; once
A's first job has started, site B sends one ``output_perturbation`` fit of a five-row dataset
with ``Prefer: wait`` (then long polls, if the wait is capped) and the script times it until
B's job has succeeded: B's wait. Then A's jobs are
cancelled. Repeated ``--repeats`` times; the median is printed.

The same script measures the code before the change (run it from a checkout of the earlier
commit: the settings it does not know are ignored, and its scheduler is first in, first out)
and after (``--share``: ``PRIVFIT_MAX_SITE_WORKER_SHARE``)::

    .venv/bin/python -m benchmarks.bench_fairness --workers 2 --runner process
    .venv/bin/python -m benchmarks.bench_fairness --workers 1 --runner process
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from pydantic import SecretStr

from benchmarks._common import environment, load_average, median
from service.db.migrate import upgrade
from service.main import create_app
from service.settings import Settings

ADMIN_KEY = "bench-admin-key-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
HEADER = "patient,age,color,income,outcome"
SHORT_ROWS = ["p1,30,red,200,yes", "p2,10,purple,500,no", "p3,95,blue,1500,no",
              "p4,54,green,0,yes", "p5,18,red,1000,no"]  # fmt: skip
SPEC = {
    "name": "toy",
    "label": {"column": "outcome", "positive": "yes", "negative": "no"},
    "features": [
        {"column": "age", "type": "numeric", "lower": 18, "upper": 90},
        {"column": "color", "type": "categorical", "categories": ["red", "green", "blue"]},
        {"column": "income", "type": "numeric", "lower": 0, "upper": 1000},
    ],
    "budget": {"epsilon": 10.0, "delta": 0},
    "missing": "error",
}
SHORT_FIT = {"mechanism": "output_perturbation", "epsilon": 0.1, "regularization": 0.1}


def long_rows(n: int) -> list[str]:
    colors = ("red", "green", "blue")
    return [
        f"p{i},{18 + i % 70},{colors[i % 3]},{(i * 37) % 1000},{'yes' if i % 2 else 'no'}"
        for i in range(n)
    ]


def new_site(client: TestClient, name: str, rows: list[str]) -> tuple[dict[str, str], str]:
    response = client.post("/v1/sites", json={"name": name}, headers=ADMIN)
    assert response.status_code == 201, response.text
    headers = {"Authorization": f"Bearer {response.json()['key']['api_key']}"}
    data = ("\n".join([HEADER, *rows]) + "\n").encode()
    response = client.post(
        "/v1/datasets",
        files={"file": ("toy.csv", data, "text/csv"), "spec": (None, json.dumps(SPEC))},
        headers=headers,
    )
    assert response.status_code == 201, response.text
    return headers, str(response.json()["id"])


def one_run(client: TestClient, args: argparse.Namespace, run: int) -> float:
    a_headers, a_data = new_site(client, f"A{run}", long_rows(args.rows))
    b_headers, b_data = new_site(client, f"B{run}", SHORT_ROWS)
    long_fit = {
        "mechanism": "dp_sgd",
        "epsilon": 1.0,
        "regularization": 0.01,
        "params": {"epochs": args.epochs, "batch_size": 1},
    }
    jobs = []
    for _ in range(args.long_jobs):
        response = client.post(f"/v1/datasets/{a_data}/fits", json=long_fit, headers=a_headers)
        assert response.status_code == 202, response.text
        jobs.append(response.json()["id"])
    try:
        while client.get(f"/v1/jobs/{jobs[0]}", headers=a_headers).json()["status"] == "queued":
            time.sleep(0.05)  # across processes: no event to wait on
        started = time.perf_counter()
        response = client.post(
            f"/v1/datasets/{b_data}/fits",
            json=SHORT_FIT,
            headers={**b_headers, "Prefer": "wait=600"},
        )
        job = response.json()
        while job["status"] in ("queued", "running"):  # Prefer: wait is capped: long polls
            job = client.get(f"/v1/jobs/{job['id']}?wait=30", headers=b_headers).json()
        waited = time.perf_counter() - started
        assert job["status"] == "succeeded", job
    finally:
        for job in jobs:
            client.post(f"/v1/jobs/{job}/cancel", headers=a_headers)
        for job in jobs:
            client.get(f"/v1/jobs/{job}?wait=30", headers=a_headers)
    return waited


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--runner", choices=["process", "thread"], default="process")
    parser.add_argument("--share", type=float, default=0.5)
    parser.add_argument("--long-jobs", type=int, default=3)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        settings = Settings.model_validate(
            {
                "database_url": f"sqlite:///{Path(folder) / 'bench.db'}",
                "admin_key": SecretStr(ADMIN_KEY),
                "job_runner": args.runner,
                "job_workers": args.workers,
                "max_site_worker_share": args.share,
                "rate_limit_failed_auth": None,
                "rate_limit_expensive": None,
            }
        )
        upgrade(settings.database_url)
        load_before = load_average()
        with TestClient(create_app(settings)) as client:
            waits = [one_run(client, args, run) for run in range(args.repeats)]
    report = {
        "workers": args.workers,
        "runner": args.runner,
        "share": args.share,
        "long_jobs": args.long_jobs,
        "epochs": args.epochs,
        "rows": args.rows,
        "waits_s": [round(w, 3) for w in waits],
        "median_wait_s": round(median(waits), 3),
        "load_before": load_before,
        "load_after": load_average(),
        "environment": environment(1),
    }
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
