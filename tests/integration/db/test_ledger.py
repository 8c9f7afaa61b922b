"""The budget ledger (:mod:`service.domain.ledger.budgets`) on SQLite and PostgreSQL
(docs/design.md §2, §4).

Checks, at the domain level on a real database: exact arithmetic in ledger units, charges that
are all-or-none (also for several datasets at once), idempotency keys charged once, refunds
only for jobs that never started, the CHECK constraints as a backstop below the application,
and the invariant spent == the sum of the charges still ``charged``.
"""

from __future__ import annotations

import math
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import IntegrityError

from service.db.base import utcnow
from service.db.models import Dataset, Job, Site
from service.db.uow import UnitOfWorkFactory
from service.domain.errors import BudgetExhaustedError, ConflictError, NotFoundError
from service.domain.ledger import budgets
from service.domain.ledger.budgets import (
    ChargeRequest,
    DatasetBudgetExhaustedError,
    DatasetDeletedError,
    DuplicateChargeError,
)
from service.domain.ledger.units import DELTA_UNIT, EPSILON_UNIT, to_units

E = 1_000_000_000  # ε-units in 1.0


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


@pytest.fixture
def site_id(uow_factory: UnitOfWorkFactory) -> str:
    with uow_factory() as uow:
        site = uow.sites.add(Site(name=f"ledger-{uuid.uuid4().hex[:8]}"))
        uow.commit()
    return site.id


def make_dataset(
    uow_factory: UnitOfWorkFactory, site_id: str, *, epsilon: float = 1.0, delta: float = 1e-6
) -> str:
    with uow_factory() as uow:
        dataset = uow.datasets.add(
            Dataset(
                owner_site_id=site_id,
                name="ledger test",
                spec={"budget": {"epsilon": epsilon, "delta": delta}},
                preprocessing={},
                feature_names=["x", "intercept"],
                n_rows=10,
                n_features=2,
                epsilon_cap_units=to_units(epsilon, EPSILON_UNIT, "down"),
                delta_cap_units=to_units(delta, DELTA_UNIT, "down"),
                epsilon_spent_units=0,
                delta_spent_units=0,
            )
        )
        uow.commit()
    return dataset.id


def make_job(uow_factory: UnitOfWorkFactory, site_id: str, dataset_id: str) -> str:
    with uow_factory() as uow:
        job = uow.jobs.add(Job(owner_site_id=site_id, kind="fit", dataset_id=dataset_id, params={}))
        uow.commit()
    return job.id


def spent(uow_factory: UnitOfWorkFactory, dataset_id: str) -> tuple[int, int]:
    with uow_factory() as uow:
        dataset = uow.datasets.get(dataset_id)
        assert dataset is not None
        return dataset.epsilon_spent_units, dataset.delta_spent_units


def assert_invariant(engine: Engine) -> None:
    """For every dataset: spent == SUM(units) over its charges in state 'charged'."""
    query = text(
        "SELECT d.id, d.epsilon_spent_units, d.delta_spent_units, "
        "COALESCE(SUM(c.epsilon_units), 0), COALESCE(SUM(c.delta_units), 0) "
        "FROM dataset d LEFT JOIN ledger_charge c "
        "ON c.dataset_id = d.id AND c.state = 'charged' "
        "GROUP BY d.id, d.epsilon_spent_units, d.delta_spent_units"
    )
    with engine.connect() as connection:
        rows = connection.execute(query).all()
    assert rows
    for dataset_id, eps_spent, delta_spent, eps_sum, delta_sum in rows:
        assert (eps_spent, delta_spent) == (eps_sum, delta_sum), dataset_id


def charge(
    uow_factory: UnitOfWorkFactory,
    dataset_id: str,
    epsilon: float,
    delta: float = 0.0,
    *,
    job_id: str | None = None,
    key: str | None = None,
) -> str:
    """One charge in its own committed transaction."""
    with uow_factory() as uow:
        charge_id = budgets.charge(
            uow,
            dataset_id=dataset_id,
            epsilon=epsilon,
            delta=delta,
            mechanism="output_perturbation",
            job_id=job_id,
            idempotency_key=key,
        ).id
        uow.commit()
    return charge_id


# ---- exact arithmetic ---------------------------------------------------------------------


