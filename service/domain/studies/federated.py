"""Federated fits: a multiparty protocol across the datasets granted to a study (issue 6).

The coordinator of a study asks for ``noisy_average``, ``psgd``, ``admm`` or
``distributed_lasso`` over some of the datasets its members granted to the study
(:mod:`service.domain.studies.membership`); the protocol runs inside PrivFit, each site's local
steps over
that site's own rows only (:mod:`service.dp.federated`), and only the final model is released,
to every member of the study.

Order of a federated fit (the same ledger rules as a single fit, docs/design.md §2):

1. validate everything public with :func:`service.dp.federated.federated_calibrate` on the
   granted datasets' public sizes: an unknown protocol, bad parameters, a dataset that is not
   granted, a non-private protocol over a dataset that does not allow non-private use — each a
   422 before anything is spent;
2. one transaction: the queued job, and one charge per dataset of its own cost (parallel
   composition: the datasets hold different people), each within the dataset's remaining
   budget *and* the study's grant on it — all or none
   (:func:`service.domain.ledger.budgets.charge_many`); a
   shortfall is a 409 naming the dataset; commit before any noise is drawn;
   The job stores the protocol's typed plan (:mod:`service.dp.core.plan`; a fit with parties
   on nodes stores none: its plan needs the nodes' sizes, learnt when it runs);
3. the runner runs :func:`run_federated_job`, which runs the stored plan (re-deriving it only
   as a check: a different one fails the job with ``plan-mismatch`` before any site step).
   Progress is reported per round and a cancel is
   honoured at the next round; a failure in any site's step fails the whole job and releases
   nothing. The budget stays spent once the job has started; a job cancelled while queued is
   refunded (dataset and grant alike).

Granting a dataset to a study makes its row count visible to the study's coordinator and
members: every protocol's calibration depends on the sites' sizes (public under replace-one
neighbours), and the calibration is part of the released model's privacy record.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from service.db.models import Dataset, RemoteContribution, Study, StudyContribution
from service.db.uow import UnitOfWork, UnitOfWorkFactory
from service.domain.access.principal import Principal
from service.domain.audit import AuditContext
from service.domain.datasets.catalog import load_design
from service.domain.datasets.labels import LabelTask, UnsupportedTaskError
from service.domain.errors import (
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
)
from service.domain.ids import looks_like_id, refuse_duplicates
from service.domain.jobs.charged import (
    DatasetCharge,
    JobDraft,
    Pricing,
    SubmittedJob,
    submit_charged_job,
)
from service.domain.jobs.lifecycle import (
    ClaimedJob,
    JobContext,
    JobScheduler,
    PublicJobError,
    Release,
    charged_amounts,
    runs_jobs_in_the_api_process,
)
from service.domain.ledger import budgets
from service.domain.ledger.units import DELTA_UNIT, EPSILON_UNIT, from_units
from service.domain.nodes.remote_fit import reaches_nodes, run_remote_federated_job
from service.domain.ranges import calibrated, check_calibration
from service.domain.records.base import (
    json_safe,
)
from service.domain.records.federated import (
    federated_privacy_record,
    public_calibration,
    public_composition,
)
from service.domain.studies.membership import StudyFacts, study_task, visible_study
from service.dp.analysis.work import federated_work
from service.dp.core.plan import PlanMismatchError, plan_from_json, plan_to_json
from service.dp.federated import (
    FEDERATED_PROTOCOLS,
    PROTOCOL_TASKS,
    TASK_REFUSALS,
    FederatedCalibration,
    federated_calibrate,
    federated_fit,
    protocol_losses,
    protocols_for_task,
)
from service.dp.federated.parties import REMOTE_PROTOCOLS

__all__ = [
    "MAX_FEDERATED_DATASETS",
    "MIN_FEDERATED_DATASETS",
    "DatasetCost",
    "FederatedQuote",
    "FederatedRequest",
    "federated_privacy_record",
    "quote_federated_fit",
    "run_federated_job",
    "submit_federated_fit",
]

logger = logging.getLogger(__name__)

MIN_FEDERATED_DATASETS: Final[int] = 2
MAX_FEDERATED_DATASETS: Final[int] = 100
#: A placeholder ε used only to learn whether a protocol with these parameters is private
#: when the request names no ε (a non-private protocol ignores ε).
_PROBE_EPSILON: Final[float] = 1.0


@dataclass(frozen=True, slots=True)
class FederatedRequest:
    """A federated fit as the coordinator asked for it (already well-formed)."""

    protocol: str
    epsilon: float | None
    delta: float = 0.0
    #: None: the protocol's own loss for the study's label (``squared`` for the Lasso,
    #: ``huber`` for another protocol on a numeric label, ``logistic`` otherwise).
    loss: str | None = None
    regularization: float = 0.01
    datasets: Sequence[str] | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    name: str | None = None

    @property
    def resolved_loss(self) -> str:
        """The loss for a binary label."""
        return self.loss_for("binary")

    def loss_for(self, task: str) -> str:
        """The loss named, or the protocol's default for a label of ``task``."""
        if self.loss is not None:
            return self.loss
        if self.protocol == "distributed_lasso":
            return "squared"
        return "huber" if task == "regression" else "logistic"

    def to_params(self, task: str = "binary") -> dict[str, Any]:
        """The JSON stored as the job's ``params`` (with the study and datasets added)."""
        return {
            "protocol": self.protocol,
            "epsilon": None if self.epsilon is None else float(self.epsilon),
            "delta": float(self.delta),
            "loss": self.loss_for(task),
            "regularization": float(self.regularization),
            "params": json_safe(dict(self.params)),
            "name": self.name,
        }


