"""The coordinator and the site node of the node tests, below HTTP and without processes.

Shared by ``test_node_tasks`` (the node keeps to the accepted terms) and ``test_node_privacy``
(the node's answers are releases): a coordinator's study whose member site runs a node with two
datasets, each offered (:func:`make_network`); the coordinator's task exchange wired straight
to the node's :func:`~service.domain.nodes.node_tasks.handle_task` through the agent's wire
schemas (:class:`Wire`); and the helpers that read the node's ledgers and audit log.
"""

from __future__ import annotations

import io
import json
import math
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from service.api.schemas.nodes import NodeTaskRead, TaskResultIn
from service.db.models import AuditEvent, NodeJob, Site
from service.db.uow import UnitOfWorkFactory
from service.domain.access.principal import Principal
from service.domain.audit import AuditContext
from service.domain.datasets.catalog import create_dataset
from service.domain.datasets.spec import BudgetLimits, FeatureInput, build_spec
from service.domain.jobs.lifecycle import ClaimedJob
from service.domain.ledger import budgets
from service.domain.ledger.budgets import BudgetStatus
from service.domain.nodes.exchange import NodeExchange, NodeTask
from service.domain.nodes.node_tasks import NodeState, handle_task
from service.domain.nodes.offers import OfferView, create_offer, withdraw_offer
from service.domain.nodes.remote import (
    RemoteOffer,
    add_remote_contribution,
    withdraw_remote_contribution,
)
from service.domain.nodes.remote_fit import NodeRefusedError, _Link, _terms
from service.domain.randomness import Randomness
from service.domain.studies.federated.request import FederatedRequest
from service.domain.studies.federated.submit import submit_federated_fit
from service.domain.studies.membership import StudySpecInput, create_study

CONTEXT = AuditContext(request_id="test", client_ip=None)
FEATURES = [
    FeatureInput(column="dose", type="numeric", lower=0.0, upper=100.0),
    FeatureInput(column="arm", type="categorical", categories=("a", "b")),
]
LABEL_COLUMN, POSITIVE, NEGATIVE = "outcome", "yes", "no"
ROWS = (120, 150)
#: the encoded width: dose, the two arms, the intercept
D = 4
#: psgd over the node's datasets: ε = 0.5 per dataset, three noisy rounds
PSGD: dict[str, Any] = {"protocol": "psgd", "epsilon": 0.5, "delta": 1e-5, "iterations": 3}


# --- the coordinator ----------------------------------------------------------------------


class HeldRunner:
    """The coordinator's job runner: holds the federated job; the test runs it."""

    sole_api_process = True

    def __init__(self) -> None:
        self.jobs: list[str] = []

    def submit(self, job_id: str) -> None:
        self.jobs.append(job_id)

    def submit_to_api_process(self, job_id: str) -> None:
        self.jobs.append(job_id)


class InProcessCoordinator:
    """The node's ``CoordinatorLink``: registers the offer as a remote contribution of the
    coordinator's study, as the member site (the coordinator's endpoint does the same)."""

    def __init__(self, uow_factory: UnitOfWorkFactory, member: Principal) -> None:
        self.uow_factory = uow_factory
        self.member = member

    def offer(self, *, study_id: str, offer: RemoteOffer) -> str:
        return add_remote_contribution(
            self.uow_factory(),
            study_id=study_id,
            offer=offer,
            actor=self.member,
            context=CONTEXT,
        ).id

    def withdraw(self, *, study_id: str, contribution_id: str) -> None:
        withdraw_remote_contribution(
            self.uow_factory(),
            study_id=study_id,
            contribution_id=contribution_id,
            actor=self.member,
            context=CONTEXT,
        )


@dataclass
class Delivery:
    """One task as the agent received it and the node's answer before the wire."""

    message: dict[str, Any]
    answer: dict[str, Any]


