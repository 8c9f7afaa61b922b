"""Studies: several sites learning together without pooling data (issue 5 items 1-2).

A study has a coordinator (the site that creates it, also a member), member sites and a shared
feature spec (label + features, as in a dataset spec). Members read the study (members,
contributions, results); for anyone else it does not exist (404). Members contribute a model
they own, or a grant letting the study spend up to (ε, δ) of one of their datasets' budgets (the
federated fits use grants; here they are only recorded). Every contribution must encode exactly
the study's features and label: a mismatch is a 422 that lists what differs. A member can
withdraw its own contribution until an aggregation has used it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from service.db.errors import IntegrityConflictError
from service.db.models import Model, Study, StudyContribution, StudyMember, new_id
from service.db.uow import UnitOfWork
from service.domain import audit
from service.domain.access.principal import Principal
from service.domain.audit import AuditContext
from service.domain.datasets import labels
from service.domain.datasets.labels import DEFAULT_MAX_CLASSES, LabelTask, UnsupportedTaskError
from service.domain.datasets.spec import DatasetSpecError, FeatureInput, RowNorm, build_feature_spec
from service.domain.errors import (
    ConflictError,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
)
from service.domain.ids import looks_like_id
from service.domain.ledger.units import DELTA_UNIT, EPSILON_UNIT, from_units, to_units

__all__ = [
    "MAX_MEMBERS",
    "DatasetGrant",
    "StudyFacts",
    "StudyPage",
    "StudySpecInput",
    "StudyView",
    "add_contribution",
    "binary_only",
    "create_study",
    "get_study",
    "list_studies",
    "require_binary_study",
    "require_matching",
    "spec_differences",
    "study_task",
    "visible_study",
    "withdraw_contribution",
]

#: Member sites a study may name (besides the coordinator).
MAX_MEMBERS = 100


@dataclass(frozen=True, slots=True)
class StudySpecInput:
    """The study's label and features as the coordinator wrote them. The label takes any of
    a dataset spec's three forms (:mod:`service.domain.datasets.labels`): ``positive`` (and
    ``negative``), ``classes``, or the bounds ``lower``/``upper``."""

    label_column: str
    positive: str | int | bool | None
    features: Sequence[FeatureInput]
    row_norm: RowNorm = "clip"
    negative: str | int | bool | None = None
    classes: Sequence[str | int | bool] | None = None
    lower: float | None = None
    upper: float | None = None


@dataclass(frozen=True, slots=True)
class DatasetGrant:
    """A grant on one of the member's datasets: the study may spend up to (ε, δ) of it."""

    dataset_id: str
    epsilon_cap: float
    delta_cap: float


@dataclass(frozen=True, slots=True)
class StudyFacts:
    """What every model released to a study takes from the study: its encoded features,
    preprocessing and label (public), read once so a worker can build the model later."""

    id: str
    feature_names: list[str]
    preprocessing: dict[str, Any]
    label: dict[str, Any]

    @classmethod
    def of(cls, study: Study) -> StudyFacts:
        return cls(
            id=study.id,
            feature_names=list(study.feature_names),
            preprocessing=dict(study.preprocessing),
            label=dict(study.spec.get("label") or {}),
        )

    def model(
        self,
        *,
        owner_site_id: str,
        job_id: str,
        source: str,
        mechanism: str,
        loss: str,
        body: dict[str, Any],
        privacy: dict[str, Any],
        name: str | None = None,
        dataset_id: str | None = None,
        model_id: str | None = None,
    ) -> Model:
        """The (unsaved) model released to the study, readable by every member."""
        return Model(
            id=model_id or new_id(),
            owner_site_id=owner_site_id,
            name=name,
            source=source,
            mechanism=mechanism,
            loss=loss,
            feature_names=self.feature_names,
            preprocessing=self.preprocessing,
            body=body,
            label=self.label,
            privacy=privacy,
            dataset_id=dataset_id,
            job_id=job_id,
            study_id=self.id,
        )


