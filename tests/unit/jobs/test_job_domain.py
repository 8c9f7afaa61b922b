"""The jobs domain below HTTP: the progress callback, claiming, recovery helpers, randomness.

Jobs are created through the API (with a runner that never runs them) and then driven with
``service.domain.jobs.lifecycle`` directly on the same database.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from numpy.typing import NDArray

from service.db.base import utcnow
from service.db.uow import UnitOfWorkFactory
from service.domain.fits.run import fit_kwargs
from service.domain.jobs.lifecycle import JobCancelledError, recover_jobs, settle_lost_job
from service.domain.jobs.lifecycle.execution import _Progress
from service.domain.randomness import Randomness
from service.dp import FitResult
from service.dp import fit as dp_fit
from service.runtime.worker import run_job
from tests.conftest import SiteHandle
from tests.unit.jobs._flow import HoldingRunner, fit_body, upload


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def uow(app: FastAPI, client: TestClient) -> UnitOfWorkFactory:
    """The app's units of work; jobs submitted through the API stay queued."""
    app.state.job_runner = HoldingRunner()
    factory: UnitOfWorkFactory = app.state.uow_factory
    return factory


@pytest.fixture
def queue(client: TestClient, site: SiteHandle, uow: UnitOfWorkFactory) -> Callable[..., str]:
    """Queue a fit on a fresh toy dataset; returns the job id."""
    dataset = upload(client, site.headers)

    def make(**fields: Any) -> str:
        response = client.post(
            f"/v1/datasets/{dataset['id']}/fits", json=fit_body(**fields), headers=site.headers
        )
        assert response.status_code == 202, response.text
        job_id: str = response.json()["id"]
        return job_id

    return make


def _job(uow: UnitOfWorkFactory, job_id: str) -> Any:
    with uow() as u:
        return u.jobs.get(job_id)


def _claim(uow: UnitOfWorkFactory, job_id: str) -> None:
    with uow() as u:
        assert u.jobs.claim(job_id, started_at=utcnow())
        u.commit()


# --- progress ------------------------------------------------------------------------------


def test_progress_is_throttled_clamped_and_never_writes_the_end(
    uow: UnitOfWorkFactory, queue: Callable[..., str]
) -> None:
    job_id = queue()
    _claim(uow, job_id)
    clock = Clock()
    progress = _Progress(uow, job_id, interval=1.0, clock=clock)

    progress(0.3)  # within the first interval after the claim: not written
    assert _job(uow, job_id).progress == 0.0
    clock.now += 1.0
    progress(0.4)
    assert _job(uow, job_id).progress == 0.4
    clock.now += 0.5
    progress(0.6)  # throttled
    assert _job(uow, job_id).progress == 0.4
    clock.now += 0.5
    progress(0.7)
    assert _job(uow, job_id).progress == 0.7
    clock.now += 5.0
    progress(1.0)  # the success records 1 together with the model
    assert _job(uow, job_id).progress == 0.7
    progress.sync(1.7)
    assert _job(uow, job_id).progress == 1.0
    progress.sync(-0.2)
    assert _job(uow, job_id).progress == 0.0
    progress.sync(None)  # only checks for a cancel
    assert _job(uow, job_id).progress == 0.0


def test_progress_stops_the_fit_once_a_cancel_is_requested(
    uow: UnitOfWorkFactory, queue: Callable[..., str]
) -> None:
    job_id = queue()
    _claim(uow, job_id)
    clock = Clock()
    progress = _Progress(uow, job_id, interval=1.0, clock=clock)
    clock.now += 2.0
    progress(0.2)
    with uow() as u:
        assert u.jobs.request_cancel(job_id)
        u.commit()

    clock.now += 0.1
    progress(0.25)  # throttled: not even read yet
    clock.now += 2.0
    with pytest.raises(JobCancelledError):
        progress(0.5)
    assert _job(uow, job_id).progress == 0.5


def test_progress_stops_a_job_that_is_no_longer_running(
    uow: UnitOfWorkFactory, queue: Callable[..., str]
) -> None:
    job_id = queue()
    _claim(uow, job_id)
    assert recover_jobs(uow) == []  # the 'crashed' job is now failed
    with pytest.raises(JobCancelledError):
        _Progress(uow, job_id, interval=0.0).sync(0.5)
    assert _job(uow, job_id).progress == 0.0  # a finished job's progress is not rewritten


# --- claiming ------------------------------------------------------------------------------


def _never(*_: Any, **__: Any) -> FitResult:
    raise AssertionError("fitted a job that was not queued")


def test_a_job_is_claimed_by_one_worker_only(
    uow: UnitOfWorkFactory, queue: Callable[..., str]
) -> None:
    job_id = queue()
    calls: list[str] = []

    def fit(X: NDArray[np.float64], y: NDArray[np.float64], mechanism: str, **kw: Any) -> Any:
        calls.append(mechanism)
        # a second delivery of the same job while this one runs does nothing
        assert run_job(uow, job_id, fit=_never).status == "running"
        return dp_fit(X, y, mechanism, **kw)

    assert run_job(uow, job_id, fit=fit).status == "succeeded"
    assert calls == ["objective_perturbation"]
    assert run_job(uow, job_id, fit=_never).status == "succeeded"
    job = _job(uow, job_id)
    assert (job.status, job.attempt) == ("succeeded", 1)
    assert run_job(uow, "0" * 32, fit=_never).status == "missing"


