"""Helpers shared by the fit and job tests: a small public-spec dataset, uploads, polling,
and two alternative job runners (the app takes any :class:`~service.runtime.runner.JobRunner`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from fastapi.testclient import TestClient

from service.db.uow import UnitOfWorkFactory
from service.domain.jobs.lifecycle import FitFunction, recover_jobs
from service.domain.randomness import Randomness
from service.dp import fit as dp_fit
from service.runtime.worker import run_job
from service.settings import Settings

FINISHED = frozenset({"succeeded", "failed", "cancelled"})
TIMEOUT = 30.0

#: The toy dataset's encoded features: 2 numeric, 3 one-hot, intercept.
TOY_FEATURES = ["x1", "x2", "color=red", "color=green", "color=blue", "intercept"]


def toy_csv(n: int = 200, seed: int = 0) -> bytes:
    """A CSV with a header: two numeric columns, one categorical, a yes/no label."""
    rng = np.random.default_rng(seed)
    lines = ["x1,x2,color,y"]
    for _ in range(n):
        x1 = float(rng.normal())
        x2 = float(rng.uniform(0.0, 10.0))
        color = str(rng.choice(["red", "green", "blue"]))
        label = "yes" if x1 + 0.2 * x2 - 1.0 + 0.5 * float(rng.normal()) > 0 else "no"
        lines.append(f"{x1:.4f},{x2:.4f},{color},{label}")
    return ("\n".join(lines) + "\n").encode()


def toy_spec(
    *, epsilon: float = 5.0, delta: float = 1e-5, allow_non_private: bool = False
) -> dict[str, Any]:
    """The public upload spec of :func:`toy_csv`."""
    return {
        "name": "toy",
        "label": {"column": "y", "positive": "yes"},
        "features": [
            {"column": "x1", "type": "numeric", "lower": -3, "upper": 3},
            {"column": "x2", "type": "numeric", "lower": 0, "upper": 10},
            {"column": "color", "type": "categorical", "categories": ["red", "green", "blue"]},
        ],
        "budget": {"epsilon": epsilon, "delta": delta},
        "allow_non_private": allow_non_private,
    }


def upload(
    client: TestClient,
    headers: dict[str, str],
    *,
    raw: bytes | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Upload a dataset (the toy one by default); returns the 201 body."""
    response = client.post(
        "/v1/datasets",
        files={
            "file": ("toy.csv", toy_csv() if raw is None else raw, "text/csv"),
            "spec": (None, json.dumps(toy_spec() if spec is None else spec)),
        },
        headers=headers,
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def fit_body(mechanism: str = "objective_perturbation", **fields: Any) -> dict[str, Any]:
    """A fit request body with PrivFit's example values, overridden by ``fields``."""
    body: dict[str, Any] = {
        "mechanism": mechanism,
        "epsilon": 0.5,
        "delta": 0.0,
        "loss": "logistic",
        "regularization": 0.01,
        "params": {},
    }
    body.update(fields)
    return body


def wait_for(
    predicate: Callable[[], bool],
    timeout: float = TIMEOUT,
    what: str = "",
    *,
    interval: float = 0.01,
) -> None:
    """Poll ``predicate`` every ``interval`` s until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout} s: {what or predicate}")
        time.sleep(interval)


def get_job(client: TestClient, headers: dict[str, str], job_id: str) -> dict[str, Any]:
    response = client.get(f"/v1/jobs/{job_id}", headers=headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def wait_job(
    client: TestClient,
    headers: dict[str, str],
    job_id: str,
    *,
    statuses: Iterable[str] = FINISHED,
    timeout: float = TIMEOUT,
) -> dict[str, Any]:
    """Poll ``GET /v1/jobs/{id}`` until its status is one of ``statuses``; returns the job."""
    wanted = frozenset(statuses)
    seen: dict[str, Any] = {}

    def done() -> bool:
        seen.update(get_job(client, headers, job_id))
        return seen["status"] in wanted

    wait_for(done, timeout, f"job {job_id} in {sorted(wanted)} (last: {seen.get('status')})")
    return seen


def budget(client: TestClient, headers: dict[str, str], dataset_id: str) -> dict[str, Any]:
    response = client.get(f"/v1/datasets/{dataset_id}/budget", headers=headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


# --- alternative runners ------------------------------------------------------------------


class InlineRunner:
    """A minimal :class:`~service.runtime.runner.JobRunner`: runs each job synchronously inside
    ``submit`` with the worker's ``run_job`` (the domain's ``execute_job`` with the registered
    handlers). Stands in for any other engine (a task queue's client would enqueue the id
    instead); nothing in the domain knows about it."""

    def __init__(
        self,
        uow_factory: UnitOfWorkFactory,
        *,
        fit: FitFunction = dp_fit,
        randomness: Randomness | None = None,
    ) -> None:
        self._uow_factory = uow_factory
        self._fit = fit
        self._randomness = randomness
        self.started = False
        self.stopped = False
        self.ran: list[tuple[str, str]] = []

    def start(self) -> None:
        self.started = True

    def submit(self, job_id: str) -> None:
        status = run_job(
            self._uow_factory, job_id, fit=self._fit, randomness=self._randomness
        ).status
        self.ran.append((job_id, status))

    def recover(self) -> Sequence[str]:
        queued = recover_jobs(self._uow_factory)
        for job_id in queued:
            self.submit(job_id)
        return queued

    def shutdown(self, *, wait: bool = True) -> None:
        self.stopped = True

    @classmethod
    def factory(cls, **kwargs: Any) -> Callable[[Settings, UnitOfWorkFactory], InlineRunner]:
        """For ``app.state.job_runner_factory``: builds the runner on the app's database."""

        def build(_settings: Settings, uow_factory: UnitOfWorkFactory) -> InlineRunner:
            return cls(uow_factory, **kwargs)

        return build


class HoldingRunner:
    """A runner that accepts jobs and never runs them: they stay ``queued``."""

    def __init__(self) -> None:
        self.submitted: list[str] = []

    def start(self) -> None:
        pass

    def submit(self, job_id: str) -> None:
        self.submitted.append(job_id)

    def recover(self) -> Sequence[str]:
        return []

    def shutdown(self, *, wait: bool = True) -> None:
        pass

    @classmethod
    def factory(cls) -> Callable[[Settings, UnitOfWorkFactory], HoldingRunner]:
        """For ``app.state.job_runner_factory``."""

        def build(_settings: Settings, _uow_factory: UnitOfWorkFactory) -> HoldingRunner:
            return cls()

        return build
