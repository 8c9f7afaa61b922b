"""A coordinator, honest or not, against one site node: every answer is a release (issue 25 §5).

For every protocol a node runs (PSGD; ADMM with dual perturbation, primal perturbation with
Laplace-type and with Gaussian noise; the distributed Lasso with noise) the test plays the
coordinator against the node's party on two neighbouring datasets D and D′ (site 0's first
record's label flipped) and checks what the node's proof assumes.

Party level (no database; the party built exactly as the node builds it:
``calibrate_problem(make_federated_problem(...))``, ``local_party``, its noise stream
``site_generator(seed, 0, K)``, each step through ``perform_step`` with public vectors only):

* *Grid.* Every message is an exact lattice point: answer/(s·2⁻³²) is an integer, s = 1, or for
  a very noisy Gaussian-round answer (PSGD, Lasso at a tiny ε) s = ``grid_scale(σ_k)`` > 1.
  Checked for an honest coordinator (the protocol's own ``run_parties`` over the node's party
  and local parties), for a malicious one and for adversarial query points.
* *No cancellation.* A malicious coordinator sends the same query point (ADMM: the same
  neighbour broadcasts, with or without the dual updates) in every accepted round, in J
  independent jobs on fixed data. The exact difference test that broke the earlier PSGD
  (answer₂ − answer₁: with a fixed noise share it repeated to 4·10⁻¹⁵ across jobs while moving
  by 0.28 between D and D′) must not distinguish: its spread across jobs is at least 0.8 times
  the spread of one answer (pure noise: the data and the point are fixed), and for PSGD and the
  Lasso ≈ σ_k√2 with the same mean on D and D′. More generally no linear combination of the
  node's T·d scalar messages cancels its noise: each scalar's residual after the least-squares
  fit on all the scalars before it (a Cholesky factor of their covariance across jobs) keeps
  at least 0.8 of one answer's spread (dual perturbation: of that
  spread times s/(s + cB_p), the least share of a round's objective noise its broadcast keeps).
* *Adversarial points* (zero, huge, ±10³⁰⁰) are answered on the grid or refused; whether a
  node answers must not depend on one record (a refusal is an observed, noise-free bit). This
  test found that it did for ADMM's primal perturbation (both noises): its solve must reach a
  proved gradient bound, and at neighbour broadcasts ≈ 2.5·10¹⁰ that succeeded on one dataset
  and failed on its neighbour. The step now refuses such inputs from its public certificate
  floor before it reads the data (``service.dp.federated.admm``).
* *Full-transcript audit* (PSGD): the worst-case pair of ``test_empirical_privacy`` (Huber
  h = 0.5, λ = 25, one site of two rows x = 1, labels (+1, −1) in D and (−1, −1) in D′), T = 4
  adaptively chosen points kept in Huber's linear piece, statistic Σ_t answers (sufficient:
  every answer is S + Z_t with S = 0 on D, 2 on D′). Its empirical ε lower bound
  (``tests.unit.dp._audit``) stays below the charged ε and, with the node's σ halved, exceeds it.

Node level (the real :func:`~service.domain.nodes.node_tasks.handle_task`, SQLite and
PostgreSQL, the coordinator and node of ``tests/integration/_nodes.py``): for each protocol the
honest coordinator runs exactly the accepted rounds through the node, every answer on the grid;
then one more round, a step of another protocol, or the certification step ``gop_gradient`` of
the earlier PSGD is refused, recorded (``node.task_refused``), fails the job and charges
nothing more; and the node's ledger holds exactly the cost its proof needs, computed here
independently from the calibration's noise (PSGD and the Lasso: ε(T·ρ₁, δ) with
ρ₁ = (2C)²/(2σ²), σ also checked against the closed Bun–Steinke form; ADMM: its composition,
which spends exactly the offered ε), rounded up to the ledger units (10⁻⁹ ε, 10⁻¹⁵ δ).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from service.db.uow import UnitOfWorkFactory
from service.domain.ledger.units import DELTA_UNIT, EPSILON_UNIT, to_units
from service.domain.nodes.remote_fit import RemoteParty, _Link
from service.dp.core.accounting import gaussian_zcdp, zcdp_to_dp, zcdp_to_dp_cks
from service.dp.federated import calibrate_problem, make_federated_problem
from service.dp.federated._common import FederatedCalibration, FederatedProblem, RoundClock
from service.dp.federated.gaussian_rounds import grid_scale
from service.dp.federated.parties import (
    NOISY_STEPS,
    STEPS,
    local_party,
    perform_step,
    run_parties,
    site_generator,
)
from service.dp.noise.lattice import GRID
from tests.integration._nodes import (
    ROWS,
    D,
    Network,
    Wire,
    failures,
    joined,
    make_network,
    refusal_events,
    refused,
)
from tests.unit.dp._audit import sequential_audit

FloatArray = NDArray[np.float64]


# --- the protocols ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    """One protocol as a coordinator asks a node for it."""

    name: str
    protocol: str
    loss: str
    epsilon: float
    delta: float
    params: dict[str, Any]

    @property
    def step(self) -> str:
        return NOISY_STEPS[self.protocol]

    @property
    def gaussian_rounds(self) -> bool:
        """PSGD and the Lasso: fresh N(0, σ_k²I) per answer (``gaussian_rounds``)."""
        return self.protocol in ("psgd", "distributed_lasso")


def _cases(rounds: int, epsilon: float) -> list[Case]:
    return [
        Case("psgd", "psgd", "logistic", epsilon, 1e-5, {"iterations": rounds}),
        Case(
            "admm-dual",
            "admm",
            "logistic",
            epsilon,
            1e-5,
            {"perturbation": "dual", "iterations": rounds},
        ),
        Case(
            "admm-primal",
            "admm",
            "logistic",
            epsilon,
            1e-5,
            {"perturbation": "primal", "iterations": rounds},
        ),
        Case(
            "admm-gaussian",
            "admm",
            "logistic",
            epsilon,
            1e-5,
            {"perturbation": "primal", "noise": "gaussian", "iterations": rounds},
        ),
        Case(
            "distributed_lasso",
            "distributed_lasso",
            "squared",
            epsilon,
            1e-5,
            {"iterations": rounds},
        ),
    ]


PARTY_CASES = _cases(3, 1.0)
IDS = [c.name for c in PARTY_CASES]
#: the node's data at party level: site 0 (the node) and site 1 (a local party)
SIZES = (40, 50)
WIDTH = 3


def _site_data(seed: int, n: int) -> tuple[FloatArray, FloatArray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, WIDTH))
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
    y = np.where(X @ np.array([1.0, -1.0, 0.5]) > 0, 1.0, -1.0)
    return X, y


X0, Y0 = _site_data(1, SIZES[0])
#: the neighbouring dataset D′: the node's first record's label flipped
Y0_PRIME = np.concatenate([-Y0[:1], Y0[1:]])
OTHER = _site_data(2, SIZES[1])


def _calibrated(case: Case, sizes: Sequence[int], d: int) -> tuple[FederatedProblem, Any]:
    problem = make_federated_problem(
        case.protocol,
        site_sizes=list(sizes),
        d=d,
        epsilon=case.epsilon,
        delta=case.delta,
        loss=case.loss,
        regularization=0.05,
        params=case.params,
    )
    return problem, calibrate_problem(problem)


def _scale(case: Case, cal: FederatedCalibration, index: int = 0) -> int:
    """The grid's multiple s of 2⁻³² the node's answers lie on (module docstring)."""
    if not case.gaussian_rounds:
        return 1
    return grid_scale(float(cal.details["sites"][index]["sigma"]))


def _on_grid(answer: FloatArray, scale: int) -> bool:
    cells = np.asarray(answer, dtype=np.float64) / (scale * GRID)
    return bool(np.all(np.isfinite(cells)) and np.all(cells == np.round(cells)))


def _publics(case: Case, cal: FederatedCalibration, point: FloatArray) -> list[FloatArray]:
    """A step's public vectors: the query point, or one broadcast per neighbour (ADMM)."""
    if case.protocol == "admm":
        return [point for _ in cal.details["neighbours"][0]]
    return [point]


