"""Coordinator side: remote contributions, datasets kept on member sites' own nodes.

A node offers one of its datasets to a study it is a member of (``POST
/v1/studies/{id}/remote-contributions``, called by the node's ``POST
/v1/datasets/{id}/offers``): the coordinator stores only the dataset's public spec (features
with their public bounds and categories, label, encoded width) and the caps the node accepts
per job, never a row or a row count. The node's ledger is the authority on the dataset's
budget; the caps here are what the coordinator may ask for. Either side withdraws; a withdrawn
contribution takes part in no new fit (a running one fails at its next task on the node).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from service.db.base import utcnow
from service.db.models import RemoteContribution, new_id
from service.db.uow import UnitOfWork
from service.domain import audit
from service.domain.access.principal import Principal
from service.domain.audit import AuditContext
from service.domain.errors import InvalidInputError, NotFoundError, PermissionDeniedError
from service.domain.ids import looks_like_id
from service.domain.ledger.units import DELTA_UNIT, EPSILON_UNIT, from_units, to_units
from service.domain.studies.membership import (
    require_binary_study,
    require_matching,
    visible_study,
)

__all__ = [
    "RemoteOffer",
    "RemoteView",
    "add_remote_contribution",
    "list_remote_contributions",
    "remote_view",
    "withdraw_remote_contribution",
]


@dataclass(frozen=True, slots=True)
class RemoteOffer:
    """What a node sends when it offers a dataset: its public spec and the per-study caps."""

    node_dataset_id: str
    preprocessing: Mapping[str, Any]
    label: Mapping[str, Any]
    n_features: int
    epsilon_cap: float
    delta_cap: float


@dataclass(frozen=True, slots=True)
class RemoteView:
    id: str
    study_id: str
    site_id: str
    node_dataset_id: str
    n_features: int
    epsilon_cap: float
    delta_cap: float
    created_at: Any
    withdrawn_at: Any


def remote_view(row: RemoteContribution) -> RemoteView:
    return RemoteView(
        id=row.id,
        study_id=row.study_id,
        site_id=row.site_id,
        node_dataset_id=row.node_dataset_id,
        n_features=row.n_features,
        epsilon_cap=from_units(row.epsilon_cap_units, EPSILON_UNIT),
        delta_cap=from_units(row.delta_cap_units, DELTA_UNIT),
        created_at=row.created_at,
        withdrawn_at=row.withdrawn_at,
    )


def _caps(epsilon_cap: float, delta_cap: float) -> tuple[int, int]:
    errors: list[dict[str, Any]] = []
    if not (
        isinstance(epsilon_cap, int | float) and math.isfinite(epsilon_cap) and epsilon_cap > 0
    ):
        errors.append({"loc": ["body", "epsilon_cap"], "msg": "must be a finite number > 0"})
    if not (math.isfinite(delta_cap) and 0 <= delta_cap < 1):
        errors.append({"loc": ["body", "delta_cap"], "msg": "must satisfy 0 <= delta_cap < 1"})
    if errors:
        raise InvalidInputError(
            "invalid caps: " + "; ".join(f"{e['loc'][-1]} {e['msg']}" for e in errors),
            errors=errors,
        )
    return to_units(float(epsilon_cap), EPSILON_UNIT, "up"), to_units(
        float(delta_cap), DELTA_UNIT, "up"
    )


#: Why node protocols take datasets of binary labels only (the first half of either side's 422).
NODE_STEPS_ASSUME_BINARY = (
    "the node protocols (psgd, admm) compute every step for labels y = ±1, and the terms a node "
    "accepts carry no label form"
)


def add_remote_contribution(
    uow: UnitOfWork,
    *,
    study_id: str,
    offer: RemoteOffer,
    actor: Principal,
    context: AuditContext,
) -> RemoteView:
    """Register a member's node dataset in the study. 404 for a study the caller is not in;
    422 when the spec differs from the study's (the message lists what) or the caps are bad."""
    site_id = actor.site_or_not_found("study")
    eps_units, delta_units = _caps(offer.epsilon_cap, offer.delta_cap)
    if not (isinstance(offer.n_features, int) and offer.n_features > 0):
        raise InvalidInputError(
            "n_features must be a positive integer",
            errors=[{"loc": ["body", "n_features"], "msg": "must be a positive integer"}],
        )
    with uow:
        study = visible_study(uow, study_id, actor)
        require_binary_study(
            study,
            "a dataset on a site node",
            loc=["body", "spec"],
            why=f"{NODE_STEPS_ASSUME_BINARY}, so a node could not check that a step suits its "
            "labels; grant the dataset to the study instead, or contribute a model fitted on "
            "the node",
        )
        require_matching(study, offer.preprocessing, offer.label, "dataset", field="spec")
        row = RemoteContribution(
            id=new_id(),
            study_id=study.id,
            site_id=site_id,
            node_dataset_id=offer.node_dataset_id,
            spec={"preprocessing": dict(offer.preprocessing), "label": dict(offer.label)},
            n_features=offer.n_features,
            epsilon_cap_units=eps_units,
            delta_cap_units=delta_units,
        )
        uow.remote_contributions.add(row)
        audit.record(
            uow,
            action="study.remote_contribution_added",
            actor=actor,
            context=context,
            subject_type="study",
            subject_id=study.id,
            details={"contribution_id": row.id},
        )
        uow.commit()
        return remote_view(row)


def list_remote_contributions(
    uow: UnitOfWork, *, study_id: str, actor: Principal
) -> list[RemoteView]:
    """Every remote contribution of a study the caller is in (withdrawn ones included)."""
    with uow:
        study = visible_study(uow, study_id, actor)
        return [
            remote_view(r) for r in uow.remote_contributions.of_study(study.id, active_only=False)
        ]


def withdraw_remote_contribution(
    uow: UnitOfWork,
    *,
    study_id: str,
    contribution_id: str,
    actor: Principal,
    context: AuditContext,
) -> None:
    """Withdraw a remote contribution: by the site that offered it, or by the study's
    coordinator. Idempotent; 404 when unknown."""
    site_id = actor.site_or_not_found("study")
    with uow:
        study = visible_study(uow, study_id, actor)
        row = (
            uow.remote_contributions.get(contribution_id)
            if looks_like_id(contribution_id)
            else None
        )
        if row is None or row.study_id != study.id:
            raise NotFoundError("contribution")
        if site_id not in (row.site_id, study.coordinator_site_id):
            raise PermissionDeniedError(
                "only the contributing site or the study's coordinator can withdraw it"
            )
        if uow.remote_contributions.withdraw(row.id, at=utcnow()):
            audit.record(
                uow,
                action="study.remote_contribution_withdrawn",
                actor=actor,
                context=context,
                subject_type="study",
                subject_id=study.id,
                details={"contribution_id": row.id},
            )
        uow.commit()
