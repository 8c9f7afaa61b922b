"""The charged aggregation methods' jobs: ``transfer`` (PST-F, or PST-H with feature groups) and
``feature``, on a dataset the coordinator owns.

:func:`charged_draft` turns a request into the job the one charged-job contract submits
(:func:`service.domain.jobs.charged.submit_charged_job`): the source models and the dataset
are checked, and the job is priced by the method's calibration (:mod:`service.dp.multisite.methods`)
on the dataset's public n and d. :func:`run_aggregation_job` is the worker's half: it reads
the sources and the dataset, fits, and returns the model with its privacy record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from service.db.models import Dataset, Study
from service.db.uow import UnitOfWork, UnitOfWorkFactory
from service.domain.access.principal import Principal
from service.domain.datasets.catalog import load_design
from service.domain.errors import (
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
)
from service.domain.ids import looks_like_id
from service.domain.jobs.charged import (
    DatasetCharge,
    JobDraft,
    Pricing,
)
from service.domain.jobs.lifecycle import (
    ClaimedJob,
    JobContext,
    Release,
    charged_amounts,
)
from service.domain.ranges import calibrated, check_calibration
from service.domain.records.aggregations import input_entry, transfer_privacy_record
from service.domain.records.base import (
    json_safe,
)
from service.domain.studies.aggregation_inputs import SourceInput, average_inputs, select_inputs
from service.domain.studies.membership import (
    StudyFacts,
    binary_only,
    require_matching,
    study_task,
    visible_study,
)
from service.domain.studies.transfer_groups import check_group_budgets, resolve_groups
from service.dp.analysis.work import solve_work
from service.dp.core.base import Calibration
from service.dp.core.released import META_FEATURES
from service.dp.multisite.aggregation import (
    FEATURE_MECHANISMS,
    META_FEATURE_KINDS,
)
from service.dp.multisite.methods import (
    CHARGED_AGGREGATIONS,
    ChargedAggregation,
    feature_method,
    transfer_method,
)


@dataclass(frozen=True, slots=True)
class TransferRequest:
    """Hypothesis transfer onto the coordinator's own target dataset; with ``feature_groups``
    (lists of the study's encoded feature names, or of categorical column names standing for
    their one-hot block) and optional public ``importance`` weights it is PST-H (seed 003)."""

    target_dataset_id: str
    epsilon: float
    transfer_strength: float
    source_models: Sequence[str] | None = None
    regularization: float = 0.01
    loss: str = "logistic"
    name: str | None = None
    feature_groups: Sequence[Sequence[str]] | None = None
    importance: Sequence[float] | None = None
    #: PST-H's meta-features (``sigmoid``, the default, or ``centered_sigmoid``).
    meta_features: str | None = None


@dataclass(frozen=True, slots=True)
class FeatureRequest:
    """The feature method on the coordinator's own holdout dataset."""

    holdout_dataset_id: str
    epsilon: float
    delta: float = 0.0
    mechanism: str = "objective_perturbation"
    regularization: float = 0.01
    meta_features: str = "linear"
    source_models: Sequence[str] | None = None
    loss: str = "logistic"
    name: str | None = None


#: Why a charged method refuses a study of multi-class or numeric labels (a 422 saying so,
#: nothing charged; docs/design.md, "Studies of multi-class and numeric labels"), by the
#: variant's name: ``feature`` with sigmoid meta-features and PST-H (``transfer`` with
#: feature groups). Plain ``transfer`` and ``feature`` with linear meta-features fit every task.
BINARY_ONLY: Mapping[str, str] = {
    "feature": (
        "sigmoid meta-features are each site model's probability σ(fᵀx) of the positive class "
        "of a binary label, and the stacked model's high level is a binary logistic fit on "
        "them; a multi-class model gives K softmax probabilities and a numeric one a value, "
        "neither one probability per model; use linear meta-features (a fit of the study's "
        "task on the site models' scores) or average the models instead"
    ),
    "transfer": (
        "PST-H's high level is a binary logistic fit on sigmoid meta-features σ(u_kᵀx), each "
        "group model's probability of the positive class of a binary label; a multi-class or "
        "numeric label has no such probability per group; use transfer without "
        "feature_groups (the centred multinomial or Huber objective perturbation) or "
        "average the models instead"
    ),
}