@dataclass(frozen=True, slots=True)
class StudyView:
    """A study as its members see it."""

    study: Study
    members: tuple[StudyMember, ...]
    contributions: tuple[StudyContribution, ...]
    results: tuple[Model, ...]


@dataclass(frozen=True, slots=True)
class StudyPage:
    """One page of studies."""

    items: Sequence[StudyView]
    total: int


def _view(uow: UnitOfWork, study: Study) -> StudyView:
    return StudyView(
        study=study,
        members=tuple(uow.studies.members(study.id)),
        contributions=tuple(uow.studies.contributions(study.id)),
        results=tuple(uow.studies.results(study.id)),
    )


def visible_study(uow: UnitOfWork, study_id: str, actor: Principal) -> Study:
    """The study, if the caller's site is a member; 404 otherwise (the admin is in none)."""
    site_id = actor.site_or_not_found("study")
    if not looks_like_id(study_id):
        raise NotFoundError("study")
    study = uow.studies.get(study_id)
    if study is None or not uow.studies.is_member(study_id, site_id):
        raise NotFoundError("study")
    return study


# --- the feature spec ----------------------------------------------------------------------


def _build_spec(
    name: str, spec: StudySpecInput, max_classes: int
) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """(normalised spec, preprocessing, encoded feature names); 422 under ``body.spec``."""
    try:
        built = build_feature_spec(
            name=name,
            label_column=spec.label_column,
            positive=spec.positive,
            negative=spec.negative,
            features=spec.features,
            row_norm=spec.row_norm,
            classes=spec.classes,
            label_lower=spec.lower,
            label_upper=spec.upper,
            max_classes=max_classes,
        )
    except DatasetSpecError as exc:
        reason = exc.detail.removeprefix("invalid dataset spec: ")
        errors = []
        for e in exc.errors:
            loc = list(e.get("loc", ()))
            prefix = ["body"] if loc[:1] == ["name"] else ["body", "spec"]
            errors.append({"loc": [*prefix, *loc], "msg": str(e.get("msg", reason))})
        raise InvalidInputError(
            f"invalid study spec: {reason}",
            errors=errors or [{"loc": ["body", "spec"], "msg": reason}],
        ) from exc
    prep = built.preprocessing
    normalised = {
        "label": built.label,
        "features": [f.to_dict() for f in prep.features],
        "row_norm": prep.row_norm,
    }
    return normalised, prep.to_dict(), list(prep.feature_names())


def _describe_feature(feature: Mapping[str, Any]) -> str:
    if feature.get("type") == "numeric":
        return f"numeric with bounds [{feature.get('lower')!r}, {feature.get('upper')!r}]"
    return f"categorical with categories {list(feature.get('categories') or [])!r}"


def spec_differences(
    study_preprocessing: Mapping[str, Any],
    study_label: Mapping[str, Any],
    preprocessing: Mapping[str, Any],
    label: Mapping[str, Any],
) -> list[str]:
    """What differs between a contribution's public spec and the study's, in words (empty when
    they encode the same features in the same order, with the same label form: the same
    task, and the same positive class (binary), the same classes in the same order
    (multi-class: class k is the k-th declared class, so an order that differs would swap
    the rows of a (K, d) model), or the same bounds (regression: the [−1, 1] encoding depends
    on them). Specs are public: the messages quote bounds, classes and categories, never
    data."""
    out: list[str] = []
    if label.get("column") != study_label.get("column"):
        out.append(
            f"label column: {label.get('column')!r}, the study's is {study_label.get('column')!r}"
        )
    out.extend(_label_differences(label, study_label))
    mine = {str(f.get("column")): f for f in preprocessing.get("features") or []}
    theirs = {str(f.get("column")): f for f in study_preprocessing.get("features") or []}
    missing = [c for c in theirs if c not in mine]
    extra = [c for c in mine if c not in theirs]
    if missing:
        out.append("missing features the study declares: " + ", ".join(map(repr, missing)))
    if extra:
        out.append("features the study does not declare: " + ", ".join(map(repr, extra)))
    for column, feature in mine.items():
        reference = theirs.get(column)
        if reference is None or dict(feature) == dict(reference):
            continue
        out.append(
            f"feature {column!r}: {_describe_feature(feature)}, the study's is "
            f"{_describe_feature(reference)}"
        )
    shared_mine = [c for c in mine if c in theirs]
    shared_theirs = [c for c in theirs if c in mine]
    if not missing and not extra and shared_mine != shared_theirs:
        out.append(
            "feature order: "
            + ", ".join(shared_mine)
            + "; the study's is "
            + ", ".join(shared_theirs)
        )
    out.extend(
        f"{key}: {preprocessing.get(key)!r}, the study's is {study_preprocessing.get(key)!r}"
        for key in ("row_norm", "intercept")
        if preprocessing.get(key) != study_preprocessing.get(key)
    )
    if preprocessing.get("projection") != study_preprocessing.get("projection"):
        out.append("random projection: the contribution's design differs from the study's")
    return out


