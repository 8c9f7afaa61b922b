"""Node side: accepting, checking and running a coordinator's tasks (the agent's logic).

The node is the authority on its data's budget. For every task it:

1. finds the offer the task addresses (refused if unknown or withdrawn);
2. on ``join`` (the first task of a job): checks the terms (protocol one a node runs, a private
   variant, ε and δ finite and within the offer's caps, valid parameters), computes its own
   cost with the protocol's calibration, and in ONE transaction debits the offer's caps, charges
   its dataset's ledger (idempotency key: the coordinator's job id) and records the job with
   the terms it accepted, plus an audit event: all or nothing, before any step runs. A second
   ``join`` for the same job never charges again;
3. on every later task: refuses anything but the accepted terms (protocol, parameters,
   rounds, ε, δ, loss, λ, party index, K, seed), a job id it did not accept, a sequence
   number it has already seen (a replay), a step the protocol does not have, more noisy
   rounds than accepted, and steps before ``prepare``;
4. ``prepare`` carries the sizes and the coordinator's plan: the node derives the plan once
   from the accepted terms and the sizes, refuses unless the coordinator's is equal (it never
   takes a noise scale it was sent), checks its own size and that its cost is within what it
   charged, and builds its party over its own rows;
5. runs the step with :func:`service.dp.federated.parties.perform_step`: its own plan,
   its own noise (the CSPRNG; the job seed only when this node runs in test mode).

Refusals carry a reason (no data) that the coordinator records on its job; the node records
them in its audit log and fails the accepted job the refused task addresses (by its offer and
job id), whatever the refusal: different terms, a replay, a step out of turn, a second join, a
withdrawn offer. The per-job party state lives in the agent's memory: after an agent restart
the node refuses the rest of a running job and fails it (its charge stays, nothing is charged
twice). A dataset takes part in a coordinator job once: a job that names it under two offers
is refused at the second join (the ledger holds one charge per dataset and job).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from service.db.base import utcnow
from service.db.models import DatasetOffer, NodeJob, new_id
from service.db.uow import UnitOfWork, UnitOfWorkFactory
from service.domain import audit
from service.domain.audit import AuditContext
from service.domain.datasets.catalog import load_design
from service.domain.errors import BudgetExhaustedError, DomainError
from service.domain.ledger import budgets
from service.domain.ledger.units import DELTA_UNIT, EPSILON_UNIT, to_units
from service.domain.randomness import Randomness
from service.dp.core.plan import PlanMismatchError, plan_from_json, require_same_plan
from service.dp.federated import (
    FederatedCalibration,
    calibrate_problem,
    make_federated_problem,
)
from service.dp.federated._common import FederatedProblem, Site
from service.dp.federated.parties import (
    REMOTE_PROTOCOLS,
    STEPS,
    local_party,
    perform_step,
    site_generator,
)

__all__ = ["NodeState", "handle_task"]

logger = logging.getLogger(__name__)

NODE_CONTEXT: Final[AuditContext] = AuditContext(request_id="node-agent")
_TERM_KEYS: Final[tuple[str, ...]] = (
    "job_id",
    "protocol",
    "epsilon",
    "delta",
    "loss",
    "regularization",
    "params",
    "rounds",
    "sites",
    "index",
    "seed",
)


class Refusal(Exception):
    """A task the node will not run, with the reason it sends back."""


@dataclass
class _LiveJob:
    offer_id: str
    dataset_id: str
    n: int
    terms: dict[str, Any]
    charged: tuple[float, float]
    last_seq: int
    problem: FederatedProblem | None = None
    calibration: FederatedCalibration | None = None
    party: Site | None = None
    rng: Any = None
    counts: dict[str, int] = field(default_factory=dict)


@dataclass
class NodeState:
    """What the agent keeps in memory between tasks: the running jobs' parties."""

    randomness: Randomness
    jobs: dict[tuple[str, str], _LiveJob] = field(default_factory=dict)


def _normalised_terms(raw: object) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise Refusal("the task carries no terms")
    terms = {k: raw.get(k) for k in _TERM_KEYS}
    extra = sorted(set(raw) - set(_TERM_KEYS))
    if extra:
        raise Refusal("the task's terms have unknown fields: " + ", ".join(extra[:5]))
    return terms


def _problem(terms: Mapping[str, Any], sizes: list[int], d: int) -> FederatedProblem:
    epsilon = terms["epsilon"]
    return make_federated_problem(
        str(terms["protocol"]),
        site_sizes=sizes,
        d=d,
        epsilon=float(epsilon) if isinstance(epsilon, int | float) else math.nan,
        delta=float(terms["delta"]),
        loss=str(terms["loss"]),
        regularization=float(terms["regularization"]),
        params=dict(terms["params"] or {}),
    )


