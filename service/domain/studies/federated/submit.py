"""Quote and submit a federated fit: the per-dataset costs and the calibration, and the charged
job (every granted dataset charged its own cost, all or none) that stores the protocol's plan."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from service.db.models import Study
from service.db.uow import UnitOfWork
from service.domain.access.principal import Principal
from service.domain.audit import AuditContext
from service.domain.jobs.charged import (
    DatasetCharge,
    JobDraft,
    Pricing,
    SubmittedJob,
    submit_charged_job,
)
from service.domain.jobs.lifecycle import JobScheduler
from service.domain.ledger import budgets
from service.domain.ledger.units import DELTA_UNIT, EPSILON_UNIT, from_units
from service.domain.nodes.remote_fit import reaches_nodes
from service.domain.records.federated import public_calibration, public_composition
from service.domain.studies.federated.checks import (
    _calibrate,
    _check_request,
    _coordinated_study,
    _costs,
    _has_remote,
    _hosted,
    _Participant,
    _participants,
    _RemoteParticipant,
    _require_node_exchange,
    _width,
)
from service.domain.studies.federated.request import DatasetCost, FederatedQuote, FederatedRequest
from service.domain.studies.membership import study_task
from service.dp.analysis.work import federated_work
from service.dp.core.plan import plan_to_json
from service.dp.federated import FederatedCalibration

__all__ = ["quote_federated_fit", "submit_federated_fit"]


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
    and the package docstring): each granted dataset is charged its own cost within its budget
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
