"""What ``admm``'s calibration fixes, as typed plans: :class:`ADMMPlan` for the run (the graph,
η, T, the composition) and :class:`ADMMSitePlan` for each site's broadcasts; their records are
the calibration's ``details``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from service.dp.core.plan import Plan, plan_kind
from service.dp.federated._common import finite
from service.dp.federated.admm_calibration.params import NAME, SOLVER_SLACK

__all__ = ["ADMMPlan", "ADMMSitePlan"]


@plan_kind("federated.admm_site")
@dataclass(frozen=True, slots=True)
class ADMMSitePlan(Plan):
    """Site p's numbers for its broadcasts. ``variant`` is ``"none"``, ``"dual"`` (DVP: ζ_p,
    Φ_p and the certified release's α_r), ``"primal"`` (PVP with noise ∝ exp(−ζ‖b‖)) or
    ``"gaussian"`` (Gaussian PVP: σ_p); the fields another variant does not use are None."""

    variant: str
    n: int
    degree: int
    phi: float
    zeta: float | None = None
    kappa: float | None = None
    alpha_bar: float | None = None
    branch: str | None = None
    alpha_objective: float | None = None
    alpha_hat: float | None = None
    jacobian_epsilon: float | None = None
    release_epsilon: float | None = None
    sensitivity_exact_minimiser: float | None = None
    sensitivity: float | None = None
    gradient_bound: float | None = None
    sigma: float | None = None
    expected_noise_norm: float | None = None

    def record(self) -> dict[str, Any]:
        """The site's entry of ``details["sites"]`` (the keys its variant has, in order)."""
        keys = {
            "none": ("Phi", "zeta"),
            "dual": (
                "kappa",
                "alpha_bar",
                "branch",
                "Phi",
                "alpha_objective",
                "alpha_hat",
                "zeta",
                "jacobian_epsilon",
                "release_epsilon",
                "expected_noise_norm",
            ),
            "primal": (
                "Phi",
                "sensitivity_exact_minimiser",
                "sensitivity",
                "gradient_bound",
                "zeta",
                "expected_noise_norm",
            ),
            "gaussian": (
                "Phi",
                "zeta",
                "sensitivity_exact_minimiser",
                "sensitivity",
                "gradient_bound",
                "sigma",
                "expected_noise_norm",
            ),
        }[self.variant]
        out: dict[str, Any] = {"n": self.n, "degree": self.degree}
        for key in keys:
            value = getattr(self, "phi" if key == "Phi" else key)
            out[key] = finite(value) if isinstance(value, float) else value
        return out


@plan_kind("federated.admm")
@dataclass(frozen=True, slots=True)
class ADMMPlan(Plan):
    """What ADMM's calibration fixed: the graph, η, T and every site's noise, with the
    composition (per-iteration α; or zCDP for Gaussian PVP; or none)."""

    perturbation: str
    noise: str
    d: int
    loss: str
    c: float
    huber_h: float | None
    regularization: float
    penalty: float
    penalty_default: bool
    iterations: int
    iterations_default: bool
    neighbours: tuple[tuple[int, ...], ...]
    sites: tuple[ADMMSitePlan, ...]
    #: None for ``perturbation: "none"``
    epsilon: float | None = None
    delta: float = 0.0
    # noise "laplace": the per-iteration α and its composition
    alpha: float | None = None
    composition_method: str | None = None
    basic_total_epsilon: float | None = None
    advanced_total: tuple[float, float] | None = None
    delta_prime: float | None = None
    # noise "gaussian": the zCDP accounting
    zcdp_conversion: str | None = None
    rho_total: float | None = None
    rho_per_round: float | None = None
    epsilon_spent: float | None = None
    epsilon_bun_steinke: float | None = None

    @property
    def total(self) -> int:
        return sum(site.n for site in self.sites)

    @property
    def private(self) -> bool:
        return self.perturbation != "none"

    def record(self) -> dict[str, Any]:
        """The calibration's ``details``: every number under the papers' names."""
        N = self.total
        details: dict[str, Any] = {
            "protocol": NAME,
            "perturbation": self.perturbation,
            "K": len(self.sites),
            "N": N,
            "d": self.d,
            "loss": self.loss,
            "c": finite(self.c),
            "lipschitz": 1.0,
            "regularization": finite(self.regularization),
            "C_R_over_B_p": finite(1.0 / N),
            "penalty": finite(self.penalty),
            "penalty_default": self.penalty_default,
            "iterations": self.iterations,
            "iterations_default": self.iterations_default,
            "neighbours": [list(row) for row in self.neighbours],
            "noise": self.noise,
        }
        if self.huber_h is not None:
            details["huber_h"] = finite(self.huber_h)
        if self.epsilon is None:
            details.update(epsilon=None, delta=0.0, guarantee="none")
        elif self.noise == "gaussian":
            details.update(
                epsilon=finite(self.epsilon),
                delta=finite(self.delta),
                alpha=None,
                composition_method="zcdp",
                basic_total=None,
                advanced_total=None,
                delta_prime=None,
                zcdp_conversion=self.zcdp_conversion,
                rho_total=finite(_number(self.rho_total)),
                rho_per_round=finite(_number(self.rho_per_round)),
                epsilon_spent=finite(_number(self.epsilon_spent)),
                epsilon_bun_steinke=finite(_number(self.epsilon_bun_steinke)),
                solver_slack=SOLVER_SLACK,
            )
        else:
            advanced = self.advanced_total
            details.update(
                epsilon=finite(self.epsilon),
                delta=finite(self.delta),
                alpha=finite(_number(self.alpha)),
                composition_method=self.composition_method,
                basic_total={"epsilon": finite(_number(self.basic_total_epsilon)), "delta": 0.0},
                advanced_total=(
                    None
                    if advanced is None
                    else {"epsilon": finite(advanced[0]), "delta": finite(advanced[1])}
                ),
                delta_prime=None if self.delta_prime is None else finite(self.delta_prime),
            )
        details["sites"] = [site.record() for site in self.sites]
        return details


def _number(value: float | None) -> float:
    if value is None:
        raise ValueError("the plan lacks a number its variant needs")
    return value
