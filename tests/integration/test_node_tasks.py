"""A site's node answering a coordinator's tasks, below HTTP and without processes (issue 15).

The node's side of a federated fit (:func:`service.domain.nodes.node_tasks.handle_task`, what
``privfit agent`` runs for every task it polls) driven through the domain on SQLite and on
PostgreSQL. The tasks are the coordinator's own: a real federated job submitted on a study,
its terms from ``remote_fit._terms``, each task built by the coordinator's ``_Link`` (and its
``RemoteParty`` proxies) and passed through the wire schema the agent reads
(``NodeTaskRead``), the node's answer back through the one the coordinator reads
(``TaskResultIn``). Coordinator and node share one database here (their tables differ); the
node has its own site, datasets and offers, made with ``create_dataset`` and ``create_offer``.

What the node must keep:

* ``join`` checks the terms against the offer and charges the node's own ledger for the whole
  job in one transaction, once per coordinator job: a second ``join`` never charges again
  (it is refused, and ends the job);
* every later task must match the accepted terms: a changed term, a replayed sequence number,
  a step the protocol does not have or out of turn, more rounds than accepted, a step before
  ``prepare`` are refused with a reason, recorded in the node's audit log, charged nothing,
  and fail the job;
  a task of a job the node never accepted is refused and leaves its running jobs alone;
* after an agent restart (a fresh ``NodeState``, same database) the node refuses the rest of a
  running job, fails it, keeps its charge, and a fresh ``join`` of it charges nothing;
* after a coordinator restart, recovery fails the running job and queues one ``abort`` per
  remote contribution (once): the node fails its job with or without its party in memory, and
  no ledger moves;
* terms beyond the offer's caps, a withdrawn or unknown offer, a non-private variant, the
  noisy average, a dataset whose own budget is short, and a job naming one dataset under two
  offers are refused before any charge;
* a dataset whose label is not binary is never offered (the node refuses before it contacts
  the coordinator).
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from service.api.schemas.nodes import NodeTaskRead, TaskResultIn
from service.db.base import utcnow
from service.db.uow import UnitOfWorkFactory
from service.domain.datasets.catalog import create_dataset
from service.domain.datasets.labels import UnsupportedTaskError
from service.domain.datasets.spec import BudgetLimits, build_spec
from service.domain.jobs.lifecycle import JobContext, recover_jobs
from service.domain.ledger import budgets
from service.domain.nodes import remote_fit
from service.domain.nodes.exchange import NodeExchange, NodeTask
from service.domain.nodes.node_tasks import handle_task
from service.domain.nodes.remote_fit import (
    RESTART_ABORT_SEQ,
    NodeRefusedError,
    RemoteParty,
    _Link,
    _terms,
    run_remote_federated_job,
)
from service.domain.randomness import Randomness
from service.domain.studies.membership import (
    DatasetGrant,
    add_contribution,
)
from service.dp import fit as dp_fit
from service.runtime.worker import interrupted_hooks
from tests.integration._nodes import (
    CONTEXT,
    FEATURES,
    LABEL_COLUMN,
    NEGATIVE,
    POSITIVE,
    ROWS,
    D,
    Network,
    Node,
    Wire,
    failures,
    joined,
    make_network,
    refusal_events,
    refused,
    spent,
    ward_csv,
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


@pytest.fixture
def exchange_is_the_wire(monkeypatch: pytest.MonkeyPatch, wire: Wire) -> Wire:
    """The coordinator's process-wide exchange replaced by the wire to the node."""
    monkeypatch.setattr(remote_fit, "EXCHANGE", wire)
    return wire


# --- a whole fit ----------------------------------------------------------------------------