class NodeLikeParty:
    """The node's party behind the protocol's site methods: each call becomes (step, public
    vectors) for ``perform_step`` with the node's own calibration and noise stream, and every
    vector the node sends is recorded (as ``test_parties``'s NodeLikeParty)."""

    def __init__(self, problem: FederatedProblem, cal: FederatedCalibration, seed: int) -> None:
        self.index = 0
        self.site = local_party(problem, cal, 0, X0, Y0)
        self._args = (problem, cal)
        self._rng = site_generator(seed, 0, problem.sites)
        self.sent: list[FloatArray] = []

    def _run(self, step: str, vectors: Sequence[FloatArray]) -> Any:
        out = perform_step(self.site, *self._args, step, list(vectors), self._rng)
        if out is not None:
            self.sent.append(out)
        return out

    def noisy_gradient(self, w: FloatArray, *_: Any) -> Any:
        return self._run("noisy_gradient", [w])

    def local_step(self, neighbours: Sequence[FloatArray], **_: Any) -> Any:
        return self._run("local_step", neighbours)

    def dual_update(self, neighbours: Sequence[FloatArray]) -> None:
        self._run("dual_update", neighbours)

    def gradient_sum(self, w: FloatArray, **_: Any) -> Any:
        return self._run("gradient_sum", [w])