@dataclass(frozen=True, slots=True)
class DatasetCost:
    """One participating dataset: its owner, its cost and whether it can be paid (its own
    budget, and the study's grant on it). No row count: the coordinator may not see one."""

    dataset_id: str
    site_id: str
    epsilon: float
    delta: float
    dataset_sufficient: bool
    #: Shown to the dataset's owner only (another site's budget is its own business).
    remaining_epsilon: float | None
    remaining_delta: float | None
    grant_left_epsilon: float
    grant_left_delta: float

    @property
    def affordable(self) -> bool:
        return (
            self.dataset_sufficient
            and self.epsilon <= self.grant_left_epsilon
            and self.delta <= self.grant_left_delta
        )


@dataclass(frozen=True, slots=True)
class FederatedQuote:
    """A dry run: per-dataset costs and the calibration; nothing is spent."""

    protocol: str
    private: bool
    rounds: int
    composition: str
    calibration: dict[str, Any]
    notes: tuple[str, ...]
    costs: tuple[DatasetCost, ...]


@dataclass(frozen=True, slots=True)
class _Participant:
    grant: StudyContribution
    dataset: Dataset


@dataclass(frozen=True, slots=True)
class _RemoteParticipant:
    """A dataset kept on a member's node (issue 15): charged by the node, not here."""

    contribution: RemoteContribution


#: Placeholder size of a node's dataset in the submit-time calibration: it only validates the
#: parameters and prices the hosted datasets (whose costs do not depend on any size for the
#: protocols nodes run); the job calibrates with the real sizes the nodes report.
_REMOTE_SIZE_PLACEHOLDER: Final[int] = 1000

_NOISY_AVERAGE_REMOTE: Final[str] = (
    "noisy_average cannot run over remote contributions: its guarantee needs a trusted "
    "curator (each site's exact, non-private local model is averaged first and the noise is "
    "added to the average), and a node sends only values that are already differentially "
    "private; use psgd, admm (dual or primal perturbation) or distributed_lasso with noise"
)