def test_a_fit_over_the_node_charges_each_dataset_once_and_finishes(
    network: Network, exchange_is_the_wire: Wire
) -> None:
    """The coordinator's own job runner against the node: join, prepare, every round and the
    certification, finish. Each dataset is charged once, by the node, for the whole job."""
    node, wire = network.node, exchange_is_the_wire
    job = network.job()
    release = run_remote_federated_job(
        network.uow_factory,
        job,
        JobContext(randomness=Randomness(), progress=lambda _: None, fit=dp_fit),
    )
    steps = [d.message["step"] for d in wire.log]
    assert steps[:4] == ["join", "join", "prepare", "prepare"]
    assert steps[-2:] == ["finish", "finish"]
    assert steps.count("noisy_gradient") == 2 * job.params["rounds"] == 6
    assert all("refused" not in d.answer for d in wire.log)
    # what the node reported as its charge is what its ledger holds, once per dataset
    reported = {
        e["contribution_id"]: e["charged_by_this_job"] for e in release.model.privacy["datasets"]
    }
    for k, (contribution, dataset_id) in enumerate(
        zip(network.contributions, node.datasets, strict=True)
    ):
        status = node.budget(dataset_id)
        [charge] = status.charges
        assert (charge.epsilon, charge.state) == (0.5, "charged")
        assert charge.mechanism == "node_psgd"
        assert (status.epsilon_spent, status.delta_spent) == (charge.epsilon, charge.delta)
        assert reported[contribution]["epsilon"] == pytest.approx(charge.epsilon)
        assert node.offer_spent(contribution) == (
            status.epsilon_spent_units,
            status.delta_spent_units,
        )
        [row] = node.jobs(contribution)
        assert (row.coordinator_job_id, row.status, row.error) == (job.id, "finished", None)
        assert row.charge_id == charge.id
        assert row.terms == _terms(job, k, 2, None)
    accepted = node.events("node.job_accepted")
    assert [e.details["coordinator_job_id"] for e in accepted if e.details] == [job.id] * 2
    assert len(node.events("node.job_finished")) == 2
    assert node.events("node.task_refused") == []


# --- join: once per job ---------------------------------------------------------------------


def test_a_second_join_of_an_accepted_job_never_charges_again(network: Network, wire: Wire) -> None:
    node = network.node
    job = network.job()
    links = network.links(job, wire)
    first = links[0].ask("join")
    assert first["n"] == ROWS[0]
    assert first["charged"]["epsilon"] == pytest.approx(0.5)
    after_join = spent(node, node.datasets[0]), node.offer_spent(network.contributions[0])

    # the coordinator asks again (the next sequence number), then replays the join itself
    assert "already accepted and charged" in refused(links[0], "join")
    links[0].seq = 0
    assert "already accepted" in refused(links[0], "join")

    assert (spent(node, node.datasets[0]), node.offer_spent(network.contributions[0])) == (
        after_join
    )
    assert len(node.budget(node.datasets[0]).charges) == 1
    [row] = node.jobs(network.contributions[0])
    assert row.status == "failed"
    assert "already accepted" in (row.error or "")
    assert len(refusal_events(node, job.id)) == 2
    assert all(e["step"] == "join" for e in refusal_events(node, job.id))
    # the other party's dataset was never touched
    assert spent(node, node.datasets[1]) == (0.0, 0.0)


# --- later tasks: only the accepted terms ---------------------------------------------------


def _forge_term(key: str, value: Any) -> Callable[[_Link], None]:
    def forge(link: _Link) -> None:
        link.terms = {**link.terms, key: value}

    return forge


def _seq(value: Callable[[int], int]) -> Callable[[_Link], None]:
    def forge(link: _Link) -> None:
        link.seq = value(link.seq)

    return forge


#: What a forged task does to the coordinator's link → what the node's refusal says.
FORGERIES: dict[str, tuple[Callable[[_Link], None], str]] = {
    "a changed epsilon": (_forge_term("epsilon", 5.0), "differ from the accepted ones: epsilon"),
    "a changed delta": (_forge_term("delta", 1e-4), "accepted ones: delta"),
    "more rounds": (_forge_term("rounds", 30), "accepted ones: rounds"),
    "changed params": (_forge_term("params", {"iterations": 30}), "accepted ones: params"),
    "another protocol": (_forge_term("protocol", "admm"), "accepted ones: protocol"),
    "another loss": (_forge_term("loss", "huber"), "accepted ones: loss"),
    "another party index": (_forge_term("index", 1), "accepted ones: index"),
    "a seed": (_forge_term("seed", "7"), "accepted ones: seed"),
    "an unknown term": (_forge_term("sigma", 0.0), "unknown fields: sigma"),
    "a replayed sequence number": (_seq(lambda seq: seq - 1), "replayed"),
    "a sequence number seen long ago": (_seq(lambda seq: 0), "replayed"),
}


