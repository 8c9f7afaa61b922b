"""A round over nodes that have their own cores (issue 25 §6), without HTTP.

``bench_nodes`` runs three nodes on this machine's two cores, where nodes that step at once
compete for the same cores. This script isolates what the coordinator does: ADMM's and
distributed Lasso's real coordinators (``run_parties``) over :class:`RemoteParty` proxies and
the real task exchange (:class:`NodeExchange`), with one thread per node that takes its task
and answers after a fixed sleep (a node busy on its own machine: no CPU taken here). Each
configuration runs with the sites called in turn (the old coordinator) and with
``site_round`` (every node at once); printed: the time per round and its ratio to one node's
step. Run from the repository root::

    .venv/bin/python -m benchmarks.bench_site_rounds --rounds 10 --step-ms 50
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from benchmarks._common import environment, load_average, markdown_table, median
from service.domain.nodes.exchange import NodeExchange
from service.domain.nodes.remote_fit import RemoteParty, _Link
from service.dp.federated import _common, admm, distributed_lasso, make_federated_problem
from service.dp.federated import calibrate_problem as calibrate
from service.dp.federated import protocol as skeleton
from service.dp.federated._common import RoundClock

D = 106


def _in_turn(sites: Sequence[Any], step: Callable[[int, Any], Any]) -> list[Any]:
    return [_common.site_call(s.index, partial(step, k, s)) for k, s in enumerate(sites)]


def _node(exchange: NodeExchange, contribution: str, seconds: float, stop: threading.Event) -> None:
    """Answer every task of ``contribution`` after ``seconds`` (a vector for a step that sends
    one, an empty answer otherwise)."""
    while not stop.is_set():
        task = exchange.next_for([contribution], wait=0.2)
        if task is None:
            continue
        time.sleep(seconds)
        body: dict[str, Any] = {} if task.step == "dual_update" else {"vector": [0.001] * D}
        exchange.answer(task.id, [contribution], body)


def _round_seconds(protocol: str, K: int, rounds: int, step: float, parallel: bool) -> float:
    params: dict[str, Any] = {"iterations": rounds}
    loss = "squared" if protocol == distributed_lasso.NAME else "logistic"
    if protocol == admm.NAME:
        params["perturbation"] = "dual"
    problem = make_federated_problem(
        protocol,
        site_sizes=[10_000] * K,
        d=D,
        epsilon=1.0,
        delta=1e-6,
        loss=loss,
        regularization=1e-3,
        params=params,
    )
    calibration = calibrate(problem)
    exchange = NodeExchange()
    stop = threading.Event()
    nodes = [
        threading.Thread(target=_node, args=(exchange, f"c{k}", step, stop), daemon=True)
        for k in range(K)
    ]
    for t in nodes:
        t.start()
    parties = [RemoteParty(_Link(exchange, f"c{k}", "job", k, {}), D) for k in range(K)]
    module = admm if protocol == admm.NAME else distributed_lasso
    # the shared round skeleton asks every site of a round; ADMM's dual updates are its own
    patched = (skeleton, admm)
    originals = [m.site_round for m in patched]
    if not parallel:
        for m in patched:
            m.site_round = _in_turn  # type: ignore[attr-defined]
    try:
        clock = RoundClock(rounds, None)
        module.run_parties(parties, problem, calibration, rng=None, clock=clock)
    finally:
        for m, original in zip(patched, originals, strict=True):
            m.site_round = original  # type: ignore[attr-defined]
        stop.set()
        for t in nodes:
            t.join()
    return median(clock.seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--step-ms", type=float, default=50.0)
    parser.add_argument("--sites", default="3,10")
    args = parser.parse_args()
    load_before = load_average()
    step = args.step_ms / 1000.0
    rows = []
    for protocol, phases in ((admm.NAME, 2), (distributed_lasso.NAME, 1)):
        for K in (int(k) for k in args.sites.split(",")):
            in_turn = _round_seconds(protocol, K, args.rounds, step, parallel=False)
            at_once = _round_seconds(protocol, K, args.rounds, step, parallel=True)
            rows.append(
                [
                    protocol,
                    str(K),
                    str(phases),
                    f"{1000 * in_turn:.1f}",
                    f"{1000 * at_once:.1f}",
                    f"{at_once / (phases * step):.3f}",
                ]
            )
    print(environment())
    print(
        markdown_table(
            [
                "protocol",
                "nodes",
                "node steps per round",
                "per round, in turn (ms)",
                "per round, at once (ms)",
                "at once / one node's steps",
            ],
            rows,
        )
    )
    print(
        f"each node step {args.step_ms:g} ms (a sleep); {args.rounds} rounds, median round; "
        f"load average before {load_before}, after {load_average()}"
    )


if __name__ == "__main__":
    main()
