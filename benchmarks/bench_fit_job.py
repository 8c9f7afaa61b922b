"""Fit-job wall time over HTTP against ``service.dp.fit`` on the same data.

Adult (the published training split, uploaded as a site would: ``benchmarks.adult.csv_bytes``
with ``datasets/adult/spec.json``) is uploaded once to a PrivFit server: by default ``uvicorn``
on 127.0.0.1 in a child process, as PrivFit is deployed (``--transport testclient``: the app in
this process through ``fastapi.testclient``, lifespan and job runner included). Then, for
each mechanism, ``--repeats`` times, the four contenders in a rotating order:

* ``library``: ``service.dp.fit(X, y, mechanism, ...)`` on the design matrix the service
  itself fits on (read back from the database with ``service.domain.datasets.catalog.load_design``),
  noise from the OS CSPRNG as in the service: the issue's reference;
* ``prepared``: ``service.dp.fit(design, None, ...)`` on ``service.dp.prepare_design(X, y)``,
  which is how the service's worker fits a stored dataset (checked once, the solver's float32
  copy kept between fits). HTTP minus this is the cost of the HTTP path itself;
* ``Prefer: wait``: ``POST /v1/datasets/{id}/fits`` with ``Prefer: wait=30``, answered (201)
  once the job has succeeded: validation and charging the ledger, queueing, the worker
  claiming the job, reading the dataset, the fit, storing the model and its privacy record,
  and the answer, in one request;
* ``POST + GET``: the same POST without the preference (202), then ``GET /v1/jobs/{id}?wait=30``
  (a long poll that answers when the job ends; ``--no-long-poll``: a plain GET every
  ``--poll-ms``) until the job has succeeded.

The client is httpx (over TCP to uvicorn). Medians are printed, and the ratios to the library
(the issue's target is ≤ 1.25) and ``Prefer: wait`` / prepared as the median over the rounds
of each round's ratio. Native threads are pinned to 1 (``--threads``) for the same reasons as
in ``bench_adult_fit``; with ``--runner process`` the worker process inherits that through the
environment. Run from the repository root::

    .venv/bin/python -m benchmarks.bench_fit_job                  # uvicorn, process runner
    .venv/bin/python -m benchmarks.bench_fit_job --transport testclient
    .venv/bin/python -m benchmarks.bench_fit_job --runner thread --repeats 5
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr

from benchmarks._common import environment, limit_threads, load_average, markdown_table, median
from benchmarks.adult import csv_bytes, load_spec

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "out"
ADMIN_KEY = "bench-admin-key-0123456789abcdef"
LAMBDA = 1e-3
#: The two ways a client follows a fit: one request that answers when the job has ended
#: (``Prefer: wait``), or the 202 and then ``GET /v1/jobs/{id}`` (a long poll by default).
FLOWS = ("wait", "poll")
PREFER_WAIT = {"Prefer": "wait=30"}

#: (label, mechanism, ε, δ, params)
CASES: tuple[tuple[str, str, float, float, dict[str, Any]], ...] = (
    ("objective perturbation", "objective_perturbation", 0.5, 0.0, {}),
    ("output perturbation", "output_perturbation", 0.5, 0.0, {}),
    ("GOP", "gaussian_objective_perturbation", 0.5, 1e-6, {}),
    ("DP-SGD, 2 epochs, b=50", "dp_sgd", 0.5, 0.0, {"epochs": 2, "batch_size": 50}),
)


def paired_ratio(times: list[float], reference: list[float]) -> float:
    """The median over the rounds of one round's ratio: a round runs every contender within a
    few hundred milliseconds, so slow drifts of the machine's speed cancel out."""
    return median([a / b for a, b in zip(times, reference, strict=True)])