def test_a_task_that_departs_from_the_accepted_terms_is_refused_and_fails_the_job(
    network: Network, wire: Wire
) -> None:
    """Each forgery on a running job of its own (joined, prepared, one round done)."""
    node = network.node
    for forgery, (forge, expected) in FORGERIES.items():
        job = network.job()
        links = network.links(job, wire)
        sizes = joined(links)
        parties = [RemoteParty(link, d=D) for link in links]
        for link in links:
            link.ask("prepare", sizes=sizes)
        parties[0].noisy_gradient(np.zeros(D), 0.0, None)
        ledger = node.ledgers()

        forge(links[0])
        reason = refused(links[0], "noisy_gradient", vectors=[np.zeros(D)])

        assert expected in reason, forgery
        assert node.ledgers() == ledger, forgery  # no charge, on either dataset or offer
        [event] = refusal_events(node, job.id)
        assert (event["step"], event["reason"]) == ("noisy_gradient", reason), forgery
        assert event["contribution_id"] == network.contributions[0]
        row = node.job(network.contributions[0], job.id)
        assert (row.status, row.error) == ("failed", reason), forgery
        [failed] = failures(node, job.id)
        assert failed.outcome == "failure"
        assert failed.details == {"coordinator_job_id": job.id, "error": reason}
        # the job is over on this node: even a task on the accepted terms is refused now
        links[0].terms = _terms(job, 0, 2, None)
        links[0].seq = 100
        again = refused(links[0], "noisy_gradient", vectors=[np.zeros(D)])
        assert "ended on this node (failed)" in again, forgery
        # the job's other party, whose tasks were not forged, goes on
        assert parties[1].noisy_gradient(np.zeros(D), 0.0, None).shape == (D,)
        assert node.job(network.contributions[1], job.id).status == "accepted"
    assert [len(node.budget(d).charges) for d in node.datasets] == [len(FORGERIES)] * 2


def test_steps_outside_the_protocol_are_refused_and_fail_the_job(
    network: Network, wire: Wire
) -> None:
    """Each on a job of its own, after the steps named by ``done``: a step psgd does not
    have (among them the fixed-noise and certification steps of earlier versions), a round
    before prepare, a round beyond the accepted ones, a vector of another width, ``prepare``
    without the node's own size or twice."""
    node = network.node
    zero = [np.zeros(D)]
    cases: list[tuple[str, int, str, dict[str, Any], str]] = [
        ("prepare", 0, "local_step", {"vectors": zero}, "psgd has no step 'local_step'"),
        ("prepare", 0, "steal_rows", {}, "psgd has no step 'steal_rows'"),
        ("prepare", 0, "draw_fixed_noise", {}, "psgd has no step 'draw_fixed_noise'"),
        ("prepare", 3, "gop_gradient", {"vectors": zero}, "psgd has no step 'gop_gradient'"),
        ("join", 0, "noisy_gradient", {"vectors": zero}, "after prepare"),
        ("prepare", 3, "noisy_gradient", {"vectors": zero}, "more noisy_gradient steps"),
        ("prepare", 0, "noisy_gradient", {"vectors": [np.zeros(D + 1)]}, f"{D} finite numbers"),
        ("join", 0, "prepare", {"sizes": [ROWS[0] + 1, ROWS[1]]}, "own size"),
        ("join", 0, "prepare", {"sizes": [ROWS[0]]}, "one positive size per party"),
        ("prepare", 0, "prepare", {"sizes": list(ROWS)}, "already prepared"),
    ]
    for done, rounds, step, inputs, expected in cases:
        job = network.job()
        links = network.links(job, wire)
        sizes = joined(links)
        link = links[0]
        if done == "prepare":
            link.ask("prepare", sizes=sizes)
        for _ in range(rounds):
            link.ask("noisy_gradient", zero)
        ledger = node.ledgers()
        reason = refused(link, step, **inputs)
        assert expected in reason, (step, done)
        assert node.ledgers() == ledger
        assert [e["reason"] for e in refusal_events(node, job.id)] == [reason]
        row = node.job(network.contributions[0], job.id)
        assert (row.status, row.error) == ("failed", reason)
        assert len(failures(node, job.id)) == 1
    # each job was charged once, at its join
    assert len(node.budget(node.datasets[0]).charges) == len(cases)
    assert spent(node, node.datasets[0])[0] == pytest.approx(0.5 * len(cases))