def _label_differences(label: Mapping[str, Any], study_label: Mapping[str, Any]) -> list[str]:
    """The label-form part of :func:`spec_differences`, each naming its field."""
    mine, theirs = LabelTask.from_label(label), LabelTask.from_label(study_label)
    if mine.task != theirs.task:
        return [f"label task: {mine.describe()}, the study's is {theirs.describe()}"]
    if mine.task == "multiclass":
        if mine.classes == theirs.classes:
            return []
        return [
            f"label classes: {list(mine.classes)!r}, the study's are {list(theirs.classes)!r} "
            "(the same classes in the same order)"
        ]
    if mine.task == "regression":
        if (mine.lower, mine.upper) == (theirs.lower, theirs.upper):
            return []
        return [
            f"label bounds (lower, upper): ({mine.lower!r}, {mine.upper!r}), the study's are "
            f"({theirs.lower!r}, {theirs.upper!r})"
        ]
    return _binary_differences(label, study_label)


def _binary_differences(label: Mapping[str, Any], study_label: Mapping[str, Any]) -> list[str]:
    if str(label.get("positive")) == str(study_label.get("positive")):
        return []
    return [
        f"positive class: {label.get('positive')!r}, the study's is {study_label.get('positive')!r}"
    ]


def study_task(study: Study) -> LabelTask:
    """The study's label form (binary for every study created before labels had forms)."""
    return LabelTask.from_label(dict(study.spec.get("label") or {}))


def binary_only(
    task: LabelTask, what: str, *, loc: list[str | int], why: str
) -> UnsupportedTaskError:
    """The 422 :class:`UnsupportedTaskError` for ``what`` (e.g. "the feature method"), defined
    for binary labels only, on a study whose label is ``task``, for the reason ``why``."""
    return labels.binary_only(task, what, loc=loc, why=why, scope="studies of binary labels")


def require_binary_study(study: Study, what: str, *, loc: list[str | int], why: str) -> None:
    """422 :class:`UnsupportedTaskError` (:func:`binary_only`) unless the study's label is
    binary."""
    task = study_task(study)
    if task.task != "binary":
        raise binary_only(task, what, loc=loc, why=why)


def require_matching(
    study: Study,
    preprocessing: Mapping[str, Any],
    label: Mapping[str, Any],
    what: str,
    *,
    field: str | None = None,
) -> None:
    """422 listing :func:`spec_differences` unless the spec matches the study's (its label
    form included: task, classes in order, bounds)."""
    differences = spec_differences(
        study.preprocessing, dict(study.spec.get("label") or {}), preprocessing, label
    )
    if differences:
        raise InvalidInputError(
            f"the {what}'s feature spec does not match the study's: " + "; ".join(differences),
            errors=[{"loc": ["body", field or f"{what}_id"], "msg": d} for d in differences],
        )


# --- use cases -----------------------------------------------------------------------------