def _for_task(
    study: Study, spec: ChargedAggregation, params: Mapping[str, Any]
) -> tuple[ChargedAggregation, Mapping[str, Any]]:
    """The method and its job parameters for the study's label task (derived once): unchanged
    for a binary study; for a multi-class or numeric one, ``transfer`` without feature groups
    and ``feature`` with linear meta-features fit the task (their parameters name it),
    sigmoid stacking and PST-H are a 422 with the reason."""
    labels = study_task(study)
    if labels.task == "binary":
        return spec, params
    if spec.method == "feature" and params.get("meta_features") != "linear":
        raise binary_only(
            labels,
            "the feature method with sigmoid meta-features",
            loc=["body", "meta_features"],
            why=BINARY_ONLY["feature"],
        )
    if spec.method == "transfer" and params.get("feature_groups"):
        raise binary_only(
            labels,
            "the transfer method with feature groups (PST-H)",
            loc=["body", "feature_groups"],
            why=BINARY_ONLY["transfer"],
        )
    with_task = {**params, **labels.dp_kwargs}
    return CHARGED_AGGREGATIONS[spec.method](with_task), with_task


def _method_draft(
    study_id: str,
    spec: ChargedAggregation,
    dataset_id: str,
    source_models: Sequence[str] | None,
    params: Mapping[str, Any],
    actor: Principal,
) -> Callable[[UnitOfWork], JobDraft]:
    """The job of a charged aggregation (see :func:`transfer`): the coordinator, the source
    models, its own dataset whose spec matches the study's; priced by ``spec``'s calibration
    on the dataset's public n and d, charged to that dataset."""

    def draft(uow: UnitOfWork) -> JobDraft:
        site_id = actor.site_or_not_found("study")
        study = visible_study(uow, study_id, actor)
        if study.coordinator_site_id != site_id:
            raise PermissionDeniedError("only the study's coordinator can run aggregations")
        method, job_params = _for_task(study, spec, params)
        multiclass = job_params.get("task") == "multiclass"
        inputs = select_inputs(uow, study, source_models)
        average_inputs(inputs, None)  # refuses stacked (non-linear) sources
        dataset = uow.datasets.get(dataset_id) if looks_like_id(dataset_id) else None
        if dataset is None or dataset.owner_site_id != site_id or dataset.deleted_at is not None:
            raise NotFoundError("dataset")
        require_matching(
            study,
            dataset.preprocessing,
            dict(dataset.spec.get("label") or {}),
            f"{method.role} dataset",
            field=method.field,
        )

        def price() -> Pricing:
            calibration = _calibrate_charged(method, dataset, len(inputs))
            return Pricing(
                mechanism=method.method,
                charges=[
                    DatasetCharge(
                        dataset_id=dataset.id,
                        owner_site_id=site_id,
                        epsilon=calibration.epsilon,
                        delta=calibration.delta,
                    )
                ],
                audit_action="study.aggregated",
                audit_subject=("study", study.id),
                audit_details={"method": method.method, "dataset_id": dataset.id},
                used_contributions=[i.contribution_id for i in inputs],
                calibration=calibration,
                # one solve on the caller's dataset (stacking: over the K source scores), in
                # dimension d·K for a multi-class model
                work=solve_work(
                    int(dataset.n_rows),
                    (int(dataset.n_features) + len(inputs))
                    * (int(job_params.get("n_classes", 1)) if multiclass else 1),
                ),
            )

        return JobDraft(
            kind="aggregate",
            dataset_id=dataset.id,
            params={
                **job_params,
                "method": method.method,
                "study_id": study.id,
                "source_models": [i.model.id for i in inputs],
                method.field: dataset.id,
            },
            price=price,
        )

    return draft


def _calibrate_charged(spec: ChargedAggregation, dataset: Dataset, k: int) -> Calibration:
    """``spec``'s calibration on the dataset's public size; 422 for parameters it refuses."""
    calibration = calibrated(
        spec.method,
        lambda: spec.calibrate(max(int(dataset.n_rows), 1), int(dataset.n_features), k),
    )
    check_calibration(
        epsilon=calibration.epsilon,
        delta=calibration.delta,
        details=calibration.details,
        noise_norm=calibration.expected_noise_norm,
    )
    return calibration


