"""The checks of a federated fit that need no data, each refusing before anything is charged:
the coordinator, the participants (granted datasets and remote contributions), the protocol
against the study's label task, its calibration on the sites' public sizes, and the (ε, δ)
charged to each dataset."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from service.db.models import Dataset, RemoteContribution, Study, StudyContribution
from service.db.uow import UnitOfWork
from service.domain.access.principal import Principal
from service.domain.datasets.labels import LabelTask, UnsupportedTaskError
from service.domain.errors import InvalidInputError, NotFoundError, PermissionDeniedError
from service.domain.ids import looks_like_id, refuse_duplicates
from service.domain.jobs.lifecycle import JobScheduler, runs_jobs_in_the_api_process
from service.domain.ledger import budgets
from service.domain.ranges import calibrated, check_calibration
from service.domain.studies.federated.request import (
    _PROBE_EPSILON,
    MAX_FEDERATED_DATASETS,
    MIN_FEDERATED_DATASETS,
    FederatedRequest,
)
from service.domain.studies.membership import visible_study
from service.dp.federated import (
    FEDERATED_PROTOCOLS,
    PROTOCOL_TASKS,
    TASK_REFUSALS,
    FederatedCalibration,
    federated_calibrate,
    protocol_losses,
    protocols_for_task,
)
from service.dp.federated.parties import REMOTE_PROTOCOLS


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