def test_a_task_of_a_job_the_node_never_accepted_is_refused(network: Network, wire: Wire) -> None:
    """A job id the node never accepted, or a contribution it has no offer for: refused; the
    job the node did accept goes on."""
    node = network.node
    job = network.job()
    links = network.links(job, wire)
    sizes = joined(links)
    ledger = node.ledgers()
    stranger = _Link(wire, network.contributions[0], "f" * 32, 0, links[0].terms)
    stranger.terms = {**stranger.terms, "job_id": "f" * 32}
    stranger.seq = 5
    assert "never accepted" in refused(stranger, "prepare", sizes=sizes)
    elsewhere = _Link(wire, "0" * 32, job.id, 0, links[0].terms)
    elsewhere.seq = 5
    assert "no offer for that contribution" in refused(elsewhere, "prepare", sizes=sizes)

    assert node.ledgers() == ledger
    assert len(refusal_events(node, "f" * 32)) == 1
    assert len(refusal_events(node, job.id)) == 1
    assert node.events("node.job_failed") == []
    for link in links:
        link.ask("prepare", sizes=sizes)
    assert [node.job(c, job.id).status for c in network.contributions] == ["accepted"] * 2


# --- an agent restart -----------------------------------------------------------------------


def test_after_an_agent_restart_the_running_job_is_refused_and_nothing_is_charged_twice(
    network: Network, wire: Wire
) -> None:
    node = network.node
    job = network.job()
    links = network.links(job, wire)
    sizes = joined(links)
    for link in links:
        link.ask("prepare", sizes=sizes)
    RemoteParty(links[0], d=D).noisy_gradient(np.zeros(D), 0.0, None)
    charges = [node.budget(d).charges for d in node.datasets]
    ledger = node.ledgers()

    node.restart()

    reason = refused(links[0], "noisy_gradient", vectors=[np.zeros(D)])
    assert "no longer holds the job's local state (an agent restart)" in reason
    # nor can the coordinator start the job over on the node: a fresh join charges nothing
    again = network.links(job, wire)
    assert "already accepted and charged" in refused(again[1], "join")
    assert "agent restart" in wire.last["refused"]
    assert "ended on this node (failed)" in refused(again[0], "join")

    assert [node.budget(d).charges for d in node.datasets] == charges
    assert [c.state for cs in charges for c in cs] == ["charged", "charged"]
    assert node.ledgers() == ledger
    for contribution in network.contributions:
        row = node.job(contribution, job.id)
        assert row.status == "failed"
        assert "agent restart" in (row.error or "")
    assert len(refusal_events(node, job.id)) == 3
    assert len(failures(node, job.id)) == 2
    assert len(node.events("node.job_accepted")) == 2
    # the restarted agent accepts new jobs as usual
    assert joined(network.links(network.job(), wire)) == list(ROWS)
    assert len(node.events("node.job_accepted")) == 4


# --- refused before any charge --------------------------------------------------------------