_NODES_NEED_API_PROCESS: Final[str] = (
    "a federated fit over remote contributions cannot run on this coordinator: its job runner "
    "(PRIVFIT_JOB_RUNNER=queue) runs jobs in separate worker processes, or it serves the API "
    "from several processes (PRIVFIT_WORKERS > 1), and the nodes may poll another one, while "
    "the nodes' tasks and answers are exchanged only in the memory of the API process the "
    "nodes poll (so that no node's row count reaches the database). Nothing was charged and "
    "no job was queued. Run the coordinator of a study with site nodes as one API process "
    "(PRIVFIT_WORKERS=1) with PRIVFIT_JOB_RUNNER=process (the default) or thread and point "
    "the nodes' agents at it; fits over granted (hosted) datasets alone are not affected"
)


# --- checks that need no data ------------------------------------------------------------


def _coordinated_study(uow: UnitOfWork, study_id: str, actor: Principal) -> Study:
    site_id = actor.site_or_not_found("study")
    study = visible_study(uow, study_id, actor)
    if study.coordinator_site_id != site_id:
        raise PermissionDeniedError("only the study's coordinator can run federated fits")
    return study


def _participants(
    uow: UnitOfWork, study: Study, requested: Sequence[str] | None
) -> list[_Participant | _RemoteParticipant]:
    """The granted datasets and remote contributions taking part, in request order (default:
    grant order, then the remote contributions in the order they were offered)."""
    grants = {
        c.dataset_id: c
        for c in uow.studies.contributions(study.id)
        if c.kind == "dataset" and c.dataset_id is not None
    }
    remote = {r.id: r for r in uow.remote_contributions.of_study(study.id)}
    if requested is None:
        ids = [*grants, *remote]
    else:
        ids = list(requested)
        refuse_duplicates(ids, field="datasets", what="dataset")
        missing = [i for i, d in enumerate(ids) if d not in grants and d not in remote]
        if missing:
            raise InvalidInputError(
                "only datasets granted to this study can take part; not granted: "
                + ", ".join(repr(ids[i]) for i in missing),
                errors=[
                    {"loc": ["body", "datasets", i], "msg": "not granted to this study"}
                    for i in missing
                ],
            )
    if len(ids) < MIN_FEDERATED_DATASETS:
        raise InvalidInputError(
            f"a federated fit needs at least {MIN_FEDERATED_DATASETS} granted datasets; "
            f"this request has {len(ids)} (members grant datasets with "
            "POST /v1/studies/{id}/contributions)",
            errors=[{"loc": ["body", "datasets"], "msg": "too few granted datasets"}],
        )
    out: list[_Participant | _RemoteParticipant] = []
    for dataset_id in ids:
        if dataset_id in remote:
            out.append(_RemoteParticipant(contribution=remote[dataset_id]))
            continue
        dataset = uow.datasets.get(dataset_id)
        if dataset is None:  # pragma: no cover - the foreign key keeps granted datasets
            raise NotFoundError("dataset")
        if dataset.deleted_at is not None:
            raise budgets.DatasetDeletedError(
                f"dataset {dataset_id} was deleted; it can no longer take part in a fit"
            )
        out.append(_Participant(grant=grants[dataset_id], dataset=dataset))
    return out


def _width(p: _Participant | _RemoteParticipant) -> int:
    if isinstance(p, _RemoteParticipant):
        return int(p.contribution.n_features)
    return int(p.dataset.n_features)


def _size(p: _Participant | _RemoteParticipant) -> int:
    if isinstance(p, _RemoteParticipant):
        return _REMOTE_SIZE_PLACEHOLDER
    return int(p.dataset.n_rows)


def _hosted(participants: Sequence[_Participant | _RemoteParticipant]) -> list[_Participant]:
    return [p for p in participants if isinstance(p, _Participant)]


def _require_task(protocol: str, labels: LabelTask) -> None:
    """422 (``unsupported-label-task``, nothing charged) unless ``protocol`` fits the study's
    label task (:data:`service.dp.federated.PROTOCOL_TASKS`; the reason in the message)."""
    if labels.task in PROTOCOL_TASKS[protocol]:
        return
    fitting = protocols_for_task(labels.task)
    msg = (
        f"the {protocol} protocol is not available for a study of {labels.describe()}: "
        f"{TASK_REFUSALS[protocol][labels.task]}; "
        + (
            f"use {' or '.join(fitting)}"
            if fitting
            else "no federated protocol fits it: average the sites' models instead"
        )
    )
    raise UnsupportedTaskError(msg, errors=[{"loc": ["body", "protocol"], "msg": msg}])