def create_study(
    uow: UnitOfWork,
    *,
    name: str,
    members: Sequence[str],
    spec: StudySpecInput,
    actor: Principal,
    context: AuditContext,
    max_classes: int = DEFAULT_MAX_CLASSES,
) -> StudyView:
    """Create a study coordinated by the caller, with the named member sites.

    422 when no member besides the coordinator is named, when a member id is not a site, or
    when the spec breaks the dataset-spec rules.
    """
    coordinator = actor.require_site()
    normalised, preprocessing, feature_names = _build_spec(name, spec, max_classes)
    others: list[str] = []
    for site_id in members:
        if site_id != coordinator and site_id not in others:
            others.append(site_id)
    if not others:
        raise InvalidInputError(
            "a study needs at least one member site besides the coordinator",
            errors=[{"loc": ["body", "members"], "msg": "name at least one other site"}],
        )
    if len(others) > MAX_MEMBERS:
        raise InvalidInputError(
            f"a study has at most {MAX_MEMBERS} members besides the coordinator",
            errors=[{"loc": ["body", "members"], "msg": f"at most {MAX_MEMBERS} sites"}],
        )
    with uow:
        known = uow.studies.existing_site_ids([s for s in others if looks_like_id(s)])
        unknown = [i for i, s in enumerate(members) if s != coordinator and s not in known]
        if unknown:
            raise InvalidInputError(
                "every member must be an existing site id; unknown: "
                + ", ".join(repr(members[i]) for i in unknown),
                errors=[{"loc": ["body", "members", i], "msg": "no such site"} for i in unknown],
            )
        study = uow.studies.add(
            Study(
                id=new_id(),
                coordinator_site_id=coordinator,
                name=name,
                spec=normalised,
                preprocessing=preprocessing,
                feature_names=feature_names,
            )
        )
        uow.studies.add_member(study.id, coordinator, role="coordinator")
        for site_id in others:
            uow.studies.add_member(study.id, site_id, role="member")
        audit.record(
            uow,
            action="study.created",
            actor=actor,
            context=context,
            subject_type="study",
            subject_id=study.id,
            details={"members": len(others) + 1},
        )
        uow.commit()
        return _view(uow, study)


def get_study(uow: UnitOfWork, *, study_id: str, actor: Principal) -> StudyView:
    """A study the caller belongs to; others are 404 (for the admin, every study)."""
    with uow:
        return _view(uow, visible_study(uow, study_id, actor))


def list_studies(uow: UnitOfWork, *, actor: Principal, limit: int, offset: int) -> StudyPage:
    """The studies the caller belongs to, newest first (403 for the admin, in none)."""
    member = actor.require_site()
    with uow:
        return StudyPage(
            items=[
                _view(uow, s)
                for s in uow.studies.list_page(member_site_id=member, limit=limit, offset=offset)
            ],
            total=uow.studies.count(member_site_id=member),
        )


def _grant_units(
    grant: DatasetGrant, epsilon_cap_units: int, delta_cap_units: int
) -> tuple[int, int]:
    errors: list[dict[str, Any]] = []
    eps_units = delta_units = 0
    if not (math.isfinite(grant.epsilon_cap) and grant.epsilon_cap > 0):
        errors.append({"loc": ["body", "epsilon_cap"], "msg": "must be a finite number > 0"})
    else:
        eps_units = to_units(grant.epsilon_cap, EPSILON_UNIT, "up")
        if eps_units > epsilon_cap_units:
            errors.append(
                {
                    "loc": ["body", "epsilon_cap"],
                    "msg": "exceeds the dataset's ε cap of "
                    f"{from_units(epsilon_cap_units, EPSILON_UNIT)!r}",
                }
            )
    if not (math.isfinite(grant.delta_cap) and 0 <= grant.delta_cap < 1):
        errors.append({"loc": ["body", "delta_cap"], "msg": "must satisfy 0 <= delta_cap < 1"})
    else:
        delta_units = to_units(grant.delta_cap, DELTA_UNIT, "up")
        if delta_units > delta_cap_units:
            errors.append(
                {
                    "loc": ["body", "delta_cap"],
                    "msg": "exceeds the dataset's δ cap of "
                    f"{from_units(delta_cap_units, DELTA_UNIT)!r}",
                }
            )
    if errors:
        raise InvalidInputError(
            "the grant must fit within the dataset's budget caps: "
            + "; ".join(f"{e['loc'][-1]} {e['msg']}" for e in errors),
            errors=errors,
        )
    return eps_units, delta_units