def test_a_join_outside_what_the_node_runs_is_refused_before_any_charge(
    network: Network, wire: Wire
) -> None:
    """Each forged join on a job of its own; the node's ledgers stay as they were."""
    node = network.node
    cases: list[tuple[dict[str, Any], str]] = [
        ({"protocol": "noisy_average", "params": {}}, "not run on nodes"),
        (
            {"protocol": "admm", "params": {"perturbation": "none", "iterations": 3}},
            "without differential privacy",
        ),
        ({"epsilon": None}, "epsilon must be a number"),
        ({"epsilon": "0.5"}, "epsilon must be a number"),
        ({"epsilon": math.inf}, "epsilon must be a number"),  # JSON has no ∞: it arrives null
        ({"epsilon": -0.5}, "invalid terms"),
        ({"delta": 1.5}, "invalid terms"),
        ({"rounds": 2}, "rounds differ"),
        ({"params": {"iterations": 0}}, "invalid terms"),
        ({"index": 1, "sites": 1}, "party index"),
        ({"job_id": "another-job"}, "job id"),
    ]
    for terms, expected in cases:
        link = network.links(network.job(), wire)[0]
        link.terms = {**link.terms, **terms}
        reason = refused(link, "join")
        assert expected in reason, terms
        [event] = refusal_events(node, link.job_id)
        assert event["step"] == "join"
        assert event["reason"] == reason

    # no cost at all, as a rogue coordinator's JSON may carry (``json.loads`` takes NaN and
    # Infinity; the wire schema above would not send them)
    for value in (math.nan, math.inf):
        job = network.job()
        message = NodeTask(
            id="t-1",
            contribution_id=network.contributions[0],
            job_id=job.id,
            seq=1,
            step="join",
            terms={**_terms(job, 0, 2, None), "epsilon": value},
        ).to_message()
        answer = handle_task(node.uow_factory, node.state, json.loads(json.dumps(message)))
        assert "invalid terms" in answer["refused"], value

    # an offer this node does not have
    job = network.job()
    unknown = _Link(wire, "0" * 32, job.id, 0, _terms(job, 0, 2, None))
    assert "no offer for that contribution" in refused(unknown, "join")

    assert node.ledgers() == ((0, 0), (0, 0), (0, 0), (0, 0))
    assert [node.jobs(c) for c in network.contributions] == [[], []]
    assert len(node.events("node.task_refused")) == len(cases) + 3
    assert node.events("node.job_accepted") == []


def test_terms_beyond_the_offer_s_caps_or_the_dataset_s_budget_are_refused_before_any_charge(
    network: Network, wire: Wire
) -> None:
    node = network.node
    # a third dataset offered with small caps: at most ε = 0.8, δ = 1.5e-5 in all
    small = node.offer(node.add_dataset(100, epsilon=2.0), epsilon_cap=0.8, delta_cap=1.5e-5)
    dataset_id = node.datasets[-1]

    def join(**overrides: Any) -> dict[str, Any]:
        link = network.links(network.job(small, network.contributions[1], **overrides), wire)[0]
        try:
            return link.ask("join")
        except NodeRefusedError:
            return wire.last

    assert "offer's caps" in join(epsilon=0.9)["refused"]
    assert "offer's caps" in join(delta=2e-5)["refused"]
    assert spent(node, dataset_id) == (0.0, 0.0)
    assert node.offer_spent(small) == (0, 0)
    assert join(epsilon=0.5)["charged"]["epsilon"] == pytest.approx(0.5)
    assert "offer's caps" in join(epsilon=0.5)["refused"]  # no longer: ε = 0.3 is left
    assert spent(node, dataset_id)[0] == pytest.approx(0.5)
    assert node.offer_spent(small)[0] == node.budget(dataset_id).epsilon_spent_units
    assert len(node.budget(dataset_id).charges) == 1
    assert len(node.jobs(small)) == 1

    # the dataset's owner spent most of its own budget on local fits since: the offer still
    # has ε = 0.3 (δ = 5e-6) left, the dataset only ε = 0.1
    with node.uow_factory() as uow:
        budgets.charge(uow, dataset_id=dataset_id, epsilon=1.4, delta=0.0, mechanism="local_fit")
        uow.commit()
    offer = node.offer_spent(small)
    assert "dataset's own budget" in join(epsilon=0.25, delta=1e-6)["refused"]
    assert node.offer_spent(small) == offer  # the offer's debit was rolled back with it
    assert spent(node, dataset_id)[0] == pytest.approx(1.9)
    assert len(node.jobs(small)) == 1
    assert len(node.events("node.task_refused")) == 4


def test_a_withdrawn_offer_takes_no_new_job_and_fails_its_running_one(
    network: Network, wire: Wire
) -> None:
    node = network.node
    running = network.job()
    links = network.links(running, wire)
    sizes = joined(links)
    waiting = network.job()
    ledger = node.ledgers()
    node.withdraw(network.contributions[0])

    assert "withdrawn" in refused(network.links(waiting, wire)[0], "join")
    assert "withdrawn" in refused(links[0], "prepare", sizes=sizes)
    assert node.ledgers() == ledger  # the running job's charge is kept, nothing added
    assert node.job(network.contributions[0], running.id).status == "failed"
    assert [r.coordinator_job_id for r in node.jobs(network.contributions[0])] == [running.id]
    # the dataset's other offer is unaffected
    links[1].ask("prepare", sizes=sizes)
    assert node.job(network.contributions[1], running.id).status == "accepted"