def _check_join_terms(terms: Mapping[str, Any]) -> tuple[int, int]:
    if terms["protocol"] not in REMOTE_PROTOCOLS:
        raise Refusal(
            f"protocol {terms['protocol']!r} is not run on nodes (its messages are not "
            "private on their own)"
        )
    for key in ("epsilon", "delta", "regularization"):
        value = terms[key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Refusal(f"{key} must be a number")
    sites, index = terms["sites"], terms["index"]
    if not (isinstance(sites, int) and isinstance(index, int) and 0 <= index < sites):
        raise Refusal("the party index and the number of parties are invalid")
    if not isinstance(terms["params"], Mapping):
        raise Refusal("params must be an object")
    if not isinstance(terms["rounds"], int):
        raise Refusal("rounds must be an integer")
    if not isinstance(terms["job_id"], str) or not terms["job_id"]:
        raise Refusal("the terms name no job")
    return sites, index


def _offer(uow: UnitOfWork, contribution_id: object) -> DatasetOffer:
    offer = uow.offers.by_contribution(str(contribution_id))
    if offer is None:
        raise Refusal("this node has no offer for that contribution")
    if offer.withdrawn_at is not None:
        raise Refusal("the offer was withdrawn")
    return offer


def _join(
    uow_factory: UnitOfWorkFactory, state: NodeState, task: Mapping[str, Any]
) -> dict[str, Any]:
    terms = _normalised_terms(task.get("terms"))
    if task.get("job_id") != terms["job_id"]:
        raise Refusal("the task's job id differs from the job id of its terms")
    sites, index = _check_join_terms(terms)
    with uow_factory() as uow:
        offer = _offer(uow, task.get("contribution_id"))
        dataset = uow.datasets.get(offer.dataset_id)
        if dataset is None or dataset.deleted_at is not None:
            raise Refusal("the offered dataset was deleted")
        n, d = int(dataset.n_rows), int(dataset.n_features)
        offer_id, dataset_id = offer.id, dataset.id
        existing = uow.offers.job(offer.id, str(terms["job_id"]))
        if existing is not None:
            if existing.terms != terms:
                raise Refusal("this job was accepted with different terms")
            if (offer.id, str(terms["job_id"])) in state.jobs:
                raise Refusal("a replayed join: this job was already accepted and charged")
            if existing.status != "accepted":
                raise Refusal(
                    "this job was already accepted and charged, and it ended on this node "
                    f"({existing.status})"
                )
            raise Refusal(
                "this job was already accepted and charged; this node no longer holds its "
                "local state (an agent restart), so the job cannot continue"
            )
    try:
        problem = _problem(terms, [n] * sites, d)
        calibration = calibrate_problem(problem)
    except ValueError as exc:
        raise Refusal(f"invalid terms: {exc}") from None
    if not calibration.private:
        raise Refusal("the terms ask for a variant without differential privacy")
    if calibration.rounds != terms["rounds"]:
        raise Refusal("the terms' rounds differ from the protocol's calibration")
    cost = calibration.site_costs[index]
    epsilon, delta = float(cost.epsilon), float(cost.delta)
    if epsilon > float(terms["epsilon"]) or delta > float(terms["delta"]) + 0.0:
        raise Refusal("the protocol's cost exceeds the job's ε or δ")
    eps_units = to_units(epsilon, EPSILON_UNIT, "up")
    delta_units = to_units(delta, DELTA_UNIT, "up")
    with uow_factory() as uow:
        if not uow.offers.debit(offer_id, eps_units, delta_units):
            raise Refusal(
                f"the job's cost (ε = {epsilon:g}, δ = {delta:g}) is outside what is left of "
                "the offer's caps"
            )
        try:
            charge = budgets.charge(
                uow,
                dataset_id=dataset_id,
                epsilon=epsilon,
                delta=delta,
                mechanism=f"node_{terms['protocol']}",
                idempotency_key=f"coordinator-job:{terms['job_id']}"[:200],
            )
        except BudgetExhaustedError:
            uow.rollback()
            raise Refusal("the dataset's own budget cannot cover the job's cost") from None
        except DomainError as exc:
            uow.rollback()
            raise Refusal(f"the charge failed: {exc.detail}") from None
        # The ledger holds one charge per dataset and coordinator job (the key above): a job
        # that names this dataset under a second offer gets the first join's charge back, and
        # a second party over the same rows would run uncharged. Checked after the charge, so a
        # join that raced the other one sees its job (committed with its charge).
        if any(
            uow.offers.job(o.id, str(terms["job_id"])) for o in uow.offers.of_dataset(dataset_id)
        ):
            uow.rollback()
            raise Refusal(
                "this dataset already takes part in this job under another offer: it takes "
                "part once (its ledger holds one charge per job)"
            )
        uow.offers.add_job(
            NodeJob(
                id=new_id(),
                offer_id=offer_id,
                coordinator_job_id=str(terms["job_id"]),
                terms=terms,
                charge_id=charge.id,
                status="accepted",
            )
        )
        audit.record(
            uow,
            action="node.job_accepted",
            context=NODE_CONTEXT,
            subject_type="dataset",
            subject_id=dataset_id,
            details={
                "offer_id": offer_id,
                "coordinator_job_id": terms["job_id"],
                "protocol": terms["protocol"],
                "epsilon": epsilon,
                "delta": delta,
                "rounds": terms["rounds"],
                "charge_id": charge.id,
                "seeded": state.randomness.seed is not None and terms["seed"] is not None,
            },
        )
        uow.commit()
    state.jobs[(offer_id, str(terms["job_id"]))] = _LiveJob(
        offer_id=offer_id,
        dataset_id=dataset_id,
        n=n,
        terms=terms,
        charged=(epsilon, delta),
        last_seq=int(task.get("seq") or 0),
    )
    return {
        "n": n,
        "n_features": d,
        "charged": {"epsilon": epsilon, "delta": delta},
        "dataset_id": dataset_id,
    }


def _live(uow_factory: UnitOfWorkFactory, state: NodeState, task: Mapping[str, Any]) -> _LiveJob:
    terms = _normalised_terms(task.get("terms"))
    job_id = task.get("job_id")
    with uow_factory() as uow:
        offer = _offer(uow, task.get("contribution_id"))
        offer_id = offer.id
        accepted = uow.offers.job(offer.id, str(job_id)) if isinstance(job_id, str) else None
    live = state.jobs.get((offer_id, str(job_id)))
    if live is None:
        if accepted is None:
            raise Refusal("this node never accepted that job")
        if accepted.status != "accepted":
            raise Refusal(f"this job already ended on this node ({accepted.status})")
        raise Refusal("this node no longer holds the job's local state (an agent restart)")
    if terms != live.terms:
        differing = sorted(k for k in _TERM_KEYS if terms.get(k) != live.terms.get(k))
        raise Refusal("the task's terms differ from the accepted ones: " + ", ".join(differing))
    seq = task.get("seq")
    if not isinstance(seq, int) or seq <= live.last_seq:
        raise Refusal("a replayed task (its sequence number was already seen)")
    live.last_seq = seq
    return live


def _prepare(
    uow_factory: UnitOfWorkFactory,
    state: NodeState,
    live: _LiveJob,
    sizes: object,
    plan: object = None,
) -> None:
    terms = live.terms
    if live.party is not None:
        raise Refusal("the job was already prepared")
    if not (
        isinstance(sizes, list)
        and len(sizes) == terms["sites"]
        and all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes)
    ):
        raise Refusal("prepare must carry one positive size per party")
    if sizes[terms["index"]] != live.n:
        raise Refusal("the sizes do not give this node's own size at its index")
    X, y = load_design(uow_factory, live.dataset_id)
    try:
        problem = _problem(terms, list(sizes), int(X.shape[1]))
        calibration = calibrate_problem(problem)
    except ValueError as exc:
        raise Refusal(f"invalid terms: {exc}") from None
    _check_plan(plan, calibration)
    cost = calibration.site_costs[terms["index"]]
    if (
        not calibration.private
        or to_units(float(cost.epsilon), EPSILON_UNIT, "up")
        > to_units(live.charged[0], EPSILON_UNIT, "up")
        or to_units(float(cost.delta), DELTA_UNIT, "up")
        > to_units(live.charged[1], DELTA_UNIT, "up")
        or calibration.rounds != terms["rounds"]
    ):
        raise Refusal("with these sizes the protocol would spend more than this node charged")
    seed = terms["seed"] if state.randomness.seed is not None else None
    live.problem = problem
    live.calibration = calibration
    live.party = local_party(problem, calibration, int(terms["index"]), X, y)
    live.rng = site_generator(
        None if seed is None else int(seed), int(terms["index"]), int(terms["sites"])
    )