@contextlib.contextmanager
def _client(args: argparse.Namespace, url: str) -> Iterator[Any]:
    """An HTTP client of a PrivFit app on ``url``: in process, or a uvicorn child process."""
    if args.transport == "uvicorn":
        from benchmarks.bench_upload import uvicorn_server

        extra = {"PRIVFIT_MAX_BUDGET_EPSILON": "1000", "PRIVFIT_JOB_RUNNER": args.runner}
        with uvicorn_server(url, extra) as base, httpx.Client(base_url=base, timeout=600) as c:
            yield c
        return
    from fastapi.testclient import TestClient

    from service.main import create_app
    from service.settings import Settings

    settings = Settings(
        database_url=url,
        admin_key=SecretStr(ADMIN_KEY),
        max_request_bytes=2**30,
        max_budget_epsilon=1000.0,
        job_runner=args.runner,
        log_level="WARNING",
    )
    with TestClient(create_app(settings)) as client:
        yield client


def _run(args: argparse.Namespace) -> list[dict[str, Any]]:
    from service.db.migrate import upgrade
    from service.db.session import make_engine, make_sessionmaker
    from service.db.uow import UnitOfWork
    from service.domain.datasets.catalog import load_design
    from service.dp import fit, prepare_design

    raw = csv_bytes("train")
    spec = load_spec()
    spec["missing"] = "drop"
    spec["budget"] = {"epsilon": 1000.0, "delta": 1e-3}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        url = args.database_url or f"sqlite:///{Path(tmp) / 'bench.db'}"
        upgrade(url)
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        with _client(args, url) as client:
            made = client.post("/v1/sites", json={"name": f"bench-{time.time_ns()}"}, headers=admin)
            made.raise_for_status()
            site = {"Authorization": f"Bearer {made.json()['key']['api_key']}"}
            uploaded = client.post(
                "/v1/datasets",
                files={"file": ("adult.csv", raw, "text/csv"), "spec": (None, json.dumps(spec))},
                headers=site,
            )
            if uploaded.status_code != 201:
                raise RuntimeError(f"upload failed: {uploaded.status_code} {uploaded.text}")
            dataset_id = uploaded.json()["id"]
            engine = make_engine(url)
            X, y = load_design(lambda: UnitOfWork(make_sessionmaker(engine)), dataset_id)
            poll = args.poll_ms / 1000.0

            design = prepare_design(X, y)

            def library(mechanism: str, eps: float, delta: float, params: dict[str, Any]) -> float:
                started = time.perf_counter()
                fit(X, y, mechanism, epsilon=eps, delta=delta, regularization=LAMBDA, **params)
                return time.perf_counter() - started

            def prepared(mechanism: str, eps: float, delta: float, params: dict[str, Any]) -> float:
                started = time.perf_counter()
                fit(
                    design,
                    None,
                    mechanism,
                    epsilon=eps,
                    delta=delta,
                    regularization=LAMBDA,
                    **params,
                )
                return time.perf_counter() - started

            def http(
                flow: str, mechanism: str, eps: float, delta: float, params: dict[str, Any]
            ) -> float:
                body = {
                    "mechanism": mechanism,
                    "epsilon": eps,
                    "delta": delta,
                    "regularization": LAMBDA,
                    "params": params,
                }
                url = f"/v1/datasets/{dataset_id}/fits"
                if flow == "wait":
                    started = time.perf_counter()
                    response = client.post(url, json=body, headers={**site, **PREFER_WAIT})
                    if response.status_code != 201 or response.json()["status"] != "succeeded":
                        raise RuntimeError(f"fit: {response.status_code} {response.text}")
                    return time.perf_counter() - started
                started = time.perf_counter()
                response = client.post(url, json=body, headers=site)
                if response.status_code != 202:
                    raise RuntimeError(f"fit refused: {response.status_code} {response.text}")
                job_url = response.headers["Location"]
                if args.long_poll:
                    job_url += "?wait=30"
                while True:
                    job = client.get(job_url, headers=site).json()
                    if job["status"] == "succeeded":
                        return time.perf_counter() - started
                    if job["status"] in ("failed", "cancelled"):
                        raise RuntimeError(f"job ended {job['status']}: {job.get('error')}")
                    time.sleep(poll)

            for label, mechanism, eps, delta, params in CASES:
                # warm-up: worker imports, caches
                for flow in FLOWS:
                    http(flow, mechanism, eps, delta, params)
                library(mechanism, eps, delta, params)
                prepared(mechanism, eps, delta, params)
                names = ["library", "prepared", *FLOWS]
                times: dict[str, list[float]] = {name: [] for name in names}
                runs: dict[str, Callable[[], float]] = {
                    "library": functools.partial(library, mechanism, eps, delta, params),
                    "prepared": functools.partial(prepared, mechanism, eps, delta, params),
                    **{
                        flow: functools.partial(http, flow, mechanism, eps, delta, params)
                        for flow in FLOWS
                    },
                }
                for repeat in range(args.repeats):
                    # A rotating order: each contender follows each other one equally often, so
                    # none always runs after a fit that evicted its data from the CPU caches.
                    for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
                        times[name].append(runs[name]())
                ms = {name: 1000 * median(values) for name, values in times.items()}
                rows.append(
                    {
                        "case": label,
                        "mechanism": mechanism,
                        "library_ms": ms["library"],
                        "prepared_ms": ms["prepared"],
                        "wait_ms": ms["wait"],
                        "poll_ms": ms["poll"],
                        "ratio": paired_ratio(times["wait"], times["library"]),
                        "ratio_poll": paired_ratio(times["poll"], times["library"]),
                        "ratio_prepared": paired_ratio(times["wait"], times["prepared"]),
                        "repeats": args.repeats,
                    }
                )
                print(
                    f"{label}: library {ms['library']:.1f} ms, prepared {ms['prepared']:.1f} ms, "
                    f"Prefer: wait {ms['wait']:.1f} ms, POST + GET {ms['poll']:.1f} ms",
                    flush=True,
                )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--runner", choices=("process", "thread"), default="process")
    parser.add_argument("--transport", choices=("testclient", "uvicorn"), default="uvicorn")
    parser.add_argument("--poll-ms", type=float, default=2.0)
    parser.add_argument(
        "--long-poll",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="wait with GET /v1/jobs/{id}?wait=30 (default) instead of polling every --poll-ms",
    )
    parser.add_argument("--threads", type=int, default=1, help="native threads; 0 = default")
    parser.add_argument("--database-url", default=None, help="default: a fresh SQLite file")
    parser.add_argument("--quick", action="store_true", help="3 repeats")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats = 3
    threads = None if args.threads == 0 else args.threads
    if threads is not None:
        # Spawned job workers read these at start-up, before numpy loads OpenBLAS.
        for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(threads)
    _controller = limit_threads(threads)
    print(environment(threads))
    mode = "a long poll (?wait=30)" if args.long_poll else f"polling every {args.poll_ms:g} ms"
    print(
        f"runner: {args.runner}, {args.transport}; flows: Prefer: wait=30, and POST then {mode}; "
        f"load average before: {load_average()}"
    )
    rows = _run(args)
    print(f"load average after: {load_average()}\n")
    print(
        markdown_table(
            [
                "case",
                "service.dp.fit ms",
                "prepared fit ms",
                "POST, Prefer: wait ms",
                "POST + GET ms",
                "wait / library",
                "POST + GET / library",
                "wait / prepared",
            ],
            [
                [
                    r["case"],
                    f"{r['library_ms']:.1f}",
                    f"{r['prepared_ms']:.1f}",
                    f"{r['wait_ms']:.1f}",
                    f"{r['poll_ms']:.1f}",
                    f"{r['ratio']:.2f}",
                    f"{r['ratio_poll']:.2f}",
                    f"{r['ratio_prepared']:.2f}",
                ]
                for r in rows
            ],
        )
    )
    OUT.mkdir(parents=True, exist_ok=True)
    out = OUT / f"fit_job_{args.runner}_{args.transport}.json"
    payload = {
        "runner": args.runner,
        "transport": args.transport,
        "long_poll": args.long_poll,
        "rows": rows,
    }
    out.write_text(json.dumps(payload, indent=2))
    print(f"\nwrote {os.path.relpath(out, ROOT)}")


if __name__ == "__main__":
    main()