def test_one_dataset_under_two_offers_takes_part_in_a_job_once(
    network: Network, wire: Wire
) -> None:
    """The same dataset offered twice to the study: a fit naming both offers would run two
    parties over the same rows; the node's ledger holds one charge per dataset and job, so
    the second join is refused rather than run uncharged."""
    node = network.node
    twice = node.offer(node.datasets[0])
    job = network.job(network.contributions[0], twice)
    first, second = network.links(job, wire)
    assert first.ask("join")["charged"]["epsilon"] == pytest.approx(0.5)
    assert "already takes part in this job" in refused(second, "join")
    status = node.budget(node.datasets[0])
    assert [c.epsilon for c in status.charges] == [0.5]
    assert status.epsilon_spent == pytest.approx(0.5)
    assert node.offer_spent(twice) == (0, 0)
    assert node.jobs(twice) == []
    # the job the first offer accepted is untouched by the refusal
    assert node.job(network.contributions[0], job.id).status == "accepted"


# --- a coordinator restart ------------------------------------------------------------------


def _hosted_dataset(network: Network) -> str:
    """A dataset of the member site hosted on the coordinator, granted to the study."""
    member = network.node.link.member
    spec = build_spec(
        name="hosted ward",
        features=FEATURES,
        epsilon=10.0,
        delta=1e-3,
        limits=BudgetLimits(max_epsilon=100.0, max_delta=1e-3),
        label_column=LABEL_COLUMN,
        positive=POSITIVE,
        negative=NEGATIVE,
    )
    dataset = create_dataset(
        network.uow_factory(),
        actor=member,
        spec=spec,
        source=io.BytesIO(ward_csv(100, seed=9)),
        context=CONTEXT,
    )
    add_contribution(
        network.uow_factory(),
        study_id=network.node.study_id,
        actor=member,
        context=CONTEXT,
        grant=DatasetGrant(dataset_id=dataset.id, epsilon_cap=8.0, delta_cap=1e-3),
    )
    return dataset.id


def _deliver(node: Node, task: NodeTask) -> dict[str, Any]:
    """``task`` through the agent's wire schemas to the node; the answer it posts back."""
    message = json.loads(NodeTaskRead.model_validate(task.to_message()).model_dump_json())
    answer = handle_task(node.uow_factory, node.state, message)
    return TaskResultIn.model_validate(answer).model_dump(exclude_none=True)


