"""Studies as use cases, without HTTP, on SQLite and PostgreSQL (service.domain.studies).

Membership rules, grants within a dataset's caps, duplicate and foreign contributions,
withdrawal before and after use, and what a non-member can see: each checked on a real
database through a unit of work, so the HTTP tests only need to check the contract (status
codes, problem types, headers).
"""

from __future__ import annotations

from typing import Any

import pytest

from service.db.base import utcnow
from service.db.models import Dataset
from service.db.uow import UnitOfWorkFactory
from service.domain.access.principal import Principal
from service.domain.audit import AuditContext
from service.domain.datasets.spec import FeatureInput
from service.domain.errors import (
    ConflictError,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
)
from service.domain.ledger.units import DELTA_UNIT, EPSILON_UNIT, to_units
from service.domain.studies.membership import (
    DatasetGrant,
    StudySpecInput,
    StudyView,
    add_contribution,
    create_study,
    get_study,
    list_studies,
    withdraw_contribution,
)
from tests.integration.test_charged_jobs import make_site

CONTEXT = AuditContext(request_id="test", client_ip=None)
SPEC = StudySpecInput(
    label_column="y",
    positive="yes",
    negative="no",
    features=[
        FeatureInput(column="age", type="numeric", lower=0.0, upper=100.0),
        FeatureInput(column="colour", type="categorical", categories=("red", "blue")),
    ],
)


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


def _study(uow_factory: UnitOfWorkFactory, coordinator: Principal, *members: Principal) -> str:
    view = create_study(
        uow_factory(),
        name="a study",
        members=[m.site_id or "" for m in members],
        spec=SPEC,
        actor=coordinator,
        context=CONTEXT,
    )
    return view.study.id


def _dataset_like(
    uow_factory: UnitOfWorkFactory,
    study_id: str,
    owner: Principal,
    *,
    epsilon: float = 2.0,
    label: dict[str, Any] | None = None,
) -> str:
    """A dataset row encoded exactly as the study's spec (or with another label)."""
    with uow_factory() as uow:
        study = uow.studies.get(study_id)
        assert study is not None
        dataset = uow.datasets.add(
            Dataset(
                owner_site_id=owner.site_id,
                name="member data",
                spec={
                    "budget": {"epsilon": epsilon, "delta": 1e-6},
                    "label": label if label is not None else dict(study.spec["label"]),
                },
                preprocessing=dict(study.preprocessing),
                feature_names=list(study.feature_names),
                n_rows=500,
                n_features=len(study.feature_names),
                allow_non_private=False,
                epsilon_cap_units=to_units(epsilon, EPSILON_UNIT, "down"),
                delta_cap_units=to_units(1e-6, DELTA_UNIT, "down"),
                epsilon_spent_units=0,
                delta_spent_units=0,
            )
        )
        uow.commit()
        return dataset.id


def _grant(
    uow_factory: UnitOfWorkFactory, study_id: str, member: Principal, dataset_id: str, cap: float
) -> str:
    contribution = add_contribution(
        uow_factory(),
        study_id=study_id,
        actor=member,
        context=CONTEXT,
        grant=DatasetGrant(dataset_id=dataset_id, epsilon_cap=cap, delta_cap=1e-7),
    )
    return contribution.id


def test_a_study_names_its_coordinator_and_members(uow_factory: UnitOfWorkFactory) -> None:
    coordinator, member, outsider = (make_site(uow_factory) for _ in range(3))
    study_id = _study(uow_factory, coordinator, member, member)  # a repeated member counts once
    view: StudyView = get_study(uow_factory(), study_id=study_id, actor=member)
    roles = {m.site_id: m.role for m in view.members}
    assert roles == {coordinator.site_id: "coordinator", member.site_id: "member"}
    assert list(view.study.feature_names) == ["age", "colour=red", "colour=blue", "intercept"]
    with pytest.raises(NotFoundError):
        get_study(uow_factory(), study_id=study_id, actor=outsider)
    listed = list_studies(uow_factory(), actor=outsider, limit=10, offset=0)
    assert study_id not in [v.study.id for v in listed.items]
    assert listed.total == 0


