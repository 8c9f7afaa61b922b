"""How much computing a job asks for, from public quantities only (issue 26 §4).

The unit is the **row-feature pass** (RFP): touching one feature of one row once, i.e. one
multiply-add over one cell of the n × d design. A pass over the whole design is n·d RFP. The
estimates are functions of what a request and the public dataset facts say (n, d, epochs,
batch size, rounds, candidates); they never read a row, so refusing a job because of its
estimate reveals nothing about the data.

* a mechanism with its own estimate (its ``capabilities.work``, :mod:`service.dp.core.options`)
  uses it: ``dp_sgd``'s E epochs of m = max(1, ⌊n/b⌋) updates in dimension d′ (d, or the
  projection's k, plus the one projection n·d·k) are E·(n + m·U)·d′ (+ n·d·k), where U =
  :data:`UPDATE_ROWS` counts each update's fixed cost (the exact noise release, the step)
  as that many rows.
  ``noisy_gd``'s T full-batch steps, each a pass and one release, are T·(n + U)·d.
* every other mechanism is one certified convex solve: :data:`SOLVE_PASSES` passes, n·d each.
* a federated protocol: its rounds over the hosted datasets' rows, one pass (PSGD, the
  distributed Lasso) or one local solve (ADMM, the noisy average's one round) per round, and
  d per round for each remote site (the node does its own work).

On one core of the 2-vCPU development machine these cost between 2·10⁷ and 9·10⁷ RFP per
second (``benchmarks/RESULTS.md``, "Fair use of workers"): the estimate is an order of
magnitude, good for a cap, not a promise of run time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from service.dp.mechanisms import get_mechanism
from service.dp.mechanisms._common import SOLVE_PASSES
from service.dp.mechanisms.dp_sgd import UPDATE_ROWS
from service.dp.mechanisms.dp_sgd import work_estimate as _dp_sgd_estimate

__all__ = [
    "SOLVE_PASSES",
    "UPDATE_ROWS",
    "dp_sgd_work",
    "evaluation_work",
    "federated_work",
    "fit_work",
    "solve_work",
]

#: Protocols whose every round is a local solve at each site (the others: one pass).
_SOLVE_ROUNDS: Final[frozenset[str]] = frozenset({"admm", "noisy_average"})


def solve_work(n: int, d: int) -> float:
    """RFP of one certified convex solve on an n × d design: SOLVE_PASSES·n·d."""
    return float(SOLVE_PASSES) * n * d


def dp_sgd_work(
    n: int, d: int, *, epochs: int, batches_per_epoch: int, dimension: int | None = None
) -> float:
    """RFP of DP-SGD: E·(n + m·U)·d′ with d′ the dimension SGD runs in (``dimension``: the
    projection's k, then plus n·d·k for projecting the rows once)."""
    details = {"epochs": epochs, "batches_per_epoch": batches_per_epoch}
    return _dp_sgd_estimate(n, d, {**details, "noise_dimension": dimension})


def fit_work(mechanism: str, n: int, d: int, details: Mapping[str, Any]) -> float:
    """RFP of one fit of ``mechanism`` on n rows and d features, from its calibration's
    ``details``: the mechanism's own estimate (``capabilities.work``; DP-SGD's reads
    ``epochs``, ``batches_per_epoch``, ``noise_dimension``), else one certified solve."""
    estimate = get_mechanism(mechanism).capabilities.work
    return solve_work(n, d) if estimate is None else estimate(n, d, details)


def evaluation_work(n: int, d: int) -> float:
    """RFP of a private evaluation: one pass to score the rows (the noisy counts and the
    bootstrap cost no row work)."""
    return float(n) * d


def federated_work(
    protocol: str, *, rounds: int, rows: Sequence[int], d: int, remote: int = 0
) -> float:
    """RFP of a federated fit: per round, a pass (or, for ADMM and the noisy average, a solve)
    over each hosted dataset's ``rows``, plus d per remote site; then one solve over all the
    hosted rows for the certified release."""
    per_round = SOLVE_PASSES if protocol in _SOLVE_ROUNDS else 1
    hosted = float(sum(rows))
    return max(1, rounds) * (per_round * hosted * d + remote * d) + solve_work(int(hosted), d)
