"""Coordinator side: a federated fit whose parties include datasets kept on nodes.

The job (kind ``federated``, with ``remote`` participants in its params: :func:`reaches_nodes`)
runs on a thread of the coordinator's API process, the one whose memory holds the task
exchange the nodes poll (:mod:`.exchange`): its draft says so and the in-process runner, with
threads or with processes, runs it there while other jobs go to its pool; a runner that cannot
(the distributed queue) is refused the fit at submission. Order:

1. ``join``: every node is sent the job's terms (the coordinator's job id, protocol,
   parameters, rounds, ε, δ, loss, λ, K, its party index, and the job seed in test mode). The
   node checks them against its offer, charges its own ledger for the whole job (idempotent
   on the job id) and answers with its row count and its charge. The row counts stay in this
   process's memory: the calibration needs them (replace-one neighbours: n is public to the
   mechanism), the coordinator's database, logs and responses never hold them. The nodes are
   asked one after another, in party order: a node that refuses stops the job before the
   nodes after it charge anything.
2. ``prepare``: every node gets the sizes and the job's public plan (calibrated once, here,
   with the real sizes), re-derives the plan from the terms and the sizes and refuses the job
   unless it is equal (a node never takes a noise scale from the coordinator), and checks that
   its own cost is within what it charged. Its steps then read that plan.
3. the protocol's coordinator (:func:`service.dp.federated.parties.run_parties`) runs round by
   round over local parties (hosted datasets) and :class:`RemoteParty` proxies, each step of a
   node being one task carrying only public state.
4. ``finish``: the nodes close the job in their ledgers. The model is stored with a privacy
   record naming every node's dataset and the charge the node reported.

``prepare``, every round's steps (:func:`service.dp.federated._common.site_round`), ``finish``
and ``abort`` go to every node at once, each from its own thread waiting on
:meth:`NodeExchange.ask`: a round takes as long as the slowest node, not the sum of them.

A node that refuses a task (outside its offer, different terms, replayed, a lost state) or is
silent past the deadline fails the job with that reason (:class:`PublicJobError`); nothing is
released and every node keeps its charge; the other nodes are sent an ``abort``.

A coordinator that dies mid-job loses the job's state (the exchange is in memory). On restart
its recovery fails the job (``job-interrupted``, charges kept) and, through
:func:`abort_interrupted_fit` (registered for the ``federated`` kind in
:mod:`service.runtime.worker`), queues the same ``abort`` for each remote contribution of the job,
fire-and-forget (:meth:`NodeExchange.post`): the same terms (the seed is derived again from the
job id) and a sequence number above any the job's own tasks reach
(:data:`RESTART_ABORT_SEQ`), since the restarted coordinator no longer knows how far it went.
A node still holding the job's party fails its job as after any abort; one whose agent
restarted refuses the task and fails its job too. Its charge stays; nothing is charged twice.
A second recovery finds the job already failed and sends nothing.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from service.db.uow import UnitOfWorkFactory
from service.domain.datasets.catalog import load_design
from service.domain.errors import NotFoundError
from service.domain.jobs.lifecycle import (
    ClaimedJob,
    JobContext,
    PublicJobError,
    Release,
    charged_amounts,
)
from service.domain.nodes.exchange import EXCHANGE, NodeExchange, NodeSilentError, NodeTask
from service.domain.randomness import Randomness
from service.domain.records.base import json_safe
from service.domain.records.federated import federated_privacy_record
from service.domain.studies.membership import StudyFacts
from service.dp.core.plan import plan_to_json
from service.dp.federated import calibrate_problem, make_federated_problem
from service.dp.federated._common import (
    FederatedCalibration,
    FederatedProblem,
    FloatArray,
    RoundClock,
    site_round,
)
from service.dp.federated.parties import local_party, run_parties
from service.dp.mechanisms._common import release

__all__ = [
    "RESTART_ABORT_SEQ",
    "RemoteParty",
    "abort_interrupted_fit",
    "reaches_nodes",
    "run_remote_federated_job",
    "task_deadline",
]

logger = logging.getLogger(__name__)

_DEADLINE: list[float] = [60.0]

#: The sequence number of the ``abort`` a restarted coordinator sends (it no longer knows how
#: far the job went, and a node refuses a number it has already seen): above any number the
#: job's own tasks reach, one per step.
RESTART_ABORT_SEQ: Final[int] = 2**31 - 1

REMOTE_NOTE: Final[str] = (
    "parties on nodes: each node ran its own steps on its own rows with noise drawn on the "
    "node, charged its own ledger for the whole job before its first step and checked every "
    "task against the terms it accepted; the coordinator saw only the values the nodes sent"
)


def reaches_nodes(params: Mapping[str, Any]) -> bool:
    """Whether a federated job, by its stored ``params``, has parties on site nodes: it must
    then run in the API process that serves the node task endpoints."""
    participants = params.get("participants")
    if not isinstance(participants, list):
        return False
    return any(isinstance(p, Mapping) and p.get("kind") == "remote" for p in participants)


def task_deadline(seconds: float | None = None) -> float:
    """The seconds a node may take to answer one task (set once from the settings)."""
    if seconds is not None:
        _DEADLINE[0] = float(seconds)
    return _DEADLINE[0]


class NodeRefusedError(PublicJobError):
    def __init__(self, index: int, reason: str) -> None:
        self.index = index
        super().__init__(
            "node-refused",
            "A node refused a task",
            f"the node of party {index} refused the job's task: {reason}. No model was "
            "released; every node keeps its charge.",
        )


class NodeTimeoutError(PublicJobError):
    def __init__(self, index: int, seconds: float) -> None:
        self.index = index
        super().__init__(
            "node-silent",
            "A node stopped answering",
            f"the node of party {index} did not answer a task within {seconds:g} s. No model "
            "was released; every node keeps its charge.",
        )


@dataclass
class _Link:
    exchange: NodeExchange
    contribution_id: str
    job_id: str
    index: int
    terms: Mapping[str, Any]
    seq: int = 0

    def task(
        self,
        step: str,
        vectors: Sequence[FloatArray] = (),
        sizes: list[int] | None = None,
        plan: dict[str, Any] | None = None,
    ) -> NodeTask:
        """The link's next task (its sequence number the next one)."""
        self.seq += 1
        return NodeTask(
            id=self.exchange.new_task_id(),
            contribution_id=self.contribution_id,
            job_id=self.job_id,
            seq=self.seq,
            step=step,
            terms=self.terms,
            vectors=[[float(x) for x in np.asarray(v, dtype=np.float64)] for v in vectors],
            sizes=sizes,
            plan=plan,
        )

    def ask(
        self,
        step: str,
        vectors: Sequence[FloatArray] = (),
        sizes: list[int] | None = None,
        *,
        plan: dict[str, Any] | None = None,
        deadline: float | None = None,
    ) -> dict[str, Any]:
        task = self.task(step, vectors, sizes, plan)
        deadline = task_deadline() if deadline is None else deadline
        try:
            answer = self.exchange.ask(task, deadline=deadline)
        except NodeSilentError:
            raise NodeTimeoutError(self.index, deadline) from None
        refused = answer.get("refused")
        if refused is not None:
            raise NodeRefusedError(self.index, str(refused)[:400])
        return answer

    def vector(self, step: str, vectors: Sequence[FloatArray], d: int) -> FloatArray:
        out = np.asarray(self.ask(step, vectors).get("vector"), dtype=np.float64)
        if out.shape != (d,) or not bool(np.all(np.isfinite(out))):
            raise NodeRefusedError(self.index, f"the node answered {step} without a valid vector")
        return out