def test_a_study_needs_existing_members_besides_its_coordinator(
    uow_factory: UnitOfWorkFactory,
) -> None:
    coordinator = make_site(uow_factory)
    with pytest.raises(InvalidInputError, match="at least one member"):
        _study(uow_factory, coordinator, coordinator)
    ghost = Principal(role="site", site_id="0" * 32)
    with pytest.raises(InvalidInputError, match="existing site id") as raised:
        _study(uow_factory, coordinator, ghost)
    assert raised.value.errors == [{"loc": ["body", "members", 0], "msg": "no such site"}]
    with uow_factory() as uow:
        assert uow.studies.count(member_site_id=coordinator.site_id) == 0  # nothing stored


def test_a_grant_fits_the_dataset_caps_and_is_contributed_once(
    uow_factory: UnitOfWorkFactory,
) -> None:
    coordinator, member = make_site(uow_factory), make_site(uow_factory)
    study_id = _study(uow_factory, coordinator, member)
    dataset_id = _dataset_like(uow_factory, study_id, member, epsilon=2.0)
    with pytest.raises(InvalidInputError, match="caps"):
        _grant(uow_factory, study_id, member, dataset_id, cap=2.5)
    contribution_id = _grant(uow_factory, study_id, member, dataset_id, cap=1.5)
    with pytest.raises(ConflictError):
        _grant(uow_factory, study_id, member, dataset_id, cap=1.0)
    view = get_study(uow_factory(), study_id=study_id, actor=coordinator)
    [contribution] = view.contributions
    assert (contribution.id, contribution.kind, contribution.dataset_id) == (
        contribution_id,
        "dataset",
        dataset_id,
    )
    assert contribution.epsilon_cap_units == to_units(1.5, EPSILON_UNIT, "up")


def test_only_the_owner_grants_and_only_a_matching_spec(uow_factory: UnitOfWorkFactory) -> None:
    coordinator, member = make_site(uow_factory), make_site(uow_factory)
    study_id = _study(uow_factory, coordinator, member)
    theirs = _dataset_like(uow_factory, study_id, member)
    with pytest.raises(NotFoundError):
        _grant(uow_factory, study_id, coordinator, theirs, cap=1.0)
    relabelled = _dataset_like(
        uow_factory, study_id, member, label={"column": "y", "positive": "no", "negative": "yes"}
    )
    with pytest.raises(InvalidInputError, match="does not match the study's"):
        _grant(uow_factory, study_id, member, relabelled, cap=1.0)
    outsider = make_site(uow_factory)
    with pytest.raises(NotFoundError):
        _grant(uow_factory, study_id, outsider, _dataset_like(uow_factory, study_id, outsider), 1)


def test_a_contribution_is_withdrawn_by_its_site_until_it_is_used(
    uow_factory: UnitOfWorkFactory,
) -> None:
    coordinator, member = make_site(uow_factory), make_site(uow_factory)
    study_id = _study(uow_factory, coordinator, member)
    first = _grant(uow_factory, study_id, member, _dataset_like(uow_factory, study_id, member), 1)
    second = _grant(uow_factory, study_id, member, _dataset_like(uow_factory, study_id, member), 1)

    def withdraw(contribution_id: str, actor: Principal) -> None:
        withdraw_contribution(
            uow_factory(),
            study_id=study_id,
            contribution_id=contribution_id,
            actor=actor,
            context=CONTEXT,
        )

    with pytest.raises(PermissionDeniedError):
        withdraw(first, coordinator)
    withdraw(first, member)
    with pytest.raises(NotFoundError):
        withdraw(first, member)
    with uow_factory() as uow:
        assert uow.studies.mark_used([second], at=utcnow()) == 1
        uow.commit()
    with pytest.raises(ConflictError, match="used by an aggregation"):
        withdraw(second, member)
    view = get_study(uow_factory(), study_id=study_id, actor=member)
    assert [c.id for c in view.contributions] == [second]