def _check_plan(sent: object, calibration: FederatedCalibration) -> None:
    """The coordinator's plan, when ``prepare`` carries one, must equal the node's own
    derivation from the accepted terms and the sizes: the node runs its own plan either way and
    never a noise scale (or anything else) it was sent."""
    if sent is None:
        return
    if not isinstance(sent, Mapping) or calibration.plan is None:
        raise Refusal("the job's plan must be an object")
    try:
        require_same_plan(plan_from_json(sent), calibration.plan)
    except PlanMismatchError as exc:
        raise Refusal(f"the coordinator's plan differs from this node's: {exc}") from None
    except (AttributeError, IndexError, KeyError, TypeError, ValueError):
        raise Refusal("the job's plan cannot be read") from None


def _step(live: _LiveJob, step: str, vectors: object) -> dict[str, Any]:
    if live.party is None or live.problem is None or live.calibration is None:
        raise Refusal("the job's steps come after prepare")
    protocol = live.problem.protocol
    if step not in STEPS[protocol]:
        raise Refusal(f"{protocol} has no step {step!r}")
    count = live.counts.get(step, 0) + 1
    rounds = live.calibration.rounds
    # every step a protocol has runs once per accepted round, and no more (the node's proof
    # composes exactly that many answers)
    if count > rounds:
        raise Refusal(f"more {step} steps than the accepted job has")
    if not isinstance(vectors, list) or not all(isinstance(v, list) for v in vectors):
        raise Refusal("a step's public inputs must be a list of vectors")
    live.counts[step] = count
    try:
        out = perform_step(live.party, live.problem, live.calibration, step, vectors, live.rng)
    except ValueError as exc:
        raise Refusal(f"the step's inputs are invalid: {exc}") from None
    except RuntimeError as exc:  # a step before the one it needs (psgd: its fixed noise)
        raise Refusal(f"the step is out of turn: {exc}") from None
    return {} if out is None else {"vector": [float(x) for x in out]}