def test_a_coordinator_restart_fails_the_job_and_aborts_it_on_every_node_once(
    network: Network, wire: Wire, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fit over a hosted dataset and both offers, its nodes joined (charged) and one round
    run, when the coordinator dies: its job row stays ``running`` and its exchange is lost.
    Recovery fails the job (``job-interrupted``, the hosted charge kept) and queues one abort
    per remote contribution in the new exchange; the node, given them, fails its job whether
    its agent still holds the party or restarted, and no ledger moves. A second recovery
    queues nothing."""
    node = network.node
    hosted = _hosted_dataset(network)
    job = network.job(hosted, *network.contributions)
    with network.uow_factory() as uow:
        assert uow.jobs.claim(job.id, started_at=utcnow()) is not None
        uow.commit()
    links = remote_fit._links(wire, job.id, job.params, None)
    assert sorted(links) == [1, 2]
    sizes = [100] + [link.ask("join")["n"] for link in links.values()]
    for link in links.values():
        link.ask("prepare", sizes=sizes)
    RemoteParty(links[1], d=D).noisy_gradient(np.zeros(D), 0.0, None)
    hosted_charges = node.budget(hosted).charges
    assert [c.state for c in hosted_charges] == ["charged"]
    ledger = node.ledgers()
    assert all(e + d > 0 for e, d in ledger)

    # the crash: a new process, with an empty exchange and the job row left running
    exchange = NodeExchange()
    monkeypatch.setattr(remote_fit, "EXCHANGE", exchange)
    hooks = interrupted_hooks(Randomness())
    assert recover_jobs(network.uow_factory, on_interrupted=hooks) == []

    with network.uow_factory() as uow:
        row = uow.jobs.get(job.id)
        assert row is not None
        assert (row.status, (row.error or {}).get("type")) == ("failed", "job-interrupted")
    assert node.budget(hosted).charges == hosted_charges
    aborts = [exchange.next_for([c], wait=0.0) for c in network.contributions]
    assert exchange.next_for(network.contributions, wait=0.0) is None
    for k, (task, contribution) in enumerate(zip(aborts, network.contributions, strict=True)):
        assert task is not None
        assert (task.step, task.contribution_id, task.job_id) == ("abort", contribution, job.id)
        assert task.seq == RESTART_ABORT_SEQ
        assert dict(task.terms) == links[k + 1].terms
    first, second = aborts
    assert first is not None
    assert second is not None

    # the agent still holds the first party: it accepts the abort like any other
    answer = _deliver(node, first)
    assert answer == {}
    node_job = node.job(network.contributions[0], job.id)
    assert (node_job.status, node_job.error) == (
        "failed",
        "the coordinator ended the job without a model",
    )
    # nobody waits for it: the answer is taken (the agent's post succeeds) and dropped, once
    assert exchange.answer(first.id, [first.contribution_id], answer)
    assert not exchange.answer(first.id, [first.contribution_id], answer)

    # after an agent restart the node refuses the abort, which fails its job too
    node.restart()
    answer = _deliver(node, second)
    assert "agent restart" in answer["refused"]
    assert node.job(network.contributions[1], job.id).status == "failed"
    assert exchange.answer(second.id, [second.contribution_id], answer)

    assert node.ledgers() == ledger  # each node's charge stays, nothing charged twice
    assert [len(node.budget(d).charges) for d in node.datasets] == [1, 1]
    assert len(failures(node, job.id)) == 2
    assert node.budget(hosted).charges == hosted_charges

    # a second recovery finds the job failed already: no abort again
    assert recover_jobs(network.uow_factory, on_interrupted=hooks) == []
    assert exchange.next_for(network.contributions, wait=0.0) is None


def test_a_restart_abort_is_not_posted_for_jobs_without_nodes() -> None:
    exchange = NodeExchange()
    params = {"participants": [{"kind": "dataset", "id": "d1"}]}
    assert (
        remote_fit.abort_interrupted_fit("j1", params, randomness=Randomness(), exchange=exchange)
        == 0
    )
    assert exchange.next_for(["d1"], wait=0.0) is None


# --- labels that are not binary ---------------------------------------------------------------


def test_a_node_refuses_to_offer_a_dataset_whose_label_is_not_binary(network: Network) -> None:
    """The node's own guard (the coordinator refuses such offers too): node protocol steps
    assume y = ±1 and the terms carry no label form. Refused before the coordinator is
    contacted; no offer is stored."""
    node = network.node
    spec = build_spec(
        name="graded ward",
        features=FEATURES,
        epsilon=10.0,
        delta=1e-3,
        limits=BudgetLimits(max_epsilon=100.0, max_delta=1e-3),
        label_column="grade",
        positive=None,
        classes=["low", "mid", "high"],
    )
    rows = [
        "dose,arm,grade",
        *(f"{i * 3.5:.2f},a,{('low', 'mid', 'high')[i % 3]}" for i in range(30)),
    ]
    dataset = create_dataset(
        node.uow_factory(),
        actor=node.site,
        spec=spec,
        source=io.BytesIO(("\n".join(rows) + "\n").encode()),
        context=CONTEXT,
    )
    with node.uow_factory() as uow:
        registered = len(uow.remote_contributions.of_study(node.study_id))
    offers = len(node.offers)
    reason = r"the node protocols \(psgd, admm\) compute every step for labels y = ±1"
    with pytest.raises(UnsupportedTaskError, match=reason):
        node.offer(dataset.id)
    assert len(node.offers) == offers
    with node.uow_factory() as uow:
        assert len(uow.remote_contributions.of_study(node.study_id)) == registered
        assert list(uow.offers.of_dataset(dataset.id)) == []
