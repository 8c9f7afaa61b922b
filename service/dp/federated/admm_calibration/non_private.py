"""``admm`` with ``perturbation: "none"``: no noise and no guarantee."""

from __future__ import annotations

from service.dp.core.accounting import PrivacyCost
from service.dp.federated._common import FederatedCalibration, FederatedProblem
from service.dp.federated.admm_calibration.params import NAME
from service.dp.federated.admm_calibration.plans import ADMMPlan, ADMMSitePlan
from service.dp.federated.admm_calibration.request import _public_fields, _Request


def _calibrate_non_private(problem: FederatedProblem, request: _Request) -> FederatedCalibration:
    """``perturbation: "none"``: nothing charged, nothing guaranteed."""
    T = request.iterations
    plan = ADMMPlan(
        **_public_fields(problem, request),
        sites=tuple(
            ADMMSitePlan(variant="none", n=n, degree=deg, phi=0.0)
            for n, deg in zip(problem.site_sizes, request.degrees, strict=True)
        ),
    )
    return FederatedCalibration(
        protocol=NAME,
        site_costs=tuple(PrivacyCost(0.0, 0.0) for _ in problem.site_sizes),
        private=False,
        details=plan.record(),
        composition=(
            f"no differential privacy: {T} iterations of non-private consensus ADMM "
            "broadcast deterministic functions of the data"
        ),
        rounds=T,
        notes=("not differentially private: ADMM without perturbation",),
        plan=plan,
    )
