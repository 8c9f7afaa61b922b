"""Charged jobs below HTTP: fits, federated fits, charged aggregations and their budgets, driven
through the domain with a unit of work on SQLite and on PostgreSQL.

The HTTP tests check the contract's status codes, problem types and headers; these check the
domain rules themselves: what is written, what is charged, what a retry, a shortfall, a refused
request or a runner that does not accept the job leaves behind.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from service.db.models import Dataset, Model, Site, Study, StudyContribution, new_id
from service.db.uow import UnitOfWorkFactory
from service.domain.access.principal import Principal
from service.domain.audit import AuditContext
from service.domain.errors import (
    BudgetExhaustedError,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
)
from service.domain.fits.submit import FitRequest, quote_fit, submit_fit
from service.domain.jobs.charged import ForeignBudgetExhaustedError, SubmittedJob
from service.domain.ledger import budgets
from service.domain.ledger.units import DELTA_UNIT, EPSILON_UNIT, to_units
from service.domain.studies.aggregations import (
    AggregationRequest,
    TransferRequest,
    quote_aggregation,
    submit_aggregation,
)
from service.domain.studies.federated.request import FederatedRequest
from service.domain.studies.federated.submit import submit_federated_fit

CONTEXT = AuditContext(request_id="test", client_ip=None)
FIT = FitRequest(mechanism="objective_perturbation", epsilon=0.5, regularization=0.01)
FEATURES = ["x", "intercept"]
PREPROCESSING: dict[str, Any] = {"features": [], "label": {}, "intercept": True}


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


class Runner:
    """Records the jobs handed to it; ``refuse`` makes ``submit`` raise."""

    def __init__(self, *, refuse: bool = False) -> None:
        self.submitted: list[str] = []
        self.refuse = refuse

    def submit(self, job_id: str) -> None:
        if self.refuse:
            raise RuntimeError("the runner is down")
        self.submitted.append(job_id)


def make_site(uow_factory: UnitOfWorkFactory) -> Principal:
    with uow_factory() as uow:
        site = uow.sites.add(Site(name=f"site-{uuid.uuid4().hex[:8]}"))
        uow.commit()
    return Principal(role="site", site_id=site.id)


def make_dataset(uow_factory: UnitOfWorkFactory, owner: Principal, *, epsilon: float = 2.0) -> str:
    with uow_factory() as uow:
        dataset = uow.datasets.add(
            Dataset(
                owner_site_id=owner.site_id,
                name="domain test",
                spec={"budget": {"epsilon": epsilon, "delta": 1e-6}, "label": {}},
                preprocessing=PREPROCESSING,
                feature_names=FEATURES,
                n_rows=1000,
                n_features=len(FEATURES),
                allow_non_private=False,
                epsilon_cap_units=to_units(epsilon, EPSILON_UNIT, "down"),
                delta_cap_units=to_units(1e-6, DELTA_UNIT, "down"),
                epsilon_spent_units=0,
                delta_spent_units=0,
            )
        )
        uow.commit()
    return dataset.id


def spent(uow_factory: UnitOfWorkFactory, dataset_id: str) -> float:
    with uow_factory() as uow:
        return budgets.budget_status(uow, dataset_id=dataset_id).epsilon_spent


def jobs_of(uow_factory: UnitOfWorkFactory, owner: Principal) -> int:
    with uow_factory() as uow:
        return uow.jobs.count(owner_site_id=owner.site_id)


# --- fits -------------------------------------------------------------------------------------


def test_a_fit_is_charged_queued_and_handed_to_the_runner(
    uow_factory: UnitOfWorkFactory,
) -> None:
    owner = make_site(uow_factory)
    dataset_id = make_dataset(uow_factory, owner)
    runner = Runner()

    submitted = submit_fit(
        uow_factory(), dataset_id=dataset_id, request=FIT, actor=owner, runner=runner
    )

    assert isinstance(submitted, SubmittedJob)
    assert submitted.created
    assert (submitted.job.kind, submitted.job.status) == ("fit", "queued")
    assert [(c.dataset_id, c.epsilon, c.state) for c in submitted.view.charges] == [
        (dataset_id, 0.5, "charged")
    ]
    assert runner.submitted == [submitted.job.id]
    assert spent(uow_factory, dataset_id) == 0.5
    with uow_factory() as uow:
        stored = uow.jobs.get(submitted.job.id)
        assert stored is not None
        # the fit's own params, and what the submission's assessment adds: no band and no
        # warning for a dataset with no public baseline (service.domain.fits.auto)
        assert stored.params == {**FIT.to_params(), "warnings": []}


def test_a_retried_fit_is_charged_once_and_a_reused_key_is_refused(
    uow_factory: UnitOfWorkFactory,
) -> None:
    owner = make_site(uow_factory)
    dataset_id = make_dataset(uow_factory, owner)
    runner = Runner()

    def submit(request: FitRequest) -> SubmittedJob:
        return submit_fit(
            uow_factory(),
            dataset_id=dataset_id,
            request=request,
            actor=owner,
            runner=runner,
            idempotency_key="fit-1",
        )

    first, again = submit(FIT), submit(FIT)
    assert (first.created, again.created) == (True, False)
    assert again.job.id == first.job.id
    assert runner.submitted == [first.job.id]
    with pytest.raises(InvalidInputError, match="Idempotency-Key"):
        submit(FitRequest(mechanism="objective_perturbation", epsilon=0.25, regularization=0.01))
    assert spent(uow_factory, dataset_id) == 0.5
    assert jobs_of(uow_factory, owner) == 1


def test_a_fit_the_budget_cannot_cover_writes_nothing(uow_factory: UnitOfWorkFactory) -> None:
    owner = make_site(uow_factory)
    dataset_id = make_dataset(uow_factory, owner, epsilon=0.4)
    quote = quote_fit(uow_factory(), dataset_id=dataset_id, request=FIT, actor=owner)
    assert (quote.epsilon, quote.affordable) == (0.5, False)
    with pytest.raises(BudgetExhaustedError):
        submit_fit(
            uow_factory(),
            dataset_id=dataset_id,
            request=FIT,
            actor=owner,
            runner=Runner(),
            context=CONTEXT,
        )
    assert spent(uow_factory, dataset_id) == 0.0
    assert jobs_of(uow_factory, owner) == 0


def test_a_fit_is_only_for_the_owner_of_the_dataset(uow_factory: UnitOfWorkFactory) -> None:
    owner, other = make_site(uow_factory), make_site(uow_factory)
    dataset_id = make_dataset(uow_factory, owner)
    with pytest.raises(NotFoundError):
        submit_fit(uow_factory(), dataset_id=dataset_id, request=FIT, actor=other, runner=Runner())
    admin = Principal("admin")
    with pytest.raises(NotFoundError):  # the admin owns no dataset: as for an unknown id
        quote_fit(uow_factory(), dataset_id=dataset_id, request=FIT, actor=admin)
    with pytest.raises(NotFoundError):
        submit_fit(uow_factory(), dataset_id=dataset_id, request=FIT, actor=admin, runner=Runner())
    assert spent(uow_factory, dataset_id) == 0.0


def test_a_job_the_runner_refuses_stays_queued_and_charged(
    uow_factory: UnitOfWorkFactory,
) -> None:
    owner = make_site(uow_factory)
    dataset_id = make_dataset(uow_factory, owner)
    submitted = submit_fit(
        uow_factory(), dataset_id=dataset_id, request=FIT, actor=owner, runner=Runner(refuse=True)
    )
    with uow_factory() as uow:
        job = uow.jobs.get(submitted.job.id)
        assert job is not None
        assert job.status == "queued"
    assert spent(uow_factory, dataset_id) == 0.5


# --- studies: federated fits and charged aggregations ------------------------------------------


def make_study(
    uow_factory: UnitOfWorkFactory, coordinator: Principal, members: list[Principal]
) -> str:
    with uow_factory() as uow:
        study = uow.studies.add(
            Study(
                coordinator_site_id=coordinator.site_id,
                name="domain study",
                spec={"label": {}},
                preprocessing=PREPROCESSING,
                feature_names=FEATURES,
            )
        )
        uow.studies.add_member(study.id, str(coordinator.site_id), role="coordinator")
        for member in members:
            uow.studies.add_member(study.id, str(member.site_id), role="member")
        uow.commit()
    return study.id


def grant(
    uow_factory: UnitOfWorkFactory, study_id: str, member: Principal, dataset_id: str, cap: float
) -> str:
    with uow_factory() as uow:
        row = uow.studies.add_contribution(
            StudyContribution(
                study_id=study_id,
                site_id=member.site_id,
                kind="dataset",
                dataset_id=dataset_id,
                epsilon_cap_units=to_units(cap, EPSILON_UNIT, "down"),
                delta_cap_units=to_units(1e-6, DELTA_UNIT, "down"),
            )
        )
        uow.commit()
    return row.id


NOISY_AVERAGE = FederatedRequest(protocol="noisy_average", epsilon=1.0, regularization=0.05)


def test_a_federated_fit_charges_every_dataset_or_none(uow_factory: UnitOfWorkFactory) -> None:
    coordinator, a, b = (make_site(uow_factory) for _ in range(3))
    study_id = make_study(uow_factory, coordinator, [a, b])
    rich = make_dataset(uow_factory, a, epsilon=4.0)
    poor = make_dataset(uow_factory, b, epsilon=1.5)
    for member, dataset_id in ((a, rich), (b, poor)):
        grant(uow_factory, study_id, member, dataset_id, cap=4.0)
    runner = Runner()

    def submit(key: str) -> SubmittedJob:
        return submit_federated_fit(
            uow_factory(),
            study_id=study_id,
            request=NOISY_AVERAGE,
            actor=coordinator,
            runner=runner,
            context=CONTEXT,
            idempotency_key=key,
        )

    first = submit("fed-1")
    assert first.created
    assert first.job.kind == "federated"
    assert sorted((c.dataset_id, c.epsilon) for c in first.view.charges) == sorted(
        [(rich, 1.0), (poor, 1.0)]
    )
    assert submit("fed-1").job.id == first.job.id  # a retry: charged once
    assert (spent(uow_factory, rich), spent(uow_factory, poor)) == (1.0, 1.0)

    # b's dataset has 0.5 left: the second fit charges neither dataset, and the refusal does
    # not tell the coordinator what another site's dataset has left.
    with pytest.raises(ForeignBudgetExhaustedError) as refused:
        submit("fed-2")
    assert "remaining_epsilon" not in refused.value.extensions()
    assert (spent(uow_factory, rich), spent(uow_factory, poor)) == (1.0, 1.0)
    assert runner.submitted == [first.job.id]
    with pytest.raises(PermissionDeniedError):
        submit_federated_fit(
            uow_factory(),
            study_id=study_id,
            request=NOISY_AVERAGE,
            actor=a,
            runner=runner,
            context=CONTEXT,
        )


def contribute_model(
    uow_factory: UnitOfWorkFactory, study_id: str, member: Principal, coef: list[float]
) -> str:
    with uow_factory() as uow:
        model = uow.models.add(
            Model(
                id=new_id(),
                owner_site_id=member.site_id,
                source="upload",
                mechanism="uploaded",
                loss="logistic",
                feature_names=FEATURES,
                preprocessing=PREPROCESSING,
                body={"kind": "linear", "coef": coef},
                label={},
                privacy={"guarantee": "none", "verified": False, "datasets": []},
            )
        )
        uow.studies.add_contribution(
            StudyContribution(
                study_id=study_id, site_id=member.site_id, kind="model", model_id=model.id
            )
        )
        uow.commit()
    return model.id


def test_a_transfer_is_quoted_charged_once_and_an_average_charges_nothing(
    uow_factory: UnitOfWorkFactory,
) -> None:
    coordinator, member = make_site(uow_factory), make_site(uow_factory)
    study_id = make_study(uow_factory, coordinator, [member])
    contribute_model(uow_factory, study_id, member, [0.5, -0.25])
    target = make_dataset(uow_factory, coordinator, epsilon=2.0)
    request = TransferRequest(target_dataset_id=target, epsilon=0.5, transfer_strength=0.1)

    quote = quote_aggregation(uow_factory(), study_id=study_id, request=request, actor=coordinator)
    assert (quote.method, quote.dataset_id, quote.epsilon) == ("transfer", target, 0.5)
    assert quote.remaining_epsilon == 2.0
    assert spent(uow_factory, target) == 0.0

    runner = Runner()
    submitted = [
        submit_aggregation(
            uow_factory(),
            study_id=study_id,
            request=request,
            actor=coordinator,
            context=CONTEXT,
            runner=runner,
            idempotency_key="transfer-1",
        )
        for _ in range(2)
    ]
    assert [s.created for s in submitted] == [True, False]
    assert runner.submitted == [submitted[0].job.id]
    assert spent(uow_factory, target) == 0.5

    averaged = submit_aggregation(
        uow_factory(),
        study_id=study_id,
        request=AggregationRequest(method="average"),
        actor=coordinator,
        context=CONTEXT,
        runner=runner,
    )
    assert (averaged.job.status, averaged.view.charges) == ("succeeded", ())
    assert spent(uow_factory, target) == 0.5
    with pytest.raises(PermissionDeniedError):
        submit_aggregation(
            uow_factory(),
            study_id=study_id,
            request=request,
            actor=member,
            context=CONTEXT,
            runner=runner,
        )