def _require_task_loss(request: FederatedRequest, labels: LabelTask) -> None:
    """422 (``unsupported-label-task``, nothing charged) when the loss asked for is not one the
    protocol takes for the study's label (the squared loss of a numeric label for the noisy
    average, whose sensitivity needs a bounded derivative; a multi-class label's multinomial
    ``logistic``); the message names the losses it takes and why."""
    allowed, why = protocol_losses(request.protocol, labels.task)
    loss = request.loss_for(labels.task)
    if not why or loss in allowed:
        return
    msg = (
        f"the {request.protocol} protocol on a study of {labels.describe()} takes the loss "
        f"{' or '.join(repr(x) for x in allowed)}, not {loss!r}: {why}"
    )
    raise UnsupportedTaskError(msg, errors=[{"loc": ["body", "loss"], "msg": msg}])


def _calibrate(
    request: FederatedRequest,
    participants: Sequence[_Participant | _RemoteParticipant],
    labels: LabelTask,
) -> FederatedCalibration:
    if request.protocol not in FEDERATED_PROTOCOLS:
        raise InvalidInputError(
            f"unknown protocol {request.protocol!r}; choose one of "
            + ", ".join(FEDERATED_PROTOCOLS),
            errors=[{"loc": ["body", "protocol"], "msg": "unknown protocol"}],
        )
    _require_task(request.protocol, labels)
    _require_task_loss(request, labels)
    has_remote = any(isinstance(p, _RemoteParticipant) for p in participants)
    if has_remote and request.protocol not in REMOTE_PROTOCOLS:
        raise InvalidInputError(
            _NOISY_AVERAGE_REMOTE,
            errors=[{"loc": ["body", "protocol"], "msg": "needs a trusted curator"}],
        )
    d = {_width(p) for p in participants}
    if len(d) != 1:  # pragma: no cover - grants match the study's spec, hence its width
        raise InvalidInputError("the granted datasets encode different numbers of features")
    calibration = calibrated(
        "federated-fit",
        lambda: federated_calibrate(
            request.protocol,
            site_sizes=[_size(p) for p in participants],
            d=d.pop(),
            epsilon=_PROBE_EPSILON if request.epsilon is None else request.epsilon,
            delta=request.delta,
            loss=request.loss_for(labels.task),
            regularization=request.regularization,
            task=labels.task,
            n_classes=labels.n_classes,
            **dict(request.params),
        ),
    )
    for cost in calibration.site_costs if calibration.private else ():
        check_calibration(
            epsilon=cost.epsilon, delta=cost.delta, details=calibration.details, noise_norm=None
        )
    if calibration.private and request.epsilon is None:
        raise InvalidInputError(
            f"epsilon is required: {request.protocol} with these parameters is private",
            errors=[{"loc": ["body", "epsilon"], "msg": "required for a private protocol"}],
        )
    if not calibration.private and has_remote:
        raise InvalidInputError(
            f"{request.protocol} with these parameters is not differentially private, and a "
            "node runs only steps whose messages are already private: remote contributions "
            "cannot take part",
            errors=[{"loc": ["body", "params"], "msg": "not private"}],
        )
    if not calibration.private:
        refusing = [p.dataset.id for p in _hosted(participants) if not p.dataset.allow_non_private]
        if refusing:
            raise InvalidInputError(
                f"{request.protocol} with these parameters is not differentially private; it "
                "may only run over datasets uploaded with allow_non_private, and these were "
                "not: " + ", ".join(refusing),
                errors=[{"loc": ["body", "datasets"], "msg": "non-private use not allowed"}],
            )
    return calibration