# --- party level: an honest coordinator ---------------------------------------------------------


def _honest_transcript(case: Case, seed: int) -> tuple[list[FloatArray], FederatedCalibration]:
    problem, cal = _calibrated(case, SIZES, WIDTH)
    node = NodeLikeParty(problem, cal, seed)
    others = [local_party(problem, cal, 1, *OTHER)]
    run_parties(
        [node, *others],
        problem,
        cal,
        rng=np.random.default_rng(seed),
        clock=RoundClock(cal.rounds, None),
    )
    return node.sent, cal


@pytest.mark.parametrize("case", PARTY_CASES, ids=IDS)
def test_an_honest_coordinator_receives_exactly_the_accepted_answers_on_the_grid(
    case: Case,
) -> None:
    sent, cal = _honest_transcript(case, seed=11)
    assert len(sent) == cal.rounds == 3  # one message per accepted round, nothing else
    scale = _scale(case, cal)
    assert all(_on_grid(answer, scale) for answer in sent)
    assert all(answer.shape == (WIDTH,) for answer in sent)


@pytest.mark.parametrize(
    "case",
    [c for c in _cases(3, 1e-3) if c.gaussian_rounds],
    ids=["psgd", "distributed_lasso"],
)
def test_very_noisy_answers_lie_on_the_coarser_power_of_two_grid(case: Case) -> None:
    """At ε = 10⁻³ σ_k is far beyond 16, so the answers are on s·2⁻³², s = grid_scale(σ_k)."""
    sent, cal = _honest_transcript(case, seed=12)
    scale = _scale(case, cal)
    assert scale > 1
    assert scale == grid_scale(float(cal.details["sites"][0]["sigma"]))
    assert all(_on_grid(answer, scale) for answer in sent)
    # the coarser grid is really used (the answers are not all on a finer one)
    assert not all(_on_grid(answer, 2 * scale) for answer in sent)


# --- party level: a malicious coordinator -------------------------------------------------------


def _repeated_point_transcripts(
    case: Case, y: FloatArray, jobs: int, *, dual_updates: bool = True
) -> tuple[NDArray[np.float64], FederatedCalibration]:
    """The node's T messages in each of ``jobs`` independent jobs (seeds) when the
    coordinator sends the same point (ADMM: the same broadcasts) every round: (jobs, T, d)."""
    problem, cal = _calibrated(case, SIZES, WIDTH)
    point = np.array([0.3, -0.2, 0.1])
    publics = _publics(case, cal, point)
    out = np.empty((jobs, cal.rounds, WIDTH))
    for j in range(jobs):
        site = local_party(problem, cal, 0, X0, y)
        rng = site_generator(10_000 + j, 0, problem.sites)
        for t in range(cal.rounds):
            answer = perform_step(site, problem, cal, case.step, publics, rng)
            assert answer is not None
            out[j, t] = answer
            if case.protocol == "admm" and dual_updates:
                perform_step(site, problem, cal, "dual_update", publics, rng)
    return out, cal


