"""The node task exchange under a round sent to every node at once (issue 25 §6): several
coordinator threads wait in :meth:`NodeExchange.ask` at the same time, each for its own node,
and each gets its own node's answer, whatever order the nodes answer in; a node that stays
silent fails only its own ask. The last test drives ``RemoteParty`` proxies through a real
``site_round`` with node threads that answer only once every node holds its task."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from service.domain.nodes.exchange import NodeExchange, NodeSilentError, NodeTask
from service.domain.nodes.remote_fit import RemoteParty, _Link
from service.dp.federated._common import site_round

K = 4
WAIT = 20.0


def _task(exchange: NodeExchange, k: int) -> NodeTask:
    return NodeTask(
        id=exchange.new_task_id(),
        contribution_id=f"c{k}",
        job_id="j",
        seq=1,
        step="gradient_sum",
        terms={},
    )


def _node(exchange: NodeExchange, k: int, barrier: threading.Barrier, out: dict[int, Any]) -> None:
    """Take this node's task, wait until every node holds its own, answer with its index."""
    task = exchange.next_for([f"c{k}"], wait=WAIT)
    out[k] = task
    barrier.wait()
    assert task is not None
    assert exchange.answer(task.id, [f"c{k}"], {"node": k})


def test_concurrent_asks_each_get_their_own_nodes_answer() -> None:
    exchange = NodeExchange()
    barrier = threading.Barrier(K, timeout=WAIT)
    taken: dict[int, Any] = {}
    # the nodes answer in reverse order: the last node's thread starts first
    nodes = [
        threading.Thread(target=_node, args=(exchange, k, barrier, taken))
        for k in reversed(range(K))
    ]
    for t in nodes:
        t.start()
    answers: dict[int, Any] = {}

    def coordinator(k: int) -> None:
        answers[k] = exchange.ask(_task(exchange, k), deadline=WAIT)

    asks = [threading.Thread(target=coordinator, args=(k,)) for k in range(K)]
    for t in asks:
        t.start()
    for t in [*asks, *nodes]:
        t.join(timeout=2 * WAIT)
    assert answers == {k: {"node": k} for k in range(K)}
    assert {k: task.contribution_id for k, task in taken.items()} == {k: f"c{k}" for k in range(K)}
    # nothing left behind: no open task, no stray answer
    assert exchange.next_for([f"c{k}" for k in range(K)], wait=0.0) is None
    assert not exchange.answer(taken[0].id, ["c0"], {"node": 0})


def test_a_silent_node_fails_only_its_own_ask() -> None:
    exchange = NodeExchange()
    silent = _task(exchange, 0)
    errors: list[BaseException] = []

    def ask_silent() -> None:
        try:
            exchange.ask(silent, deadline=0.3)
        except NodeSilentError as exc:
            errors.append(exc)

    waiting = threading.Thread(target=ask_silent)
    waiting.start()
    answered: dict[str, Any] = {}

    def ask_other() -> None:
        answered["c1"] = exchange.ask(_task(exchange, 1), deadline=WAIT)

    other = threading.Thread(target=ask_other)
    other.start()
    task = exchange.next_for(["c1"], wait=WAIT)
    assert task is not None
    waiting.join(timeout=WAIT)  # the silent node's ask ends first, on its own deadline
    assert exchange.answer(task.id, ["c1"], {"ok": True})
    other.join(timeout=WAIT)
    assert [str(e) for e in errors] == ["c0"]
    assert answered == {"c1": {"ok": True}}
    # the silent node's task was withdrawn: a late poll finds nothing, a late answer is refused
    assert exchange.next_for(["c0"], wait=0.0) is None
    assert not exchange.answer(silent.id, ["c0"], {"late": True})


def test_remote_parties_take_a_round_at_once() -> None:
    exchange = NodeExchange()
    d = 3
    links = [_Link(exchange, f"c{k}", "j", k, {"job_id": "j"}) for k in range(K)]
    parties = [RemoteParty(link, d) for link in links]
    barrier = threading.Barrier(K, timeout=WAIT)

    def node(k: int) -> None:
        task = exchange.next_for([f"c{k}"], wait=WAIT)
        assert task is not None
        barrier.wait()  # every node holds its task: the round was sent to all at once
        point = np.asarray(task.vectors[0])
        exchange.answer(task.id, [f"c{k}"], {"vector": list(point + k)})

    nodes = [threading.Thread(target=node, args=(k,)) for k in range(K)]
    for t in nodes:
        t.start()
    w = np.array([0.5, -1.0, 2.0])
    sums = site_round(parties, lambda _, party: party.gradient_sum(w, clip=1.0))
    for t in nodes:
        t.join(timeout=WAIT)
    for k, answer in enumerate(sums):
        np.testing.assert_array_equal(answer, w + k)
    assert [link.seq for link in links] == [1] * K


@pytest.mark.parametrize("failing", [0, 2])
def test_a_refusal_in_a_round_names_the_first_refusing_node(failing: int) -> None:
    exchange = NodeExchange()
    links = [_Link(exchange, f"c{k}", "j", k, {"job_id": "j"}) for k in range(K)]
    parties = [RemoteParty(link, 2) for link in links]

    def node(k: int) -> None:
        task = exchange.next_for([f"c{k}"], wait=WAIT)
        if task is None:
            return
        body: dict[str, Any] = (
            {"refused": "not this job"} if k >= failing else {"vector": [0.0, 0.0]}
        )
        exchange.answer(task.id, [f"c{k}"], body)

    nodes = [threading.Thread(target=node, args=(k,)) for k in range(K)]
    for t in nodes:
        t.start()
    with pytest.raises(Exception, match="not this job") as caught:
        site_round(parties, lambda _, party: party.gradient_sum(np.zeros(2)))
    for t in nodes:
        t.join(timeout=WAIT)
    assert getattr(caught.value, "index", None) == failing