def _costs(
    calibration: FederatedCalibration, participants: Sequence[_Participant | _RemoteParticipant]
) -> list[tuple[float, float]]:
    """(ε, δ) to charge each dataset: nothing when the protocol claims no privacy, else the
    largest per-dataset cost, charged to every dataset.

    The protocols spend the same on every dataset except ``noisy_average``, whose noise is
    calibrated to the smallest site: site i is protected at ε·min nₖ/nᵢ ≤ ε. Charging every
    site ε (an upper bound of its spend) keeps the charges, which the coordinator sees, from
    revealing the sites' relative sizes (docs/design.md §2: no row counts of another site's
    dataset).
    """
    if not calibration.private:
        return [(0.0, 0.0)] * len(participants)
    epsilon = max(float(c.epsilon) for c in calibration.site_costs)
    delta = max(float(c.delta) for c in calibration.site_costs)
    return [(epsilon, delta)] * len(participants)


def _has_remote(participants: Sequence[_Participant | _RemoteParticipant]) -> bool:
    return any(isinstance(p, _RemoteParticipant) for p in participants)


def _require_node_exchange(
    participants: Sequence[_Participant | _RemoteParticipant], runner: JobScheduler
) -> None:
    """A fit with parties on nodes runs on a thread of the API process that serves the node
    task endpoints: a runner that cannot run a job there is a 422 (nothing charged)."""
    if _has_remote(participants) and not runs_jobs_in_the_api_process(runner):
        raise InvalidInputError(
            _NODES_NEED_API_PROCESS,
            errors=[
                {
                    "loc": ["body", "datasets"],
                    "msg": "remote contributions need the process or thread job runner",
                }
            ],
        )


def _check_request(request: FederatedRequest) -> None:
    if request.datasets is not None and len(request.datasets) > MAX_FEDERATED_DATASETS:
        raise InvalidInputError(f"at most {MAX_FEDERATED_DATASETS} datasets may take part")
    for dataset_id in request.datasets or ():
        if not looks_like_id(dataset_id):
            raise InvalidInputError(
                f"only datasets granted to this study can take part; not granted: {dataset_id!r}",
                errors=[{"loc": ["body", "datasets"], "msg": "not granted to this study"}],
            )


# --- quote and submit ----------------------------------------------------------------------


def quote_federated_fit(
    uow: UnitOfWork,
    *,
    study_id: str,
    request: FederatedRequest,
    actor: Principal,
    runner: JobScheduler,
) -> FederatedQuote:
    """The dry run: per-dataset costs, calibration and what each dataset has left; refused
    as the submission would be (``runner``: where the job would go)."""
    _check_request(request)
    with uow:
        study = _coordinated_study(uow, study_id, actor)
        participants = _participants(uow, study, request.datasets)
        calibration = _calibrate(request, participants, study_task(study))
        _require_node_exchange(participants, runner)
        costs: list[DatasetCost] = []
        for p, (eps, dlt) in zip(participants, _costs(calibration, participants), strict=True):
            if isinstance(p, _RemoteParticipant):
                # charged by the node, within its offer's caps; its budget is the node's
                r = p.contribution
                cap_e = from_units(r.epsilon_cap_units, EPSILON_UNIT)
                cap_d = from_units(r.delta_cap_units, DELTA_UNIT)
                costs.append(
                    DatasetCost(
                        dataset_id=r.id,
                        site_id=r.site_id,
                        epsilon=eps,
                        delta=dlt,
                        dataset_sufficient=True,
                        remaining_epsilon=None,
                        remaining_delta=None,
                        grant_left_epsilon=cap_e,
                        grant_left_delta=cap_d,
                    )
                )
                continue
            remaining_e, remaining_d = budgets.remaining(p.dataset)
            own = p.dataset.owner_site_id == actor.site_id
            costs.append(
                DatasetCost(
                    dataset_id=p.dataset.id,
                    site_id=p.dataset.owner_site_id,
                    epsilon=eps,
                    delta=dlt,
                    dataset_sufficient=eps <= remaining_e and dlt <= remaining_d,
                    remaining_epsilon=remaining_e if own else None,
                    remaining_delta=remaining_d if own else None,
                    grant_left_epsilon=from_units(
                        int(p.grant.epsilon_cap_units or 0) - p.grant.epsilon_spent_units,
                        EPSILON_UNIT,
                    ),
                    grant_left_delta=from_units(
                        int(p.grant.delta_cap_units or 0) - p.grant.delta_spent_units,
                        DELTA_UNIT,
                    ),
                )
            )
    return FederatedQuote(
        protocol=calibration.protocol,
        private=calibration.private,
        rounds=int(calibration.rounds),
        composition=public_composition(calibration),
        calibration=public_calibration(calibration),
        notes=tuple(calibration.notes),
        costs=tuple(costs),
    )