def _conditional_spreads(messages: NDArray[np.float64]) -> NDArray[np.float64]:
    """For the T·d scalar messages of each job (rows: jobs), the residual standard deviation
    of each scalar after the least-squares fit (with intercept) on all the scalars before it:
    no linear combination of the messages has less noise than the smallest of them (given
    its last nonzero coefficient, normalised to 1)."""
    flat = messages.reshape(messages.shape[0], -1)
    out = []
    for k in range(flat.shape[1]):
        design = np.column_stack([np.ones(flat.shape[0]), flat[:, :k]])
        coef, *_ = np.linalg.lstsq(design, flat[:, k], rcond=None)
        residual = flat[:, k] - design @ coef
        out.append(math.sqrt(float(residual @ residual) / (flat.shape[0] - design.shape[1])))
    return np.array(out)


def _fresh_share(case: Case, cal: FederatedCalibration) -> float:
    """The least fraction of the first answer's noise a later answer's fresh noise keeps.

    1 where the noise is added to what is sent (PSGD, the Lasso, primal perturbation). Dual
    perturbation adds εᵀf to the step objective (× N): the broadcast moves by H⁻¹ε, H between
    s and s + cB_p (s = λB_p + NΦ + 2NηN_p, the loss's Hessian ≤ cB_p), so one round's noise
    in the broadcast is at least s/(s + cB_p) = 1/(1 + B_p(e^{j/2} − 1)) of another's, with
    j = 2 ln(1 + c/s) the calibration's ``jacobian_epsilon``."""
    if cal.details.get("perturbation") != "dual":
        return 1.0
    own = cal.details["sites"][0]
    return 1.0 / (1.0 + float(own["n"]) * math.expm1(float(own["jacobian_epsilon"]) / 2.0))


MALICIOUS = [
    pytest.param(
        case,
        dual,
        id=f"{case.name}{'' if dual else '-no-dual-updates'}",
        # an ADMM job's solves take milliseconds: a few seconds for the 2 × 150 jobs
        marks=[pytest.mark.slow] if case.protocol == "admm" else [],
    )
    for case in PARTY_CASES
    for dual in ((True, False) if case.protocol == "admm" else (True,))
]


@pytest.mark.statistical
@pytest.mark.parametrize(("case", "dual_updates"), MALICIOUS)
def test_the_same_query_in_every_round_does_not_cancel_the_node_s_noise(
    case: Case, dual_updates: bool
) -> None:
    jobs = 300 if case.gaussian_rounds else 150
    by_world = {}
    for world, y in (("D", Y0), ("D'", Y0_PRIME)):
        messages, cal = _repeated_point_transcripts(case, y, jobs, dual_updates=dual_updates)
        scale = _scale(case, cal)
        assert all(_on_grid(m, scale) for m in messages.reshape(-1, WIDTH))
        first = messages[:, 0, :]  # pure noise around a fixed point: the data are fixed
        difference = messages[:, 1, :] - first  # the exact difference test
        noise = first.std(axis=0, ddof=1)
        assert np.all(noise > 0.0)
        assert np.all(difference.std(axis=0, ddof=1) >= 0.8 * noise), world
        floor = 0.8 * _fresh_share(case, cal) * float(noise.min())
        assert np.all(_conditional_spreads(messages) >= floor), world
        if case.gaussian_rounds:
            sigma_k = float(cal.details["sites"][0]["sigma"])
            np.testing.assert_allclose(noise, sigma_k, rtol=0.15)
            np.testing.assert_allclose(
                difference.std(axis=0, ddof=1), sigma_k * math.sqrt(2.0), rtol=0.15
            )
        by_world[world] = difference
    if case.gaussian_rounds:
        # the difference is Z₂ − Z₁ in both worlds: its mean does not move between D and D′
        gap = by_world["D"].mean(axis=0) - by_world["D'"].mean(axis=0)
        sigma_k = float(cal.details["sites"][0]["sigma"])
        assert np.all(np.abs(gap) <= 4.0 * sigma_k * math.sqrt(2.0) * math.sqrt(2.0 / jobs))


#: query points (ADMM: neighbour broadcasts) a malicious coordinator may send
ADVERSARIAL = [0.0, -1e300, 1e300, 1e100, *np.logspace(6, 12, 61).tolist()]


