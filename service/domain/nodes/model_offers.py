"""Node side: contribute a model fitted here to a coordinator's study, in one call.

``POST /v1/models/{id}/offers`` uploads the model's weights, public feature spec and label to
the coordinator (``POST /v1/models`` there, stored as the site's model with its privacy claim)
and contributes it to the study (``POST /v1/studies/{id}/contributions``) for ``average``,
``feature`` or ``transfer`` aggregation. The privacy claim carries this node's record: ε, δ
and the mechanism of the fit, and the record's statement; the coordinator labels it a claim
(it cannot check it). Only the released model leaves the node, which is post-processing of a
DP release: nothing new is charged.

Every label task is offered in the form ``POST /v1/models`` takes (docs/design.md §5): a
binary or regression model as its weight vector (a regression model's in the label's [−1, 1]
units, as stored), a multi-class one as its K rows, with the label's form (``positive``/
``negative``, ``classes`` in order, or ``lower``/``upper``). The coordinator stores what it is
sent and accepts it into a study only when the label matches the study's (the same task, the
same classes in the same order, the same bounds), so a model always scores in its study's
units. The loss travels when the coordinator's upload takes it for the task, as ``other``
otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from service.db.uow import UnitOfWork
from service.domain import audit
from service.domain.access.principal import Principal
from service.domain.audit import AuditContext
from service.domain.datasets.labels import LabelTask
from service.domain.errors import InvalidInputError, NotFoundError
from service.domain.ids import looks_like_id
from service.domain.models.catalog import TASK_UPLOAD_LOSSES

__all__ = ["ModelLink", "ModelOffer", "offer_model"]


class ModelLink(Protocol):
    """The coordinator calls a model offer makes (``service.runtime.node_link``)."""

    def upload_model(self, body: Mapping[str, Any]) -> str: ...

    def contribute_model(self, *, study_id: str, model_id: str) -> str: ...


@dataclass(frozen=True, slots=True)
class ModelOffer:
    model_id: str
    study_id: str
    coordinator_model_id: str
    contribution_id: str


def _claim(privacy: Mapping[str, Any], mechanism: str | None, model_id: str) -> dict[str, Any]:
    statement = str(privacy.get("statement") or privacy.get("guarantee") or "")
    epsilon = privacy.get("epsilon")
    delta = privacy.get("delta")
    return {
        "epsilon": float(epsilon) if isinstance(epsilon, int | float) else None,
        "delta": float(delta) if isinstance(delta, int | float) else None,
        "mechanism": (mechanism or "unknown")[:64],
        "description": (
            f"fitted on a PrivFit node (its model {model_id}); the node's privacy record: "
            f"{statement}"
        )[:2000],
    }


#: The members of a label of each form (binary, multi-class, numeric).
_LABEL_KEYS = ("column", "positive", "negative", "classes", "lower", "upper")


def _weights(body: Mapping[str, Any], task: str) -> list[Any] | None:
    """The weights as ``POST /v1/models`` takes them: a vector (binary, regression) or one row
    per class (multi-class); None for a model that is not one linear map (stacked)."""
    coef = body.get("coef")
    if not isinstance(coef, list):
        return None
    if body.get("kind") == "multiclass" and task == "multiclass":
        return [[float(w) for w in row] for row in coef]
    if body.get("kind") == "linear" and task != "multiclass":
        return [float(w) for w in coef]
    return None


def offer_model(
    uow: UnitOfWork,
    *,
    link: ModelLink | None,
    model_id: str,
    study_id: str,
    actor: Principal,
    context: AuditContext,
) -> ModelOffer:
    """Upload a model the caller owns (binary, multi-class or regression) to the coordinator and
    contribute it to a study. 404 for a model it does not own; 422 for a study result or a
    model that is not one linear map over a public spec; 502 with the coordinator's reason
    when it refuses (e.g. a study of another label task)."""
    site_id = actor.site_or_not_found("model")
    with uow:
        model = uow.models.get(model_id) if looks_like_id(model_id) else None
        if model is None or model.owner_site_id != site_id:
            raise NotFoundError("model")
        # After the ownership check: another site's model is a 404 whatever the setup.
        if link is None:
            raise InvalidInputError(
                "this PrivFit has no coordinator: set PRIVFIT_COORDINATOR_URL and "
                "PRIVFIT_COORDINATOR_KEY to contribute models to a coordinator's studies"
            )
        if model.study_id is not None:
            raise InvalidInputError("a study's aggregated result cannot be contributed to a study")
        task = LabelTask.from_label(model.label)
        weights = _weights(model.body, task.task)
        prep = model.preprocessing
        if weights is None or prep.get("projection") or not prep.get("features"):
            raise InvalidInputError(
                "only a linear model over a public feature spec (no random projection) can be "
                "contributed to a coordinator's study: the coordinator stores it as weights "
                "over the encoded features of that spec"
            )
        label = {k: v for k, v in dict(model.label or {}).items() if k in _LABEL_KEYS}
        body = {
            "label": label,
            "features": list(prep["features"]),
            "row_norm": prep.get("row_norm", "clip"),
            "weights": weights,
            "loss": model.loss if model.loss in TASK_UPLOAD_LOSSES[task.task] else "other",
            "privacy_claim": _claim(dict(model.privacy or {}), model.mechanism, model.id),
        }
    coordinator_model_id = link.upload_model(body)
    contribution_id = link.contribute_model(study_id=study_id, model_id=coordinator_model_id)
    with uow:
        audit.record(
            uow,
            action="model.offered",
            actor=actor,
            context=context,
            subject_type="model",
            subject_id=model_id,
            details={
                "study_id": study_id,
                "coordinator_model_id": coordinator_model_id,
                "contribution_id": contribution_id,
            },
        )
        uow.commit()
    return ModelOffer(
        model_id=model_id,
        study_id=study_id,
        coordinator_model_id=coordinator_model_id,
        contribution_id=contribution_id,
    )