def _job_params(
    request: FederatedRequest,
    study: Study,
    participants: Sequence[_Participant | _RemoteParticipant],
    rounds: int,
) -> dict[str, Any]:
    params = {
        **request.to_params(study_task(study).task),
        "study_id": study.id,
        "datasets": [p.dataset.id for p in _hosted(participants)],
    }
    if _has_remote(participants):
        params["participants"] = [
            {"kind": "remote", "id": p.contribution.id}
            if isinstance(p, _RemoteParticipant)
            else {"kind": "dataset", "id": p.dataset.id}
            for p in participants
        ]
        params["rounds"] = rounds
    return params


def _stored_plan(
    calibration: FederatedCalibration, participants: Sequence[_Participant | _RemoteParticipant]
) -> dict[str, Any] | None:
    """The plan the job will run, fixed now (JSON form), for a fit over hosted datasets only.

    A fit with parties on nodes stores none: its plan depends on the nodes' row counts, which
    the coordinator learns only when the job runs (and never stores); it is derived once then
    and sent to every node, which re-derives it and requires equality
    (:mod:`service.domain.nodes.remote_fit`)."""
    if _has_remote(participants) or calibration.plan is None:
        return None
    return plan_to_json(calibration.plan)


def submit_federated_fit(
    uow: UnitOfWork,
    *,
    study_id: str,
    request: FederatedRequest,
    actor: Principal,
    runner: JobScheduler,
    context: AuditContext,
    idempotency_key: str | None = None,
) -> SubmittedJob:
    """Validate, charge every dataset (all or none) and enqueue (:func:`submit_charged_job`,
    and the module docstring): each granted dataset is charged its own cost within its budget
    and the study's grant on it; another site's shortfall names the dataset, not its budget.

    A fit over remote contributions goes to a thread of this API process (the one serving the
    node task endpoints); a runner that cannot run it there is a 422, nothing charged."""
    _check_request(request)

    def draft(u: UnitOfWork) -> JobDraft:
        study = _coordinated_study(u, study_id, actor)
        participants = _participants(u, study, request.datasets)
        hosted = _hosted(participants)
        calibration = _calibrate(request, participants, study_task(study))
        _require_node_exchange(participants, runner)
        params = _job_params(request, study, participants, int(calibration.rounds))

        def price() -> Pricing:
            costs = _costs(calibration, participants)
            return Pricing(
                mechanism=f"federated_{request.protocol}",
                charges=[
                    DatasetCharge(
                        dataset_id=p.dataset.id,
                        owner_site_id=p.dataset.owner_site_id,
                        epsilon=eps,
                        delta=dlt,
                        grant_id=p.grant.id,
                    )
                    for p, (eps, dlt) in zip(participants, costs, strict=True)
                    if isinstance(p, _Participant)
                ],
                audit_action="study.federated_fit_submitted",
                audit_subject=("study", study.id),
                audit_details={
                    "protocol": request.protocol,
                    "datasets": [p.dataset.id for p in hosted],
                    "remote_contributions": [
                        p.contribution.id for p in participants if isinstance(p, _RemoteParticipant)
                    ],
                },
                used_contributions=[p.grant.id for p in hosted],
                work=federated_work(
                    request.protocol,
                    rounds=int(calibration.rounds),
                    rows=[int(p.dataset.n_rows) for p in hosted],
                    d=_width(participants[0]),
                    remote=sum(isinstance(p, _RemoteParticipant) for p in participants),
                ),
                # computed from other sites' row counts: the caller sees only the cap
                work_is_public=False,
                plan=_stored_plan(calibration, participants),
            )

        return JobDraft(
            kind="federated",
            dataset_id=None,
            params=params,
            price=price,
            needs_api_process=reaches_nodes(params),
        )

    return submit_charged_job(
        uow,
        actor=actor,
        draft=draft,
        runner=runner,
        idempotency_key=idempotency_key,
        context=context,
    )