def add_contribution(
    uow: UnitOfWork,
    *,
    study_id: str,
    actor: Principal,
    context: AuditContext,
    model_id: str | None = None,
    grant: DatasetGrant | None = None,
) -> StudyContribution:
    """Contribute a model the caller owns, or a grant on one of its datasets.

    404 for a study the caller is not in, or a model/dataset it does not own; 422 when the
    feature spec differs from the study's (the message lists what differs) or a grant exceeds
    the dataset's caps; 409 when the same model or dataset is already contributed.
    """
    site_id = actor.site_or_not_found("study")
    if (model_id is None) == (grant is None):
        raise InvalidInputError("contribute either a model_id or a dataset grant")
    with uow:
        study = visible_study(uow, study_id, actor)
        if model_id is not None:
            model = uow.models.get(model_id) if looks_like_id(model_id) else None
            if model is None or model.owner_site_id != site_id:
                raise NotFoundError("model")
            if model.study_id is not None:
                raise InvalidInputError(
                    "a study's aggregated result cannot be contributed to a study",
                    errors=[{"loc": ["body", "model_id"], "msg": "an aggregated study model"}],
                )
            require_matching(study, model.preprocessing, dict(model.label or {}), "model")
            contribution = StudyContribution(
                id=new_id(), study_id=study.id, site_id=site_id, kind="model", model_id=model.id
            )
        else:
            assert grant is not None
            dataset = (
                uow.datasets.get(grant.dataset_id) if looks_like_id(grant.dataset_id) else None
            )
            if (
                dataset is None
                or dataset.owner_site_id != site_id
                or dataset.deleted_at is not None
            ):
                raise NotFoundError("dataset")
            require_matching(
                study, dataset.preprocessing, dict(dataset.spec.get("label") or {}), "dataset"
            )
            eps_units, delta_units = _grant_units(
                grant, dataset.epsilon_cap_units, dataset.delta_cap_units
            )
            contribution = StudyContribution(
                id=new_id(),
                study_id=study.id,
                site_id=site_id,
                kind="dataset",
                dataset_id=dataset.id,
                epsilon_cap_units=eps_units,
                delta_cap_units=delta_units,
            )
        try:
            uow.studies.add_contribution(contribution)
        except IntegrityConflictError as exc:
            raise ConflictError(
                f"this {contribution.kind} is already contributed to the study"
            ) from exc
        audit.record(
            uow,
            action="study.contribution_added",
            actor=actor,
            context=context,
            subject_type="study",
            subject_id=study.id,
            details={"contribution_id": contribution.id, "kind": contribution.kind},
        )
        uow.commit()
        return contribution


def withdraw_contribution(
    uow: UnitOfWork,
    *,
    study_id: str,
    contribution_id: str,
    actor: Principal,
    context: AuditContext,
) -> None:
    """Withdraw the caller's own contribution; 409 once an aggregation has used it."""
    site_id = actor.site_or_not_found("study")
    with uow:
        study = visible_study(uow, study_id, actor)
        contribution = (
            uow.studies.contribution(study.id, contribution_id)
            if looks_like_id(contribution_id)
            else None
        )
        if contribution is None:
            raise NotFoundError("contribution")
        if contribution.site_id != site_id:
            raise PermissionDeniedError("only the contributing site can withdraw a contribution")
        if contribution.used_at is not None or not uow.studies.delete_unused_contribution(
            contribution.id
        ):
            raise ConflictError(
                "the contribution has been used by an aggregation and can no longer be withdrawn"
            )
        audit.record(
            uow,
            action="study.contribution_withdrawn",
            actor=actor,
            context=context,
            subject_type="study",
            subject_id=study.id,
            details={"contribution_id": contribution.id},
        )
        uow.commit()