def _close(
    uow_factory: UnitOfWorkFactory,
    state: NodeState,
    task: Mapping[str, Any],
    *,
    status: str,
    error: str | None,
) -> None:
    """Close the accepted job ``task`` addresses (its contribution's offer and its job id),
    if there is one, and drop its party from memory: after a finish or an abort, and after
    any refused task of the job (in memory or not: a job whose state an agent restart lost
    ends here too, rather than stay accepted for ever)."""
    job_id = task.get("job_id")
    if not isinstance(job_id, str):
        return
    with uow_factory() as uow:
        offer = uow.offers.by_contribution(str(task.get("contribution_id")))
        node_job = uow.offers.job(offer.id, job_id) if offer is not None else None
        if offer is None or node_job is None:
            return
        if uow.offers.finish_job(node_job.id, status=status, error=error, at=utcnow()):
            audit.record(
                uow,
                action="node.job_finished" if status == "finished" else "node.job_failed",
                outcome="success" if status == "finished" else "failure",
                context=NODE_CONTEXT,
                subject_type="dataset",
                subject_id=offer.dataset_id,
                details={"coordinator_job_id": job_id, "error": error},
            )
        uow.commit()
    state.jobs.pop((offer.id, job_id), None)


def handle_task(
    uow_factory: UnitOfWorkFactory, state: NodeState, task: Mapping[str, Any]
) -> dict[str, Any]:
    """The answer to one task: the step's result, or ``{"refused": reason}``."""
    step = task.get("step")
    try:
        if step == "join":
            return _join(uow_factory, state, task)
        live = _live(uow_factory, state, task)
        if step == "prepare":
            _prepare(uow_factory, state, live, task.get("sizes"), task.get("plan"))
            return {}
        if step in ("finish", "abort"):
            finished = step == "finish"
            _close(
                uow_factory,
                state,
                task,
                status="finished" if finished else "failed",
                error=None if finished else "the coordinator ended the job without a model",
            )
            return {}
        return _step(live, str(step), task.get("vectors"))
    except Refusal as exc:
        reason = str(exc)
        _record_refusal(uow_factory, task, reason)
        _close(uow_factory, state, task, status="failed", error=reason[:500])
        return {"refused": reason}


def _record_refusal(uow_factory: UnitOfWorkFactory, task: Mapping[str, Any], reason: str) -> None:
    logger.warning("refused a %r task of job %r: %s", task.get("step"), task.get("job_id"), reason)
    with uow_factory() as uow:
        audit.record(
            uow,
            action="node.task_refused",
            outcome="failure",
            context=NODE_CONTEXT,
            subject_type="node_task",
            subject_id=str(task.get("task_id"))[:64],
            details={
                "coordinator_job_id": str(task.get("job_id"))[:64],
                "contribution_id": str(task.get("contribution_id"))[:64],
                "step": str(step)[:32] if (step := task.get("step")) is not None else None,
                "reason": reason[:500],
            },
        )
        uow.commit()
