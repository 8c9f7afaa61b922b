"""Charges through a study's dataset grant (federated fits) on SQLite and PostgreSQL.

A charge made through a grant must fit under the dataset's remaining budget *and* the grant's
cap; both are debited in one transaction, a shortfall of either charges nothing, a refund
credits both, racing charges never overspend the grant, and a CHECK constraint backs the cap.
"""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import IntegrityError

from service.db.base import utcnow
from service.db.models import Job, Site, Study, StudyContribution
from service.db.uow import UnitOfWorkFactory
from service.domain.ledger import budgets
from service.domain.ledger.budgets import ChargeRequest, DatasetBudgetExhaustedError
from service.domain.ledger.units import EPSILON_UNIT, to_units
from tests.integration.db.test_ledger import make_dataset, spent

E = 1_000_000_000  # ε-units in 1.0


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


@pytest.fixture
def site_id(uow_factory: UnitOfWorkFactory) -> str:
    with uow_factory() as uow:
        site = uow.sites.add(Site(name=f"grants-{uuid.uuid4().hex[:8]}"))
        uow.commit()
    return site.id


def make_grant(
    uow_factory: UnitOfWorkFactory, site_id: str, dataset_id: str, *, epsilon_cap: float
) -> str:
    with uow_factory() as uow:
        study = uow.studies.add(
            Study(
                coordinator_site_id=site_id,
                name="grants",
                spec={},
                preprocessing={},
                feature_names=["x", "intercept"],
            )
        )
        grant = uow.studies.add_contribution(
            StudyContribution(
                study_id=study.id,
                site_id=site_id,
                kind="dataset",
                dataset_id=dataset_id,
                epsilon_cap_units=to_units(epsilon_cap, EPSILON_UNIT, "down"),
                delta_cap_units=0,
            )
        )
        uow.commit()
    return grant.id


def grant_spent(uow_factory: UnitOfWorkFactory, grant_id: str) -> int:
    with uow_factory() as uow:
        grant = uow.studies.get_grant_fresh(grant_id)
        assert grant is not None
        return grant.epsilon_spent_units


def charge_through(
    uow_factory: UnitOfWorkFactory,
    site_id: str,
    charges: list[tuple[str, str, float]],
) -> str:
    """One federated-style job charging (dataset, grant, ε) for each entry, all or none."""
    with uow_factory() as uow:
        job = uow.jobs.add(Job(owner_site_id=site_id, kind="federated", params={}))
        budgets.charge_many(
            uow,
            [
                ChargeRequest(
                    dataset_id=d,
                    epsilon=e,
                    delta=0.0,
                    mechanism="federated",
                    job_id=job.id,
                    grant_id=g,
                )
                for d, g, e in charges
            ],
        )
        uow.commit()
    return job.id


def test_a_charge_through_a_grant_debits_the_dataset_and_the_grant(
    uow_factory: UnitOfWorkFactory, site_id: str
) -> None:
    dataset_id = make_dataset(uow_factory, site_id, epsilon=4.0)
    grant_id = make_grant(uow_factory, site_id, dataset_id, epsilon_cap=0.5)
    charge_through(uow_factory, site_id, [(dataset_id, grant_id, 0.2)])
    charge_through(uow_factory, site_id, [(dataset_id, grant_id, 0.3)])
    assert spent(uow_factory, dataset_id) == (E // 2, 0)
    assert grant_spent(uow_factory, grant_id) == E // 2
    with pytest.raises(DatasetBudgetExhaustedError) as caught:
        charge_through(uow_factory, site_id, [(dataset_id, grant_id, 1e-9)])
    assert "grant" in str(caught.value)
    assert dataset_id in str(caught.value)
    assert caught.value.dataset_id == dataset_id
    assert caught.value.remaining_epsilon == 0.0
    # The dataset still has 3.5 but nothing was charged to it.
    assert spent(uow_factory, dataset_id) == (E // 2, 0)


def test_a_short_grant_on_one_dataset_charges_no_dataset(
    uow_factory: UnitOfWorkFactory, site_id: str
) -> None:
    first = make_dataset(uow_factory, site_id, epsilon=4.0)
    second = make_dataset(uow_factory, site_id, epsilon=4.0)
    g1 = make_grant(uow_factory, site_id, first, epsilon_cap=2.0)
    g2 = make_grant(uow_factory, site_id, second, epsilon_cap=0.5)
    with pytest.raises(DatasetBudgetExhaustedError) as caught:
        charge_through(uow_factory, site_id, [(first, g1, 1.0), (second, g2, 1.0)])
    assert caught.value.dataset_id == second
    assert spent(uow_factory, first) == spent(uow_factory, second) == (0, 0)
    assert grant_spent(uow_factory, g1) == grant_spent(uow_factory, g2) == 0
    with uow_factory() as uow:
        assert uow.jobs.ids_with_status("queued") == []


def test_a_refund_credits_the_grant_too(uow_factory: UnitOfWorkFactory, site_id: str) -> None:
    dataset_id = make_dataset(uow_factory, site_id, epsilon=4.0)
    grant_id = make_grant(uow_factory, site_id, dataset_id, epsilon_cap=1.0)
    job_id = charge_through(uow_factory, site_id, [(dataset_id, grant_id, 0.75)])
    with uow_factory() as uow:
        assert uow.jobs.transition(
            job_id, expected="queued", status="cancelled", finished_at=utcnow()
        )
        assert budgets.refund(uow, job_id=job_id) == 1
        uow.commit()
    assert spent(uow_factory, dataset_id) == (0, 0)
    assert grant_spent(uow_factory, grant_id) == 0


def test_racing_charges_never_overspend_a_grant(
    uow_factory: UnitOfWorkFactory, site_id: str, engine: Engine
) -> None:
    dataset_id = make_dataset(uow_factory, site_id, epsilon=10.0)
    grant_id = make_grant(uow_factory, site_id, dataset_id, epsilon_cap=1.0)
    start = threading.Barrier(12)

    def attempt(_: int) -> bool:
        start.wait()
        try:
            charge_through(uow_factory, site_id, [(dataset_id, grant_id, 0.3)])
        except DatasetBudgetExhaustedError:
            return False
        return True

    with ThreadPoolExecutor(max_workers=12) as pool:
        outcomes = list(pool.map(attempt, range(12)))
    assert outcomes.count(True) == 3  # 0.9 ≤ 1.0 < 1.2
    assert grant_spent(uow_factory, grant_id) == spent(uow_factory, dataset_id)[0] == 9 * E // 10
    query = text(
        "SELECT g.epsilon_spent_units, COALESCE(SUM(c.epsilon_units), 0) "
        "FROM study_contribution g LEFT JOIN ledger_charge c "
        "ON c.grant_id = g.id AND c.state = 'charged' WHERE g.id = :id "
        "GROUP BY g.epsilon_spent_units"
    )
    with engine.connect() as connection:
        grant_total, charged_total = connection.execute(query, {"id": grant_id}).one()
    assert grant_total == charged_total


def test_the_database_refuses_a_grant_spent_beyond_its_cap(
    uow_factory: UnitOfWorkFactory, site_id: str, engine: Engine
) -> None:
    dataset_id = make_dataset(uow_factory, site_id, epsilon=4.0)
    grant_id = make_grant(uow_factory, site_id, dataset_id, epsilon_cap=1.0)
    with pytest.raises(IntegrityError), engine.begin() as connection:
        connection.execute(
            text("UPDATE study_contribution SET epsilon_spent_units = :v WHERE id = :id"),
            {"v": 2 * E, "id": grant_id},
        )