def _one_answer(case: Case, y: FloatArray, value: float) -> FloatArray | str:
    """The node's first answer at the point (value, …, value), or its refusal's kind."""
    problem, cal = _calibrated(case, SIZES, WIDTH)
    site = local_party(problem, cal, 0, X0, y)
    publics = _publics(case, cal, np.full(WIDTH, value))
    try:
        out = perform_step(site, problem, cal, case.step, publics, site_generator(3, 0, 2))
    except (ValueError, RuntimeError) as exc:  # what the node turns into a refusal
        return type(exc).__name__
    assert out is not None
    return out


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("case", PARTY_CASES, ids=IDS)
def test_adversarial_points_are_answered_on_the_grid_or_refused(case: Case) -> None:
    _, cal = _calibrated(case, SIZES, WIDTH)
    scale = _scale(case, cal)
    for value in ADVERSARIAL[:4] + ADVERSARIAL[4::10]:
        out = _one_answer(case, Y0, value)
        assert isinstance(out, str) or _on_grid(out, scale), value


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("case", PARTY_CASES, ids=IDS)
def test_whether_the_node_answers_does_not_depend_on_one_record(case: Case) -> None:
    """A refusal is seen by the coordinator without noise: at every point the node must answer
    on both neighbouring datasets or refuse on both."""
    differing = []
    for value in ADVERSARIAL:
        on_d, on_d_prime = _one_answer(case, Y0, value), _one_answer(case, Y0_PRIME, value)
        if isinstance(on_d, str) != isinstance(on_d_prime, str):
            differing.append((value, on_d if isinstance(on_d, str) else on_d_prime))
    assert differing == []


# --- party level: the full-transcript audit of PSGD -------------------------------------------

AUDIT_EPS, AUDIT_DELTA, AUDIT_T = 2.0, 0.05, 4
#: The transcript audit's looks (cumulative jobs a dataset; see its test), up to 4000 as before.
AUDIT_LOOKS = (1000, 2000, 3000, 4000)
AUDIT_X = np.ones((2, 1))
AUDIT_Y_D = np.array([1.0, -1.0])
AUDIT_Y_D_PRIME = np.array([-1.0, -1.0])
#: the coordinator keeps its points here, inside Huber's linear piece (margins < 1 − h = 0.5)
AUDIT_BOX = 0.4


def _audit_calibration() -> tuple[FederatedProblem, FederatedCalibration]:
    problem = make_federated_problem(
        "psgd",
        site_sizes=[2],
        d=1,
        epsilon=AUDIT_EPS,
        delta=AUDIT_DELTA,
        loss="huber",
        regularization=25.0,
        params={"iterations": AUDIT_T},
    )
    cal = calibrate_problem(problem)
    assert cal.details["huber_h"] == 0.5
    return problem, cal


def _cks_rho(epsilon: float, delta: float) -> float:
    """The largest ρ whose CKS conversion at δ is ≤ ε, by bisection (independent of the
    calibration's root finder)."""
    lo, hi = 0.0, epsilon
    for _ in range(100):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if zcdp_to_dp_cks(mid, delta).epsilon <= epsilon else (lo, mid)
    return lo


def _audit_statistic(
    problem: FederatedProblem, cal: FederatedCalibration, y: FloatArray, first_seed: int, jobs: int
) -> FloatArray:
    """z = 1 − Σ_t A_t/(2T) of ``jobs`` transcripts against an adaptive coordinator.

    Every query v_t lies in [−0.4, 0.4], so both records' margins y·v are in Huber's linear
    piece (l′ = −1) and the node's sum is S = −Σ_j y_j x_j: 0 on D, 2 on D′, at every point.
    Each answer is S + Z_t, Z_t ~ N(0, σ_k²) fresh (up to the 2⁻³² grid), so Σ_t A_t =
    TS + N(0, Tσ_k²) is sufficient for the transcript and z has mean 1 on D, 0 on D′ and
    sd σ_k√T/(2T) = σ_k/(2√T); with σ = 2/√(2ρ/T) that is 1/√(2ρ), the same shift-to-noise
    ratio as one Gaussian release of the whole budget ρ."""
    out = np.empty(jobs)
    for j in range(jobs):
        site = local_party(problem, cal, 0, AUDIT_X, y)
        rng = site_generator(first_seed + j, 0, 1)
        point, total = np.zeros(1), 0.0
        for _ in range(AUDIT_T):
            answer = perform_step(site, problem, cal, "noisy_gradient", [point], rng)
            assert answer is not None
            total += float(answer[0])
            point = AUDIT_BOX * np.tanh(answer)  # the next point chosen from the last answer
        out[j] = 1.0 - total / (2.0 * AUDIT_T)
    return out