class Wire(NodeExchange):
    """The coordinator's task exchange with the node's agent on the other end: each task goes
    through the schema of ``GET /v1/node/tasks/next`` to :func:`handle_task`, its answer
    through the schema of ``POST /v1/node/tasks/{id}/result``, synchronously."""

    def __init__(self, node: Node) -> None:
        super().__init__()
        self.node = node
        self.attached = True
        self.log: list[Delivery] = []

    def ask(self, task: NodeTask, *, deadline: float) -> dict[str, Any]:
        del deadline
        message = json.loads(NodeTaskRead.model_validate(task.to_message()).model_dump_json())
        answer = handle_task(self.node.uow_factory, self.node.state, message)
        self.log.append(Delivery(message, answer))
        return TaskResultIn.model_validate(answer).model_dump(exclude_none=True)

    @property
    def last(self) -> dict[str, Any]:
        return self.log[-1].answer


# --- the node -------------------------------------------------------------------------------


def ward_csv(n: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    lines = ["dose,arm,outcome"]
    for _ in range(n):
        dose = rng.uniform(0, 100)
        arm = "a" if rng.random() < 0.5 else "b"
        positive = rng.random() < 1 / (1 + math.exp(-(dose - 50) / 15))
        lines.append(f"{dose:.2f},{arm},{'yes' if positive else 'no'}")
    return ("\n".join(lines) + "\n").encode()


@dataclass
class Node:
    """A site's node: its own site, datasets and offers, and its agent's memory."""

    uow_factory: UnitOfWorkFactory
    site: Principal
    link: InProcessCoordinator
    study_id: str
    datasets: list[str] = field(default_factory=list)
    offers: list[OfferView] = field(default_factory=list)
    state: NodeState = field(default_factory=lambda: NodeState(randomness=Randomness()))

    def add_dataset(self, n: int, *, epsilon: float = 10.0, delta: float = 1e-3) -> str:
        spec = build_spec(
            name=f"ward-{len(self.datasets)}",
            features=FEATURES,
            epsilon=epsilon,
            delta=delta,
            limits=BudgetLimits(max_epsilon=100.0, max_delta=1e-3),
            label_column=LABEL_COLUMN,
            positive=POSITIVE,
            negative=NEGATIVE,
        )
        dataset = create_dataset(
            self.uow_factory(),
            actor=self.site,
            spec=spec,
            source=io.BytesIO(ward_csv(n, seed=len(self.datasets))),
            context=CONTEXT,
        )
        self.datasets.append(dataset.id)
        return dataset.id

    def offer(self, dataset_id: str, *, epsilon_cap: float = 8.0, delta_cap: float = 1e-3) -> str:
        view = create_offer(
            self.uow_factory(),
            link=self.link,
            dataset_id=dataset_id,
            study_id=self.study_id,
            epsilon_cap=epsilon_cap,
            delta_cap=delta_cap,
            actor=self.site,
            context=CONTEXT,
        )
        self.offers.append(view)
        return view.contribution_id

    def withdraw(self, contribution_id: str) -> None:
        view = next(o for o in self.offers if o.contribution_id == contribution_id)
        withdraw_offer(
            self.uow_factory(),
            link=self.link,
            dataset_id=view.dataset_id,
            offer_id=view.id,
            actor=self.site,
            context=CONTEXT,
        )

    def restart(self) -> None:
        """A new ``privfit agent`` process: the same database, an empty memory."""
        self.state = NodeState(randomness=Randomness())

    def budget(self, dataset_id: str) -> BudgetStatus:
        with self.uow_factory() as uow:
            return budgets.budget_status(uow, dataset_id=dataset_id)

    def offer_spent(self, contribution_id: str) -> tuple[int, int]:
        with self.uow_factory() as uow:
            row = uow.offers.by_contribution(contribution_id)
            assert row is not None
            return row.epsilon_spent_units, row.delta_spent_units

    def jobs(self, contribution_id: str) -> list[NodeJob]:
        with self.uow_factory() as uow:
            row = uow.offers.by_contribution(contribution_id)
            assert row is not None
            return list(uow.offers.jobs_of_offer(row.id))

    def job(self, contribution_id: str, job_id: str) -> NodeJob:
        [row] = [r for r in self.jobs(contribution_id) if r.coordinator_job_id == job_id]
        return row

    def ledgers(self) -> tuple[tuple[int, int], ...]:
        """Every dataset's spent (ε, δ) units, then every offer's."""
        out = []
        for dataset_id in self.datasets:
            status = self.budget(dataset_id)
            out.append((status.epsilon_spent_units, status.delta_spent_units))
        out += [self.offer_spent(o.contribution_id) for o in self.offers]
        return tuple(out)

    def events(self, action: str) -> list[AuditEvent]:
        with self.uow_factory() as uow:
            return list(reversed(uow.audit.list_page(action=action, limit=1000)))


def _site(uow_factory: UnitOfWorkFactory, name: str) -> Principal:
    with uow_factory() as uow:
        site = uow.sites.add(Site(name=f"{name}-{uuid.uuid4().hex[:8]}"))
        uow.commit()
    return Principal(role="site", site_id=site.id)


@dataclass
class Network:
    """A coordinator's study whose member runs a node with two datasets, each offered."""

    uow_factory: UnitOfWorkFactory
    coordinator: Principal
    node: Node
    contributions: list[str]

    def job(self, *contributions: str, **overrides: Any) -> ClaimedJob:
        """A federated fit over ``contributions`` submitted on the coordinator (charged
        nothing there: every party is remote), as its worker claims it."""
        spec = {**PSGD, **overrides}
        iterations = spec.pop("iterations")
        params = spec.pop("params", {"iterations": iterations})
        runner = HeldRunner()
        submitted = submit_federated_fit(
            self.uow_factory(),
            study_id=self.node.study_id,
            request=FederatedRequest(
                datasets=list(contributions or self.contributions), params=params, **spec
            ),
            actor=self.coordinator,
            runner=runner,
            context=CONTEXT,
        )
        assert runner.jobs == [submitted.job.id]
        job = submitted.job
        return ClaimedJob(
            id=job.id,
            kind=job.kind,
            owner_site_id=job.owner_site_id,
            dataset_id=job.dataset_id,
            params=dict(job.params),
        )

    def links(self, job: ClaimedJob, wire: Wire) -> list[_Link]:
        """The coordinator's links to the job's parties, as ``run_remote_federated_job``
        builds them (no seed: the CSPRNG)."""
        order = job.params["participants"]
        return [
            _Link(wire, entry["id"], job.id, k, _terms(job, k, len(order), None))
            for k, entry in enumerate(order)
        ]


def make_network(uow_factory: UnitOfWorkFactory) -> Network:
    """A fresh coordinator study and a node with two datasets (``ROWS``), each offered."""
    coordinator = _site(uow_factory, "coordinator")
    member = _site(uow_factory, "hospital")  # the member site, on the coordinator
    study = create_study(
        uow_factory(),
        name="dose study",
        members=[member.site_id or ""],
        spec=StudySpecInput(
            label_column=LABEL_COLUMN, positive=POSITIVE, negative=NEGATIVE, features=FEATURES
        ),
        actor=coordinator,
        context=CONTEXT,
    )
    node = Node(
        uow_factory=uow_factory,
        site=_site(uow_factory, "node"),  # the same hospital's site on its own node
        link=InProcessCoordinator(uow_factory, member),
        study_id=study.study.id,
    )
    contributions = [node.offer(node.add_dataset(n)) for n in ROWS]
    return Network(uow_factory, coordinator, node, contributions)


# --- helpers ------------------------------------------------------------------------------


def refused(link: _Link, step: str, **kwargs: Any) -> str:
    """The node's reason for refusing ``step``; the coordinator's link raised on it."""
    with pytest.raises(NodeRefusedError):
        link.ask(step, **kwargs)
    assert isinstance(link.exchange, Wire)
    reason = link.exchange.last.get("refused")
    assert isinstance(reason, str), link.exchange.last
    return reason


def joined(links: list[_Link]) -> list[int]:
    """Every party joins; returns the sizes the coordinator then sends with ``prepare``."""
    sizes = []
    for link in links:
        answer = link.ask("join")
        sizes.append(answer["n"])
    return sizes


def spent(node: Node, dataset_id: str) -> tuple[float, float]:
    status = node.budget(dataset_id)
    return status.epsilon_spent, status.delta_spent


def failures(node: Node, job_id: str) -> list[AuditEvent]:
    return [
        e
        for e in node.events("node.job_failed")
        if (e.details or {}).get("coordinator_job_id") == job_id
    ]


def refusal_events(node: Node, job_id: str) -> list[dict[str, Any]]:
    return [
        e.details or {}
        for e in node.events("node.task_refused")
        if (e.details or {}).get("coordinator_job_id") == job_id
    ]