def run_aggregation_job(
    uow_factory: UnitOfWorkFactory, job: ClaimedJob, context: JobContext
) -> Release:
    """The worker's half of ``feature`` and ``transfer``: read the source models and the
    coordinator's dataset, fit, and return the model with its privacy record. Spent: the
    (ε, δ) the fit reports on the coordinator's dataset (the sources are post-processed
    models: reading them spends nothing)."""
    params = job.params
    spec = CHARGED_AGGREGATIONS[str(params["method"])](params)
    dataset_id = str(params[spec.field])
    with uow_factory() as uow:
        study = uow.studies.get(str(params["study_id"]))
        dataset = uow.datasets.get(dataset_id)
        if study is None or dataset is None or dataset.deleted_at is not None:
            raise NotFoundError("dataset")
        contributed = {
            c.model_id: c.site_id
            for c in uow.studies.contributions(study.id)
            if c.kind == "model" and c.model_id is not None
        }
        inputs: list[SourceInput] = []
        for model_id in params["source_models"]:
            model = uow.models.get(str(model_id))
            if model is None or model_id not in contributed:
                raise LookupError("a source model of the aggregation is gone")
            inputs.append(
                SourceInput(model=model, site_id=contributed[model_id], contribution_id="")
            )
        sources = [list(i.model.body["coef"]) for i in inputs]
        entries = [input_entry(item.model, item.site_id, 1.0 / len(inputs)) for item in inputs]
        target_site = dataset.owner_site_id
        facts = StudyFacts.of(study)
    context.progress(0.0)
    X, y = load_design(uow_factory, dataset_id)
    result = spec.compute(X, y, sources, context.randomness.generator(job.id))
    record = transfer_privacy_record(
        entries,
        target_id=dataset_id,
        target_site_id=target_site,
        epsilon=result.epsilon,
        delta=result.delta,
        charged=charged_amounts(job),
        calibration=result.details,
        randomness=context.randomness,
        job_id=job.id,
        study_id=str(params["study_id"]),
        method=spec.method,
        role=spec.role,
        base_mechanism=spec.base_mechanism,
        within_job=spec.within_job,
    )
    model = facts.model(
        owner_site_id=job.owner_site_id,
        job_id=job.id,
        name=params.get("name"),
        source="aggregate",
        mechanism=spec.method,
        loss=str(params["loss"]),
        body=json_safe(result.model.to_dict()),
        privacy=record,
        dataset_id=dataset_id,
    )
    return Release(model=model, spent={dataset_id: (float(result.epsilon), float(result.delta))})


def transfer_draft(
    uow: UnitOfWork, study_id: str, request: TransferRequest, actor: Principal
) -> Callable[[UnitOfWork], JobDraft]:
    """Hypothesis transfer's job: the parameters (PST-H's groups resolved on the study's public
    features) and its :func:`_method_draft`."""
    params: dict[str, Any] = {
        "epsilon": request.epsilon,
        "delta": 0.0,
        "transfer_strength": request.transfer_strength,
        "regularization": request.regularization,
        "loss": request.loss,
        "name": request.name,
    }
    if request.meta_features is not None and request.feature_groups is None:
        raise InvalidInputError(
            "meta_features needs feature_groups (plain transfer has no meta level)",
            errors=[{"loc": ["body", "meta_features"], "msg": "needs feature_groups"}],
        )
    if request.meta_features is not None and request.meta_features not in META_FEATURES:
        raise InvalidInputError(f"meta_features must be one of {', '.join(META_FEATURES)}")
    if request.feature_groups is not None or request.importance is not None:
        site_id = actor.site_or_not_found("study")
        with uow:
            study = visible_study(uow, study_id, actor)
            if study.coordinator_site_id != site_id:
                raise PermissionDeniedError("only the study's coordinator can run aggregations")
            feature_names = list(study.feature_names)
            preprocessing = dict(study.preprocessing)
        groups, named, unused, importance = resolve_groups(
            feature_names, preprocessing, request.feature_groups, request.importance
        )
        params.update(
            feature_groups=groups,
            feature_group_names=named,
            unused_features=unused,
            importance=importance,
            meta_features=request.meta_features or "sigmoid",
        )
        check_group_budgets(importance, len(groups), request.epsilon)
    return _method_draft(
        study_id,
        transfer_method(params),
        request.target_dataset_id,
        request.source_models,
        params,
        actor,
    )


def feature_draft(
    _uow: UnitOfWork, study_id: str, request: FeatureRequest, actor: Principal
) -> Callable[[UnitOfWork], JobDraft]:
    """The feature method's job: its checked parameters and its :func:`_method_draft`."""
    if request.meta_features not in META_FEATURE_KINDS:
        raise InvalidInputError(f"meta_features must be one of {', '.join(META_FEATURE_KINDS)}")
    if request.mechanism not in FEATURE_MECHANISMS:
        raise InvalidInputError(
            f"the meta-level mechanism must be one of {', '.join(FEATURE_MECHANISMS)}"
        )
    params = {
        "epsilon": request.epsilon,
        "delta": request.delta,
        "mechanism": request.mechanism,
        "meta_features": request.meta_features,
        "regularization": request.regularization,
        "loss": request.loss,
        "name": request.name,
    }
    return _method_draft(
        study_id,
        feature_method(params),
        request.holdout_dataset_id,
        request.source_models,
        params,
        actor,
    )


def charged_draft(
    uow: UnitOfWork, study_id: str, request: TransferRequest | FeatureRequest, actor: Principal
) -> Callable[[UnitOfWork], JobDraft]:
    """The job of a charged aggregation request, checked as far as it can be without a
    transaction (the rest is checked inside the draft, in the charging transaction)."""
    if isinstance(request, TransferRequest):
        return transfer_draft(uow, study_id, request, actor)
    return feature_draft(uow, study_id, request, actor)