def _site_0_sigma(cal: FederatedCalibration, factor: float) -> FederatedCalibration:
    """The calibration with site 0's σ times ``factor``, in its plan (what the node's steps
    read) and its record alike."""
    sites = [dict(s) for s in cal.details["sites"]]
    sites[0]["sigma"] = factor * float(sites[0]["sigma"])
    planned = list(cal.plan.sites)  # type: ignore[union-attr]
    planned[0] = dataclasses.replace(planned[0], sigma=factor * planned[0].sigma)
    plan = dataclasses.replace(cal.plan, sites=tuple(planned))  # type: ignore[type-var]
    return dataclasses.replace(cal, details={**cal.details, "sites": sites}, plan=plan)


def _half_sigma(cal: FederatedCalibration) -> FederatedCalibration:
    return _site_0_sigma(cal, 0.5)


def test_the_audit_pair_gives_the_hand_derived_means_and_noise() -> None:
    problem, cal = _audit_calibration()
    rho = _cks_rho(AUDIT_EPS, AUDIT_DELTA)
    sigma = 2.0 / math.sqrt(2.0 * rho / AUDIT_T)  # sensitivity 2L = 2, ρ₁ = ρ/T
    assert float(cal.details["sigma"]) == pytest.approx(sigma, rel=1e-6)
    # the node's own σ_k: σ times its two-row sum's floating-point margin (≈ 4u)
    assert float(cal.details["sites"][0]["sigma"]) == pytest.approx(sigma, rel=1e-12)
    quiet = _site_0_sigma(cal, 1e-9 * sigma / float(cal.details["sites"][0]["sigma"]))
    assert _audit_statistic(problem, quiet, AUDIT_Y_D, 0, 1)[0] == pytest.approx(1.0, abs=1e-6)
    assert _audit_statistic(problem, quiet, AUDIT_Y_D_PRIME, 0, 1)[0] == pytest.approx(
        0.0, abs=1e-6
    )


@pytest.mark.statistical
@pytest.mark.slow
@pytest.mark.parametrize(
    "noise",
    # The half-σ control is heavy: it shows this audit's power (a test of the test, which
    # changes only when the audit does); the default tier keeps the calibrated audit, which
    # a node drawing half its noise fails exactly as the control does.
    [1.0, pytest.param(0.5, marks=pytest.mark.heavy)],
    ids=["calibrated", "half-sigma"],
)
def test_the_audit_of_a_psgd_node_s_whole_transcript(noise: float) -> None:
    """Thresholds fixed before sampling: z > 1 + k·sd, k ∈ {¼, ½, ¾, 1}, sd = 1/√(2ρ) at the
    calibrated noise (the events where p − δ against e^ε·q is largest for this shift); 99 %
    confidence, δ-aware. Calibrated: the bound stays below the charged ε and reaches 0.3 of
    it. Half the node's σ (heavy tier): the bound exceeds the charged ε.

    The audit stops early (:func:`tests.unit.dp._audit.sequential_audit`): looks after 1000,
    2000, 3000 and 4000 jobs a dataset, each bound at 1 − α/4, stopping at the first look where
    the bound passes 0.3 of ε and a 1 − α/4 upper bound on ln((p − δ)/q) for {z > 1 + sd/2} is
    below ε (there it is 1.33 with the calibrated σ, 4.29 with half: a node with half its σ
    stops early as a pass with probability ≤ 1 %). z's law is that of the federated PSGD audit
    (tests/unit/dp/federated/test_empirical_privacy.py), and simulated from it over 200 seeds
    the sequential audit passes all 200 after 1375 jobs a dataset on average instead of 4000,
    exceeds ε in all 200 with half the σ and stays below 0.3 of ε in all 200 with twice, as the
    fixed 4000-job audit does."""
    problem, cal = _audit_calibration()
    charged = float(cal.site_costs[0].epsilon)
    assert charged == pytest.approx(AUDIT_EPS, rel=1e-9)
    sd = float(cal.details["sites"][0]["sigma"]) / (2.0 * math.sqrt(AUDIT_T))
    assert sd == pytest.approx(1.0 / math.sqrt(2.0 * _cks_rho(AUDIT_EPS, AUDIT_DELTA)), rel=1e-6)
    used = cal if noise == 1.0 else _half_sigma(cal)
    seed = 1_000_000 if noise == 1.0 else 2_000_000
    done = [0]

    def draw(jobs: int) -> tuple[FloatArray, FloatArray]:
        """``jobs`` more transcripts a dataset, the job seeds the fixed audit used."""
        first = seed + done[0]
        done[0] += jobs
        return (
            _audit_statistic(problem, used, AUDIT_Y_D, first, jobs),
            _audit_statistic(problem, used, AUDIT_Y_D_PRIME, first + AUDIT_LOOKS[-1], jobs),
        )

    lower = sequential_audit(
        draw,
        looks=AUDIT_LOOKS,
        claim=charged,
        tight=0.3,
        decisive=1.0 + 0.5 * sd,
        thresholds=[1.0 + k * sd for k in (0.25, 0.5, 0.75, 1.0)],
        confidence=0.99,
        delta=AUDIT_DELTA,
    ).bound
    if noise == 1.0:
        assert 0.3 * charged < lower < charged
    else:
        assert lower > charged