def test_ten_tenths_spend_exactly_one_and_an_eleventh_fails(
    uow_factory: UnitOfWorkFactory, site_id: str, engine: Engine
) -> None:
    dataset_id = make_dataset(uow_factory, site_id, epsilon=1.0)
    for _ in range(10):
        charge(uow_factory, dataset_id, 0.1)
    assert spent(uow_factory, dataset_id) == (E, 0)
    with pytest.raises(DatasetBudgetExhaustedError) as caught:
        charge(uow_factory, dataset_id, 0.1)
    assert caught.value.remaining_epsilon == 0.0
    assert caught.value.requested_epsilon == 0.1
    assert caught.value.dataset_id == dataset_id
    assert isinstance(caught.value, BudgetExhaustedError)
    # The smallest possible charge does not fit either, but a free one does.
    with pytest.raises(DatasetBudgetExhaustedError):
        charge(uow_factory, dataset_id, 1e-9)
    charge(uow_factory, dataset_id, 0.0)
    with uow_factory() as uow:
        status = budgets.budget_status(uow, dataset_id=dataset_id)
    assert status.epsilon_spent == 1.0
    assert status.epsilon_remaining == 0.0
    assert status.epsilon_spent_units == status.epsilon_total_units == E
    assert len(status.charges) == 11
    assert all(c.epsilon == 0.1 for c in status.charges[:10])
    assert_invariant(engine)


def test_charges_round_up_to_the_ledger_unit(uow_factory: UnitOfWorkFactory, site_id: str) -> None:
    dataset_id = make_dataset(uow_factory, site_id, epsilon=1.0, delta=1e-6)
    charge(uow_factory, dataset_id, 1e-12, 1e-18)  # below one unit: charged as one unit
    assert spent(uow_factory, dataset_id) == (1, 1)
    charge(uow_factory, dataset_id, 0.1 + 0.2)  # 0.30000000000000004 → 300000001 units
    assert spent(uow_factory, dataset_id) == (1 + 300_000_001, 1)


def test_an_uncommitted_charge_spends_nothing(uow_factory: UnitOfWorkFactory, site_id: str) -> None:
    dataset_id = make_dataset(uow_factory, site_id)
    with uow_factory() as uow:
        budgets.charge(
            uow, dataset_id=dataset_id, epsilon=0.5, delta=0.0, mechanism="output_perturbation"
        )
        # the caller never commits
    assert spent(uow_factory, dataset_id) == (0, 0)
    with uow_factory() as uow:
        assert budgets.budget_status(uow, dataset_id=dataset_id).charges == ()


def test_a_failed_charge_leaves_earlier_charges_of_the_same_transaction_alone(
    uow_factory: UnitOfWorkFactory, site_id: str
) -> None:
    dataset_id = make_dataset(uow_factory, site_id, epsilon=1.0)
    with uow_factory() as uow:
        budgets.charge(
            uow, dataset_id=dataset_id, epsilon=0.6, delta=0.0, mechanism="output_perturbation"
        )
        with pytest.raises(DatasetBudgetExhaustedError) as caught:
            budgets.charge(
                uow,
                dataset_id=dataset_id,
                epsilon=0.6,
                delta=0.0,
                mechanism="output_perturbation",
            )
        assert caught.value.remaining_epsilon == pytest.approx(0.4, abs=1e-12)
        uow.commit()
    assert spent(uow_factory, dataset_id) == (600_000_000, 0)


@pytest.mark.parametrize(
    ("epsilon", "delta"),
    [(-0.1, 0.0), (math.nan, 0.0), (math.inf, 0.0), (0.1, 1.0), (0.1, -1e-9), (0.1, math.nan)],
)
def test_amounts_that_are_not_costs_are_refused(
    uow_factory: UnitOfWorkFactory, site_id: str, epsilon: float, delta: float
) -> None:
    dataset_id = make_dataset(uow_factory, site_id)
    with pytest.raises(ValueError):
        charge(uow_factory, dataset_id, epsilon, delta)
    assert spent(uow_factory, dataset_id) == (0, 0)


def test_unknown_and_deleted_datasets_cannot_be_charged(
    uow_factory: UnitOfWorkFactory, site_id: str
) -> None:
    with pytest.raises(NotFoundError):
        charge(uow_factory, "0" * 32, 0.1)
    dataset_id = make_dataset(uow_factory, site_id)
    with uow_factory() as uow:
        dataset = uow.datasets.get(dataset_id)
        assert dataset is not None
        dataset.deleted_at = utcnow()
        uow.commit()
    with pytest.raises(DatasetDeletedError):
        charge(uow_factory, dataset_id, 0.1)
    assert spent(uow_factory, dataset_id) == (0, 0)
    with uow_factory() as uow:  # the ledger of a deleted dataset can still be read
        assert budgets.budget_status(uow, dataset_id=dataset_id).epsilon_total == 1.0


# ---- several datasets at once -------------------------------------------------------------