def test_fit_arguments_come_from_the_stored_request() -> None:
    params = {
        "mechanism": "dp_sgd",
        "epsilon": 0.5,
        "delta": 0.0,
        "loss": "huber",
        "regularization": 0.01,
        "params": {"epochs": 2, "h": 0.25},
    }
    assert fit_kwargs(params) == {
        "epsilon": 0.5,
        "delta": 0.0,
        "loss": "huber",
        "regularization": 0.01,
        "epochs": 2,
        "h": 0.25,
    }
    assert fit_kwargs({**params, "epsilon": None})["epsilon"] == math.inf


# --- recovery helpers ----------------------------------------------------------------------


def test_recover_jobs_fails_running_jobs_and_returns_queued_ones(
    uow: UnitOfWorkFactory, queue: Callable[..., str]
) -> None:
    running, queued, done = queue(), queue(), queue()
    assert run_job(uow, done).status == "succeeded"
    _claim(uow, running)

    assert recover_jobs(uow) == [queued]

    interrupted = _job(uow, running)
    assert interrupted.status == "failed"
    assert interrupted.error["type"] == "job-interrupted"
    assert _job(uow, queued).status == "queued"
    assert _job(uow, done).status == "succeeded"
    with uow() as u:
        assert [c.state for c in u.ledger.charges_for_job(running)] == ["charged"]


def test_a_lost_job_is_failed_if_it_started_and_resubmitted_if_not(
    uow: UnitOfWorkFactory, queue: Callable[..., str]
) -> None:
    started, waiting = queue(), queue()
    _claim(uow, started)

    assert settle_lost_job(uow, started) is False
    assert _job(uow, started).error["type"] == "job-interrupted"
    assert settle_lost_job(uow, started) is False  # already settled: stays failed
    assert settle_lost_job(uow, waiting) is True
    assert _job(uow, waiting).status == "queued"
    assert settle_lost_job(uow, "0" * 32) is False


# --- randomness ----------------------------------------------------------------------------


def _coef(uow: UnitOfWorkFactory, job_id: str) -> tuple[Any, dict[str, Any]]:
    with uow() as u:
        job = u.jobs.get(job_id)
        assert job is not None
        assert job.model_id is not None
        model = u.models.get(job.model_id)
        assert model is not None
        return model.body, model.privacy


def test_a_test_seed_gives_each_job_its_own_stream_and_the_record_says_so(
    uow: UnitOfWorkFactory, queue: Callable[..., str]
) -> None:
    seeded = [queue(), queue()]
    private = [queue(), queue()]
    for job_id in seeded:
        assert run_job(uow, job_id, randomness=Randomness(seed=7)).status == "succeeded"
    for job_id in private:
        assert run_job(uow, job_id).status == "succeeded"

    (body_a, record_a), (body_b, _) = (_coef(uow, j) for j in seeded)
    (body_c, record_c), (body_d, _) = (_coef(uow, j) for j in private)
    # One seed for every job would let anyone cancel the noise between two jobs' models.
    assert body_a != body_b
    assert record_a["randomness"]["source"] == "test_seed"
    assert record_a["randomness"]["seed"] == 7
    assert record_a["randomness"]["job_seed"] == str(Randomness(seed=7).job_seed(seeded[0]))
    assert body_c != body_d
    assert record_c["randomness"]["source"] == "csprng"


def test_a_seed_is_honoured_only_in_test_mode() -> None:
    assert Randomness.from_settings(environment="test", test_seed=3).seed == 3
    for environment in ("production", "development"):
        assert Randomness.from_settings(environment=environment, test_seed=3).seed is None
    assert Randomness().generator("job-1") is None
    assert Randomness().job_seed("job-1") is None


def test_per_job_seeds_are_reproducible_and_distinct() -> None:
    seeded = Randomness(seed=3)
    ids = [f"job-{i}" for i in range(200)]
    seeds = [seeded.job_seed(i) for i in ids]
    assert len(set(seeds)) == len(ids)
    assert seeds == [Randomness(seed=3).job_seed(i) for i in ids]
    assert seeded.job_seed("job-0") != Randomness(seed=4).job_seed("job-0")
    # Seed/job-id boundaries cannot be shifted to collide ("1"+"23" vs "12"+"3").
    assert Randomness(seed=1).job_seed("23") != Randomness(seed=12).job_seed("3")
    draw_a = seeded.generator("job-0").standard_normal(4)  # type: ignore[union-attr]
    draw_b = seeded.generator("job-0").standard_normal(4)  # type: ignore[union-attr]
    draw_c = seeded.generator("job-1").standard_normal(4)  # type: ignore[union-attr]
    assert list(draw_a) == list(draw_b) != list(draw_c)
    with pytest.raises(ValueError, match="job id"):
        seeded.generator("")
    with pytest.raises(ValueError, match="non-negative"):
        Randomness(seed=-1)
