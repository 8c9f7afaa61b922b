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
read from the party's own calibration, never from the message, so a coordinator cannot make a
party add less noise than the calibration of the accepted job requires.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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

#: The steps a coordinator may ask a party of each protocol for.
STEPS: Final[dict[str, tuple[str, ...]]] = {
    psgd.NAME: ("noisy_gradient",),
    admm.NAME: ("local_step", "dual_update"),
    distributed_lasso.NAME: ("gradient_sum",),
}

#: The step each protocol runs once per communication round (counted against the rounds).
NOISY_STEPS: Final[dict[str, str]] = {
    psgd.NAME: "noisy_gradient",
    admm.NAME: "local_step",
    distributed_lasso.NAME: "gradient_sum",
}

_Builder = Callable[[FederatedProblem, FederatedCalibration, int, FloatArray, FloatArray], Site]
_BUILDERS: Final[dict[str, _Builder]] = {
    psgd.NAME: psgd.party,
    admm.NAME: admm.party,
    distributed_lasso.NAME: distributed_lasso.party,
}


def local_party(
    problem: FederatedProblem,
    calibration: FederatedCalibration,
    index: int,
    X: FloatArray,
    y: FloatArray,
) -> Site:
    """Party ``index`` over (X, y), already validated (rows of norm ≤ 1, labels ±1)."""
    return _BUILDERS[problem.protocol](problem, calibration, index, X, y)


def run_parties(
    parties: Sequence[Any],
    problem: FederatedProblem,
    calibration: FederatedCalibration,
    *,
    rng: np.random.Generator | None,
    clock: RoundClock,
) -> FloatArray:
    """The protocol's coordinator over ``parties`` (local sites or proxies, in site order)."""
    if problem.protocol == psgd.NAME:
        return psgd.run_parties(parties, problem, calibration, rng=rng, clock=clock)
    if problem.protocol == admm.NAME:
        return admm.run_parties(parties, problem, calibration, rng=rng, clock=clock)
    if problem.protocol == distributed_lasso.NAME:
        return distributed_lasso.run_parties(parties, problem, calibration, rng=rng, clock=clock)
    raise ValueError(f"{problem.protocol} cannot run over separate parties")


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
    point, or the neighbours' broadcasts) with the party's own calibration; returns the vector
    it sends back (None for a step that sends nothing). ``ValueError`` for a step the protocol
    does not have or inputs of the wrong shape."""
    if step not in STEPS.get(problem.protocol, ()):
        raise ValueError(f"{problem.protocol} has no step {step!r}")
    det = calibration.details
    d = problem.d
    points = [np.asarray(v, dtype=np.float64) for v in vectors]
    if any(p.shape != (d,) or not bool(np.all(np.isfinite(p))) for p in points):
        raise ValueError(f"every public vector of a step must be {d} finite numbers")
    if problem.protocol == psgd.NAME:
        assert isinstance(site, psgd.PSGDSite)
        (point,) = _exactly(points, 1)
        # the party's own σ_k: σ scaled by its sum's floating-point margin (gaussian_rounds)
        return site.noisy_gradient(point, float(det["sites"][site.index]["sigma"]), rng)
    if problem.protocol == admm.NAME:
        assert isinstance(site, admm.ADMMSite)
        index = site.index
        neighbours = det["neighbours"][index]
        _exactly(points, len(neighbours))
        if step == "dual_update":
            site.dual_update(points)
            return None
        own = det["sites"][index]
        return site.local_step(
            points,
            perturbation=str(det["perturbation"]),
            extra=float(own["Phi"]),
            zeta=0.0 if own["zeta"] is None else float(own["zeta"]),
            rng=rng,
            sigma=float(own["sigma"]) if "sigma" in own else None,
            gradient_bound=float(own["gradient_bound"]) if "gradient_bound" in own else None,
            release_epsilon=(float(own["release_epsilon"]) if "release_epsilon" in own else None),
        )
    assert isinstance(site, distributed_lasso.LassoSite)
    (point,) = _exactly(points, 1)
    noisy = bool(det["noise"])
    return site.gradient_sum(
        point,
        clip=float(det["clip"]) if noisy else None,
        # the party's own σ_k: σ scaled by its sum's floating-point margin (distributed_lasso)
        sigma=float(det["sites"][site.index]["sigma"]) if noisy else None,
        rng=rng,
    )


def _exactly(points: list[FloatArray], count: int) -> list[FloatArray]:
    if len(points) != count:
        raise ValueError(f"this step takes {count} public vectors, got {len(points)}")
    return points