def test_charge_many_charges_every_dataset(
    uow_factory: UnitOfWorkFactory, site_id: str, engine: Engine
) -> None:
    a, b, c = (make_dataset(uow_factory, site_id) for _ in range(3))
    requests = [
        ChargeRequest(dataset_id=c, epsilon=0.3, delta=1e-7, mechanism="admm"),
        ChargeRequest(dataset_id=a, epsilon=0.1, delta=0.0, mechanism="admm"),
        ChargeRequest(dataset_id=b, epsilon=0.2, delta=0.0, mechanism="admm"),
    ]
    with uow_factory() as uow:
        ids = budgets.charge_many(uow, requests)
        uow.commit()
    assert len(ids) == len(set(ids)) == 3
    with uow_factory() as uow:
        for charge_id, request in zip(ids, requests, strict=True):
            row = uow.ledger.get(charge_id)
            assert row is not None
            assert row.dataset_id == request.dataset_id
    assert spent(uow_factory, a) == (100_000_000, 0)
    assert spent(uow_factory, b) == (200_000_000, 0)
    assert spent(uow_factory, c) == (300_000_000, 100_000_000)
    assert_invariant(engine)


def test_charge_many_is_all_or_none(
    uow_factory: UnitOfWorkFactory, site_id: str, engine: Engine
) -> None:
    rich = make_dataset(uow_factory, site_id, epsilon=5.0)
    poor = make_dataset(uow_factory, site_id, epsilon=0.5)
    also_rich = make_dataset(uow_factory, site_id, epsilon=5.0)
    requests = [
        ChargeRequest(dataset_id=rich, epsilon=1.0, delta=0.0, mechanism="psgd"),
        ChargeRequest(dataset_id=poor, epsilon=1.0, delta=0.0, mechanism="psgd"),
        ChargeRequest(dataset_id=also_rich, epsilon=1.0, delta=0.0, mechanism="psgd"),
    ]
    with uow_factory() as uow:
        with pytest.raises(DatasetBudgetExhaustedError) as caught:
            budgets.charge_many(uow, requests)
        uow.commit()  # even a commit afterwards keeps nothing: the unit of work was rolled back
    assert caught.value.dataset_id == poor
    assert f"dataset {poor}" in caught.value.detail
    assert caught.value.remaining_epsilon == 0.5
    for dataset_id in (rich, poor, also_rich):
        assert spent(uow_factory, dataset_id) == (0, 0)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT COUNT(*) FROM ledger_charge")).scalar_one() == 0

    # A deleted dataset among them is all-or-none too.
    with uow_factory() as uow:
        row = uow.datasets.get(poor)
        assert row is not None
        row.deleted_at = utcnow()
        uow.commit()
    with uow_factory() as uow, pytest.raises(DatasetDeletedError):
        budgets.charge_many(
            uow,
            [requests[0], ChargeRequest(dataset_id=poor, epsilon=0.1, delta=0.0, mechanism="x")],
        )
    assert spent(uow_factory, rich) == (0, 0)
    assert_invariant(engine)


# ---- idempotency --------------------------------------------------------------------------


def test_an_idempotency_key_is_charged_once(
    uow_factory: UnitOfWorkFactory, site_id: str, engine: Engine
) -> None:
    dataset_id = make_dataset(uow_factory, site_id)
    first = charge(uow_factory, dataset_id, 0.25, key="retry-1")
    again = charge(uow_factory, dataset_id, 0.25, key="retry-1")
    assert again == first
    assert spent(uow_factory, dataset_id) == (250_000_000, 0)
    with pytest.raises(ConflictError, match="different charge"):
        charge(uow_factory, dataset_id, 0.5, key="retry-1")
    # Another key, or the same key on another dataset, is another charge.
    other = charge(uow_factory, dataset_id, 0.25, key="retry-2")
    assert other != first
    second_dataset = make_dataset(uow_factory, site_id)
    assert charge(uow_factory, second_dataset, 0.25, key="retry-1") != first
    assert spent(uow_factory, dataset_id) == (500_000_000, 0)
    assert spent(uow_factory, second_dataset) == (250_000_000, 0)
    assert_invariant(engine)


def test_a_replayed_key_is_answered_even_when_the_budget_is_spent(
    uow_factory: UnitOfWorkFactory, site_id: str
) -> None:
    dataset_id = make_dataset(uow_factory, site_id, epsilon=1.0)
    first = charge(uow_factory, dataset_id, 1.0, key="all-of-it")
    assert charge(uow_factory, dataset_id, 1.0, key="all-of-it") == first
    assert spent(uow_factory, dataset_id) == (E, 0)


def test_racing_charges_with_one_key_are_charged_once(
    uow_factory: UnitOfWorkFactory, site_id: str, engine: Engine
) -> None:
    dataset_id = make_dataset(uow_factory, site_id)
    start = threading.Barrier(8)

    def attempt(_: int) -> str:
        start.wait()
        try:
            return charge(uow_factory, dataset_id, 0.3, key="same-key")
        except DuplicateChargeError:
            return "duplicate"

    with ThreadPoolExecutor(max_workers=8) as pool:
        outcomes = list(pool.map(attempt, range(8)))
    ids = {o for o in outcomes if o != "duplicate"}
    assert len(ids) == 1  # every winner names the same charge; losers may be told to retry
    assert charge(uow_factory, dataset_id, 0.3, key="same-key") in ids  # a retry finds it
    assert spent(uow_factory, dataset_id) == (300_000_000, 0)
    assert_invariant(engine)


