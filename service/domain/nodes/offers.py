"""Node side: offering one of this node's datasets to a study on a coordinator.

``POST /v1/datasets/{id}/offers`` registers the dataset on the coordinator as a remote
contribution carrying only its public spec (feature bounds and categories, label, encoded
width) and the caps the node accepts (:class:`CoordinatorLink`, an outbound call: the node needs
no open port). The node's ledger reserves nothing at offer time; each accepted job is charged
when it starts (:mod:`.node_tasks`), within the offer's caps. Withdrawal is recorded here
first (from then on the node refuses every task of the offer) and then told to the
coordinator.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from service.db.base import utcnow
from service.db.models import DatasetOffer, new_id
from service.db.uow import UnitOfWork
from service.domain import audit
from service.domain.access.principal import Principal
from service.domain.audit import AuditContext
from service.domain.datasets.catalog import get_owned_dataset, require_live
from service.domain.datasets.labels import require_binary
from service.domain.errors import InvalidInputError, NotFoundError, UpstreamError
from service.domain.ids import looks_like_id
from service.domain.ledger.units import DELTA_UNIT, EPSILON_UNIT, from_units, to_units
from service.domain.nodes.remote import NODE_STEPS_ASSUME_BINARY, RemoteOffer

__all__ = [
    "CoordinatorLink",
    "OfferView",
    "create_offer",
    "list_offers",
    "withdraw_offer",
]


class CoordinatorLink(Protocol):
    """The node's outbound connection to its coordinator (``PRIVFIT_COORDINATOR_URL`` with the
    site's key there). Each method raises :class:`UpstreamError` when the coordinator cannot
    be reached or refuses, with its reason."""

    def offer(self, *, study_id: str, offer: RemoteOffer) -> str:
        """Register ``offer`` as a remote contribution; returns the coordinator's id."""
        ...

    def withdraw(self, *, study_id: str, contribution_id: str) -> None: ...


@dataclass(frozen=True, slots=True)
class OfferView:
    id: str
    dataset_id: str
    study_id: str
    contribution_id: str
    epsilon_cap: float
    delta_cap: float
    epsilon_spent: float
    delta_spent: float
    created_at: datetime
    withdrawn_at: datetime | None


def _view(row: DatasetOffer) -> OfferView:
    return OfferView(
        id=row.id,
        dataset_id=row.dataset_id,
        study_id=row.study_id,
        contribution_id=row.contribution_id,
        epsilon_cap=from_units(row.epsilon_cap_units, EPSILON_UNIT),
        delta_cap=from_units(row.delta_cap_units, DELTA_UNIT),
        epsilon_spent=from_units(row.epsilon_spent_units, EPSILON_UNIT),
        delta_spent=from_units(row.delta_spent_units, DELTA_UNIT),
        created_at=row.created_at,
        withdrawn_at=row.withdrawn_at,
    )


def _require_link(link: CoordinatorLink | None) -> CoordinatorLink:
    if link is None:
        raise InvalidInputError(
            "this PrivFit has no coordinator: set PRIVFIT_COORDINATOR_URL and "
            "PRIVFIT_COORDINATOR_KEY to offer datasets to a coordinator's studies"
        )
    return link


#: Why a node offers datasets of binary labels only (its protocols' steps assume it).
NODE_LABEL_REASON = (
    f"{NODE_STEPS_ASSUME_BINARY}, so the node could not check that a step suits other "
    "labels; contribute a model fitted here instead (POST /v1/models/{id}/offers)"
)