# --- node level: the real node on SQLite and PostgreSQL ---------------------------------------

NODE_CASES = _cases(2, 0.5)
#: a step of another protocol, per protocol
FOREIGN = {"psgd": "gradient_sum", "admm": "noisy_gradient", "distributed_lasso": "local_step"}


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


@pytest.fixture
def network(uow_factory: UnitOfWorkFactory) -> Network:
    return make_network(uow_factory)


@pytest.fixture
def wire(network: Network) -> Wire:
    return Wire(network.node)


def _expected_charge(case: Case, cal: FederatedCalibration) -> tuple[float, float]:
    """The cost the node's proof needs, from the calibration's noise (not its cost field)."""
    det = cal.details
    T = int(det["iterations"])
    if case.gaussian_rounds:
        sigma = float(det["sigma"])
        rho_1 = gaussian_zcdp(2.0 * float(det.get("clip", 1.0)), sigma)  # (2C)²/(2σ²)
        assert rho_1 == pytest.approx(4.0 * float(det.get("clip", 1.0)) ** 2 / (2.0 * sigma**2))
        convert = zcdp_to_dp_cks if det["zcdp_conversion"] == "cks" else zcdp_to_dp
        return convert(T * rho_1, case.delta).epsilon, case.delta
    if det["noise"] == "gaussian":
        rho = max(gaussian_zcdp(float(s["sensitivity"]), float(s["sigma"])) for s in det["sites"])
        assert zcdp_to_dp_cks(T * rho, case.delta).epsilon <= case.epsilon * (1 + 1e-12)
        return case.epsilon, case.delta  # spends exactly the offer
    # Laplace-type ADMM: T broadcasts of α each, basic composition, no δ
    assert det["composition_method"] == "basic"
    return T * float(det["alpha"]), 0.0


def _run_accepted_rounds(
    network: Network, wire: Wire, case: Case, **overrides: Any
) -> tuple[list[_Link], FederatedCalibration, str]:
    """A job of ``case`` over both offers: join, prepare, and the honest coordinator over the
    two nodes' parties for exactly the accepted rounds."""
    job = network.job(
        protocol=case.protocol,
        epsilon=case.epsilon,
        delta=case.delta,
        iterations=0,
        params={**case.params, **overrides},
    )
    links = network.links(job, wire)
    sizes = joined(links)
    assert sizes == list(ROWS)
    for link in links:
        link.ask("prepare", sizes=sizes)
    problem, cal = _calibrated(
        dataclasses.replace(case, params={**case.params, **overrides}), ROWS, D
    )
    run_parties(
        [RemoteParty(link, d=D) for link in links],
        problem,
        cal,
        rng=None,
        clock=RoundClock(cal.rounds, None),
    )
    return links, cal, job.id


