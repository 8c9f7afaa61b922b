"""``admm``'s calibration: the site graph, the penalty, and the noise of every site's broadcasts
from public quantities only (the protocol and its privacy argument:
:mod:`service.dp.federated.admm`).

* Laplace-type noise ∝ exp(−ζ‖b‖) (``noise: "laplace"``, the paper's): each of the T broadcasts
  of a site is α-DP for its dataset given the public history (Zhang & Zhu 2017, Thm 1 for DVP,
  Thm 2 for PVP); the T rounds compose (the tighter of basic and, with ``delta_prime``,
  advanced composition) to at most the ε offered (:mod:`.laplace`).
* Gaussian PVP (``noise: "gaussian"``): σ_p per site so that T rounds are ρ-zCDP, ρ the largest
  total whose conversion is ≤ ε at the δ offered (:mod:`.gaussian`).
* ``perturbation: "none"``: no noise and no guarantee (:mod:`.non_private`).

What they share: the parameters and default penalties (:mod:`.params`), the site graph
(:mod:`.graph`), the request read and checked (:mod:`.request`) and the typed plans
(:mod:`.plans`). :func:`calibrate` reads the request and calibrates its variant.
"""

from __future__ import annotations

from service.dp.federated._common import FederatedCalibration, FederatedProblem
from service.dp.federated.admm_calibration.gaussian import _calibrate_gaussian
from service.dp.federated.admm_calibration.laplace import _calibrate_laplace
from service.dp.federated.admm_calibration.non_private import _calibrate_non_private
from service.dp.federated.admm_calibration.request import _read_request

__all__ = ["calibrate"]


def calibrate(problem: FederatedProblem) -> FederatedCalibration:
    """Graph, penalty, per-iteration α and its composition, and ζ (and Φ) per site; or σ per
    site for Gaussian PVP; or no noise for ``perturbation: "none"``."""
    request = _read_request(problem)
    if request.law == "gaussian":
        return _calibrate_gaussian(problem, request)
    if request.perturbation == "none":
        return _calibrate_non_private(problem, request)
    return _calibrate_laplace(problem, request)