def create_offer(
    uow: UnitOfWork,
    *,
    link: CoordinatorLink | None,
    dataset_id: str,
    study_id: str,
    epsilon_cap: float,
    delta_cap: float,
    actor: Principal,
    context: AuditContext,
) -> OfferView:
    """Offer a dataset the caller owns to a coordinator study. 404 for a dataset it does not
    own; 422 for caps beyond the dataset's own caps or no coordinator; 502 with the
    coordinator's reason when it refuses (a study the site is not in, a spec that differs)."""
    errors: list[dict[str, Any]] = []
    with uow:
        dataset = require_live(get_owned_dataset(uow, dataset_id=dataset_id, actor=actor))
        # After the ownership check: another site's dataset is a 404 whatever the setup.
        coordinator = _require_link(link)
        # The node's own guard (the coordinator refuses too): the terms a node accepts carry
        # no label form, and every node protocol step assumes y = ±1.
        require_binary(
            dataset.spec.get("label"),
            "offering a dataset to a study from a node",
            loc=["body", "dataset_id"],
            why=NODE_LABEL_REASON,
        )
        if not (math.isfinite(epsilon_cap) and epsilon_cap > 0):
            errors.append({"loc": ["body", "epsilon_cap"], "msg": "must be a finite number > 0"})
        elif to_units(epsilon_cap, EPSILON_UNIT, "up") > dataset.epsilon_cap_units:
            errors.append({"loc": ["body", "epsilon_cap"], "msg": "exceeds the dataset's ε cap"})
        if not (math.isfinite(delta_cap) and 0 <= delta_cap < 1):
            errors.append({"loc": ["body", "delta_cap"], "msg": "must satisfy 0 <= delta_cap < 1"})
        elif to_units(delta_cap, DELTA_UNIT, "up") > dataset.delta_cap_units:
            errors.append({"loc": ["body", "delta_cap"], "msg": "exceeds the dataset's δ cap"})
        if errors:
            raise InvalidInputError(
                "the offer's caps must fit within the dataset's budget caps: "
                + "; ".join(f"{e['loc'][-1]} {e['msg']}" for e in errors),
                errors=errors,
            )
        preprocessing = dict(dataset.preprocessing)
        label = dict(dataset.spec.get("label") or {})
        n_features = int(dataset.n_features)
    contribution_id = coordinator.offer(
        study_id=study_id,
        offer=RemoteOffer(
            node_dataset_id=dataset_id,
            preprocessing=preprocessing,
            label=label,
            n_features=n_features,
            epsilon_cap=epsilon_cap,
            delta_cap=delta_cap,
        ),
    )
    try:
        with uow:
            row = DatasetOffer(
                id=new_id(),
                dataset_id=dataset_id,
                study_id=study_id,
                contribution_id=contribution_id,
                epsilon_cap_units=to_units(epsilon_cap, EPSILON_UNIT, "up"),
                delta_cap_units=to_units(delta_cap, DELTA_UNIT, "up"),
            )
            uow.offers.add(row)
            audit.record(
                uow,
                action="dataset.offered",
                actor=actor,
                context=context,
                subject_type="dataset",
                subject_id=dataset_id,
                details={
                    "offer_id": row.id,
                    "study_id": study_id,
                    "contribution_id": contribution_id,
                },
            )
            uow.commit()
            return _view(row)
    except BaseException:
        # nothing stored here: take the registration back so neither side is half-done
        with contextlib.suppress(UpstreamError):
            coordinator.withdraw(study_id=study_id, contribution_id=contribution_id)
        raise


def list_offers(uow: UnitOfWork, *, dataset_id: str, actor: Principal) -> list[OfferView]:
    with uow:
        dataset = get_owned_dataset(uow, dataset_id=dataset_id, actor=actor)
        return [_view(r) for r in uow.offers.of_dataset(dataset.id)]


def withdraw_offer(
    uow: UnitOfWork,
    *,
    link: CoordinatorLink | None,
    dataset_id: str,
    offer_id: str,
    actor: Principal,
    context: AuditContext,
) -> OfferView:
    """Withdraw an offer: recorded here first (the node refuses its tasks from now on), then
    told to the coordinator (502 if it cannot be told; the offer stays withdrawn here)."""
    with uow:
        dataset = get_owned_dataset(uow, dataset_id=dataset_id, actor=actor)
        row = uow.offers.get(offer_id) if looks_like_id(offer_id) else None
        if row is None or row.dataset_id != dataset.id:
            raise NotFoundError("offer")
        # Without a coordinator the withdrawal could not be told: refuse before changing
        # anything rather than answer 422 for a withdrawal already stored.
        coordinator = _require_link(link)
        if uow.offers.withdraw(row.id, at=utcnow()):
            audit.record(
                uow,
                action="dataset.offer_withdrawn",
                actor=actor,
                context=context,
                subject_type="dataset",
                subject_id=dataset.id,
                details={"offer_id": row.id},
            )
        uow.commit()
        study_id, contribution_id = row.study_id, row.contribution_id
        row = uow.offers.get_fresh(row.id) or row
        view = _view(row)
    coordinator.withdraw(study_id=study_id, contribution_id=contribution_id)
    return view
