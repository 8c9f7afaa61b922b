"""The parties of a federated protocol, one per dataset, wherever they run (issue 15).

A protocol is a coordinator (``run_parties`` of its module) talking to parties (its ``Site``
class). In the in-process fit every party is a local site object; on a node a party is the
same site object, built by :func:`local_party` over the node's own rows, whose steps are
invoked by :func:`perform_step` with the public values the coordinator sent; at the
coordinator a remote party is a proxy with the same methods. Both paths therefore run the
same code with the same calibration and, in test mode with the same job seed, the same
per-site noise stream (:func:`site_generator`), so they release the same model.

:func:`perform_step` takes the step's public inputs only (the coordinator's query point, or the
neighbours' broadcasts); every calibrated number (σ, ζ, Φ, the clip, the gradient bound) is
read from the party's own typed plan (``calibration.plan``), never from the message, so a
coordinator cannot make a party add less noise than the calibration of the accepted job
requires.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from service.dp.federated import admm, distributed_lasso, psgd
from service.dp.federated._common import (
    FederatedCalibration,
    FederatedProblem,
    FloatArray,
    RoundClock,
    Site,
)
from service.dp.federated.protocol import FederatedProtocol

__all__ = [
    "NOISY_STEPS",
    "REMOTE_PROTOCOLS",
    "STEPS",
    "local_party",
    "perform_step",
    "run_parties",
    "site_generator",
]

#: Protocols whose parties may run on separate nodes: every message a party sends carries
#: that party's own noise. ``noisy_average`` is not among them: its local fits are exact and
#: the noise is added by a trusted curator after averaging.
REMOTE_PROTOCOLS: Final[tuple[str, ...]] = (psgd.NAME, admm.NAME, distributed_lasso.NAME)

_REMOTE: Final[dict[str, FederatedProtocol[Any]]] = {
    psgd.NAME: psgd.PROTOCOL,
    admm.NAME: admm.PROTOCOL,
    distributed_lasso.NAME: distributed_lasso.PROTOCOL,
}

#: The steps a coordinator may ask a party of each protocol for.
STEPS: Final[dict[str, tuple[str, ...]]] = {name: p.steps for name, p in _REMOTE.items()}

#: The step each protocol runs once per communication round (counted against the rounds).
NOISY_STEPS: Final[dict[str, str]] = {
    psgd.NAME: "noisy_gradient",
    admm.NAME: "local_step",
    distributed_lasso.NAME: "gradient_sum",
}


def _protocol(name: str) -> FederatedProtocol[Any]:
    protocol = _REMOTE.get(name)
    if protocol is None:
        raise ValueError(f"{name} cannot run over separate parties")
    return protocol


def local_party(
    problem: FederatedProblem,
    calibration: FederatedCalibration,
    index: int,
    X: FloatArray,
    y: FloatArray,
) -> Site:
    """Party ``index`` over (X, y), already validated (rows of norm ≤ 1, labels ±1)."""
    party: Site = _protocol(problem.protocol).local_party(problem, calibration, index, X, y)
    return party


def run_parties(
    parties: Sequence[Any],
    problem: FederatedProblem,
    calibration: FederatedCalibration,
    *,
    rng: np.random.Generator | None,
    clock: RoundClock,
) -> FloatArray:
    """The protocol's coordinator over ``parties`` (local sites or proxies, in site order)."""
    return _protocol(problem.protocol).run_parties(
        parties, problem, calibration, rng=rng, clock=clock
    )


def site_generator(seed: int | None, index: int, sites: int) -> np.random.Generator | None:
    """Party ``index``'s noise stream for a job seeded with ``seed`` (test mode), the same one
    the in-process fit gives that party (:func:`~service.dp.federated._common.site_generators`
    of ``np.random.default_rng(seed)``); None (the CSPRNG) without a seed."""
    if seed is None:
        return None
    return np.random.default_rng(seed).spawn(sites)[index]


def perform_step(
    site: Site,
    problem: FederatedProblem,
    calibration: FederatedCalibration,
    step: str,
    vectors: Sequence[FloatArray],
    rng: np.random.Generator | None,
) -> FloatArray | None:
    """Run one of the party's steps on the public ``vectors`` the coordinator sent (the query
    point, or the neighbours' broadcasts) with the party's own plan (``calibration.plan``);
    returns the vector it sends back (None for a step that sends nothing). ``ValueError`` for a
    step the protocol does not have or inputs of the wrong shape."""
    if step not in STEPS.get(problem.protocol, ()):
        raise ValueError(f"{problem.protocol} has no step {step!r}")
    protocol = _protocol(problem.protocol)
    plan = protocol.plan(calibration)
    d = problem.d
    points = [np.asarray(v, dtype=np.float64) for v in vectors]
    if any(p.shape != (d,) or not bool(np.all(np.isfinite(p))) for p in points):
        raise ValueError(f"every public vector of a step must be {d} finite numbers")
    return protocol.perform(site, plan, step, points, rng)