class RemoteParty:
    """A party that runs on a node: the site methods every protocol's coordinator calls, each
    sending one task with the public inputs only. The calibrated numbers and the generator the
    coordinator passes are ignored: the node uses its own calibration and noise."""

    def __init__(self, link: _Link, d: int) -> None:
        self.index = link.index
        self._link = link
        self._d = d

    def noisy_gradient(
        self, w: FloatArray, sigma: float, rng: np.random.Generator | None
    ) -> FloatArray:
        del sigma, rng
        return self._link.vector("noisy_gradient", [w], self._d)

    def local_step(
        self, neighbour_broadcasts: Sequence[FloatArray], **calibrated: Any
    ) -> FloatArray:
        del calibrated
        return self._link.vector("local_step", neighbour_broadcasts, self._d)

    def dual_update(self, neighbour_broadcasts: Sequence[FloatArray]) -> None:
        self._link.ask("dual_update", neighbour_broadcasts)

    def gradient_sum(self, w: FloatArray, **calibrated: Any) -> FloatArray:
        del calibrated
        return self._link.vector("gradient_sum", [w], self._d)


def _terms(job: ClaimedJob, index: int, sites: int, seed: int | None) -> dict[str, Any]:
    return _job_terms(job.id, job.params, index, sites, seed)


def _job_terms(
    job_id: str, p: Mapping[str, Any], index: int, sites: int, seed: int | None
) -> dict[str, Any]:
    """The terms every task of the job carries to the node of party ``index``."""
    return {
        "job_id": job_id,
        "protocol": str(p["protocol"]),
        "epsilon": p.get("epsilon"),
        "delta": float(p["delta"]),
        "loss": str(p["loss"]),
        "regularization": float(p["regularization"]),
        "params": dict(p.get("params") or {}),
        "rounds": int(p["rounds"]),
        "sites": sites,
        "index": index,
        "seed": None if seed is None else str(seed),
    }