# --- the worker ------------------------------------------------------------------------------


def plan_changed(exc: PlanMismatchError) -> PublicJobError:
    """The job's failure when the plan re-derived at run time differs from the stored one (a
    defect, never a silent re-calibration): public numbers' names only, nothing released."""
    return PublicJobError(
        "plan-mismatch",
        "The fit's plan changed after submission",
        f"{exc} No site step ran and no model was released; the charges stay.",
    )


def run_federated_job(
    uow_factory: UnitOfWorkFactory, job: ClaimedJob, context: JobContext
) -> Release:
    """Run the protocol over the granted datasets and return the final model.

    Spent: the protocol's own per-site costs for the run (``result.calibration.site_costs``,
    in the datasets' order), or (0, 0) everywhere for a run that claims no privacy.

    Each site's design is read from its own stored dataset and handed to the protocol as a
    separate site; the protocol's site steps see only their own rows. Any exception (a site's
    step, a deleted dataset, a solver that does not converge, a cancel) propagates, so the
    job fails or is cancelled with nothing released.
    """
    params = job.params
    if reaches_nodes(params):
        return run_remote_federated_job(uow_factory, job, context)
    study_id = str(params["study_id"])
    dataset_ids = [str(d) for d in params["datasets"]]
    with uow_factory() as uow:
        study = uow.studies.get(study_id)
        if study is None:
            raise NotFoundError("study")
        owners: list[dict[str, Any]] = []
        for dataset_id in dataset_ids:
            dataset = uow.datasets.get(dataset_id)
            if dataset is None or dataset.deleted_at is not None:
                raise NotFoundError("dataset")
            owners.append({"id": dataset.id, "site_id": dataset.owner_site_id})
        facts = StudyFacts.of(study)
    context.progress(0.0)
    sites = [load_design(uow_factory, dataset_id) for dataset_id in dataset_ids]
    epsilon = params.get("epsilon")
    try:
        result = federated_fit(
            sites,
            str(params["protocol"]),
            epsilon=_PROBE_EPSILON if epsilon is None else float(epsilon),
            delta=float(params["delta"]),
            loss=str(params["loss"]),
            regularization=float(params["regularization"]),
            rng=context.randomness.generator(job.id),
            progress=context.progress,
            # the plan fixed at submission runs; the fit re-derives it only as a check
            plan=None if job.plan is None else plan_from_json(job.plan),
            **LabelTask.from_label(facts.label).dp_kwargs,
            **dict(params.get("params") or {}),
        )
    except PlanMismatchError as exc:
        raise plan_changed(exc) from None
    record = federated_privacy_record(
        result.calibration,
        datasets=owners,
        randomness=context.randomness,
        job_id=job.id,
        study_id=study_id,
        charged=charged_amounts(job),
    )
    calibration = result.calibration
    spent = {
        dataset_id: (
            (float(cost.epsilon), float(cost.delta)) if calibration.private else (0.0, 0.0)
        )
        for dataset_id, cost in zip(dataset_ids, calibration.site_costs, strict=True)
    }
    model = facts.model(
        owner_site_id=job.owner_site_id,
        job_id=job.id,
        name=params.get("name"),
        source="federated",
        mechanism=result.protocol,
        loss=str(params["loss"]),
        body=json_safe(result.model.to_dict()),
        privacy=record,
    )
    return Release(model=model, spent=spent)