@pytest.mark.parametrize("case", NODE_CASES, ids=[c.name for c in NODE_CASES])
def test_a_node_answers_the_accepted_rounds_on_the_grid_refuses_the_rest_and_charges_its_cost(
    network: Network, wire: Wire, case: Case
) -> None:
    node = network.node
    beyond = {
        "one more round": (case.step, "more "),
        "a step of another protocol": (FOREIGN[case.protocol], "has no step"),
        "the certification step": ("gop_gradient", "has no step 'gop_gradient'"),
    }
    for k, (what, (step, expected)) in enumerate(beyond.items()):
        start = len(wire.log)
        links, cal, job_id = _run_accepted_rounds(network, wire, case)
        # every step ran exactly the accepted rounds, every answer on the grid
        log = wire.log[start:]
        for index, link in enumerate(links):
            mine = [d for d in log if d.message["terms"]["index"] == index]
            steps = [d.message["step"] for d in mine if d.message["step"] in STEPS[case.protocol]]
            assert {s: steps.count(s) for s in steps} == dict.fromkeys(set(steps), cal.rounds)
            assert case.step in steps
            answers = [np.array(d.answer["vector"]) for d in mine if "vector" in d.answer]
            assert len(answers) == cal.rounds
            assert all(_on_grid(a, _scale(case, cal, index)) for a in answers), what
            assert link.seq == len(mine)

        ledger = node.ledgers()
        publics = [np.zeros(D) for _ in range(len(cal.details.get("neighbours", [[0]])[0]))]
        reason = refused(links[0], step, vectors=publics)
        assert expected in reason, what
        assert node.ledgers() == ledger, what  # the refusal charges nothing
        [event] = refusal_events(node, job_id)
        assert (event["step"], event["reason"]) == (step, reason), what
        assert event["contribution_id"] == network.contributions[0]
        row = node.job(network.contributions[0], job_id)
        assert (row.status, row.error) == ("failed", reason), what
        assert len(failures(node, job_id)) == 1
        # the charge: what the proof needs, computed here, in ledger units, once per job
        epsilon, delta = _expected_charge(case, cal)
        units = (to_units(epsilon, EPSILON_UNIT, "up"), to_units(delta, DELTA_UNIT, "up"))
        for dataset_id, contribution in zip(node.datasets, network.contributions, strict=True):
            status = node.budget(dataset_id)
            assert len(status.charges) == k + 1
            assert (status.epsilon_spent_units, status.delta_spent_units) == (
                (k + 1) * units[0],
                (k + 1) * units[1],
            ), what
            assert status.charges[-1].mechanism == f"node_{case.protocol}"
            assert node.offer_spent(contribution) == (
                status.epsilon_spent_units,
                status.delta_spent_units,
            )
        if case.protocol == "admm":  # ADMM spends exactly the offered ε
            assert units[0] == to_units(case.epsilon, EPSILON_UNIT, "up")
    assert len(node.events("node.task_refused")) == len(beyond)


@pytest.mark.parametrize("name", ["psgd", "distributed_lasso"])
def test_a_bun_steinke_job_charges_the_closed_form_cost(
    network: Network, wire: Wire, name: str
) -> None:
    """With zcdp_conversion = "bun_steinke" σ has a closed form: ρ = (√(ln(1/δ) + ε) −
    √(ln(1/δ)))², σ = 2C/√(2ρ/T); the node's ledger holds ρ' + 2√(ρ' ln(1/δ)) for
    ρ' = T·(2C)²/(2σ²), rounded up to the ledger units (≤ the offered ε)."""
    [case] = [c for c in NODE_CASES if c.name == name]
    links, cal, job_id = _run_accepted_rounds(network, wire, case, zcdp_conversion="bun_steinke")
    T, clip = cal.rounds, float(cal.details.get("clip", 1.0))
    log_inv = math.log(1.0 / case.delta)
    rho = (math.sqrt(log_inv + case.epsilon) - math.sqrt(log_inv)) ** 2
    sigma = 2.0 * clip / math.sqrt(2.0 * rho / T)
    assert float(cal.details["sigma"]) == pytest.approx(sigma, rel=1e-9)
    assert float(cal.details["sigma"]) >= sigma * (1 - 1e-15)
    spent_rho = T * (2.0 * clip) ** 2 / (2.0 * float(cal.details["sigma"]) ** 2)
    epsilon = spent_rho + 2.0 * math.sqrt(spent_rho * log_inv)
    assert epsilon <= case.epsilon
    status = network.node.budget(network.node.datasets[0])
    assert (status.epsilon_spent_units, status.delta_spent_units) == (
        to_units(epsilon, EPSILON_UNIT, "up"),
        to_units(case.delta, DELTA_UNIT, "up"),
    )
    del links, job_id