def run_remote_federated_job(
    uow_factory: UnitOfWorkFactory, job: ClaimedJob, context: JobContext
) -> Release:
    """Run the protocol over hosted datasets and nodes (module docstring); returns the model.

    Spent (checked against the coordinator's ledger): the hosted datasets' own costs; the
    nodes' costs are charged and checked by the nodes themselves."""
    params = job.params
    order: list[dict[str, str]] = [dict(x) for x in params["participants"]]
    study_id = str(params["study_id"])
    with uow_factory() as uow:
        study = uow.studies.get(study_id)
        if study is None:
            raise NotFoundError("study")
        facts = StudyFacts.of(study)
        owners: list[dict[str, Any]] = []
        hosted_n: dict[str, int] = {}
        widths: set[int] = set()
        for entry in order:
            if entry["kind"] == "dataset":
                dataset = uow.datasets.get(entry["id"])
                if dataset is None or dataset.deleted_at is not None:
                    raise NotFoundError("dataset")
                owners.append({"id": dataset.id, "site_id": dataset.owner_site_id})
                hosted_n[dataset.id] = int(dataset.n_rows)
                widths.add(int(dataset.n_features))
            else:
                remote = uow.remote_contributions.get(entry["id"])
                if remote is None or remote.withdrawn_at is not None:
                    raise PublicJobError(
                        "contribution-withdrawn",
                        "A remote contribution was withdrawn",
                        f"remote contribution {entry['id']} was withdrawn before the job ran; "
                        "no model was released",
                    )
                owners.append(
                    {
                        "id": remote.id,
                        "site_id": remote.site_id,
                        "node_dataset_id": remote.node_dataset_id,
                    }
                )
                widths.add(int(remote.n_features))
    if not EXCHANGE.attached:
        raise PublicJobError(
            "nodes-unreachable",
            "Nodes cannot reach this job",
            "this job ran outside the API process that serves the node task endpoints; a "
            "coordinator of remote contributions must run its jobs with the process (the "
            "default) or thread job runner (PRIVFIT_JOB_RUNNER=process or thread), not the "
            "queue. No node was asked anything.",
        )
    if len(widths) != 1:
        raise PublicJobError(
            "width-mismatch",
            "Participants differ in width",
            "the participants encode different numbers of features; no model was released",
        )
    d = widths.pop()
    context.progress(0.0)
    seed = context.randomness.job_seed(job.id)
    links = _links(EXCHANGE, job.id, job.params, seed)
    try:
        reported, _sizes, problem, calibration, coef = _run_protocol(
            uow_factory, job, context, order, links, hosted_n, d
        )
    except BaseException as exc:
        _abort(links, skip=getattr(exc, "index", None))
        raise
    model_body = release(coef)
    charged = {**charged_amounts(job), **reported}
    record = federated_privacy_record(
        calibration,
        datasets=owners,
        randomness=context.randomness,
        job_id=job.id,
        study_id=study_id,
        charged=charged,
    )
    record = _with_nodes(record, owners)
    spent = {
        entry["id"]: (
            (float(cost.epsilon), float(cost.delta)) if calibration.private else (0.0, 0.0)
        )
        for entry, cost in zip(order, calibration.site_costs, strict=True)
        if entry["kind"] == "dataset"
    }
    model = facts.model(
        owner_site_id=job.owner_site_id,
        job_id=job.id,
        name=params.get("name"),
        source="federated",
        mechanism=problem.protocol,
        loss=str(params["loss"]),
        body=json_safe(model_body.to_dict()),
        privacy=record,
    )
    return Release(model=model, spent=spent)


