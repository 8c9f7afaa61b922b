"""A node fit's plan: calibrated once by the coordinator, checked once by each node (issue 27).

The node of ``tests/integration/_nodes.py`` (SQLite and PostgreSQL): the coordinator derives the
job's plan once with the real sizes and sends it with ``prepare``; each node derives it from the
accepted terms and the sizes and refuses the job unless the two are equal, whichever way they
differ (a smaller σ would under-noise the node's answers; a node never takes a noise scale from
the coordinator). A node calibrates twice per job (its cost at ``join``, its plan at
``prepare``), never once per step; the coordinator once when the job runs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from service.db.uow import UnitOfWorkFactory
from service.domain.jobs.lifecycle import JobContext
from service.domain.nodes import node_tasks, remote_fit
from service.domain.nodes.remote_fit import run_remote_federated_job
from service.domain.randomness import Randomness
from service.dp import fit as dp_fit
from service.dp.core.plan import plan_from_json, plan_to_json
from service.dp.federated import (
    FederatedCalibration,
    calibrate_problem,
    make_federated_problem,
    psgd,
)
from tests.integration._nodes import (
    D,
    Network,
    Wire,
    joined,
    make_network,
    refusal_events,
    refused,
)


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


@pytest.fixture
def network(uow_factory: UnitOfWorkFactory) -> Network:
    return make_network(uow_factory)


@pytest.fixture
def wire(network: Network) -> Wire:
    return Wire(network.node)


def _counting(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[FederatedCalibration]:
    """Every calibration ``module`` computes, in order."""
    calls: list[FederatedCalibration] = []

    def counted(problem: Any) -> FederatedCalibration:
        calls.append(calibrate_problem(problem))
        return calls[-1]

    monkeypatch.setattr(module, "calibrate_problem", counted)
    return calls


def test_a_node_fit_calibrates_once_at_the_coordinator_and_twice_per_node(
    network: Network, wire: Wire, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(remote_fit, "EXCHANGE", wire)
    job = network.job()  # submitted (its calibration uses placeholder sizes for the nodes)
    assert "participants" in job.params
    at_nodes = _counting(monkeypatch, node_tasks)
    at_coordinator = _counting(monkeypatch, remote_fit)
    release = run_remote_federated_job(
        network.uow_factory,
        job,
        JobContext(randomness=Randomness(), progress=lambda _: None, fit=dp_fit),
    )
    assert release.model.privacy["datasets"]
    parties = len(network.contributions)
    steps = [d.message["step"] for d in wire.log]
    assert steps.count("noisy_gradient") == parties * job.params["rounds"]
    assert len(at_coordinator) == 1
    # join (the node's cost) and prepare (its plan), for each of the two parties, and no
    # calibration for any of the 2 × 3 steps
    assert len(at_nodes) == 2 * parties
    [plan] = [c.plan for c in at_coordinator]
    assert plan is not None
    prepares = [d.message for d in wire.log if d.message["step"] == "prepare"]
    assert len(prepares) == parties
    for message in prepares:
        assert message["plan"] == plan_to_json(plan)  # sent exactly (JSON through the wire)
        assert plan_from_json(message["plan"]) == plan
    # each node's prepare derived the very plan it was sent
    assert [c.plan for c in at_nodes[parties:]] == [plan] * parties


def _job_plan(network: Network, sizes: list[int]) -> psgd.PSGDPlan:
    """The plan of ``network.job()`` for these sizes, as the coordinator derives it."""
    problem = make_federated_problem(
        "psgd",
        site_sizes=sizes,
        d=D,
        epsilon=0.5,
        delta=1e-5,
        loss="logistic",
        regularization=0.01,
        params={"iterations": 3},
    )
    plan = calibrate_problem(problem).plan
    assert isinstance(plan, psgd.PSGDPlan)
    return plan


def _with_site_sigma(plan: psgd.PSGDPlan, index: int, factor: float) -> dict[str, Any]:
    sites = list(plan.sites)
    sites[index] = dataclasses.replace(sites[index], sigma=factor * sites[index].sigma)
    return plan_to_json(dataclasses.replace(plan, sites=tuple(sites)))


@pytest.mark.parametrize("factor", [0.5, 2.0], ids=["less-noise", "more-noise"])
def test_a_node_refuses_a_plan_other_than_its_own_before_any_step(
    network: Network, wire: Wire, factor: float
) -> None:
    node = network.node
    job = network.job()
    links = network.links(job, wire)
    sizes = joined(links)
    honest = _job_plan(network, sizes)
    ledger = node.ledgers()
    reason = refused(links[0], "prepare", sizes=sizes, plan=_with_site_sigma(honest, 0, factor))
    assert "plan differs" in reason
    assert "sites" in reason  # the field, never a number of it
    assert node.ledgers() == ledger  # nothing more is charged
    [event] = refusal_events(node, job.id)
    assert event["step"] == "prepare"
    # the refusal failed the job on this node: no step of it runs afterwards
    assert "already ended" in refused(links[0], "noisy_gradient", vectors=[[0.0] * D])
    # the other party, sent the honest plan, accepts it
    assert links[1].ask("prepare", sizes=sizes, plan=plan_to_json(honest)) == {}


def test_a_node_refuses_a_plan_it_cannot_read(network: Network, wire: Wire) -> None:
    job = network.job()
    links = network.links(job, wire)
    sizes = joined(links)
    reason = refused(links[0], "prepare", sizes=sizes, plan={"kind": "federated.unknown"})
    assert "cannot be read" in reason