# ---- refunds ------------------------------------------------------------------------------


def test_a_job_that_never_started_is_refunded_once(
    uow_factory: UnitOfWorkFactory, site_id: str, engine: Engine
) -> None:
    dataset_id = make_dataset(uow_factory, site_id)
    job_id = make_job(uow_factory, site_id, dataset_id)
    kept_job = make_job(uow_factory, site_id, dataset_id)
    charge(uow_factory, dataset_id, 0.4, 2e-7, job_id=job_id)
    charge(uow_factory, dataset_id, 0.1, job_id=kept_job)
    assert spent(uow_factory, dataset_id) == (500_000_000, 200_000_000)

    with uow_factory() as uow:
        assert uow.jobs.transition(job_id, expected="queued", status="cancelled")
        assert budgets.refund(uow, job_id=job_id) == 1
        uow.commit()
    assert spent(uow_factory, dataset_id) == (100_000_000, 0)
    with uow_factory() as uow:
        assert budgets.refund(uow, job_id=job_id) == 0  # already refunded
        uow.commit()
        status = budgets.budget_status(uow, dataset_id=dataset_id)
    assert spent(uow_factory, dataset_id) == (100_000_000, 0)
    by_job = {c.job_id: c for c in status.charges}
    assert by_job[job_id].state == "refunded"
    assert by_job[job_id].refunded_at is not None
    assert by_job[kept_job].state == "charged"
    assert by_job[kept_job].refunded_at is None
    assert status.epsilon_spent == pytest.approx(0.1, abs=0)
    assert_invariant(engine)


def test_a_job_that_started_is_never_refunded(
    uow_factory: UnitOfWorkFactory, site_id: str, engine: Engine
) -> None:
    dataset_id = make_dataset(uow_factory, site_id)
    running, failed, cancelled = (make_job(uow_factory, site_id, dataset_id) for _ in range(3))
    for job_id in (running, failed, cancelled):
        charge(uow_factory, dataset_id, 0.2, job_id=job_id)
    with uow_factory() as uow:
        for job_id in (running, failed, cancelled):
            assert uow.jobs.claim(job_id, started_at=utcnow())
        assert uow.jobs.transition(failed, expected="running", status="failed")
        assert uow.jobs.transition(cancelled, expected="running", status="cancelled")
        uow.commit()
    for job_id in (running, failed, cancelled):
        with uow_factory() as uow, pytest.raises(ConflictError, match="never refunded"):
            budgets.refund(uow, job_id=job_id)
    assert spent(uow_factory, dataset_id) == (600_000_000, 0)
    with uow_factory() as uow, pytest.raises(NotFoundError):
        budgets.refund(uow, job_id="f" * 32)
    assert_invariant(engine)


# ---- the database's own backstop ----------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE dataset SET epsilon_spent_units = epsilon_cap_units + 1",
        "UPDATE dataset SET delta_spent_units = delta_cap_units + 1",
        "UPDATE dataset SET epsilon_spent_units = -1",
        "UPDATE dataset SET epsilon_cap_units = 0, epsilon_spent_units = 1",
        "UPDATE ledger_charge SET state = 'forgiven'",
        "UPDATE ledger_charge SET epsilon_units = -5",
    ],
)
def test_check_constraints_refuse_overspending_written_directly(
    uow_factory: UnitOfWorkFactory, site_id: str, engine: Engine, statement: str
) -> None:
    dataset_id = make_dataset(uow_factory, site_id)
    charge(uow_factory, dataset_id, 0.5)
    with pytest.raises(IntegrityError), engine.begin() as connection:
        connection.execute(text(statement))
    assert spent(uow_factory, dataset_id) == (500_000_000, 0)
    assert_invariant(engine)


def test_concurrent_charges_never_overspend(
    uow_factory: UnitOfWorkFactory, site_id: str, engine: Engine
) -> None:
    dataset_id = make_dataset(uow_factory, site_id, epsilon=1.0)
    start = threading.Barrier(16)

    def attempt(_: int) -> bool:
        start.wait()
        try:
            charge(uow_factory, dataset_id, 0.3)
        except DatasetBudgetExhaustedError:
            return False
        return True

    with ThreadPoolExecutor(max_workers=16) as pool:
        outcomes = list(pool.map(attempt, range(16)))
    assert outcomes.count(True) == 3  # 0.9 ≤ 1.0 < 1.2
    assert spent(uow_factory, dataset_id) == (900_000_000, 0)
    assert_invariant(engine)