def _run_protocol(
    uow_factory: UnitOfWorkFactory,
    job: ClaimedJob,
    context: JobContext,
    order: Sequence[Mapping[str, str]],
    links: Mapping[int, _Link],
    hosted_n: Mapping[str, int],
    d: int,
) -> tuple[
    dict[str, tuple[float, float]], list[int], FederatedProblem, FederatedCalibration, FloatArray
]:
    """join → prepare → the rounds → finish (module docstring)."""
    params = job.params
    reported: dict[str, tuple[float, float]] = {}
    sizes: list[int] = []
    for k, entry in enumerate(order):
        if k in links:
            answer = links[k].ask("join")
            n = answer.get("n")
            charged = answer.get("charged") or {}
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise NodeRefusedError(k, "the node's join answer had no valid size")
            if int(answer.get("n_features", d)) != d:
                raise NodeRefusedError(k, "the node's dataset has a different width")
            sizes.append(n)
            reported[entry["id"]] = (
                float(charged.get("epsilon", 0.0)),
                float(charged.get("delta", 0.0)),
            )
        else:
            sizes.append(hosted_n[entry["id"]])
    epsilon = params.get("epsilon")
    problem = make_federated_problem(
        str(params["protocol"]),
        site_sizes=sizes,
        d=d,
        epsilon=1.0 if epsilon is None else float(epsilon),
        delta=float(params["delta"]),
        loss=str(params["loss"]),
        regularization=float(params["regularization"]),
        params=dict(params.get("params") or {}),
    )
    # the job's one calibration with the real sizes (the stored submission-time one used
    # placeholders for the nodes' sizes): its plan runs here and is sent to every node, which
    # re-derives it from the terms and the sizes and refuses the job unless it is equal
    calibration = calibrate_problem(problem)
    plan = None if calibration.plan is None else plan_to_json(calibration.plan)
    _ask_every_node(links, "prepare", sizes=sizes, plan=plan)
    parties: list[Any] = []
    for k, entry in enumerate(order):
        if k in links:
            parties.append(RemoteParty(links[k], d))
        else:
            X, y = load_design(uow_factory, entry["id"])
            parties.append(local_party(problem, calibration, k, X, y))
    clock = RoundClock(calibration.rounds, context.progress)
    coef = run_parties(
        parties,
        problem,
        calibration,
        rng=context.randomness.generator(job.id),
        clock=clock,
    )
    _ask_every_node(links, "finish")
    return reported, sizes, problem, calibration, coef


def _links(
    exchange: NodeExchange, job_id: str, params: Mapping[str, Any], seed: int | None
) -> dict[int, _Link]:
    """The links to the job's remote parties, by party index."""
    order = [dict(x) for x in params["participants"]]
    return {
        k: _Link(exchange, entry["id"], job_id, k, _job_terms(job_id, params, k, len(order), seed))
        for k, entry in enumerate(order)
        if entry["kind"] == "remote"
    }


def abort_interrupted_fit(
    job_id: str,
    params: Mapping[str, Any],
    *,
    randomness: Randomness,
    exchange: NodeExchange | None = None,
) -> int:
    """After a restart, for a federated job that recovery has just failed: queue one
    ``abort`` per remote contribution, shaped as :func:`_abort`'s (module docstring), without
    waiting for the answers. Returns how many were queued (none for a job without nodes).
    ``exchange``: this process's by default."""
    if not reaches_nodes(params):
        return 0
    exchange = EXCHANGE if exchange is None else exchange
    links = _links(exchange, job_id, params, randomness.job_seed(job_id))
    for link in links.values():
        link.seq = RESTART_ABORT_SEQ - 1
        exchange.post(link.task("abort"))
    if links:
        logger.info("queued an abort for each of the %d node(s) of job %s", len(links), job_id)
    return len(links)


def _ask_every_node(links: Mapping[int, _Link], step: str, **kwargs: Any) -> None:
    """Ask every node for ``step`` at once and wait for all the answers
    (:func:`~service.dp.federated._common.site_round`); the first refusal in party order
    propagates."""
    site_round(list(links.values()), lambda _, link: link.ask(step, **kwargs))


def _abort(links: Mapping[int, _Link], *, skip: int | None) -> None:
    """Tell every node at once that the job ended without a model (best effort, short
    deadline): each records it as failed in its ledger's job; its charge stays. ``skip``: the
    node that refused or fell silent (it already knows, or cannot be told)."""

    def abort(_: int, link: _Link) -> None:
        with contextlib.suppress(PublicJobError):
            link.ask("abort", deadline=min(5.0, task_deadline()))

    site_round([link for index, link in links.items() if index != skip], abort)


def _with_nodes(record: dict[str, Any], owners: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The federated record with each node's dataset named and its charge marked as reported
    by the node (whose ledger is the authority)."""
    by_id = {o["id"]: o for o in owners}
    entries = []
    for entry in record["datasets"]:
        owner = by_id.get(entry["id"], {})
        if "node_dataset_id" in owner:
            entry = {
                **entry,
                "kind": "node",
                "contribution_id": entry["id"],
                "node_dataset_id": owner["node_dataset_id"],
                "charge_reported_by_node": True,
            }
        else:
            entry = {**entry, "kind": "hosted"}
        entries.append(entry)
    notes = list(record.get("assumptions") or [])
    notes.append(REMOTE_NOTE)
    return {
        **record,
        "datasets": entries,
        "assumptions": notes,
        "released": "only this final model: the nodes' rows never left them, and what they "
        "sent was noised on the node",
        "nodes": {
            "secure_aggregation": False,
            "charges": "each node's charge as reported by the node, whose own ledger holds it",
        },
    }
